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

Manifest (JSON, format 1; the model is `records.Manifest`):

    {"format": 1, "pack_id": "...", "write_id": "...", "written_at": 1714000000.123,
     "task": "linear_tracking", "optimizer": "fade", "stage": "tuning",
     "configs": ["<config id>", ...], "seeds": [0, 1, 2],      # the pack's runs: every config x every seed
     "files": {"scores": {"path": "scores/task=.../pack-....parquet", "rows": 6, "bytes": 4242, "sha256": "..."},
               "curves": {"path": "curves/task=.../pack-....parquet", "rows": 12, "bytes": 5151, "sha256": "..."}}}
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.spec import TUNING, Pack
from sweeps.store.location import Entry, StoreLocation
from sweeps.store.records import KINDS, DataFile, Manifest, RecordError, parse_record, write_record

if TYPE_CHECKING:  # sweeps.packs imports torch; a store that only reads needs neither
    from sweeps.packs.outcome import PackOutcome

SCORES, CURVES = KINDS
MANIFESTS = "manifests"
PARTITIONS = ("task", "optimizer")  # hive partitions: in the path, never inside a file
HIVE_SCHEMA = {"task": pl.String, "optimizer": pl.String}
STAGE = "stage"  # the column (and manifest key) naming a row's stage


class StoreError(RuntimeError):
    """A store that cannot be read as it is (a damaged manifest or data file); `fade-sweep verify` says more."""


# ---------------------------------------------------------------- tables of a pack


def run_keys(pack: Pack) -> pl.DataFrame:
    """task, optimizer, config_id, settings (less `steps`, its own column), every hyperparameter
    (null where the optimizer does not take it) and seed of every run: configs outer, seeds inner.
    Built with polars alone (pyarrow's conversions load pandas), so readers can use it lightly."""
    configs, seeds = pack.configs, len(pack.seeds)
    settings = {k: v for k, v in dataclasses.asdict(pack.experiment.settings).items() if k != "steps"}
    values = [dict(c.hyperparameters) for c in configs]
    per_config = pl.DataFrame(
        {
            "task": [pack.experiment.task] * len(configs),
            "optimizer": [pack.experiment.optimizer] * len(configs),
            "config_id": [c.config_id for c in configs],
            **{k: [v] * len(configs) for k, v in settings.items()},
            **{name: pl.Series(name, [v.get(name) for v in values], pl.Float64) for name in HYPERPARAMETERS},
        }
    )
    rows = per_config.gather(np.repeat(np.arange(len(configs)), seeds))
    return rows.with_columns(seed=pl.Series(np.tile(np.asarray(pack.seeds, np.int64), len(configs))))


def _arrow_keys(pack: Pack, repeat: int = 1) -> dict[str, pa.ChunkedArray]:
    """`run_keys` as Arrow columns for a data file, each row repeated `repeat` times (curve bins)."""
    keys = run_keys(pack)
    table = keys.gather(np.repeat(np.arange(keys.height), repeat)).to_arrow()
    return {f.name: table[f.name].cast(pa.string()) if pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type)
            else table[f.name] for f in table.schema}


def scores_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    """The pack's scores as read back (partition columns included)."""
    columns = _arrow_keys(pack)
    columns["score"] = pa.array(outcome.score, pa.float64())
    columns["diverged"] = pa.array(outcome.diverged, pa.bool_())
    columns["steps"] = pa.array(np.full(pack.runs, pack.experiment.settings.steps), pa.int64())
    columns["wall_seconds"] = pa.array(np.full(pack.runs, outcome.wall_seconds), pa.float64())
    columns[STAGE] = pa.array([pack.stage] * pack.runs, pa.string())
    return pa.table(columns)


def curves_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    """The pack's curves as read back (partition columns included)."""
    bins = len(outcome.bin_end)
    columns = _arrow_keys(pack, bins)
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


# ---------------------------------------------------------------- writes


def _write_data_file(table: pa.Table, location: StoreLocation, relative: str) -> DataFile:
    """Write one data file under its final (write-once) name; returns its manifest entry."""
    size, sha256 = location.write_with(relative, lambda f: pq.write_table(table.drop_columns(list(PARTITIONS)), f))
    return DataFile(path=relative, rows=table.num_rows, bytes=size, sha256=sha256)


def new_write_id() -> str:
    """Unique and time-ordered: <UTC time to the microsecond>-<random>."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1e6) % 1_000_000:06d}-{uuid.uuid4().hex[:8]}"


def write_pack(location: StoreLocation, pack: Pack, outcome: PackOutcome) -> Manifest:
    """Commit a finished pack: its curves and scores files, then its manifest (the commit)."""
    e = pack.experiment
    write_id = new_write_id()
    stem = f"pack-{pack.pack_id}-{write_id}"
    partition = f"task={e.task}/optimizer={e.optimizer}"
    files = {
        CURVES: _write_data_file(curves_table(pack, outcome), location, f"{CURVES}/{partition}/{stem}.parquet"),
        SCORES: _write_data_file(scores_table(pack, outcome), location, f"{SCORES}/{partition}/{stem}.parquet"),
    }
    manifest = Manifest(
        pack_id=pack.pack_id, write_id=write_id, written_at=time.time(), task=e.task, optimizer=e.optimizer, stage=pack.stage,
        configs=tuple(c.config_id for c in pack.configs), seeds=tuple(int(s) for s in pack.seeds), files=files,
        name=f"{stem}.json",
    )
    write_record(location, f"{MANIFESTS}/{manifest.name}", manifest, durable=True)  # the commit
    return manifest


# ---------------------------------------------------------------- manifests


def manifest_entries(location: StoreLocation) -> list[Entry]:
    """The committed manifests' entries (hidden temporary files excluded), by name."""
    return [e for e in location.list(MANIFESTS) if e.name.endswith(".json") and not e.name.startswith(".")]


def parse_manifest(location: StoreLocation, entry: Entry) -> Manifest:
    """One manifest; RecordError naming its file if it is damaged."""
    manifest = parse_record(Manifest, location.read_bytes(entry.rel), location.url(entry.rel))
    return manifest.model_copy(update={"name": entry.name})


def read_manifests(location: StoreLocation) -> list[Manifest]:
    """Every committed pack write, oldest first. StoreError names a damaged manifest."""
    try:
        manifests = [parse_manifest(location, entry) for entry in manifest_entries(location)]
    except RecordError as err:
        raise StoreError(f"{err}; run `fade-sweep verify {location}`") from None
    return sorted(manifests, key=lambda m: m.order)


def runs_of(manifests: list[Manifest]) -> set[tuple[str, int]]:
    """(config_id, seed) of every run these manifests commit."""
    return {pair for m in manifests for pair in m.pairs()}


# ---------------------------------------------------------------- the driver's store upkeep


def has_results(location: StoreLocation) -> bool:
    """Whether any pack is committed."""
    return bool(manifest_entries(location))


def stage_manifests(location: StoreLocation, stage: str = TUNING) -> list[Manifest]:
    """The committed pack writes of one stage, oldest first."""
    return [m for m in read_manifests(location) if m.run_stage == stage]


def finished_runs(location: StoreLocation, stage: str = TUNING) -> set[tuple[str, int]]:
    """(config_id, seed) of every committed run of `stage` (from the manifests; no Parquet is read)."""
    return runs_of(stage_manifests(location, stage))


def pack_written(location: StoreLocation, pack: Pack) -> bool:
    """Whether every run of the pack is committed (by this pack or others of its stage)."""
    return set(pack.pairs()) <= finished_runs(location, pack.stage)


def damage(location: StoreLocation, manifest: Manifest, kind: str) -> str | None:
    """Why a committed file cannot be what its manifest recorded (missing, or truncated / grown:
    its size differs), or None. A same-size change needs the hash: `fade-sweep verify`."""
    entry = manifest.files[kind]
    if not location.is_file(entry.path):
        return "missing, but its manifest names it"
    size = location.size(entry.path)
    return None if size == entry.bytes else f"{size} bytes, but its manifest recorded {entry.bytes} (damaged)"


def set_aside_damaged(location: StoreLocation) -> list[str]:
    """Un-commit every pack with a missing or damaged file (only while holding the writer lock):
    its manifest moves to history/damaged-<name>, its files become orphans, and its runs are
    planned again. Returns the damaged files."""
    damaged = []
    for manifest in read_manifests(location):
        bad = [manifest.files[k].path for k in KINDS if damage(location, manifest, k)]
        if bad:
            rel = f"{MANIFESTS}/{manifest.name}"
            location.write_bytes(f"history/damaged-{manifest.name}", location.read_bytes(rel))
            location.delete(rel)
            damaged.extend(bad)
    return damaged


def orphans(location: StoreLocation, manifests: list[Manifest]) -> list[str]:
    """Paths (relative to the store) under scores/, curves/ and manifests/ that `manifests` do not
    commit (left by an interrupted write)."""
    named = {m.files[k].path for m in manifests for k in KINDS}
    found = [e.rel for kind in KINDS for e in location.list(kind, recursive=True) if e.rel not in named]
    found.extend(e.rel for e in location.list(MANIFESTS) if e.name.startswith("."))
    return found


def remove_orphans(location: StoreLocation) -> list[str]:
    """Delete the orphans (only while holding the store's writer lock); returns them as users see them."""
    rels = orphans(location, read_manifests(location))
    for rel in rels:
        location.delete(rel)
    return [location.url(r) for r in rels]


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


def select(manifests: list[Manifest], wanted: frozenset[tuple[str, int]] | None = None) -> Selection:
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


def _scan(location: StoreLocation, manifests: list[Manifest], kind: str) -> list[pl.LazyFrame]:
    """One lazy scan per task (tasks differ in their settings columns) and file schema (with or without
    the stage column), partitions from the paths.

    Local files: polars reads them itself. Object stores: a pyarrow dataset over the same
    filesystem (so the same credentials chain and endpoint), scanned lazily by polars."""
    by_task: dict[tuple[str, bool], list[str]] = {}
    for m in manifests:
        rel = m.files[kind].path
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
        import pyarrow.dataset as ds  # imports pandas: only where an object store is read

        partitioning = ds.partitioning(pa.schema([("task", pa.string()), ("optimizer", pa.string())]), flavor="hive")
        frames = {
            key: pl.scan_pyarrow_dataset(ds.dataset(paths, filesystem=location.fs, format="parquet",
                                                    partitioning=partitioning, partition_base_dir=location.path(kind)))
            for key, paths in by_task.items()
        }
    return [frame.with_columns(pl.lit(TUNING).alias(STAGE)) if legacy else frame for (_, legacy), frame in frames.items()]


def scan_selection(location: StoreLocation, selection: Selection, kind: str) -> pl.LazyFrame | None:
    """A LazyFrame over the selected rows of `kind` (scores or curves); task and optimizer first. None if empty."""
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

