"""Hyperparameter importance: a main-effect variance decomposition of the cell statistic
over each method's full-factorial grid (definition: `sweeps.analysis.stats.main_effect_shares`).

Per (task settings, method), over the hyperparameters with more than one value in its
grid: the share of the variance of the chosen statistic across cells explained by each
hyperparameter's main effect, and the share left to interactions; exact on a full grid.

Diverged cells (any seed NaN or inf) have no finite statistic, so they are excluded, and so
are unstable cells (`stats.unstable`: a finite blow-up would dominate every share); the
decomposition then needs every remaining combination of the grid's values exactly once.
When cells are diverged or missing (the grid is not full any more) the method's
decomposition is skipped and its row says why (`status`), rather than decomposing a
ragged grid, which is not exact and whose shares would depend on which cells failed.
Grid values come from the recorded sweep and the stored cells together.

In a raced sweep (sweeps.analysis.race) an eliminated cell holds fewer seeds than a survivor, and
seeds differ in difficulty: every cell's statistic is then taken over the seeds every configuration
holds (`shared_seeds`: round 1's), so the cells compared hold the same seeds and the grid stays full.


    from sweeps.analysis.importance import importance_table
    from sweeps.analysis.queries import Analysis
    from sweeps.store import Store
    importance_table(Analysis.of(Store.open("results/linear-demo"), stat="iqm"))
"""

from __future__ import annotations

import numpy as np
import polars as pl

from sweeps.analysis import queries, stats
from sweeps.analysis.queries import Analysis
from tasks import get_task


def unstable_cells(cells: pl.DataFrame, keys: list[str]) -> pl.Series:
    """Per cell: unstable by `stats.unstable`, the typical cell taken over the cells sharing `keys`
    (task settings and optimizer); lower-is-better tasks only; false for missing cells."""
    lower = cells["task"].replace_strict({t: not get_task(t).higher_is_better for t in cells["task"].unique()},
                                         return_dtype=pl.Boolean)
    columns = cells.select(pl.col("median", "max").fill_null(float("nan")),
                           typical=pl.col("median").median().over(keys, mapping_strategy="group_to_rows"))
    flags = stats.unstable(columns["median"].to_numpy(), columns["max"].to_numpy(),
                           columns["typical"].fill_null(float("nan")).to_numpy())
    return pl.Series("unstable", flags & lower.to_numpy())


def shared_seeds(scores: pl.LazyFrame) -> list[int]:
    """The seeds every configuration of `scores` holds (of a raced sweep: round 1's; else every seed)."""
    configs = scores.select(pl.col("config_id").n_unique()).collect().item()
    held = scores.group_by("seed").agg(pl.col("config_id").n_unique()).filter(pl.col("config_id") == configs)
    return sorted(held.collect()["seed"].to_list())


def importance_table(analysis: Analysis) -> pl.DataFrame:
    """Long format: one row per (task settings, method, hyperparameter) plus an "interactions"
    row, with `share` (of the variance of the analysis' statistic across the grid's cells) and
    `levels`; a method whose decomposition is skipped has one row with null share and `status`
    saying why."""
    variant, cells = analysis.variant, analysis.cells
    if analysis.race is not None:  # every cell on the same seeds (module doc)
        shared = pl.col("seed").is_in(shared_seeds(analysis.scores))
        cells = queries.cells(analysis.scores.filter(shared), analysis.stat)
    keys = [*variant, "optimizer", "config_id", *queries.hyperparameter_columns(cells.columns)]
    observed = cells.select(*keys, "stat_value", "diverged_seeds").with_columns(
        unstable=unstable_cells(cells, [*variant, "optimizer"]))
    if not analysis.complete:  # cells the sweep asked for and the store lacks make the grid not full
        shared = [c for c in keys if c in analysis.expected.columns]
        expected = analysis.expected.select(shared).unique()
        observed = expected.join(observed, on=shared, how="full", coalesce=True, nulls_equal=True)
    rows = []
    for key, group in observed.group_by([*variant, "optimizer"], maintain_order=True):  # one per method
        base = dict(zip([*variant, "optimizer"], key))
        hyper = [h for h in queries.hyperparameter_columns(group.columns) if group[h].drop_nulls().n_unique() > 1]
        if not hyper:
            continue  # nothing varies: no decomposition to make
        usable = group.filter((pl.col("diverged_seeds") == 0) & pl.col("stat_value").is_finite() & ~pl.col("unstable"))
        levels = {h: sorted(group[h].drop_nulls().unique()) for h in hyper}
        full = int(np.prod([len(v) for v in levels.values()]))
        diverged = group.filter(pl.col("diverged_seeds") > 0).height
        shaky = int(group["unstable"].sum())
        missing = group.filter(pl.col("stat_value").is_null() & pl.col("diverged_seeds").fill_null(0).eq(0)).height
        result = None
        if usable.height == full:
            codes = np.stack([usable[h].replace_strict({v: i for i, v in enumerate(levels[h])}, return_dtype=pl.Int64)
                              .to_numpy() for h in hyper], axis=1)
            result = stats.main_effect_shares(codes, usable["stat_value"].to_numpy())
        if result is None:
            if usable.height != full:
                why = (f"skipped: grid not full ({usable.height} of {full} cells usable; {diverged} diverged, "
                       + (f"{shaky} unstable, " if shaky else "") + f"{missing} missing)")
            else:
                why = "skipped: every cell has the same score"
            rows.append({**base, "hyperparameter": None, "levels": None, "share": None, "cells": usable.height,
                         "status": why})
            continue
        shares, rest = result
        for h, share in zip(hyper, shares):
            rows.append({**base, "hyperparameter": h, "levels": len(levels[h]), "share": float(share),
                         "cells": full, "status": "ok"})
        rows.append({**base, "hyperparameter": "interactions", "levels": None, "share": rest, "cells": full, "status": "ok"})
    schema = {**{c: observed.schema[c] for c in [*variant, "optimizer"]}, "hyperparameter": pl.String,
              "levels": pl.Int64, "share": pl.Float64, "cells": pl.Int64, "status": pl.String}
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
