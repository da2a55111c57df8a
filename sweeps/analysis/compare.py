"""Paired comparisons between methods: each method's selected configuration against a
reference method's, on the seeds both ran.

Seeds are paired: for a given seed every configuration of every method sees the same
stream, so a method's score on seed s is compared with the reference's on seed s. Per
(task settings, method): the difference stat(method) - stat(reference) with its paired
bootstrap CI, and the probability of improvement P(method better than reference) (lower
MSE, higher accuracy) with its CI. Definitions: `sweeps.analysis.stats`.

    from sweeps.analysis.queries import Analysis
    from sweeps.analysis.summaries import compare_table
    from sweeps.store import Store
    compare_table(Analysis.of(Store.open("results/linear-demo"), stat="median"), reference="sgd")
"""

from __future__ import annotations

import numpy as np
import polars as pl

from sweeps.analysis import queries, stats
from sweeps.analysis.queries import Analysis

COMPARE_COLUMNS = (
    "reference", "stat", "stat_value", "reference_value", "difference", "diff_ci_low", "diff_ci_high",
    "p_improvement", "p_ci_low", "p_ci_high", "shared_seeds",
)


def paired_table(analysis: Analysis, best: pl.DataFrame, reference: str | None = None) -> pl.DataFrame:
    """One row per (task settings, method) of `best` (the best table, `summaries.best_table(analysis)`;
    `summaries.compare_table` passes it): its selected configuration against the reference's.

    `reference`: a method name; default the best method of each task settings (by `stat`).
    `status`: "ok", "reference" (the reference's own row), "no shared seeds", or the
    method's best-table status ("diverged on d/n seeds", "missing") / "no reference" when the
    reference has no usable configuration there. Raises ValueError for an unknown method.
    """
    frame, variant, stat = analysis.scores, analysis.variant, analysis.stat
    if reference is not None and reference not in set(best["optimizer"]):
        raise ValueError(f"unknown reference method {reference!r}; the methods here: {', '.join(sorted(set(best['optimizer'])))}")
    chosen = best.filter(pl.col("status") == "ok")
    per_seed = (
        frame.filter(pl.col("config_id").is_in(chosen["config_id"].to_list()))
        .select("config_id", "seed", pl.col("score").cast(pl.Float64))
        .collect()
    )
    by_config = {
        key[0]: (group["seed"].to_numpy(), group["score"].to_numpy())
        for key, group in per_seed.sort("config_id", "seed").group_by("config_id", maintain_order=True)
    }
    if reference is None:
        refs = best.filter(pl.col("best_method")).select(*variant, reference=pl.col("optimizer"))
    else:
        refs = best.select(variant).unique(maintain_order=True).with_columns(reference=pl.lit(reference))
    refs = refs.join(
        chosen.select(*variant, reference=pl.col("optimizer"), _ref_config=pl.col("config_id"),
                      reference_value=pl.col("stat_value")),
        on=[*variant, "reference"], how="left", nulls_equal=True,
    )
    rows = best.join(refs, on=variant, how="left", nulls_equal=True)

    # pair the seeds of every (method, reference), then one vectorised call per shared-seed count
    pairs: dict[int, list[tuple[int, np.ndarray, np.ndarray, bool]]] = {}
    shared = np.zeros(rows.height, np.int64)
    status = rows["status"].to_list()
    higher = rows.select(queries.higher_is_better())["task"].to_list()
    for i, (config, ref_config, method, ref) in enumerate(
        rows.select("config_id", "_ref_config", "optimizer", "reference").iter_rows()
    ):  # one per method: a handful of rows
        if status[i] != "ok":
            continue
        if ref_config is None:
            status[i] = "no reference"
            continue
        if method == ref:
            status[i] = "reference"
        seeds_a, a = by_config[config]
        seeds_r, r = by_config[ref_config]
        common, ia, ir = np.intersect1d(seeds_a, seeds_r, return_indices=True)
        shared[i] = common.size
        if common.size == 0:
            status[i] = "no shared seeds"
            continue
        pairs.setdefault(common.size, []).append((i, a[ia], r[ir], higher[i]))
    results = {name: np.full(rows.height, np.nan) for name in ("difference", "diff_ci_low", "diff_ci_high",
                                                                "p_improvement", "p_ci_low", "p_ci_high")}
    for group in pairs.values():
        index = [g[0] for g in group]
        out = stats.paired_comparisons(np.stack([g[1] for g in group]), np.stack([g[2] for g in group]),
                                       np.array([g[3] for g in group]), stat)
        for name, values in out.items():
            results[name][index] = values
    rows = rows.with_columns(
        *(pl.Series(name, values) for name, values in results.items()),
        pl.Series("shared_seeds", shared, dtype=pl.UInt32),
        pl.Series("status", status, dtype=pl.String),
    ).with_columns(
        pl.when(pl.col("status").is_in(["ok", "reference"])).then(pl.col(c)).otherwise(None).alias(c)
        for c in results
    )
    hyper = queries.hyperparameter_columns(rows.columns)
    return rows.select(*variant, "optimizer", "config_id", *hyper, *COMPARE_COLUMNS, "seeds", "status").sort(
        [*variant, "optimizer"]
    )
