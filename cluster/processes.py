"""The machine's process table (Linux /proc): who is below whom, which processes name a folder, stopping by PID.

What `cluster.local` and the embedded Ray's clean-up (`cluster.embedded`) stop is always found here by what is
its own (its folder on the command line, a recorded PID with its start time), never by a process name.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from cluster.ports import started_at


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # not a process, or gone
    return parents


def descendants(roots: set[int]) -> set[int]:
    """`roots` and every process below them."""
    parents, found = _parents(), set(roots)
    while more := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= more
    return found


def cluster_pids(temp_dir: Path) -> set[int]:
    """The processes of the cluster kept in `temp_dir`: those naming it on their command line (its
    daemons), and their descendants (workers and agents, which rename themselves)."""
    marker, roots = re.compile(re.escape(os.fsencode(temp_dir)) + rb"(/|\x00|$)"), set()
    for pid in _parents():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.search(f.read()) and pid != os.getpid():
                    roots.add(pid)
        except OSError:
            continue
    return descendants(roots)


def signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def stop_pids(pids: set[int], grace: float = 10.0) -> None:
    """SIGTERM `pids`, SIGKILL those left after `grace` seconds, and wait until they are gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_all({pid for pid in pids if running(pid)}, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(running(pid) for pid in pids):
            time.sleep(0.1)


def same_process(pid: int, start: int | None) -> bool:
    """Whether `pid` is still the process that started at `start` (not a reused PID)."""
    return start is not None and running(pid) and started_at(pid) == start
