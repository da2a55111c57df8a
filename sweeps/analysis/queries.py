"""Query a results directory with polars: LazyFrames over scores and curves, and the
aggregations every table needs (per-cell mean, std with ddof=1, standard error, median,
IQM, bootstrap CI, seed count, diverged and outlier seeds; best configuration per method
by the chosen statistic). The statistics' definitions are in `sweeps.analysis.stats`.

    from sweeps import results
    cells = results.cells(results.scores("results/linear-noise0"), stat="median").collect()
    best = results.best_configs(cells.lazy()).collect()  # ranked on the median
    results.config_curves("results/linear-noise0", best["config_id"][0]).collect()
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.analysis import stats
from sweeps.store.location import as_location
from sweeps.store.record import recorded_pairs, recorded_sweep
from sweeps.store.dataset import (
    CURVES,
    SCORES,
    STAGE,
    Selection,
    notice_once,
    run_keys,
    scan_selection,
    select,
    stage_manifests,
)
from sweeps.store.stages import read_confirmation
from sweeps.spec import TUNING, Pack, Sweep, make_config
from tasks import TASKS

DDOF = 1  # sample standard deviation across seeds
PER_RUN = ("seed", "score", "diverged", "wall_seconds")
_NUMERIC_STATS = ("mean", "std", "sem", "median", "iqm", "min", "max", "ci_low", "ci_high")
CELL_STATS = (  # what `cells` adds, in this order
    *_NUMERIC_STATS, "stat", "stat_value", "seeds", "diverged_seeds", "any_diverged", "outliers", "outlier_seeds",
)
STATS = stats.STATS  # the statistics `cells(frame, stat=...)` and `fade-sweep table --stat` choose from
HYPERPARAMETER_COLUMNS = tuple(HYPERPARAMETERS)
METHOD_KEYS = ("task", "optimizer")


def selection(results_dir: str | Path, all_runs: bool = False, stage: str = TUNING) -> Selection:
    """Which committed rows of `stage` a reader reads: each (config, seed) once (from the newest manifest
    of the stage that holds it), and, unless `all_runs`, only the pairs of the store's current sweep
    (sweep.yaml; for the confirmation stage, those of confirmation.json)."""
    wanted = None if all_runs else _wanted(results_dir, stage)
    manifests = stage_manifests(results_dir, stage)
    key = (as_location(results_dir).uri, stage, tuple(m.name for m in manifests), wanted)
    cached = _SELECTIONS.get(key)
    if cached is None:  # manifests are write-once: their names identify them
        _SELECTIONS.clear()
        cached = _SELECTIONS[key] = (wanted, select(manifests, wanted))
    if stage == TUNING:
        notice_once(results_dir, cached[1].outside)
    return cached[1]


def _wanted(results_dir: str | Path, stage: str) -> frozenset | None:
    if stage == TUNING:
        return recorded_pairs(results_dir)
    record = read_confirmation(results_dir)
    return frozenset() if record is None else record.pairs()


_SELECTIONS: dict[tuple, tuple[frozenset | None, Selection]] = {}


def _frame(results_dir: str | Path, kind: str, all_runs: bool, stage: str) -> pl.LazyFrame:
    frame = scan_selection(results_dir, selection(results_dir, all_runs, stage), kind)
    if frame is None:
        hint = "run a sweep first (`fade-sweep run ...`)" if stage == TUNING else "run `fade-sweep confirm` first"
        raise FileNotFoundError(f"no {stage} {kind} under {results_dir}/{kind}: {hint}")
    return frame


def scores(results_dir: str | Path, *, all_runs: bool = False, stage: str = TUNING) -> pl.LazyFrame:
    """One row per (config, seed) of the current sweep (every stored run with `all_runs=True`) in
    `stage` (tuning: the grid; confirmation: selected configurations on fresh seeds); task and
    optimizer (the hive partitions) first. Only committed packs are read."""
    return _frame(results_dir, SCORES, all_runs, stage)


def curves(results_dir: str | Path, *, all_runs: bool = False, stage: str = TUNING) -> pl.LazyFrame:
    """One row per (config, seed, bin), of the same runs as `scores`."""
    return _frame(results_dir, CURVES, all_runs, stage)


def config_curves(results_dir: str | Path, config_id: str) -> pl.LazyFrame:
    """The per-seed curves of one configuration, ordered by seed and step."""
    return curves(results_dir).filter(pl.col("config_id") == config_id).sort("seed", "step")


def variant_columns(frame: pl.LazyFrame) -> list[str]:
    """The task and its settings: what separates one table from another (e.g. noise level)."""
    known = {"optimizer", "config_id", STAGE, *HYPERPARAMETER_COLUMNS, *PER_RUN}
    return [c for c in frame.collect_schema().names() if c not in known and c != "step"]


def cells(frame: pl.LazyFrame, stat: str = "mean") -> pl.LazyFrame:
    """Aggregate per-seed scores into one row per configuration (grid cell).

    Adds mean, std (ddof=1), sem, median, iqm, min, max, the 95% bootstrap CI of `stat`
    (ci_low, ci_high), `stat` (its name) and `stat_value` (its value: what ranks cells),
    seeds, diverged_seeds, any_diverged, outliers (count) and outlier_seeds ("seed:score"
    joined by "; ", null when none). Definitions: `sweeps.analysis.stats`. Computed eagerly
    with numpy (cells grouped by seed count, no loop per cell); returned lazy.
    """
    stats.check_stat(stat)
    keys = [c for c in frame.collect_schema().names() if c not in (*PER_RUN, STAGE)]  # a frame holds one stage
    grouped = (
        frame.group_by(keys)
        .agg(
            _seeds=pl.col("seed").sort(),
            _scores=pl.col("score").cast(pl.Float64).sort_by("seed"),
            seeds=pl.len(),
            diverged_seeds=pl.col("diverged").sum(),
            any_diverged=pl.col("diverged").any(),
        )
        .sort("config_id")
        .collect()
    )
    return _with_statistics(grouped, stat).lazy()


def _with_statistics(grouped: pl.DataFrame, stat: str) -> pl.DataFrame:
    """Fill the statistics of every cell from its `_seeds`/`_scores` lists, one numpy block per seed count."""
    m = grouped.height
    counts = grouped["seeds"].to_numpy()
    columns = {name: np.full(m, np.nan) for name in ("mean", "std", "sem", "median", "iqm", "min", "max", "ci_low", "ci_high")}
    outliers = np.zeros(m, np.uint32)
    labels: list[str | None] = [None] * m
    for n in np.unique(counts):
        rows = np.flatnonzero(counts == n)
        block = grouped["_scores"].gather(rows).explode().to_numpy().reshape(rows.size, n)
        for name, values in stats.block_statistics(block, stat).items():
            columns[name][rows] = values
        mask = stats.outlier_mask(block)
        outliers[rows] = mask.sum(axis=1)
        flagged = np.flatnonzero(mask.any(axis=1))  # only the (few) cells with an outlier get a label
        if flagged.size:
            seeds = grouped["_seeds"].gather(rows[flagged]).explode().to_numpy().reshape(flagged.size, n)
            for i, cell in enumerate(flagged):
                labels[rows[cell]] = "; ".join(
                    f"{seeds[i, j]}:{block[cell, j]:.4g}" for j in np.flatnonzero(mask[cell])
                )
    single = counts < 2  # one seed: no spread, no CI
    for name in ("std", "sem"):
        columns[name][single] = np.nan
    out = grouped.drop("_seeds", "_scores").with_columns(
        *(pl.Series(name, values) for name, values in columns.items()),
        pl.Series("outliers", outliers),
        pl.Series("outlier_seeds", labels, dtype=pl.String),
        stat=pl.lit(stat),
    )
    out = out.with_columns(
        *(pl.when(pl.col("seeds") < 2).then(None).otherwise(pl.col(c)).alias(c) for c in ("std", "sem", "ci_low", "ci_high")),
    ).with_columns(  # NaN only where a seed is not finite (diverged): no robust statistic there
        pl.col("median", "iqm", "ci_low", "ci_high").fill_nan(None),
    ).with_columns(
        stat_value=pl.col(stat),
    )
    front = [c for c in out.columns if c not in CELL_STATS]
    return out.select(*front, *CELL_STATS)


def higher_is_better(task: str | pl.Expr = "task") -> pl.Expr:
    """True where the task's score is better when higher (accuracy), false where lower (MSE)."""
    column = pl.col(task) if isinstance(task, str) else task
    return column.replace_strict({name: spec.higher_is_better for name, spec in TASKS.items()}, default=False,
                                 return_dtype=pl.Boolean)


def ranking_key(column: str = "mean") -> pl.Expr:
    """A sort key on which smaller is better for every task (negated where higher scores win)."""
    return pl.when(higher_is_better()).then(-pl.col(column)).otherwise(pl.col(column))


def best_configs(cell_frame: pl.LazyFrame) -> pl.LazyFrame:
    """The best configuration per (task, settings, optimizer) by the task's score, ranked on
    the statistic `cells` was asked for (`stat_value`; the mean for a frame without it).

    Cells with any diverged seed are never selected; a method whose every cell diverged
    keeps one row with null statistics and `all_diverged` true. Ties go to the smaller config_id.
    """
    names = cell_frame.collect_schema().names()
    chosen = "stat_value" if "stat_value" in names else "mean"
    group = [c for c in variant_columns(cell_frame) if c not in CELL_STATS]
    group = [*group, "optimizer"]
    ranked = cell_frame.with_columns(
        usable=(pl.col("diverged_seeds") == 0) & pl.col(chosen).is_finite(),
        key=ranking_key(chosen),
    )
    nulled = [c for c in (*_NUMERIC_STATS, "stat_value", "outlier_seeds") if c in names]
    return (
        ranked.sort(["usable", "key", "config_id"], descending=[True, False, False], nulls_last=True)
        .group_by(group, maintain_order=True)
        .agg(pl.all().first(), configs=pl.len(), diverged_configs=(~pl.col("usable")).sum())
        .with_columns(all_diverged=~pl.col("usable"))
        .with_columns(pl.when(pl.col("all_diverged")).then(None).otherwise(pl.col(c)).alias(c) for c in nulled)
        .drop("usable", "key")
    )


_EXPECTED: dict[int, tuple[Sweep, pl.DataFrame]] = {}  # by sweep object (the recorded one is cached per file)


def expected_runs(sweep: Sweep) -> pl.DataFrame:
    """The key columns (as in scores/) of every (config, seed) the sweep asks for."""
    cached = _EXPECTED.get(id(sweep))
    if cached is not None and cached[0] is sweep:
        return cached[1]
    frame = _expected_runs(sweep)
    _EXPECTED.clear()
    _EXPECTED[id(sweep)] = (sweep, frame)
    return frame


def _expected_runs(sweep: Sweep) -> pl.DataFrame:
    frames = []
    for experiment in sweep.experiments:
        configs = tuple(make_config(experiment, values) for values in experiment.configs())
        pack = Pack(experiment, configs, sweep.seeds)
        keys = pl.from_arrow(pa.table(run_keys(pack)))
        frames.append(keys.with_columns(steps=pl.lit(experiment.settings.steps, pl.Int64)))
    return pl.concat(frames, how="diagonal_relaxed")


def missing_runs(results_dir: str | Path) -> pl.DataFrame:
    """Runs of the recorded sweep with no committed score yet (key columns as in scores/);
    empty when no sweep is recorded. Reads the manifests only."""
    sweep = recorded_sweep(results_dir)
    if sweep is None:
        return pl.DataFrame(schema={"config_id": pl.String, "seed": pl.Int64})
    done = {pair for m in stage_manifests(results_dir, TUNING) for pair in m.pairs()}
    expected = expected_runs(sweep)
    present = pl.DataFrame(
        {"config_id": [c for c, _ in done], "seed": [s for _, s in done]}, schema={"config_id": pl.String, "seed": pl.Int64}
    )
    return expected.join(present, on=["config_id", "seed"], how="anti")
