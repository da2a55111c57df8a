"""What a sweep produced: the Parquet store, polars queries, tables, the report, status.json.

No Ray here. The query API (polars LazyFrames):

    from sweeps import results
    cells = results.cells(results.scores("results/linear-demo")).collect()
    best = results.best_table("results/linear-demo")            # one row per method
    print(results.table_text("results/linear-demo", "sensitivity", "md"))
"""

from sweeps.results.queries import (
    CELL_STATS,
    DDOF,
    HYPERPARAMETER_COLUMNS,
    METHOD_KEYS,
    best_configs,
    cells,
    config_curves,
    curves,
    expected_runs,
    missing_runs,
    ranking_key,
    recorded_sweep,
    scores,
    variant_columns,
)
from sweeps.results.tables import SensitivityTable, best_table, sensitivity_tables, table_text

__all__ = [
    "CELL_STATS",
    "DDOF",
    "HYPERPARAMETER_COLUMNS",
    "METHOD_KEYS",
    "SensitivityTable",
    "best_configs",
    "best_table",
    "cells",
    "config_curves",
    "curves",
    "expected_runs",
    "missing_runs",
    "ranking_key",
    "recorded_sweep",
    "scores",
    "sensitivity_tables",
    "table_text",
    "variant_columns",
]
