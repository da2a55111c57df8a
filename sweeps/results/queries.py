"""Query a results directory with polars: LazyFrames over scores and curves, and the
aggregations every table needs (per-cell mean, std with ddof=1, standard error, seed
count, diverged seeds; best configuration per method).

    from sweeps import results
    cells = results.cells(results.scores("results/linear-noise0")).collect()
    best = results.best_configs(results.cells(results.scores("results/linear-noise0"))).collect()
    results.config_curves("results/linear-noise0", best["config_id"][0]).collect()
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.results.record import recorded_pairs, recorded_sweep
from sweeps.results.store import (
    CURVES,
    SCORES,
    Selection,
    notice_once,
    read_manifests,
    run_keys,
    scan_selection,
    select,
)
from sweeps.spec import Pack, Sweep, make_config
from tasks import get_task

DDOF = 1  # sample standard deviation across seeds
PER_RUN = ("seed", "score", "diverged", "wall_seconds")
CELL_STATS = ("mean", "std", "sem", "seeds", "diverged_seeds", "any_diverged")  # what `cells` adds
HYPERPARAMETER_COLUMNS = tuple(HYPERPARAMETERS)
METHOD_KEYS = ("task", "optimizer")


def selection(results_dir: str | Path, all_runs: bool = False) -> Selection:
    """Which committed rows a reader reads: each (config, seed) once (from the newest manifest that
    holds it), and, unless `all_runs`, only the pairs of the store's current sweep (sweep.yaml)."""
    wanted = None if all_runs else recorded_pairs(results_dir)
    manifests = read_manifests(results_dir)
    key = (str(Path(results_dir).absolute()), tuple(m.name for m in manifests), id(wanted))
    cached = _SELECTIONS.get(key)
    if cached is None or cached[0] is not wanted:  # manifests are write-once: their names identify them
        _SELECTIONS.clear()
        cached = _SELECTIONS[key] = (wanted, select(manifests, wanted))
    notice_once(results_dir, cached[1].outside)
    return cached[1]


_SELECTIONS: dict[tuple, tuple[frozenset | None, Selection]] = {}


def _frame(results_dir: str | Path, kind: str, all_runs: bool) -> pl.LazyFrame:
    frame = scan_selection(results_dir, selection(results_dir, all_runs), kind)
    if frame is None:
        raise FileNotFoundError(f"no {kind} under {results_dir}/{kind}: run a sweep first (`fade-sweep run ...`)")
    return frame


def scores(results_dir: str | Path, *, all_runs: bool = False) -> pl.LazyFrame:
    """One row per (config, seed) of the current sweep (every stored run with `all_runs=True`);
    task and optimizer (the hive partitions) first. Only committed packs are read."""
    return _frame(results_dir, SCORES, all_runs)


def curves(results_dir: str | Path, *, all_runs: bool = False) -> pl.LazyFrame:
    """One row per (config, seed, bin), of the same runs as `scores`."""
    return _frame(results_dir, CURVES, all_runs)


def config_curves(results_dir: str | Path, config_id: str) -> pl.LazyFrame:
    """The per-seed curves of one configuration, ordered by seed and step."""
    return curves(results_dir).filter(pl.col("config_id") == config_id).sort("seed", "step")


def variant_columns(frame: pl.LazyFrame) -> list[str]:
    """The task and its settings: what separates one table from another (e.g. noise level)."""
    known = {"optimizer", "config_id", *HYPERPARAMETER_COLUMNS, *PER_RUN}
    return [c for c in frame.collect_schema().names() if c not in known and c != "step"]


def cells(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Aggregate per-seed scores into one row per configuration (grid cell)."""
    keys = [c for c in frame.collect_schema().names() if c not in PER_RUN]
    return frame.group_by(keys).agg(
        mean=pl.col("score").mean(),
        std=pl.col("score").std(ddof=DDOF),
        sem=pl.col("score").std(ddof=DDOF) / pl.len().sqrt(),
        seeds=pl.len(),
        diverged_seeds=pl.col("diverged").sum(),
        any_diverged=pl.col("diverged").any(),
    )


def ranking_key(column: str = "mean") -> pl.Expr:
    """A sort key on which smaller is better for every task (negated where higher scores win)."""
    higher = pl.col("task").map_elements(lambda t: get_task(t).higher_is_better, return_dtype=pl.Boolean)
    return pl.when(higher).then(-pl.col(column)).otherwise(pl.col(column))


def best_configs(cell_frame: pl.LazyFrame) -> pl.LazyFrame:
    """The best configuration per (task, settings, optimizer) by the task's score.

    Cells with any diverged seed are never selected; a method whose every cell diverged
    keeps one row with null mean and `all_diverged` true.
    """
    group = [c for c in variant_columns(cell_frame) if c not in CELL_STATS]
    group = [*group, "optimizer"]
    ranked = cell_frame.with_columns(
        usable=(pl.col("diverged_seeds") == 0) & pl.col("mean").is_finite(),
        key=ranking_key(),
    )
    return (
        ranked.sort(["usable", "key"], descending=[True, False], nulls_last=True)
        .group_by(group, maintain_order=True)
        .agg(pl.all().first(), configs=pl.len(), diverged_configs=(~pl.col("usable")).sum())
        .with_columns(all_diverged=~pl.col("usable"))
        .with_columns(
            pl.when(pl.col("all_diverged")).then(None).otherwise(pl.col(c)).alias(c) for c in ("mean", "std", "sem")
        )
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
    done = {pair for m in read_manifests(results_dir) for pair in m.pairs()}
    expected = expected_runs(sweep)
    present = pl.DataFrame(
        {"config_id": [c for c, _ in done], "seed": [s for _, s in done]}, schema={"config_id": pl.String, "seed": pl.Int64}
    )
    return expected.join(present, on=["config_id", "seed"], how="anti")
