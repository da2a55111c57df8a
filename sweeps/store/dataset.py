"""The Parquet data of interface.md: its layout, the key columns of a pack's runs, and the scans readers read.

Layout under RESULTS_DIR (= <storage>/<sweep name>):

    sweep.yaml                 the current sweep (canonical document; see sweep_record.py)
    store.json                 store format, dtype, package version, sweep history
    history/sweep-<time>.yaml  earlier sweep records, kept when a resume changed the sweep
    writer.lock                held by the one process writing the store (see lock.py)
    scores/task=<task>/optimizer=<opt>/pack-<pack id>-<write id>.parquet   one row per (config, seed)
    curves/task=<task>/optimizer=<opt>/pack-<pack id>-<write id>.parquet   one row per (config, seed, bin)
    manifests/pack-<pack id>-<write id>.json                             the commit record of one pack

Data files do not contain `task` and `optimizer`: they are hive partitions, read from the
path (so pyarrow.dataset(partitioning="hive"), pandas, DuckDB and polars agree). Every file
carries every built-in hyperparameter column (null where the optimizer does not take it) and the
task's settings, so files of different optimizers concatenate; a researcher's learner's files add
its own hyperparameters (sweeps.spec.own), and are scanned apart and concatenated diagonally.

Stages. A pack belongs to one stage (sweeps.plan.STAGES): `tuning` (the sweep's grid on its
seeds) or `confirmation` (selected configurations on fresh seeds, see records.ConfirmationRecord). Its manifest
says which ("stage"; a manifest without it predates stages and is tuning) and its data files
carry a `stage` column for outside readers (polars, DuckDB: filter `stage = 'tuning'`). The
readers here select manifests by stage, so (config, seed) pairs, the newest-wins rule and
finished runs are all per stage, and the frames they return hold one stage (`stage` filled in
for files written before stages).

Reading needs polars alone (pyarrow only for an object store); writing a pack is commit.py's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from fade_core.hyperparameters import HYPERPARAMETERS
from fade_core.linear import LINEAR_LEARNERS
from fade_core.neural import NEURAL_LEARNERS
from sweeps.plan import TUNING, Pack
from sweeps.spec import Experiment, Sweep
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import Selection
from sweeps.store.records import PARTITIONS, Manifest
from tasks import TASKS

KEYS_SCHEMA = {"config_id": pl.String, "seed": pl.Int64}
# The task and its settings columns (`steps` included): what tells a file's experiments apart beside the optimizer.
SETTING_COLUMNS = frozenset({"task", "steps",
                             *(f.name for t in TASKS.values() for f in dataclasses.fields(t.settings_type))})
BUILT_IN = frozenset({*LINEAR_LEARNERS, *NEURAL_LEARNERS})  # files of other optimizers may have columns of their own
STAGE = "stage"  # the column (and manifest key) naming a row's stage


# ---------------------------------------------------------------- the runs of a pack


def hyperparameter_columns(experiment: Experiment) -> list[str]:
    """The hyperparameter columns of an experiment's files: every built-in one, then those of its
    learner's own (a researcher's rule, sweeps.spec.own), typed Float64 like them."""
    own = [h.name for h in experiment.learner.own] if experiment.learner is not None else []
    return [*HYPERPARAMETERS, *own]


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
            **{name: pl.Series(name, [v.get(name) for v in values], pl.Float64)
               for name in hyperparameter_columns(pack.experiment)},
        }
    )
    rows = per_config.gather(np.repeat(np.arange(len(configs)), seeds))
    return rows.with_columns(seed=pl.Series(np.tile(np.asarray(pack.seeds, np.int64), len(configs))))


# ---------------------------------------------------------------- what readers read


def _scan(location: StoreLocation, manifests: list[Manifest], kind: str) -> list[pl.LazyFrame]:
    """One lazy scan per task (tasks differ in their settings columns) and file schema (with or without
    the stage column), partitions from the paths.

    The location scans (local files: polars itself; object stores: a pyarrow dataset over the
    store's filesystem, so the same credentials chain and endpoint)."""
    by_task: dict[tuple[str, bool, str], list[str]] = {}
    for m in manifests:
        own = "" if m.optimizer in BUILT_IN else m.optimizer  # a researcher's learner: columns of its own
        by_task.setdefault((m.task, m.stage is None, own), []).append(m.files[kind].path)
    frames = {key: location.scan_parquet(rels, PARTITIONS) for key, rels in by_task.items()}
    return [frame.with_columns(pl.lit(TUNING).alias(STAGE)) if legacy else frame
            for (_, legacy, _), frame in frames.items()]


def scan_selection(location: StoreLocation, selection: Selection, kind: str) -> pl.LazyFrame | None:
    """A LazyFrame over the selected rows of `kind` (scores or curves); task and optimizer first. None if empty."""
    frames = _scan(location, list(selection.whole), kind)
    for manifest, keep in selection.partial:
        rows = pl.DataFrame({"config_id": [c for c, _ in keep], "seed": [s for _, s in keep]}, schema=KEYS_SCHEMA)
        frames.extend(f.join(rows.lazy(), on=["config_id", "seed"], how="semi") for f in _scan(location, [manifest], kind))
    if not frames:
        return None
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    names = frame.collect_schema().names()
    return frame.select(*PARTITIONS, *(n for n in names if n not in PARTITIONS))



def expected_runs(sweep: Sweep | None, stage: str, configs: set[str] | None = None,
                  seeds: tuple[int, ...] | None = None) -> pl.DataFrame:
    """The key columns (as in scores/) and steps of the runs of `stage` a store asks for: the sweep's
    grid (or the `configs` cells of it) on its seeds (or `seeds`); no rows when no sweep is recorded."""
    if sweep is None:
        return pl.DataFrame(schema=KEYS_SCHEMA)
    seeds = sweep.seeds if seeds is None else seeds
    packs = [Pack(e, tuple(c for c in e.cells if configs is None or c.config_id in configs), seeds, stage)
             for e in sweep.experiments]
    frames = [run_keys(p).with_columns(steps=pl.lit(p.experiment.settings.steps, pl.Int64)) for p in packs if p.configs]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema=KEYS_SCHEMA)


def without_runs(frame: pl.DataFrame, runs: set[tuple[str, int]]) -> pl.DataFrame:
    """The rows of `frame` whose (config_id, seed) is not among `runs`."""
    present = pl.DataFrame({"config_id": [c for c, _ in runs], "seed": [s for _, s in runs]}, schema=KEYS_SCHEMA)
    return frame.join(present, on=["config_id", "seed"], how="anti")
