"""The aggregations every table needs, as functions of polars frames (never of paths): per-cell
mean, std with ddof=1, standard error, median, IQM, bootstrap CI, seed count, diverged and
outlier seeds; the best configuration per method by the chosen statistic. The statistics'
definitions are in `sweeps.analysis.stats`. Polars' conventions: expressions where a helper
builds a column, LazyFrame in, DataFrame out where something is collected.

    from sweeps.store import Store
    from sweeps.analysis.queries import Analysis, best_configs, cells, config_curves
    store = Store.open("results/linear-noise0")
    table = cells(store.scan("scores"), stat="median")       # one row per configuration
    best = best_configs(table)                               # ranked on the median
    config_curves(store.scan("curves"), best["config_id"][0]).collect()
    analysis = Analysis.of(store, stat="median")             # what the tables are made of, cells computed once
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import numpy as np
import polars as pl

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.analysis import stats
from sweeps.analysis.race import stored_race
from sweeps.analysis.raced import RaceSummary, race_summary, raced_scores
from sweeps.plan import TUNING
from sweeps.store import Store
from sweeps.store.dataset import SETTING_COLUMNS, STAGE
from tasks import TASKS

DDOF = 1  # sample standard deviation across seeds
PER_RUN = ("seed", "score", "diverged", "wall_seconds")
_NUMERIC_STATS = ("mean", "std", "sem", "median", "iqm", "min", "max", "ci_low", "ci_high")
CELL_STATS = (  # what `cells` adds, in this order
    *_NUMERIC_STATS, "stat", "stat_value", "seeds", "diverged_seeds", "any_diverged", "outliers", "outlier_seeds",
)
STATS = stats.STATS  # the statistics `cells(frame, stat=...)` and `fade-sweep table --stat` choose from
HYPERPARAMETER_COLUMNS = tuple(HYPERPARAMETERS)
RACE_COLUMNS = ("race_status", "eliminated_round")  # a raced sweep's cells: still in the race, or out after which round


@dataclass(frozen=True)
class Analysis:
    """What the tables and the report are made of, gathered once: the committed per-seed scores,
    the recorded sweep's runs (all of them, and those still missing), and the statistic (mean,
    median or iqm) that is shown and ranks configurations. `cells` is computed on first use and
    shared by every table."""

    scores: pl.LazyFrame
    expected: pl.DataFrame  # key columns (settings, hyperparameters) of every run the recorded sweep asks for
    missing: pl.DataFrame  # the same, of the runs with no result yet
    stat: str = "mean"
    race: RaceSummary | None = None  # a raced sweep's tuning stage: its rounds and what they cost
    left_out: tuple[str, ...] = ()  # damaged scores files whose runs are left out (counted in `missing`)
    repair: str = ""  # the command that runs them again (`fade-sweep run ... --resume`), when some are left out

    @classmethod
    def of(cls, store: Store, stat: str = "mean", stage: str = TUNING) -> Analysis:
        """The analysis of one stage's runs (tuning: the grid; confirmation: the selected configurations).
        A raced sweep's tuning scores carry the race's columns (RACE_COLUMNS, from race.json)."""
        own_hyperparameters(store)
        scores, expected = store.scan("scores", stage=stage), store.expected_runs(stage)
        summary = None
        if stage == TUNING and store.sweep is not None and store.sweep.race is not None:
            record = stored_race(store)  # a damaged race.json: replayed from the scores
            scores = raced_scores(scores, record)
            summary = race_summary(store.sweep, record, expected)
        left_out = tuple(store.left_out_files(stage))
        return cls(scores, expected, store.missing_runs(stage), stats.check_stat(stat), summary, left_out,
                   store.resume_command() if left_out else "")

    @cached_property
    def variant(self) -> list[str]:
        """The task and its settings columns: what separates one table from another."""
        return variant_columns(self.scores)

    @cached_property
    def cells(self) -> pl.DataFrame:
        return cells(self.scores, self.stat)

    @property
    def complete(self) -> bool:
        """Every run of the recorded sweep has a result: the tables need not add missing cells."""
        return self.missing.height == 0


def config_curves(curves: pl.LazyFrame, config_id: str) -> pl.LazyFrame:
    """The per-seed curves of one configuration, ordered by seed and step."""
    return curves.filter(pl.col("config_id") == config_id).sort("seed", "step")


def variant_columns(frame: pl.LazyFrame) -> list[str]:
    """The task and its settings: what separates one table from another (e.g. noise level). Named
    positively (`SETTING_COLUMNS`): a column of a researcher's learner's own hyperparameter is no variant."""
    return [c for c in frame.collect_schema().names() if c in SETTING_COLUMNS]


def hyperparameter_columns(names: Iterable[str]) -> list[str]:
    """The hyperparameter columns among `names`: the built-in ones in their order, then those of the
    researchers' learners of the stores analysed so far (`own_hyperparameters`)."""
    names = set(names)
    return [h for h in (*HYPERPARAMETER_COLUMNS, *_OWN_HYPERPARAMETERS) if h in names]


# The hyperparameters of the researchers' learners of the stores this process has analysed (store.json's
# records, sweeps.spec.own): the tables tell them from the columns they compute by these names, which a
# rule may not take (sweeps.spec.own.RESERVED_COLUMNS).
_OWN_HYPERPARAMETERS: dict[str, None] = {}


def own_hyperparameters(store: Store) -> None:
    """Make the recorded sweep's own hyperparameters columns the tables show (in the rules' order)."""
    sweep = store.sweep
    for learner in sweep.learners if sweep is not None else ():
        _OWN_HYPERPARAMETERS.update(dict.fromkeys(h.name for h in learner.own))


def cells(frame: pl.LazyFrame, stat: str = "mean") -> pl.DataFrame:
    """Aggregate per-seed scores into one row per configuration (grid cell).

    Adds mean, std (ddof=1), sem, median, iqm, min, max, the 95% bootstrap CI of `stat`
    (ci_low, ci_high), `stat` (its name) and `stat_value` (its value: what ranks cells),
    seeds, diverged_seeds, any_diverged, outliers (count) and outlier_seeds ("seed:score"
    joined by "; ", null when none). Definitions: `sweeps.analysis.stats`. Computed with
    numpy (cells grouped by seed count, no loop per cell).
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
    return _with_statistics(grouped, stat)


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


def best_configs(cell_frame: pl.DataFrame) -> pl.DataFrame:
    """The best configuration per (task, settings, optimizer) by the task's score, ranked on
    the statistic `cells` was asked for (`stat_value`; the mean for a frame without it).

    Cells with any diverged seed are never selected; a method whose every cell diverged (on at
    least one seed) keeps one row with null statistics and `all_diverged` true: the cell that
    diverged on the fewest seeds, so its `seeds` and `diverged_seeds` say how close it came (one
    seed of ten is not ten of ten). Ties go to the smaller config_id.
    In a raced sweep (a `race_status` column) only the race's survivors are selected: an eliminated
    cell holds fewer seeds, and its statistic is never ranked against theirs.
    """
    names = cell_frame.collect_schema().names()
    chosen = "stat_value" if "stat_value" in names else "mean"
    group = [*variant_columns(cell_frame), "optimizer"]
    usable = (pl.col("diverged_seeds") == 0) & pl.col(chosen).is_finite()
    in_race = pl.col("race_status") != "eliminated" if "race_status" in names else pl.lit(True)
    ranked = cell_frame.lazy().with_columns(usable=usable, eligible=usable & in_race, key=ranking_key(chosen))
    nulled = [c for c in (*_NUMERIC_STATS, "stat_value", "outlier_seeds") if c in names]
    return (
        ranked.sort(["eligible", "diverged_seeds", "key", "config_id"], descending=[True, False, False, False],
                    nulls_last=True)
        .group_by(group, maintain_order=True)
        .agg(pl.all().first(), configs=pl.len(), diverged_configs=(~pl.col("usable")).sum())
        .with_columns(all_diverged=~pl.col("eligible"))
        .with_columns(pl.when(pl.col("all_diverged")).then(None).otherwise(pl.col(c)).alias(c) for c in nulled)
        .drop("usable", "eligible", "key")
        .collect()
    )
