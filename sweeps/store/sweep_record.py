"""What a store records about itself: the sweep it holds, the dtype, the package version.

    sweep.yaml                 the CURRENT sweep, as a canonical document (plain YAML, never pickle)
    store.json                 records.StoreRecord: {"format": 1, "dtype": "float32", "package_version": "0.1.0",
                                "created_at": ..., "updated_at": ..., "sweep_sha256": ...,
                                "history": ["history/sweep-20250101T120000.yaml", ...]}
    history/sweep-<time>.yaml  every earlier sweep record, moved there when a resume changed the sweep

The recorded sweep is the truth: tables, the report, missing runs and `verify` count the
(config, seed) pairs of sweep.yaml only; stored runs outside it are ignored (and said so once).
sweep.yaml is read back by the sweep file's own rules (`sweeps.spec.parse_sweep_text`: YAML 1.2
floats, no duplicate keys), the rules it was validated by. A resume with an edited sweep file
runs only what the new sweep lacks. A change that alters the meaning of runs already stored
(the dtype, or the task settings of an experiment that has stored runs) is refused with a
SweepError naming the key, and so is one whose task streams reach past the steps every version of
the stream draws the same while the store's runs of that task came from another version than this
code's (store.json's `stream_versions`; none recorded: version 1).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from importlib import metadata

import yaml

from sweeps.plan import TUNING
from sweeps.spec import LOCATION_SETTINGS, Sweep, SweepError, parse_sweep_text
from sweeps.spec.own import DeclaredLearner
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import read_manifests, runs_of
from sweeps.store.records import STATUS_FILE, RecordError, StoreRecord, read_record, write_record
from sweeps.store.status import read_status
from tasks import get_task

SWEEP_RECORD = "sweep.yaml"
STORE_RECORD = "store.json"
HISTORY = "history"


def package_version() -> str:
    try:
        return metadata.version("fade-sweep")
    except metadata.PackageNotFoundError:
        return "unknown"


def canonical_document(sweep: Sweep) -> str:
    """The sweep's document as stored: plain YAML, keys in the order written."""
    return yaml.safe_dump(sweep.document, sort_keys=False)


def _same_document(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def read_store_record(location: StoreLocation) -> StoreRecord | None:
    """store.json (None if absent); RecordError naming it if damaged."""
    return read_record(location, STORE_RECORD, StoreRecord)


def read_sweep(location: StoreLocation, sha256: str = "", learners: tuple[DeclaredLearner, ...] = ()) -> Sweep | None:
    """The store's current sweep (sweep.yaml), if recorded; SweepError naming the file if it is not one,
    or if its bytes are not those recorded (`sha256`, store.json's: a truncated sweep.yaml may still
    parse, as a smaller sweep). `learners`: its own learners as store.json records them (data: no code
    is imported to read a store)."""
    try:
        raw = location.read_bytes(SWEEP_RECORD)
    except FileNotFoundError:
        return None
    if sha256 and hashlib.sha256(raw).hexdigest() != sha256:
        raise SweepError(f"{location.url(SWEEP_RECORD)}: changed or truncated since it was recorded "
                         f"(its sha256 is not the one {STORE_RECORD} records)")
    return parse_sweep_text(raw.decode(errors="replace"), location.url(SWEEP_RECORD), learners)


def recorded_learners(record: StoreRecord | None) -> tuple[DeclaredLearner, ...]:
    """The sweep's own learners as store.json records them."""
    try:
        return tuple(DeclaredLearner.from_record(r) for r in record.learners) if record is not None else ()
    except (KeyError, TypeError) as err:
        raise SweepError(f"{STORE_RECORD}: learners: not a learner record ({err})") from None


def recorded_sweep(location: StoreLocation, record: StoreRecord | None) -> Sweep | None:
    """The store's sweep, checked against `record` (store.json, None: not readable) where it has its hash."""
    if record is None:
        return read_sweep(location)
    return read_sweep(location, record.sweep_sha256, recorded_learners(record))


def _learner_conflict(old: StoreRecord | None, new: Sweep, stored: set[tuple[str, int]]) -> str | None:
    """A learner of the researcher's own whose rule is not the one the store's runs of it ran."""
    before = {d.name: d for d in recorded_learners(old)}
    for learner in new.learners:
        was = before.get(learner.name)
        if was is None or was.sha256 == learner.sha256:
            continue
        runs = {c.config_id for e in new.experiments if e.optimizer == learner.name for c in e.cells}
        if any(config in runs for config, _ in stored):
            return (f"learners.{learner.name}: the rule's source changed since the store recorded it (sha256 "
                    f"{learner.sha256[:12]}, recorded {was.sha256[:12]}); restore it, or run it under another sweep "
                    "name or --storage")
    return None


def check_streams(location: StoreLocation, store: StoreRecord | None, sweeps: tuple[Sweep | None, ...],
                  stored_tasks: set[str]) -> None:
    """Refuse (SweepError) adding runs to a store holding runs of a task (`stored_tasks`) that were drawn
    from another version of its stream than this code draws, where an experiment of `sweeps` (the new and
    the recorded one) runs past the steps every version draws the same: new and stored runs would differ
    in their data. Shorter streams are the same in every version, so a store of them resumes whatever
    version it records (`store`: store.json, None: none recorded)."""
    for sweep in sweeps:
        for e in sweep.experiments if sweep is not None else ():
            task = get_task(e.task)
            was = store.stream_version(e.task) if store is not None else 1
            if e.task not in stored_tasks or was == task.stream_version or not task.reaches_past_shared(e.settings):
                continue
            made_by = f" (fade-sweep {store.package_version})" if store is not None else ""
            raise SweepError(
                f"{location}: {e.task}: the store's runs were drawn from version {was} of its stream and this code "
                f"draws version {task.stream_version}, which differs past step {task.shared_steps(e.settings):,} "
                f"(steps is {e.settings.steps:,}): their runs must not share a table; run it under another sweep "
                f"name or --storage, or with the code that made the store{made_by}")


def recorded_stream_versions(store: StoreRecord | None, sweep: Sweep) -> dict[str, int]:
    """store.json's stream versions once `sweep` is recorded: this code's for its tasks (`check_streams`
    passed, so their stored runs are the same in both versions), the recorded ones for the rest."""
    versions = dict(store.stream_versions) if store is not None else {}
    return {**versions, **{e.task: get_task(e.task).stream_version for e in sweep.experiments}}


def _identity(settings) -> dict:
    return {k: v for k, v in dataclasses.asdict(settings).items() if k not in LOCATION_SETTINGS}


def _settings_conflict(old: Sweep, new: Sweep, stored: set[tuple[str, int]]) -> str | None:
    """A task setting edited under runs already stored: an old experiment with stored runs whose
    (task, optimizer) the new sweep still runs, but never with the old settings."""
    new_settings: dict[tuple[str, str], list[dict]] = {}
    for e in new.experiments:
        new_settings.setdefault((e.task, e.optimizer), []).append(_identity(e.settings))
    for e in old.experiments:
        candidates = new_settings.get((e.task, e.optimizer))
        settings = _identity(e.settings)
        if not candidates or settings in candidates:
            continue
        runs = sum((c.config_id, s) in stored for c in e.cells for s in old.seeds)
        if not runs:
            continue
        closest = min(candidates, key=lambda c: sum(c.get(k) != v for k, v in settings.items()))
        changed = [k for k, v in settings.items() if closest.get(k) != v]
        return (
            f"task_settings.{changed[0]}: changed from {settings[changed[0]]!r} to {closest.get(changed[0])!r} "
            f"for {e.task}/{e.optimizer}, but the store holds {runs} runs with {changed[0]}={settings[changed[0]]!r}; "
            "a resume must not change what stored runs mean: restore the setting, or run the new settings "
            "under another sweep name or --storage"
        )
    return None


def check_change(location: StoreLocation, sweep: Sweep, dtype: str) -> None:
    """Refuse (SweepError) making `sweep` the store's sweep when that would change what stored runs
    mean: a dtype or task-settings change under stored runs. Reads only: the driver asks before Ray
    starts, and `check_and_record` asks again under the lock."""
    _checked(location, sweep, dtype)


def _readable(read: Callable[[StoreLocation], object], location: StoreLocation) -> tuple[object, str | None]:
    """What `read(location)` returns, or (None, why) when its record is damaged: a damaged record is
    set aside by the writer and written anew, never a dead end."""
    try:
        return read(location), None
    except (RecordError, SweepError) as err:
        return None, str(err)


def _checked(location: StoreLocation, sweep: Sweep, dtype: str) -> tuple[StoreRecord | None, Sweep | None, set, dict]:
    """The checks of `check_change`; returns (store.json, the recorded sweep, the stored tuning runs, and
    {record: why} for the records that are damaged, read as absent)."""
    store, bad_store = _readable(read_store_record, location)
    old, bad_sweep = _readable(lambda at: recorded_sweep(at, store), location)
    _, bad_status = _readable(read_status, location)
    read = ((STORE_RECORD, bad_store), (SWEEP_RECORD, bad_sweep), (STATUS_FILE, bad_status))
    damaged = {name: why for name, why in read if why}
    manifests = read_manifests(location).manifests
    stored = runs_of([m for m in manifests if m.run_stage == TUNING])
    if stored and store is not None and store.dtype != dtype:
        raise SweepError(
            f"dtype: {location} holds {store.dtype} runs and this run asks for {dtype}; "
            f"rerun with --dtype {store.dtype}, or use another --storage or sweep name"
        )
    if old is not None and stored:
        conflict = _settings_conflict(old, sweep, stored)
        if conflict:
            raise SweepError(f"{sweep.source}: {conflict}")
    conflict = _learner_conflict(store, sweep, stored)
    if conflict:
        raise SweepError(f"{sweep.source}: {conflict}")
    check_streams(location, store, (sweep, old), {m.task for m in manifests})
    return store, old, stored, damaged


def check_and_record(location: StoreLocation, sweep: Sweep, dtype: str) -> list[str]:
    """Make `sweep` the store's current sweep (the caller holds the writer lock). Returns notices to print.

    Refuses (SweepError) a dtype or task-settings change under stored runs; keeps a changed
    earlier record in history/, and a damaged one as history/damaged-<name> (then written anew;
    a damaged store.json's dtype is lost: this run's is recorded, and the notice says so).
    """
    store, old, stored, damaged = _checked(location, sweep, dtype)
    notices = []
    for name, why in damaged.items():
        location.write_bytes(f"{HISTORY}/damaged-{name}", location.read_bytes(name), durable=True)
        if name == STATUS_FILE:  # the driver writes it while packs run
            location.delete(name)
        unknown = name == STORE_RECORD and stored
        lost = f" (the stored runs' dtype could not be read: {dtype} is recorded)" if unknown else ""
        again = "the next run that runs packs writes it" if name == STATUS_FILE else f"written anew{lost}"
        notices.append(f"{why}: set aside as {location.url(f'{HISTORY}/damaged-{name}')}; {again}")
    history = list(store.history) if store is not None else []
    if old is not None and not _same_document(old.document, sweep.document):
        stamp = time.strftime("%Y%m%dT%H%M%S")
        kept = f"{HISTORY}/sweep-{stamp}.yaml"
        n = 1
        while location.exists(kept):
            n += 1
            kept = f"{HISTORY}/sweep-{stamp}-{n}.yaml"
        location.write_bytes(kept, location.read_bytes(SWEEP_RECORD), durable=True)
        history.append(kept)
        outside = len(stored - sweep.pairs)
        notices.append(
            f"The sweep changed since the store was written: the earlier record is kept as {location.url(kept)}; "
            "runs the new sweep lacks will run" + (f", and {outside} stored runs outside it are ignored" if outside else "")
        )
    text = canonical_document(sweep)
    location.makedirs()
    location.write_bytes(SWEEP_RECORD, text.encode(), durable=True)
    now = time.time()
    record = StoreRecord(
        dtype=store.dtype if stored and store is not None else dtype,
        package_version=package_version(),
        created_at=store.created_at if store is not None else now,
        created_by_version=store.created_by_version if store is not None else package_version(),
        updated_at=now,
        sweep_sha256=hashlib.sha256(text.encode()).hexdigest(),
        history=history,
        learners=[d.to_record() for d in sweep.learners],
        stream_versions=recorded_stream_versions(store, sweep),
    )
    write_record(location, STORE_RECORD, record, durable=True)
    return notices
