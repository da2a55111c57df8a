"""What a store records about itself: the sweep it holds, the dtype, the package version.

    sweep.yaml                 the CURRENT sweep, as a canonical document (plain YAML, never pickle)
    store.json                 {"format": 1, "dtype": "float32", "package_version": "0.1.0",
                                "created_at": ..., "updated_at": ..., "sweep_sha256": ...,
                                "history": ["history/sweep-20250101T120000.yaml", ...]}
    history/sweep-<time>.yaml  every earlier sweep record, moved there when a resume changed the sweep

The recorded sweep is the truth: tables, the report, `missing_runs` and `verify` count the
(config, seed) pairs of sweep.yaml only; stored runs outside it are ignored (and said so once).
A resume with an edited sweep file runs only what the new sweep lacks. A change that alters
the meaning of runs already stored (the dtype, or the task settings of an experiment that has
stored runs) is refused with a SweepError naming the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from importlib import metadata
from pathlib import Path

import yaml

from sweeps.store.location import StoreLocation, as_location
from sweeps.store.dataset import finished_runs
from sweeps.spec import LOCATION_SETTINGS, Sweep, SweepError, make_config, parse_sweep

SWEEP_RECORD = "sweep.yaml"
STORE_RECORD = "store.json"
HISTORY = "history"
STORE_FORMAT = 1


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


def read_store_record(results_dir: str | Path | StoreLocation) -> dict | None:
    try:
        return json.loads(as_location(results_dir).read_bytes(STORE_RECORD))
    except FileNotFoundError:
        return None


_SWEEP_CACHE: dict[tuple[str, int, int], tuple[Sweep, frozenset]] = {}


def _load(results_dir: str | Path | StoreLocation) -> tuple[Sweep, frozenset] | None:
    location = as_location(results_dir)
    if location.local:
        try:
            stat = Path(location.path(SWEEP_RECORD)).stat()
        except FileNotFoundError:
            return None
        key = (location.path(SWEEP_RECORD), stat.st_mtime_ns, stat.st_size)
    else:
        info = location.info(SWEEP_RECORD)
        if not info.is_file:
            return None
        key = (location.uri + "/" + SWEEP_RECORD, info.mtime_ns or 0, info.size)
    if key not in _SWEEP_CACHE:
        try:
            text = location.read_text(SWEEP_RECORD)
        except FileNotFoundError:
            return None
        sweep = parse_sweep(yaml.safe_load(text), location.url(SWEEP_RECORD))
        _SWEEP_CACHE.clear()
        _SWEEP_CACHE[key] = (sweep, frozenset(sweep_pairs(sweep)))
    return _SWEEP_CACHE[key]


def recorded_sweep(results_dir: str | Path | StoreLocation) -> Sweep | None:
    """The store's current sweep (sweep.yaml), if recorded."""
    loaded = _load(results_dir)
    return None if loaded is None else loaded[0]


def recorded_pairs(results_dir: str | Path | StoreLocation) -> frozenset | None:
    """The (config_id, seed) pairs of the store's current sweep (None: no sweep recorded)."""
    loaded = _load(results_dir)
    return None if loaded is None else loaded[1]


def sweep_pairs(sweep: Sweep) -> set[tuple[str, int]]:
    ids = [make_config(e, values).config_id for e in sweep.experiments for values in e.configs()]
    return {(config_id, s) for config_id in ids for s in sweep.seeds}


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
        ids = [make_config(e, v).config_id for v in e.configs()]
        runs = sum((config_id, s) in stored for config_id in ids for s in old.seeds)
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


def check_and_record(results_dir: str | Path | StoreLocation, sweep: Sweep, dtype: str) -> list[str]:
    """Make `sweep` the store's current sweep (the caller holds the writer lock). Returns notices to print.

    Refuses (SweepError) a dtype or task-settings change under stored runs; keeps a changed
    earlier record in history/.
    """
    results_dir = as_location(results_dir)
    store = read_store_record(results_dir) or {}
    old = recorded_sweep(results_dir)
    stored = finished_runs(results_dir)
    notices = []
    if stored and store.get("dtype") and store["dtype"] != dtype:
        raise SweepError(
            f"dtype: {results_dir} holds {store['dtype']} runs and this run asks for {dtype}; "
            f"rerun with --dtype {store['dtype']}, or use another --storage or sweep name"
        )
    if old is not None and stored:
        conflict = _settings_conflict(old, sweep, stored)
        if conflict:
            raise SweepError(f"{sweep.source}: {conflict}")
    history = list(store.get("history", []))
    if old is not None and not _same_document(old.document, sweep.document):
        stamp = time.strftime("%Y%m%dT%H%M%S")
        kept = f"{HISTORY}/sweep-{stamp}.yaml"
        n = 1
        while results_dir.exists(kept):
            n += 1
            kept = f"{HISTORY}/sweep-{stamp}-{n}.yaml"
        results_dir.write_bytes(kept, results_dir.read_bytes(SWEEP_RECORD), durable=True)
        history.append(kept)
        kept = results_dir.url(kept)
        outside = len(stored - sweep_pairs(sweep))
        notices.append(
            f"The sweep changed since the store was written: the earlier record is kept as {kept}; "
            "runs the new sweep lacks will run" + (f", and {outside} stored runs outside it are ignored" if outside else "")
        )
    text = canonical_document(sweep)
    results_dir.makedirs()
    results_dir.write_bytes(SWEEP_RECORD, text.encode(), durable=True)
    now = time.time()
    record = {
        "format": STORE_FORMAT,
        "dtype": store.get("dtype") if stored and store.get("dtype") else dtype,
        "package_version": package_version(),
        "created_at": store.get("created_at", now),
        "created_by_version": store.get("created_by_version", package_version()),
        "updated_at": now,
        "sweep_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "history": history,
    }
    results_dir.write_bytes(STORE_RECORD, json.dumps(record, indent=1).encode(), durable=True)
    return notices
