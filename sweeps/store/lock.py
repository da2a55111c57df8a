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

Object stores (s3://, gs://) have no file locks: the lock is a LEASE, the object
RESULTS_DIR/writer.lock with the same body plus an owner token and an expiry:

    {..., "owner": "<random>", "lease_seconds": 60, "renewed_at": ..., "expires_at": ...}

Taking it: read the object; a live holder (not expired, and not a dead pid on this host) is
refused as above. Otherwise create it conditionally (S3 `If-None-Match: *` via boto3, so of
two writers racing for a free lock exactly one succeeds), or, taking over an expired or dead
holder's lease (or on a store without conditional writes), overwrite it, wait a moment and
re-read: whoever's token is there wins, the other is refused. While held, a heartbeat thread
renews the lease every lease/4 seconds, re-reading first; if it finds another owner's token
(its lease expired while it was paused or cut off, and someone took over) it says so and
interrupts the sweep (as Ctrl-C would: finished packs stay, exit 130). Release deletes the
object if it is still ours.

What a lease guarantees, and what it cannot: two writers never both START on a free or
held lock; a writer killed in any way blocks the store until its lease expires (at once
when the next writer runs on the same host and sees the pid dead). It assumes clocks agree
to within a few seconds, and it cannot stop a holder frozen for longer than the lease (a
suspended VM, a long network partition) from finishing the pack it was writing after
another writer took over. That overlap is harmless to the data: every pack is written under
write-once keys with its manifest last, and readers take each (config, seed) from the
newest manifest, so no half pack is visible and nothing is counted twice.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from pydantic import ValidationError

from sweeps.store.location import StorageError, StoreLocation, as_location, redact
from sweeps.store.records import LockHolder
from sweeps.spec import SweepError

LOCK_FILE = "writer.lock"
LEASE_SECONDS = float(os.environ.get("FADE_SWEEP_LEASE_SECONDS", "60"))  # object stores: a lease not renewed expires
SETTLE_SECONDS = 1.0  # object stores, takeover: wait before re-reading who won


class StoreLocked(SweepError):
    """Another live process is writing this results folder."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def _read_holder(fd: int) -> dict | None:
    """The lock file's holder (None: empty, or not a holder record: someone is still writing it)."""
    try:
        raw = os.pread(fd, 65536, 0)
        return LockHolder.model_validate_json(raw).model_dump(exclude_none=True) if raw.strip() else None
    except (OSError, ValidationError):
        return None


def describe(holder: dict | None) -> str:
    if not holder or "pid" not in holder:
        return "another process (it has not written its name yet)"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started', holder.get('started_at'))}"


def _stale(holder: dict | None, now: float | None = None) -> bool:
    """A holder that is provably dead: same host, pid not running; or (object stores) its lease expired."""
    if not holder:
        return False
    expires = holder.get("expires_at")
    if isinstance(expires, int | float) and (time.time() if now is None else now) > expires:
        return True
    return holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
        and not pid_alive(holder["pid"])


def _body(command: str) -> dict:
    now = time.time()
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": now,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
        "command": redact(command),
    }


def _read_object(location: StoreLocation) -> dict | None:
    try:
        holder = json.loads(location.read_bytes(LOCK_FILE))
    except FileNotFoundError:
        return None
    except ValueError:
        holder = None
    if isinstance(holder, dict):
        return holder
    # Damaged (not a JSON object): held until a lease after it was written, then stale.
    try:
        written = (location.info(LOCK_FILE).mtime_ns or 0) / 1e9
    except (OSError, StorageError):
        written = time.time()
    return {"expires_at": written + LEASE_SECONDS}


class _Lease:
    """The writer lock of a store on an object store: a lease object, renewed by a heartbeat thread."""

    def __init__(self, location: StoreLocation, command: str):
        self.location = location
        self.command = command
        self.owner = uuid.uuid4().hex
        self.body: dict | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def _stamp(self) -> bytes:
        now = time.time()
        self.body.update(renewed_at=now, expires_at=now + LEASE_SECONDS, lease_seconds=LEASE_SECONDS)
        return json.dumps(self.body).encode()

    def acquire(self) -> None:
        location = self.location
        location.check()
        for _ in range(10):
            holder = _read_object(location)
            if holder is not None and holder.get("owner") != self.owner and not _stale(holder):
                raise StoreLocked(f"{location} is being written by {describe(holder)}")
            self.body = {**_body(self.command), "owner": self.owner}
            if holder is None:
                created = location.create_exclusive(LOCK_FILE, self._stamp())
                if created is False:
                    continue  # someone else created it first: read who
                if created is None:  # no conditional create here: write, then see who won
                    location.write_bytes(LOCK_FILE, self._stamp())
                    time.sleep(SETTLE_SECONDS)
            else:
                print(f"{location}: taking over the stale lock of {describe(holder)} (no longer running)", file=sys.stderr)
                location.write_bytes(LOCK_FILE, self._stamp())
                time.sleep(SETTLE_SECONDS)
            now_held = _read_object(location)
            if not now_held or now_held.get("owner") != self.owner:
                raise StoreLocked(f"{location} is being written by {describe(now_held)}")
            self._thread = threading.Thread(target=self._heartbeat, name="fade-sweep-lease", daemon=True)
            self._thread.start()
            return
        raise StoreLocked(f"{location}: could not take {LOCK_FILE} (it keeps changing); try again")

    def _heartbeat(self) -> None:
        interval = max(0.2, LEASE_SECONDS / 4)
        while not self._stop.wait(interval):
            try:
                holder = _read_object(self.location)
                if holder is not None and holder.get("owner") not in (None, self.owner):
                    self._lose(f"another writer took the store over ({describe(holder)})")
                    return
                self.location.write_bytes(LOCK_FILE, self._stamp())
            except (OSError, StorageError) as err:
                if time.time() > self.body.get("expires_at", 0):
                    self._lose(f"the lease could not be renewed before it expired ({redact(str(err))})")
                    return

    def _lose(self, why: str) -> None:
        import _thread

        self.lost = True
        print(f"fade-sweep: {self.location}: lost the writer lock: {why}; stopping this sweep", file=sys.stderr)
        _thread.interrupt_main()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            holder = _read_object(self.location)
            if holder and holder.get("owner") == self.owner:
                self.location.delete(LOCK_FILE)
        except (OSError, StorageError):
            pass  # it expires by itself


class StoreLock:
    """The writer lock of one results folder; `acquire` raises StoreLocked if it is held."""

    def __init__(self, results_dir: str | Path | StoreLocation, command: str | None = None):
        location = as_location(results_dir)
        self.location = location
        self.results_dir = (Path(results_dir) if not isinstance(results_dir, StoreLocation) else location.local_path) \
            if location.local else location
        self.path = self.results_dir / LOCK_FILE
        self.command = command if command is not None else " ".join(sys.argv)
        self.fd: int | None = None
        self.lease: _Lease | None = None

    def acquire(self) -> Self:
        if not self.location.local:
            lease = _Lease(self.location, self.command)
            lease.acquire()
            self.lease = lease
            return self
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
            body = _body(self.command)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(body).encode(), 0)
            os.fsync(fd)
            self.fd = fd
            return self
        raise StoreLocked(f"{self.results_dir}: could not take {self.path} (it keeps changing); try again")

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
    if holder is not None and not _stale(holder):
        where = as_location(results_dir)
        raise StoreLocked(f"{Path(results_dir) if where.local else where} is being written by {describe(holder)}")


def lock_holder(results_dir: str | Path | StoreLocation) -> dict | None:
    """Who holds the writer lock now (None: nobody), without taking it."""
    location = as_location(results_dir)
    if not location.local:
        holder = _read_object(location)
        return None if holder is None or (holder and _stale(holder)) else holder
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
