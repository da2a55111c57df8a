"""A sweep's live status, written by the driver beside its results and read by `fade-sweep status`.

`status.json` is rewritten atomically about once a second while the driver lives (a
heartbeat: `updated_at` moves even while no pack reports), so it can be followed from
another shell or another machine sharing the storage. It names the driver (`driver_pid`
on `host`), so a reader can tell a running sweep from one whose driver died (kill -9, a
lost machine) without a final state written: see `driver_gone`.

Format (JSON, one object):
  sweep, state (running | finished | failed | interrupted), started_at, updated_at (Unix
  seconds; updated_at is the heartbeat), run_steps_total, driver_pid, host,
  run_steps_at_start (of packs finished by earlier runs, listed as done trials),
  trials: [{pack_id, state (pending | running | done | failed), run_steps_done,
            run_steps_total, node_id, pid, restored_from_step}, ...]
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from sweeps.store.location import StoreLocation, as_location

STATUS_FILE = "status.json"
HEARTBEAT_SECONDS = 1.0  # how often a live driver refreshes updated_at (at least every few seconds)
STALE_SECONDS = 30.0  # a heartbeat older than this, from a driver on another host, means it is gone


@dataclass
class TrialStatus:
    pack_id: str
    state: str  # pending | running | done | failed
    run_steps_done: int = 0
    run_steps_total: int = 0
    node_id: str | None = None
    pid: int | None = None
    restored_from_step: int = 0  # > 0 when the trial continued from a checkpoint


@dataclass
class SweepStatus:
    sweep: str
    state: str  # running | finished | failed | interrupted
    started_at: float
    updated_at: float  # the heartbeat
    run_steps_total: int
    trials: dict[str, TrialStatus] = field(default_factory=dict)
    driver_pid: int | None = field(default_factory=os.getpid)
    host: str | None = field(default_factory=socket.gethostname)
    run_steps_at_start: int = 0  # of packs finished by earlier runs of the sweep (not part of this run's rate)

    @property
    def run_steps_done(self) -> int:
        return sum(t.run_steps_done for t in self.trials.values())

    def count(self, state: str) -> int:
        return sum(t.state == state for t in self.trials.values())

    @property
    def rate(self) -> float:
        """Run-steps per second since this run of the sweep started."""
        elapsed = self.updated_at - self.started_at
        return max(0, self.run_steps_done - self.run_steps_at_start) / elapsed if elapsed > 0 else 0.0

    @property
    def nodes(self) -> set[str]:
        return {t.node_id for t in self.trials.values() if t.node_id}

    def write(self, results_dir: str | Path | StoreLocation) -> None:
        document = {**asdict(self), "trials": [asdict(t) for t in self.trials.values()]}
        as_location(results_dir).write_bytes(STATUS_FILE, json.dumps(document, indent=1).encode())


def read_status(results_dir: str | Path | StoreLocation) -> SweepStatus | None:
    try:
        raw = json.loads(as_location(results_dir).read_bytes(STATUS_FILE))
    except FileNotFoundError:
        return None
    trial_keys = {f.name for f in fields(TrialStatus)}
    trials = {t["pack_id"]: TrialStatus(**{k: v for k, v in t.items() if k in trial_keys}) for t in raw.pop("trials")}
    keys = {f.name for f in fields(SweepStatus)} - {"trials"}
    known = {k: v for k, v in raw.items() if k in keys}
    # A status.json written before driver_pid / host existed names no driver.
    known.setdefault("driver_pid", None)
    known.setdefault("host", None)
    return SweepStatus(**known, trials=trials)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def driver_gone(status: SweepStatus, now: float | None = None) -> bool:
    """Whether a sweep that says `running` has lost its driver (killed without a final state).

    On the driver's own host: its pid is not alive. Elsewhere: no heartbeat for STALE_SECONDS.
    """
    if status.state != "running":
        return False
    age = (time.time() if now is None else now) - status.updated_at
    if status.driver_pid and status.host == socket.gethostname():
        return not _pid_alive(status.driver_pid)
    return status.host is not None and age > STALE_SECONDS


def format_rate(run_steps_per_second: float) -> str:
    """12.3K or 4.56M run-steps/s: linear sweeps run millions per second, neural ones thousands."""
    if run_steps_per_second >= 1e6:
        return f"{run_steps_per_second / 1e6:.2f}M run-steps/s"
    return f"{run_steps_per_second / 1e3:.1f}K run-steps/s"


def format_status(status: SweepStatus, finished_packs: int) -> str:
    """The lines `fade-sweep status RESULTS_DIR` prints."""
    age = time.time() - status.updated_at
    gone = driver_gone(status)
    state = "interrupted (driver not running)" if gone else status.state
    remaining = status.run_steps_total - status.run_steps_done
    eta = remaining / status.rate if status.rate > 0 and status.state == "running" and not gone else None
    lines = [
        f"sweep {status.sweep}: {state} (updated {age:.0f} s ago)",
        f"packs: {status.count('done')} done, {status.count('running')} running, {status.count('failed')} failed, "
        f"{status.count('pending')} pending ({finished_packs} pack files in the store)",
        f"run-steps: {status.run_steps_done:.3e} of {status.run_steps_total:.3e} "
        f"({100 * status.run_steps_done / max(status.run_steps_total, 1):.1f}%), {format_rate(status.rate)}"
        + (f", ETA {eta:.0f} s" if eta is not None else ""),
    ]
    if gone:
        where = "" if status.host == socket.gethostname() else f" on {status.host}, no heartbeat for {age:.0f} s"
        lines.append(f"driver (pid {status.driver_pid}{where}) is not running: the sweep was interrupted; continue with --resume")
    elif status.state == "interrupted":
        lines.append("the sweep was interrupted; continue with `fade-sweep run ... --resume`")
    elif status.state == "running" and age > 60:
        lines.append("no update for over a minute: the driver may have stopped; continue with `fade-sweep run ... --resume`")
    return "\n".join(lines)
