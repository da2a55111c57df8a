"""What a sweep produced, for users: the Store, polars queries, tables. No Ray here.

The Store-based way (open once, then everything is read from it once):

    from sweeps import results
    store = results.Store.open("results/linear-demo")          # a path or s3://... URI
    scores = store.scan("scores")                              # LazyFrame: committed runs of the recorded sweep
    cells = results.cells(scores, stat="median")               # DataFrame: one row per configuration
    analysis = results.Analysis.of(store, stat="iqm")          # what the tables are made of (cells computed once)
    results.best_table(analysis); results.compare_table(analysis, reference="sgd")
    print(results.table_text(analysis, "sensitivity", "md"))

Conveniences that open a Store for one call: `results.scores(path)`, `results.curves(path)`,
`results.missing_runs(path)`, `results.recorded_sweep(path)`, `results.analysis(path, stat)`,
and every table function also takes a path (`results.best_table("results/linear-demo", stat="iqm")`).
The statistics (median, IQM, bootstrap CIs, outlier seeds, paired comparisons, importance)
are defined in `sweeps.analysis.stats`.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import polars as pl

from sweeps.analysis import importance, summaries, tables
from sweeps.analysis.queries import (
    CELL_STATS,
    DDOF,
    HYPERPARAMETER_COLUMNS,
    STATS,
    Analysis,
    best_configs,
    cells,
    config_curves,
    higher_is_better,
    ranking_key,
    variant_columns,
)
from sweeps.analysis.stats import block_statistics, main_effect_shares, outlier_mask, paired_comparisons
from sweeps.analysis.summaries import SensitivityTable, sensitivity_frame
from sweeps.spec import TUNING, Sweep
from sweeps.store import Store, StoreLocation

Target = str | os.PathLike | StoreLocation


def scores(target: Target, *, all_runs: bool = False, stage: str = TUNING) -> pl.LazyFrame:
    """`Store.open(target).scan("scores")`: one row per committed (config, seed) of the recorded sweep
    (every stored run with `all_runs=True`); `stage="confirmation"`: the confirmation runs."""
    return Store.open(target).scan("scores", all_runs=all_runs, stage=stage)


def curves(target: Target, *, all_runs: bool = False, stage: str = TUNING) -> pl.LazyFrame:
    """`Store.open(target).scan("curves")`: one row per (config, seed, bin) of the same runs as `scores`."""
    return Store.open(target).scan("curves", all_runs=all_runs, stage=stage)


def missing_runs(target: Target, stage: str = TUNING) -> pl.DataFrame:
    """Runs of `stage` the store asks for with no committed result yet."""
    return Store.open(target).missing_runs(stage)


def recorded_sweep(target: Target) -> Sweep | None:
    """The sweep the store records (sweep.yaml)."""
    return Store.open(target).sweep


def analysis(target: Target, stat: str = "mean") -> Analysis:
    """`Analysis.of(Store.open(target), stat)`: what the table functions take."""
    return Analysis.of(Store.open(target), stat)


def _from_path_too(table: Callable[..., Any]) -> Callable[..., Any]:
    """`table` of an Analysis that also takes a store's path or URI (and `stat`) in its place."""

    @functools.wraps(table)
    def convenience(source: Analysis | Target, *args: Any, stat: str = "mean", **kwargs: Any) -> Any:
        if not isinstance(source, Analysis):
            source = analysis(source, stat)
        return table(source, *args, **kwargs)

    return convenience


best_table = _from_path_too(summaries.best_table)
sensitivity_tables = _from_path_too(summaries.sensitivity_tables)
compare_table = _from_path_too(summaries.compare_table)
importance_table = _from_path_too(importance.importance_table)
table_text = _from_path_too(tables.table_text)

__all__ = [
    "CELL_STATS",
    "DDOF",
    "HYPERPARAMETER_COLUMNS",
    "STATS",
    "Analysis",
    "SensitivityTable",
    "Store",
    "analysis",
    "best_configs",
    "best_table",
    "block_statistics",
    "cells",
    "compare_table",
    "config_curves",
    "curves",
    "higher_is_better",
    "importance_table",
    "main_effect_shares",
    "missing_runs",
    "outlier_mask",
    "paired_comparisons",
    "ranking_key",
    "recorded_sweep",
    "scores",
    "sensitivity_frame",
    "sensitivity_tables",
    "table_text",
    "variant_columns",
]
