"""The writer lock of a store, whatever the store is on: the interface, and who holds it.

A location hands out its lock (`StoreLocation.writer_lock()`): a `FileLock` on a local folder
(lock.py: flock) or a `LeaseLock` on an object store (lease.py: a lease object renewed by a
heartbeat). Both are a `WriterLock`, so no caller asks which kind of store it holds. Shared
here: the holder's record (`records.LockHolder`: this process as a holder, whether a holder is
provably gone, how it reads in a message) and the refusal of a second writer.

Notices (a stale lock taken over, a lease lost) go to the `sweeps.store` logger: the command
line shows them on stderr, a library caller sees them as Python's warnings of its own logging.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Protocol, Self

from sweeps.spec import SweepError
from sweeps.store.records import LockHolder
from sweeps.store.uris import redact

LOCK_FILE = "writer.lock"
log = logging.getLogger("sweeps.store")


class StoreLocked(SweepError):
    """Another live process is writing this results folder."""


class WriterLock(Protocol):
    """One writer per store: `acquire` raises StoreLocked while a live process holds the lock.

    `holder()` and `token()` read the lock without taking it: who holds it now (None: nobody),
    and the owner token it names whether or not its holder still runs (what a pack's commit
    checks: a Ray worker of a killed driver must not commit under the writer that took over)."""

    @property
    def owner(self) -> str: ...
    def acquire(self) -> Self: ...
    def release(self) -> None: ...
    def holder(self) -> LockHolder | None: ...
    def token(self) -> str | None: ...
    def refuse_if_held(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...


class HeldLock:
    """What both kinds of writer lock share (a mixin of FileLock and LeaseLock, which supply `where`,
    `acquire`, `release` and `holder`): the context manager, the early refusal, the takeover notice."""

    where: str  # the store as messages name it

    def refuse_if_held(self) -> None:
        """StoreLocked now if a live process holds the lock (a cheap early check, before anything slow
        such as starting Ray; `acquire` remains the real guard)."""
        holder = self.holder()
        if holder is not None and not stale(holder):
            raise StoreLocked(f"{self.where} is being written by {describe(holder)}")

    def taking_over(self, holder: LockHolder | None) -> None:
        log.warning("%s: taking over the stale lock of %s (no longer running)", self.where, describe(holder))

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def describe(holder: LockHolder | None) -> str:
    if holder is None or holder.pid is None:
        return "another process (it has not written its name yet)"
    return f"pid {holder.pid} on {holder.host} since {holder.started or holder.started_at}"


def stale(holder: LockHolder | None, now: float | None = None) -> bool:
    """A holder that is provably dead: same host, pid not running; or (object stores) its lease expired."""
    if holder is None:
        return False
    if holder.expires_at is not None and (time.time() if now is None else now) > holder.expires_at:
        return True
    return holder.host == socket.gethostname() and holder.pid is not None and not pid_alive(holder.pid)


def holder_body(command: str, owner: str) -> LockHolder:
    """This process as a holder: pid, host, start time, the command (redacted), and `owner`, a random
    token naming this hold of the lock (what a pack's commit checks: see `WriterLock.token`)."""
    now = time.time()
    return LockHolder(owner=owner, pid=os.getpid(), host=socket.gethostname(), started_at=now,
                      started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)), command=redact(command))
