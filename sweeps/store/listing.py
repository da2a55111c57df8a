"""The sweeps of a storage folder (`fade-sweep status STORAGE`): each results folder under it, with its
task, its state, its runs done of the runs it asks for and when it last changed.

Records and manifests only (no data file, no polars), so a storage of a hundred sweeps lists in well
under two seconds (benchmarks/bench_listing.py). A state is one of:
- `running`: status.json says so and its driver lives (or the writer lock is held: starting);
- `finished`: every run the sweep asks for (of a race: so far) is in, and no driver is at work;
- `interrupted`: runs are missing and no driver is at work (stopped, killed, or failed: `failed`);
- `damaged`: a record or manifest cannot be read, or a data file is not its manifest's size
  (`Store.damage_notice` says which and the repair).
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeps.spec import SweepError
from sweeps.store.holder import LOCK_FILE, stale
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import MANIFESTS
from sweeps.store.race import missing_count, race_damage
from sweeps.store.sweep_record import SWEEP_RECORD
from sweeps.store.records import STATUS_FILE, RecordError, SweepStatus
from sweeps.store.status import driver_gone
from sweeps.store.store import Store

STORE_MARKS = ("store.json", SWEEP_RECORD, STATUS_FILE, MANIFESTS, LOCK_FILE)  # what only a results folder holds
RUNNING, FINISHED, INTERRUPTED, FAILED, DAMAGED = "running", "finished", "interrupted", "failed", "damaged"


@dataclass(frozen=True)
class SweepEntry:
    """One results folder of a storage, as `status STORAGE` lists it."""

    name: str
    tasks: tuple[str, ...]  # empty: no readable sweep record
    state: str  # running | finished | interrupted | failed | damaged
    runs_done: int
    runs_total: int | None  # None: no readable sweep record to count from
    last_change: float | None  # Unix seconds: the heartbeat of status.json, else store.json's update
    damage: str | None = None  # Store.damage_notice (or the unreadable sweep record), when damaged
    location: StoreLocation | None = None


def is_results_folder(location: StoreLocation) -> bool:
    """Whether `location` is one sweep's results folder (rather than a storage holding several)."""
    return any(location.exists(mark) for mark in STORE_MARKS)


def list_sweeps(storage: StoreLocation) -> list[SweepEntry]:
    """Every results folder directly under `storage`, by name; folders that hold no sweep are left out."""
    return [entry_of(Store(storage / name)) for name in storage.children() if is_results_folder(storage / name)]


def entry_of(store: Store) -> SweepEntry:
    """The listing's row of one results folder (read: status.json, store.json, sweep.yaml, the manifests)."""
    status, record = _readable(store.status), _readable(lambda: store.record)
    try:
        sweep = store.sweep
    except SweepError:
        sweep = None
    readable = sweep is not None or not store.location.exists(SWEEP_RECORD)
    damaged = (not readable or store.damaged_manifests or store.damaged_files
               or _damaged_record(store, status, record, sweep))
    damage = (store.damage_notice() or "sweep.yaml cannot be read") if damaged else None  # the notice reads again
    finished = store.finished_runs() - store.left_out_runs()  # a damaged scores file's runs count as missing
    done = len(finished & sweep.pairs) if sweep is not None else len(finished)
    total = None if sweep is None else done + missing_count(store.location, sweep, finished)
    last = status.updated_at if status is not None else record.updated_at if record is not None else None
    tasks = tuple(dict.fromkeys(e.task for e in sweep.experiments)) if sweep is not None else ()
    return SweepEntry(store.location.name, tasks, _state(store, status, done, total, damage), done, total, last,
                      damage, store.location)


def _state(store: Store, status: SweepStatus | None, done: int, total: int | None, damage: str | None) -> str:
    if status is not None and status.state == RUNNING and not driver_gone(status):
        return RUNNING
    if status is None and _starting(store):
        return RUNNING
    if damage:
        return DAMAGED
    if total is not None and done >= total:
        return FINISHED
    return FAILED if status is not None and status.state == FAILED else INTERRUPTED


def _starting(store: Store) -> bool:
    """A driver holds the writer lock but has written no status yet."""
    if not store.location.exists(LOCK_FILE):
        return False
    holder = store.location.writer_lock().holder()
    return holder is not None and not stale(holder)


def _damaged_record(store: Store, status: SweepStatus | None, record, sweep) -> bool:
    """Whether status.json, store.json, confirmation.json or race.json is there but cannot be read."""
    if (status is None and store.location.exists(STATUS_FILE)) or (record is None and store.location.exists("store.json")):
        return True
    return _unreadable(lambda: store.confirmation) or race_damage(store.location, sweep) is not None


def _unreadable(read) -> bool:
    try:
        read()
    except RecordError:
        return True
    return False


def _readable(read):
    try:
        return read()
    except RecordError:
        return None
