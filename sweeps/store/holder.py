"""Who holds a store's writer lock (`writer.lock`): the holder's body, whether it is provably
gone, and how it reads in a message. Shared by the local lock (lock.py) and the object-store
lease (lease.py)."""

from __future__ import annotations

import os
import socket
import time

from sweeps.spec import SweepError
from sweeps.store.uris import redact

LOCK_FILE = "writer.lock"


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


def describe(holder: dict | None) -> str:
    if not holder or "pid" not in holder:
        return "another process (it has not written its name yet)"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started', holder.get('started_at'))}"


def stale(holder: dict | None, now: float | None = None) -> bool:
    """A holder that is provably dead: same host, pid not running; or (object stores) its lease expired."""
    if not holder:
        return False
    expires = holder.get("expires_at")
    if isinstance(expires, int | float) and (time.time() if now is None else now) > expires:
        return True
    return holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
        and not pid_alive(holder["pid"])


def holder_body(command: str, owner: str) -> dict:
    """This process as a holder: pid, host, start time, the command (redacted), and `owner`, a random
    token naming this hold of the lock (what a pack's commit checks: see `writer_token`)."""
    now = time.time()
    return {
        "owner": owner,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": now,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
        "command": redact(command),
    }
