"""Which local TCP ports are taken, and by which process (Linux /proc; elsewhere: taken or not).

`python -m cluster.local up` asks before it starts anything, so a port held by someone else is a refusal
naming the holder, never a half-started cluster whose clean-up reaches what is not its own.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def overlap(planned: list[tuple[int, str]]) -> tuple[int, str, str] | None:
    """The first port a plan gives to two of its uses ((port, one use, the other)), or None: checked
    before anything starts, as Ray finds it only once a node is half up."""
    first: dict[int, str] = {}
    for port, what in planned:
        if port in first and first[port] != what:
            return port, first[port], what
        first.setdefault(port, what)
    return None


def in_use(port: int) -> bool:
    """Whether a socket listens on (or is bound to) `port` on any local address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no holder
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def listener(port: int) -> int | None:
    """The PID of the process listening on TCP `port` (None: none, or one this user cannot see)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()) if inodes else ():
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                return pid
        except OSError:
            continue  # gone, or another user's
    return None


def holder(port: int) -> str | None:
    """Who holds `port`, in words ("pid 123 (gcs_server)"), or None when it is free."""
    if not in_use(port):
        return None
    pid = listener(port)
    if pid is None:
        return "another process (not one this user can see)"
    return f"pid {pid} ({process_name(pid)})"


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def started_at(pid: int) -> int | None:
    """The process's start time (clock ticks since boot): with the PID, names one process, never a reused PID."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
