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

import socket
import time

from sweeps.store.holder import pid_alive
from sweeps.store.location import StoreLocation
from sweeps.store.records import STATUS_FILE, SweepStatus, TrialStatus, read_record

HEARTBEAT_SECONDS = 1.0  # how often a live driver refreshes updated_at (at least every few seconds)
STALE_SECONDS = 30.0  # a heartbeat older than this, from a driver on another host, means it is gone

__all__ = ["STATUS_FILE", "SweepStatus", "TrialStatus", "driver_gone", "read_status"]


def read_status(location: StoreLocation) -> SweepStatus | None:
    """The store's status.json (None if absent); RecordError naming it if damaged."""
    return read_record(location, STATUS_FILE, SweepStatus)


def driver_gone(status: SweepStatus, now: float | None = None) -> bool:
    """Whether a sweep that says `running` has lost its driver (killed without a final state).

    On the driver's own host: its pid is not alive. Elsewhere: no heartbeat for STALE_SECONDS.
    """
    if status.state != "running":
        return False
    age = (time.time() if now is None else now) - status.updated_at
    if status.driver_pid and status.host == socket.gethostname():
        return not pid_alive(status.driver_pid)
    return status.host is not None and age > STALE_SECONDS

