"""The Parquet results store of interface.md: data files, per-pack manifests, the commit rule.

Layout under RESULTS_DIR (= <storage>/<sweep name>):

    sweep.yaml                 the current sweep (canonical document; see record.py)
    store.json                 store format, dtype, package version, sweep history
    history/sweep-<time>.yaml  earlier sweep records, kept when a resume changed the sweep
    writer.lock                held by the one process writing the store (see lock.py)
    scores/task=<task>/optimizer=<opt>/pack-<pack id>-<write id>.parquet   one row per (config, seed)
    curves/task=<task>/optimizer=<opt>/pack-<pack id>-<write id>.parquet   one row per (config, seed, bin)
    manifests/pack-<pack id>-<write id>.json                             the commit record of one pack

Data files do not contain `task` and `optimizer`: they are hive partitions, read from the
path (so pyarrow.dataset(partitioning="hive"), pandas, DuckDB and polars agree). Every file
carries every hyperparameter column (null where the optimizer does not take it) and the
task's settings, so files of different optimizers concatenate.

Commit protocol. A pack's data files get write-once names (the write id is new for every
write) and are written atomically (see location.py: locally under a hidden temporary name,
fsynced and renamed into place; on an object store as one object, which appears whole or not
at all); the pack's manifest is written the same way LAST (on S3: one PUT, atomic). The manifest is the commit: readers read only
files named by manifests, so a crash never shows half a pack and a file no manifest names
(an orphan) is never read; `fade-sweep run --resume` deletes orphans. If two manifests
claim the same (config, seed) (a pack written twice), readers take each (config, seed)
from the NEWEST manifest (by `written_at`, then write id) and ignore older copies.

Stages. A pack belongs to one stage (sweeps.spec.STAGES): `tuning` (the sweep's grid on its
seeds) or `confirmation` (selected configurations on fresh seeds, see stages.py). Its manifest
says which ("stage"; a manifest without it predates stages and is tuning) and its data files
carry a `stage` column for outside readers (polars, DuckDB: filter `stage = 'tuning'`). The
readers here select manifests by stage, so (config, seed) pairs, the newest-wins rule and
finished runs are all per stage, and the frames they return hold one stage (`stage` filled in
for files written before stages).

Manifest (JSON, format 1):

    {"format": 1, "pack_id": "...", "write_id": "...", "written_at": 1714000000.123,
     "task": "linear_tracking", "optimizer": "fade", "stage": "tuning",
     "configs": ["<config id>", ...], "seeds": [0, 1, 2],      # the pack's runs: every config x every seed
     "files": {"scores": {"path": "scores/task=.../pack-....parquet", "rows": 6, "bytes": 4242, "sha256": "..."},
               "curves": {"path": "curves/task=.../pack-....parquet", "rows": 12, "bytes": 5151, "sha256": "..."}}}
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.packs.outcome import PackOutcome
from sweeps.store.location import Entry, StoreLocation, as_location
from sweeps.spec import STAGES, TUNING, Pack

SCORES, CURVES = "scores", "curves"
KINDS = (SCORES, CURVES)
MANIFESTS = "manifests"
MANIFEST_FORMAT = 1
PARTITIONS = ("task", "optimizer")  # hive partitions: in the path, never inside a file
HIVE_SCHEMA = {"task": pl.String, "optimizer": pl.String}
STAGE = "stage"  # the column (and manifest key) naming a row's stage


class StoreError(RuntimeError):
    """A store that cannot be read as it is (a damaged manifest); `fade-sweep verify` says more."""


# ---------------------------------------------------------------- tables of a pack


def _settings_columns(pack: Pack) -> dict[str, object]:
    """Task settings as columns (`steps` is its own column already)."""
    return {k: v for k, v in dataclasses.asdict(pack.experiment.settings).items() if k != "steps"}


def run_keys(pack: Pack, repeat: int = 1) -> dict[str, pa.Array]:
    """task, optimizer, config_id, settings, hyperparameters and seed of every run, each row repeated."""
    n_seeds = len(pack.seeds)
    runs = pack.runs
    experiment = pack.experiment
    columns: dict[str, pa.Array] = {
        "task": pa.array([experiment.task] * runs * repeat, pa.string()),
        "optimizer": pa.array([experiment.optimizer] * runs * repeat, pa.string()),
        "config_id": pa.array(np.repeat([c.config_id for c in pack.configs], n_seeds * repeat), pa.string()),
    }
    for key, value in _settings_columns(pack).items():
        columns[key] = pa.array([value] * runs * repeat)
    for name in HYPERPARAMETERS:
        values = [dict(c.hyperparameters).get(name) for c in pack.configs]
        columns[name] = pa.array(np.repeat(np.array(values, dtype=object), n_seeds * repeat), pa.float64())
    columns["seed"] = pa.array(np.repeat(np.tile(pack.seeds, len(pack.configs)), repeat), pa.int64())
    return columns


def scores_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    """The pack's scores as read back (partition columns included)."""
    columns = run_keys(pack)
    columns["score"] = pa.array(outcome.score, pa.float64())
    columns["diverged"] = pa.array(outcome.diverged, pa.bool_())
    columns["steps"] = pa.array(np.full(pack.runs, pack.experiment.settings.steps), pa.int64())
    columns["wall_seconds"] = pa.array(np.full(pack.runs, outcome.wall_seconds), pa.float64())
    columns[STAGE] = pa.array([pack.stage] * pack.runs, pa.string())
    return pa.table(columns)


def curves_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    """The pack's curves as read back (partition columns included)."""
    bins = len(outcome.bin_end)
    columns = run_keys(pack, bins)
    columns["step"] = pa.array(np.tile(outcome.bin_end, pack.runs), pa.int64())
    for name, values in outcome.curves.items():
        if values is None:
            columns[name] = pa.nulls(pack.runs * bins, pa.float64())
        elif values.ndim == 3:  # one value per output: a fixed-size list column
            flat = pa.array(values.reshape(-1), pa.float64())
            columns[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[2])
        else:
            columns[name] = pa.array(values.reshape(-1), pa.float64())
    columns[STAGE] = pa.array([pack.stage] * pack.runs * bins, pa.string())
    return pa.table(columns)


# ---------------------------------------------------------------- atomic writes


def write_bytes_atomic(path: str | Path | StoreLocation, data: bytes, *, durable: bool = False) -> None:
    """Write a small file (or object) so that readers see the old or the new content, never a part.

    `path` is a local path, or a StoreLocation naming the file (see location.py)."""
    if isinstance(path, StoreLocation):
        path.parent.write_bytes(path.name, data, durable=durable)
        return
    path = Path(path)
    StoreLocation.parse(path.parent).write_bytes(path.name, data, durable=durable)


def _target(location: StoreLocation, rel: str) -> Path | StoreLocation:
    """What write_bytes_atomic takes for `rel` under `location`: a Path locally, a location elsewhere."""
    return location.local_path / rel if location.local else location / rel


def _write_data_file(table: pa.Table, location: StoreLocation, relative: str) -> dict:
    """Write one data file under its final (write-once) name; returns its manifest entry."""
    size, sha256 = location.write_with(relative, lambda f: pq.write_table(table.drop_columns(list(PARTITIONS)), f))
    return {"path": relative, "rows": table.num_rows, "bytes": size, "sha256": sha256}


def new_write_id() -> str:
    """Unique and time-ordered: <UTC time to the microsecond>-<random>."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1e6) % 1_000_000:06d}-{uuid.uuid4().hex[:8]}"


def write_pack(results_dir: str | Path | StoreLocation, pack: Pack, outcome: PackOutcome) -> Path | StoreLocation:
    """Commit a finished pack: its curves and scores files, then its manifest (the commit). Returns the manifest."""
    results_dir = as_location(results_dir)
    e = pack.experiment
    write_id = new_write_id()
    stem = f"pack-{pack.pack_id}-{write_id}"
    partition = f"task={e.task}/optimizer={e.optimizer}"
    files = {
        CURVES: _write_data_file(curves_table(pack, outcome), results_dir, f"{CURVES}/{partition}/{stem}.parquet"),
        SCORES: _write_data_file(scores_table(pack, outcome), results_dir, f"{SCORES}/{partition}/{stem}.parquet"),
    }
    manifest = {
        "format": MANIFEST_FORMAT,
        "pack_id": pack.pack_id,
        "write_id": write_id,
        "written_at": time.time(),
        "task": e.task,
        "optimizer": e.optimizer,
        STAGE: pack.stage,
        "configs": [c.config_id for c in pack.configs],
        "seeds": [int(s) for s in pack.seeds],
        "files": files,
    }
    path = _target(results_dir, f"{MANIFESTS}/{stem}.json")
    write_bytes_atomic(path, json.dumps(manifest, indent=1).encode(), durable=True)  # the commit
    return path


# ---------------------------------------------------------------- manifests


@dataclass(frozen=True)
class Manifest:
    """One committed pack write."""

    name: str  # file name under manifests/
    pack_id: str
    write_id: str
    written_at: float
    task: str
    optimizer: str
    configs: tuple[str, ...]
    seeds: tuple[int, ...]
    files: dict  # kind -> {"path", "rows", "bytes", "sha256"}
    stage: str | None = None  # None: written before stages (tuning; its files have no stage column)

    @property
    def run_stage(self) -> str:
        return self.stage or TUNING

    @property
    def order(self) -> tuple[float, str]:
        """Newer manifests sort later; ties broken by write id (deterministic)."""
        return (self.written_at, self.write_id)

    def pairs(self) -> list[tuple[str, int]]:
        return [(c, s) for c in self.configs for s in self.seeds]


def parse_manifest(name: str, raw: bytes) -> Manifest:
    """A manifest from its JSON; ValueError (with what is wrong) if it is not one."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not valid JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"not a format-{MANIFEST_FORMAT} manifest")
    try:
        files = doc["files"]
        for kind in KINDS:
            entry = files[kind]
            if not (isinstance(entry["path"], str) and entry["path"].startswith(f"{kind}/") and ".." not in entry["path"]):
                raise ValueError(f"files.{kind}.path {entry['path']!r} is not under {kind}/")
            int(entry["rows"]), int(entry["bytes"]), str(entry["sha256"])
        stage = doc.get(STAGE)
        if stage is not None and stage not in STAGES:
            raise ValueError(f"stage {stage!r} is not one of {', '.join(STAGES)}")
        return Manifest(
            name, str(doc["pack_id"]), str(doc["write_id"]), float(doc["written_at"]), str(doc["task"]),
            str(doc["optimizer"]), tuple(str(c) for c in doc["configs"]), tuple(int(s) for s in doc["seeds"]), files,
            stage,
        )
    except (KeyError, TypeError) as err:
        raise ValueError(f"missing or mistyped field {err}") from None


_MANIFEST_CACHE: dict[tuple[str, int, int], Manifest] = {}  # manifests are write-once: cache by path, mtime, size


def _manifest_entries(results_dir: str | Path | StoreLocation) -> list[Entry]:
    """The committed manifests' entries (hidden temporary files excluded), by name."""
    location = as_location(results_dir)
    return [e for e in location.list(MANIFESTS) if e.name.endswith(".json") and not e.name.startswith(".")]


def read_manifests(results_dir: str | Path | StoreLocation) -> list[Manifest]:
    """Every committed pack write, oldest first. StoreError names a damaged manifest."""
    location = as_location(results_dir)
    manifests = []
    for entry in _manifest_entries(location):
        key = (location.path(entry.rel), entry.mtime_ns, entry.size)
        manifest = _MANIFEST_CACHE.get(key)
        if manifest is None:
            try:
                manifest = parse_manifest(entry.name, location.read_bytes(entry.rel))
            except ValueError as err:
                raise StoreError(
                    f"{location.url(entry.rel)}: damaged manifest ({err}); run `fade-sweep verify {location}`"
                ) from None
            if len(_MANIFEST_CACHE) > 100_000:
                _MANIFEST_CACHE.clear()
            _MANIFEST_CACHE[key] = manifest
        manifests.append(manifest)
    return sorted(manifests, key=lambda m: m.order)


def has_results(results_dir: str | Path | StoreLocation) -> bool:
    """Whether any pack is committed."""
    return bool(_manifest_entries(results_dir))


def stage_manifests(results_dir: str | Path | StoreLocation, stage: str = TUNING) -> list[Manifest]:
    """The committed pack writes of one stage, oldest first."""
    return [m for m in read_manifests(results_dir) if m.run_stage == stage]


def finished_runs(results_dir: str | Path | StoreLocation, stage: str = TUNING) -> set[tuple[str, int]]:
    """(config_id, seed) of every committed run of `stage` (from the manifests; no Parquet is read)."""
    return {pair for m in stage_manifests(results_dir, stage) for pair in m.pairs()}


def pack_written(results_dir: str | Path | StoreLocation, pack: Pack) -> bool:
    """Whether every run of the pack is committed (by this pack or others of its stage)."""
    done = finished_runs(results_dir, pack.stage)
    return all((c.config_id, s) in done for c in pack.configs for s in pack.seeds)


# ---------------------------------------------------------------- what readers read


@dataclass(frozen=True)
class Selection:
    """The committed files a reader reads, after the newest-wins rule and the current sweep's filter."""

    whole: tuple[Manifest, ...]  # read every row of these
    partial: tuple[tuple[Manifest, frozenset[tuple[str, int]]], ...]  # read only these (config, seed) rows
    outside: int  # stored (config, seed) pairs not in the wanted set (ignored)
    superseded: int  # (config, seed) pairs also held by a newer manifest (ignored copies)

    @property
    def runs(self) -> int:
        return sum(len(m.configs) * len(m.seeds) for m in self.whole) + sum(len(k) for _, k in self.partial)


def select(manifests: list[Manifest], wanted: set[tuple[str, int]] | frozenset | None = None) -> Selection:
    """Each (config, seed) from the newest manifest holding it, and only the `wanted` ones (None: all)."""
    owner: dict[tuple[str, int], int] = {}
    for i, m in enumerate(manifests):  # oldest first: later (newer) manifests overwrite
        for pair in m.pairs():
            owner[pair] = i
    superseded = sum(len(m.configs) * len(m.seeds) for m in manifests) - len(owner)
    outside = 0 if wanted is None else sum(1 for pair in owner if pair not in wanted)
    whole, partial = [], []
    for i, m in enumerate(manifests):
        pairs = m.pairs()
        keep = [p for p in pairs if owner[p] == i and (wanted is None or p in wanted)]
        if len(keep) == len(pairs):
            whole.append(m)
        elif keep:
            partial.append((m, frozenset(keep)))
    return Selection(tuple(whole), tuple(partial), outside, superseded)


def damage(location: StoreLocation, manifest: Manifest, kind: str) -> str | None:
    """Why a committed file cannot be what its manifest recorded (missing, or truncated / grown:
    its size differs), or None. A same-size change needs the hash: `fade-sweep verify`."""
    entry = manifest.files[kind]
    if not location.is_file(entry["path"]):
        return "missing, but its manifest names it"
    size = location.size(entry["path"])
    return None if size == entry["bytes"] else f"{size} bytes, but its manifest recorded {entry['bytes']} (damaged)"


def set_aside_damaged(results_dir: str | Path | StoreLocation) -> list[str]:
    """Un-commit every pack with a missing or damaged file (only while holding the writer lock):
    its manifest moves to history/damaged-<name>, its files become orphans, and its runs are
    planned again. Returns the damaged files."""
    location = as_location(results_dir)
    damaged = []
    for manifest in read_manifests(location):
        bad = [manifest.files[k]["path"] for k in KINDS if damage(location, manifest, k)]
        if bad:
            rel = f"{MANIFESTS}/{manifest.name}"
            location.write_bytes(f"history/damaged-{manifest.name}", location.read_bytes(rel))
            location.delete(rel)
            damaged.extend(bad)
    return damaged


def _scan(location: StoreLocation, manifests: list[Manifest], kind: str) -> list[pl.LazyFrame]:
    """One lazy scan per task (tasks differ in their settings columns) and file schema (with or without
    the stage column), partitions from the paths.

    Local files: polars reads them itself. Object stores: a pyarrow dataset over the same
    filesystem (so the same credentials chain and endpoint), scanned lazily by polars."""
    by_task: dict[tuple[str, bool], list[str]] = {}
    for m in manifests:
        rel = m.files[kind]["path"]
        if why := damage(location, m, kind):
            raise StoreError(
                f"{location.url(rel)}: {why} ({MANIFESTS}/{m.name}); run `fade-sweep verify {location}`, and "
                "`fade-sweep run ... --resume` to set the damaged pack aside and run it again"
            )
        by_task.setdefault((m.task, m.stage is None), []).append(location.path(rel))
    if location.local:
        frames = {
            key: pl.scan_parquet(paths, hive_partitioning=True, hive_schema=HIVE_SCHEMA, try_parse_hive_dates=False)
            for key, paths in by_task.items()
        }
    else:
        partitioning = ds.partitioning(pa.schema([("task", pa.string()), ("optimizer", pa.string())]), flavor="hive")
        frames = {
            key: pl.scan_pyarrow_dataset(ds.dataset(paths, filesystem=location.fs, format="parquet",
                                                    partitioning=partitioning, partition_base_dir=location.path(kind)))
            for key, paths in by_task.items()
        }
    return [frame.with_columns(pl.lit(TUNING).alias(STAGE)) if legacy else frame for (_, legacy), frame in frames.items()]


def scan_selection(results_dir: str | Path | StoreLocation, selection: Selection, kind: str) -> pl.LazyFrame | None:
    """A LazyFrame over the selected rows of `kind` (scores or curves); task and optimizer first. None if empty."""
    location = as_location(results_dir)
    frames = _scan(location, list(selection.whole), kind)
    for manifest, keep in selection.partial:
        rows = pl.DataFrame({"config_id": [c for c, _ in keep], "seed": [s for _, s in keep]},
                            schema={"config_id": pl.String, "seed": pl.Int64})
        frames.extend(f.join(rows.lazy(), on=["config_id", "seed"], how="semi") for f in _scan(location, [manifest], kind))
    if not frames:
        return None
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    names = frame.collect_schema().names()
    return frame.select(*PARTITIONS, *(n for n in names if n not in PARTITIONS))


def committed_files(results_dir: str | Path | StoreLocation, kind: str = SCORES) -> list[Path | str]:
    """The data files of `kind` that manifests name (what any other reader should read): local paths,
    or URIs on an object store."""
    location = as_location(results_dir)
    files = [m.files[kind]["path"] for m in read_manifests(location)]
    return [location.local_path / f for f in files] if location.local else [location.url(f) for f in files]


def _referenced(location: StoreLocation) -> set[str]:
    return {m.files[k]["path"] for m in read_manifests(location) for k in KINDS}


def orphan_entries(results_dir: str | Path | StoreLocation) -> list[str]:
    """Paths (relative to the store) under scores/, curves/ and manifests/ that are not part of a commit
    (left by an interrupted write)."""
    location = as_location(results_dir)
    named = _referenced(location)
    found = [e.rel for kind in KINDS for e in location.list(kind, recursive=True) if e.rel not in named]
    found.extend(e.rel for e in location.list(MANIFESTS) if e.name.startswith("."))
    return found


def orphans(results_dir: str | Path | StoreLocation) -> list[Path | str]:
    """The orphans (see orphan_entries) as local paths, or URIs on an object store."""
    location = as_location(results_dir)
    rels = orphan_entries(location)
    return [location.local_path / r for r in rels] if location.local else [location.url(r) for r in rels]


def remove_orphans(results_dir: str | Path | StoreLocation) -> list[Path | str]:
    """Delete the orphans (only while holding the store's writer lock); returns what was removed."""
    location = as_location(results_dir)
    rels = orphan_entries(location)
    for rel in rels:
        location.delete(rel)
    return [location.local_path / r for r in rels] if location.local else [location.url(r) for r in rels]


_REPORTED: set[tuple[str, int]] = set()


def notice_once(results_dir: str | Path | StoreLocation, outside: int) -> None:
    """Say once per process and store that stored runs outside the current sweep are ignored."""
    key = (as_location(results_dir).uri, outside)
    if outside and key not in _REPORTED:
        _REPORTED.add(key)
        print(f"{outside} stored runs are not in the current sweep; ignored", file=sys.stderr)
