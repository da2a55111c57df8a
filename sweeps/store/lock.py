"""One writer per results folder: an exclusive lock held for the whole run.

RESULTS_DIR/writer.lock is locked with `fcntl.flock` (released by the kernel when the
holder dies, however it dies) and holds a JSON body naming the holder:

    {"owner": "<random>", "pid": 12345, "host": "node-1", "started_at": 1714000000.0, "started": "2025-04-25 10:26:40",
     "command": "..."}

A second writer is refused at once (StoreLocked, a SweepError: exit code 2) with
"<dir> is being written by pid N on HOST since T". A lock whose holder is gone is taken
over with a notice: either the flock is free and the body names an earlier holder that did
not release (killed), or the flock is still held (by a process that inherited the file
descriptor) but the body's pid is dead on this host: then the lock file is replaced.

    with store_lock(results_dir):
        ...  # write the store

Object stores (s3://, gs://) have no file locks: there the lock is a lease object with the
same body plus an owner token and an expiry, renewed by a heartbeat (lease.py).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from pydantic import ValidationError

from sweeps.store.holder import LOCK_FILE, StoreLocked, describe, holder_body, stale
from sweeps.store.lease import Lease, read_lease
from sweeps.store.location import StorageError, StoreLocation
from sweeps.store.records import LockHolder

__all__ = ["LOCK_FILE", "StoreLock", "StoreLocked", "lock_holder", "refuse_if_locked", "store_lock", "writer_token"]


def _read_holder(fd: int) -> dict | None:
    """The lock file's holder (None: empty, or not a holder record: someone is still writing it)."""
    try:
        raw = os.pread(fd, 65536, 0)
        return LockHolder.model_validate_json(raw).model_dump(exclude_none=True) if raw.strip() else None
    except (OSError, ValidationError):
        return None


class StoreLock:
    """The writer lock of one results folder; `acquire` raises StoreLocked if it is held."""

    def __init__(self, results_dir: str | Path | StoreLocation, command: str | None = None):
        location = StoreLocation.parse(results_dir)
        self.location = location
        self.results_dir = (Path(results_dir) if not isinstance(results_dir, StoreLocation) else location.local_path) \
            if location.local else location
        self.path = self.results_dir / LOCK_FILE
        self.command = command if command is not None else " ".join(sys.argv)
        self.fd: int | None = None
        self.lease: Lease | None = None
        self._owner = uuid.uuid4().hex
        self._made: list[Path] = []  # folders the lock created (deepest first): removed on release if left empty

    @property
    def owner(self) -> str:
        """The token this hold of the lock writes into writer.lock (the lease's, on object stores)."""
        return self.lease.owner if self.lease is not None else self._owner

    def acquire(self) -> Self:
        if not self.location.local:
            lease = Lease(self.location, self.command)
            lease.acquire()
            self.lease = lease
            return self
        try:
            self._made = [p for p in (self.results_dir, *self.results_dir.parents) if not p.exists()]
            self.results_dir.mkdir(parents=True, exist_ok=True)
            return self._take()
        except OSError as err:  # an immutable or read-only folder, /proc, a full disk: the storage, not a bug
            self._remove_made()
            raise StorageError(f"storage {self.results_dir} is not writable ({err.strerror or err}); "
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
                holder = _read_holder(fd)
                inode = os.fstat(fd).st_ino
                os.close(fd)
                if not stale(holder):
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
            body = holder_body(self.command, self._owner)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(body).encode(), 0)
            os.fsync(fd)
            self.fd = fd
            return self
        raise StoreLocked(f"{self.results_dir}: could not take {self.path} (it keeps changing); try again")

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
        if self.lease is not None:
            lease, self.lease = self.lease, None
            lease.release()
            return
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

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextmanager
def store_lock(results_dir: str | Path | StoreLocation, command: str | None = None) -> Iterator[StoreLock]:
    """Hold the writer lock of `results_dir` for the duration of the block."""
    lock = StoreLock(results_dir, command).acquire()
    try:
        yield lock
    finally:
        lock.release()


def refuse_if_locked(results_dir: str | Path | StoreLocation) -> None:
    """Raise StoreLocked now if a live process holds the writer lock (a cheap early check, before
    anything slow such as starting Ray; `StoreLock.acquire` remains the real guard)."""
    holder = lock_holder(results_dir)
    if holder is not None and not stale(holder):
        where = StoreLocation.parse(results_dir)
        raise StoreLocked(f"{Path(results_dir) if where.local else where} is being written by {describe(holder)}")


def lock_holder(results_dir: str | Path | StoreLocation) -> dict | None:
    """Who holds the writer lock now (None: nobody), without taking it."""
    location = StoreLocation.parse(results_dir)
    if not location.local:
        holder = read_lease(location)
        return None if holder is None or (holder and stale(holder)) else holder
    path = location.local_path / LOCK_FILE
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


def writer_token(results_dir: str | Path | StoreLocation) -> str | None:
    """The owner token writer.lock names now, whether or not its holder still runs (None: no lock).

    A Ray worker can outlive its killed driver by seconds and finish a pack: it commits only if
    the lock still names its driver's hold, so once another writer has taken the store over
    (and tidied it), a late pack is dropped instead of committed under the new writer."""
    location = StoreLocation.parse(results_dir)
    if not location.local:
        return (read_lease(location) or {}).get("owner")
    try:
        fd = os.open(location.local_path / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return (_read_holder(fd) or {}).get("owner")
    finally:
        os.close(fd)
