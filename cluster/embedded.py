"""An embedded Ray's processes outlive a driver killed with -9 (its agents for a minute or more): each embedded
Ray this project starts is recorded, and the next one started on the machine stops what is left of a recorded
Ray whose driver is dead.

The record (one JSON file per driver, in RECORDS under the temp dir, this user's) holds the driver's PID and
start time, Ray's session folder, and the PIDs and start times of the processes Ray started below the driver.
What is reaped is only what a record names: processes naming that session folder on their command line (a
session folder is one Ray's own), the recorded processes still running as themselves (same PID, same start
time), and what is below them; never a process found by its name, never another user's or another project's Ray.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from cluster.ports import started_at
from cluster.processes import cluster_pids, descendants, same_process, stop_pids

RECORDS = Path(tempfile.gettempdir()) / f"fade-embedded-ray-{os.getuid()}"


def _record_path(pid: int) -> Path:
    return RECORDS / f"driver-{pid}.json"


def record(session_dir: str) -> None:
    """Write down this driver's embedded Ray: its session folder and the processes now below this driver."""
    me = os.getpid()
    below = [{"pid": pid, "started_at": started_at(pid)} for pid in sorted(descendants({me}) - {me})]
    RECORDS.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = json.dumps({"driver": {"pid": me, "started_at": started_at(me)}, "session_dir": session_dir,
                       "processes": below})
    partial = _record_path(me).with_suffix(".tmp")
    partial.write_text(text)
    partial.replace(_record_path(me))


def forget() -> None:
    """This driver's Ray has been shut down: its record goes."""
    _record_path(os.getpid()).unlink(missing_ok=True)


def reap_orphans() -> list[int]:
    """Stop what is left of every recorded embedded Ray whose driver is dead, and drop its record; returns the
    PIDs stopped."""
    stopped: list[int] = []
    for path in sorted(RECORDS.glob("driver-*.json")) if RECORDS.is_dir() else ():
        try:
            data = json.loads(path.read_text())
            driver, session, processes = data["driver"], data["session_dir"], data["processes"]
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # a damaged record names nothing we could stop safely
            continue
        if same_process(driver["pid"], driver["started_at"]):
            continue  # its driver is alive: its Ray is its own
        own = {p["pid"] for p in processes if same_process(p["pid"], p["started_at"])}
        pids = (cluster_pids(Path(session)) | descendants(own)) - {os.getpid()}
        stop_pids(pids)
        stopped += sorted(pids)
        path.unlink(missing_ok=True)
    return stopped
