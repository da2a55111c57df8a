"""One writer per results folder: an exclusive lock held for the whole run.

RESULTS_DIR/writer.lock is locked with `fcntl.flock` (released by the kernel when the
holder dies, however it dies) and holds a JSON body naming the holder:

    {"pid": 12345, "host": "node-1", "started_at": 1714000000.0, "started": "2025-04-25 10:26:40", "command": "..."}

A second writer is refused at once (StoreLocked, a SweepError: exit code 2) with
"<dir> is being written by pid N on HOST since T". A lock whose holder is gone is taken
over with a notice: either the flock is free and the body names an earlier holder that did
not release (killed), or the flock is still held (by a process that inherited the file
descriptor) but the body's pid is dead on this host: then the lock file is replaced.

    with store_lock(results_dir):
        ...  # write the store
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from sweeps.spec import SweepError

LOCK_FILE = "writer.lock"


class StoreLocked(SweepError):
    """Another live process is writing this results folder."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def _read_holder(fd: int) -> dict | None:
    try:
        raw = os.pread(fd, 65536, 0)
        holder = json.loads(raw) if raw.strip() else None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def describe(holder: dict | None) -> str:
    if not holder:
        return "another process (it has not written its name yet)"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started', holder.get('started_at'))}"


def _stale(holder: dict | None) -> bool:
    """A holder that is provably dead: same host, pid not running."""
    return bool(holder) and holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
        and not _pid_alive(holder["pid"])


class StoreLock:
    """The writer lock of one results folder; `acquire` raises StoreLocked if it is held."""

    def __init__(self, results_dir: str | Path, command: str | None = None):
        self.results_dir = Path(results_dir)
        self.path = self.results_dir / LOCK_FILE
        self.command = command if command is not None else " ".join(sys.argv)
        self.fd: int | None = None

    def acquire(self) -> Self:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = _read_holder(fd)
                inode = os.fstat(fd).st_ino
                os.close(fd)
                if not _stale(holder):
                    raise StoreLocked(f"{self.results_dir} is being written by {describe(holder)}") from None
                # Held by an heir of a dead writer: replace the file (only if it is still the one we read).
                print(f"{self.results_dir}: taking over the stale lock of {describe(holder)} (no longer running)",
                      file=sys.stderr)
                try:
                    if os.stat(self.path).st_ino == inode:
                        os.unlink(self.path)
                except FileNotFoundError:
                    pass
                continue
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the file was replaced or removed while we locked it: lock the new one
                os.close(fd)
                continue
            previous = _read_holder(fd)
            if previous:  # its holder ended without releasing (killed): the kernel freed the flock
                print(f"{self.results_dir}: taking over the stale lock of {describe(previous)} (no longer running)",
                      file=sys.stderr)
            now = time.time()
            body = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started_at": now,
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
                "command": self.command,
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(body).encode(), 0)
            os.fsync(fd)
            self.fd = fd
            return self
        raise StoreLocked(f"{self.results_dir}: could not take {self.path} (it keeps changing); try again")

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.ftruncate(fd, 0)  # an empty body: released cleanly
            os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextmanager
def store_lock(results_dir: str | Path, command: str | None = None) -> Iterator[StoreLock]:
    """Hold the writer lock of `results_dir` for the duration of the block."""
    lock = StoreLock(results_dir, command).acquire()
    try:
        yield lock
    finally:
        lock.release()


def refuse_if_locked(results_dir: str | Path) -> None:
    """Raise StoreLocked now if a live process holds the writer lock (a cheap early check, before
    anything slow such as starting Ray; `StoreLock.acquire` remains the real guard)."""
    holder = lock_holder(results_dir)
    if holder is not None and not _stale(holder):
        raise StoreLocked(f"{Path(results_dir)} is being written by {describe(holder)}")


def lock_holder(results_dir: str | Path) -> dict | None:
    """Who holds the writer lock now (None: nobody), without taking it."""
    path = Path(results_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_holder(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
