"""The writer lock of a store in a local folder: an exclusive flock held for the whole run.

RESULTS_DIR/writer.lock is locked with `fcntl.flock` (released by the kernel when the
holder dies, however it dies) and holds the holder's record (`records.LockHolder`):

    {"owner": "<random>", "pid": 12345, "host": "node-1", "started_at": 1714000000.0, "started": "2025-04-25 10:26:40",
     "command": "..."}

A second writer is refused at once (StoreLocked, a SweepError: exit code 2) with
"<dir> is being written by pid N on HOST since T". A lock whose holder is gone is taken
over with a notice: either the flock is free and the body names an earlier holder that did
not release (killed), or the flock is still held (by a process that inherited the file
descriptor) but the body's pid is dead on this host: then the lock file is replaced.

    with location.writer_lock():     # a FileLock here; a LeaseLock (lease.py) on an object store
        ...  # write the store
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import uuid
from pathlib import Path
from typing import Self

from sweeps.store.holder import LOCK_FILE, HeldLock, StoreLocked, describe, holder_body, stale
from sweeps.store.records import LockHolder, RecordError, parse_record, record_json
from sweeps.store.uris import StorageError

__all__ = ["LOCK_FILE", "FileLock", "StoreLocked"]


class FileLock(HeldLock):
    """The writer lock of the local folder `folder` (named `where` in messages); a `WriterLock`."""

    def __init__(self, folder: Path, where: str, command: str | None = None):
        self.folder = folder
        self.where = where
        self.path = folder / LOCK_FILE
        self.command = command if command is not None else " ".join(sys.argv)
        self.fd: int | None = None
        self.owner = uuid.uuid4().hex  # the token this hold writes into writer.lock
        self._made: list[Path] = []  # folders the lock created (deepest first): removed on release if left empty

    def acquire(self) -> Self:
        try:
            self._made = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
            self.folder.mkdir(parents=True, exist_ok=True)
            return self._take()
        except OSError as err:  # an immutable or read-only folder, /proc, a full disk: the storage, not a bug
            self._remove_made()
            raise StorageError(f"storage {self.where} is not writable ({err.strerror or err}); "
                               "choose another --storage") from None

    def _take(self) -> Self:
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = self._read(fd)
                inode = os.fstat(fd).st_ino
                os.close(fd)
                if not stale(holder):
                    raise StoreLocked(f"{self.where} is being written by {describe(holder)}") from None
                # Held by an heir of a dead writer: replace the file (only if it is still the one we read).
                self.taking_over(holder)
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
            previous = self._read(fd)
            if previous is not None:  # its holder ended without releasing (killed): the kernel freed the flock
                self.taking_over(previous)
            os.ftruncate(fd, 0)
            os.pwrite(fd, record_json(holder_body(self.command, self.owner)), 0)
            os.fsync(fd)
            self.fd = fd
            return self
        raise StoreLocked(f"{self.where}: could not take {self.path} (it keeps changing); try again")

    def _read(self, fd: int) -> LockHolder | None:
        """The lock file's holder (None: empty, or not a holder record: someone is still writing it)."""
        try:
            raw = os.pread(fd, 65536, 0)
            return parse_record(LockHolder, raw, str(self.path)) if raw.strip() else None
        except (OSError, RecordError):
            return None

    def _remove_made(self) -> None:
        """Remove the folders `acquire` created that are still empty: a run refused before writing
        anything leaves no folder behind."""
        for folder in self._made:
            try:
                folder.rmdir()
            except OSError:
                break
        self._made = []

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
        self._remove_made()

    def holder(self) -> LockHolder | None:
        """Who holds the flock now (None: nobody; a record of nothing but Nones while its holder has not
        written its name yet), without taking it."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return self._read(fd) or LockHolder()
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def token(self) -> str | None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            holder = self._read(fd)
            return None if holder is None else holder.owner
        finally:
            os.close(fd)
