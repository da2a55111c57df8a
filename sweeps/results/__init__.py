"""What a sweep produced: the Parquet store, polars queries, tables, the report, status.json.

No Ray here. The query API (polars LazyFrames):

    from sweeps import results
    cells = results.cells(results.scores("results/linear-demo"), stat="median").collect()
    best = results.best_table("results/linear-demo", stat="iqm")  # one row per method
    print(results.table_text("results/linear-demo", "sensitivity", "md", stat="median"))
    results.compare_table("results/linear-demo", reference="sgd")   # paired differences, P(improvement)
    results.importance_table("results/linear-demo")                 # main-effect variance shares

The statistics (median, IQM, bootstrap CIs, outlier seeds, paired comparisons, importance)
are defined in `sweeps.analysis.stats`.
"""

from sweeps.analysis.importance import importance_table
from sweeps.analysis.queries import (
    CELL_STATS,
    DDOF,
    HYPERPARAMETER_COLUMNS,
    METHOD_KEYS,
    STATS,
    best_configs,
    cells,
    config_curves,
    curves,
    expected_runs,
    higher_is_better,
    missing_runs,
    ranking_key,
    recorded_sweep,
    scores,
    variant_columns,
)
from sweeps.analysis.stats import block_statistics, main_effect_shares, outlier_mask, paired_comparisons
from sweeps.analysis.tables import (
    SensitivityTable,
    best_table,
    compare_table,
    sensitivity_frame,
    sensitivity_tables,
    table_text,
)

__all__ = [
    "CELL_STATS",
    "DDOF",
    "HYPERPARAMETER_COLUMNS",
    "METHOD_KEYS",
    "STATS",
    "SensitivityTable",
    "best_configs",
    "best_table",
    "block_statistics",
    "cells",
    "compare_table",
    "config_curves",
    "curves",
    "expected_runs",
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
