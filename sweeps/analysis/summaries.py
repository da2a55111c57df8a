"""The tables of tables.md as DataFrames, from an `Analysis` (tables.py renders them).

- `best_table`: one row per method, its best configuration by the task's score and the
  chosen statistic, with every cell statistic; methods of the recorded sweep with no finished
  run get a "missing" row.
- `sensitivity_tables`: every gamma0 x theta_lambda grid at one alpha, missing and diverged
  cells included, the best and tied cells marked, and the grid's robustness.
- `compare_table`: paired comparisons (compare.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from sweeps.analysis import queries
from sweeps.analysis.compare import paired_table
from sweeps.analysis.queries import Analysis

DIVERGED_RULE = ("A configuration with any diverged seed (a non-finite score) is never selected; a method whose "
                 "every configuration diverged on some seed shows the one that diverged on the fewest seeds, "
                 "as \"diverged on d/n seeds\" (d of its n seeds).")
ROBUST_WITHIN = 0.05  # sensitivity tables: the share of non-diverged cells within 5% of the best


def _missing_by(analysis: Analysis, keys: list[str], name: str) -> pl.DataFrame | None:
    if analysis.complete:
        return None
    return analysis.missing.group_by(keys).agg(pl.len().alias(name))


def best_table(analysis: Analysis) -> pl.DataFrame:
    """One row per (task, settings, optimizer) of the recorded sweep: the best configuration
    by the analysis' statistic (mean, median or iqm) and its statistics (every column of `queries.cells`).

    `status` is "ok", "diverged on d/n seeds" (no configuration usable: every one diverged on
    some seed; the row is the one that diverged on the fewest, d of its n seeds: DIVERGED_RULE)
    or "missing" (no run of the method finished: a row of nulls, so a method never silently
    vanishes from the table).
    """
    variant, stat = analysis.variant, analysis.stat
    best = queries.best_configs(analysis.cells)
    diverged = pl.format("diverged on {}/{} seeds", pl.col("diverged_seeds"), pl.col("seeds"))
    best = best.with_columns(status=pl.when(pl.col("all_diverged")).then(diverged).otherwise(pl.lit("ok")))
    if not analysis.complete:  # every method of the sweep gets a row, "missing" where no run finished
        methods = analysis.missing.group_by([*variant, "optimizer"]).agg(configs=pl.col("config_id").n_unique())
        absent = methods.join(best.select(*variant, "optimizer"), on=[*variant, "optimizer"], how="anti", nulls_equal=True)
        if absent.height:
            absent = absent.with_columns(
                status=pl.lit("missing"), all_diverged=pl.lit(False), seeds=pl.lit(0, pl.UInt32),
                diverged_configs=pl.lit(0, pl.UInt32), stat=pl.lit(stat),
            )
            best = pl.concat([best, absent], how="diagonal_relaxed")
    missing = _missing_by(analysis, [*variant, "optimizer"], "missing_runs")
    if missing is None:
        best = best.with_columns(missing_runs=pl.lit(0, pl.UInt32))
    else:
        best = best.join(missing, on=[*variant, "optimizer"], how="left", nulls_equal=True)
        best = best.with_columns(pl.col("missing_runs").fill_null(0))
    winners = best.filter(pl.col("status") == "ok").with_columns(_key=queries.ranking_key("stat_value")).sort("_key", "optimizer")
    best_method = winners.group_by(variant, maintain_order=True).agg(pl.col("optimizer").first().alias("_best"))
    return (
        best.join(best_method, on=variant, how="left", nulls_equal=True)
        .with_columns(best_method=(pl.col("optimizer") == pl.col("_best")).fill_null(False))
        .drop("_best")
        .sort([*variant, "optimizer"])
    )


_SENSITIVITY_COLUMNS = (
    "gamma0", "lambda0", "theta_lambda", "mean", "std", "sem", "median", "iqm", "ci_low", "ci_high", "stat",
    "stat_value", "seeds", "diverged_seeds", "outlier_seeds", "status", "best", "tied", "within_5pct", "config_id",
)


def compare_table(analysis: Analysis, reference: str | None = None) -> pl.DataFrame:
    """Paired comparisons (compare.py): per (task settings, method), its selected configuration
    against the reference method's (default: the best method) on their shared seeds: difference
    stat(method) - stat(reference) and P(method better than reference), each with a 95% paired
    bootstrap CI. Raises ValueError for an unknown reference."""
    return paired_table(analysis, best_table(analysis), reference)


@dataclass(frozen=True)
class SensitivityTable:
    """One gamma0 x theta_lambda grid at a fixed alpha; `cells` has one row per grid cell.

    `best`: the cell the statistic selects; `tied`: another usable cell whose 95% CI overlaps
    the best cell's (in a raced sweep, both among the race's survivors: an eliminated cell keeps its
    statistic over its own, fewer, seeds, with `race_status` and `eliminated_round`); `within_5pct`: a usable cell whose statistic is within 5% of the best's
    (|stat - best| <= 0.05 |best|). `robust` = within / usable: the fraction of non-diverged
    (and not missing) cells within 5% of the best, the one-number robustness of the grid.
    """

    variant: dict  # task and its settings
    optimizer: str
    alpha: float
    cells: pl.DataFrame  # the columns of _SENSITIVITY_COLUMNS
    stat: str = "mean"
    within: int = 0  # usable cells within 5% of the best (the best included)
    usable: int = 0  # cells with every seed finished and finite
    fixed: dict = field(default_factory=dict)  # a researcher's learner's own hyperparameters, one grid per value

    @property
    def at(self) -> str:
        """Where in the grid this table is: "alpha=0.01" (and ", rho=0.9" for a learner's own)."""
        return ", ".join(f"{k}={v:g}" for k, v in {"alpha": self.alpha, **self.fixed}.items())

    @property
    def robust(self) -> float:
        return self.within / self.usable if self.usable else math.nan


def sensitivity_tables(analysis: Analysis) -> list[SensitivityTable]:
    """Every (task settings, optimizer with gamma0 and theta_lambda, alpha) grid in the results.

    The grid's axes come from the recorded sweep (so cells with no runs show as missing) and
    from the results themselves. Cells are ranked on the analysis' statistic.
    """
    variant, stat = analysis.variant, analysis.stat
    own = [h for h in queries.hyperparameter_columns(analysis.cells.columns) if h not in queries.HYPERPARAMETER_COLUMNS]
    across = [c for c in ("sweep",) if c in analysis.cells.columns]  # sweeps compared: each cell's (across.py)
    keys = [*variant, "optimizer", "config_id", "alpha", "gamma0", "theta_lambda", *own, *across]
    raced = [c for c in queries.RACE_COLUMNS if c in analysis.cells.columns]  # a raced sweep: still in, or out when
    values = ["mean", "std", "sem", "median", "iqm", "ci_low", "ci_high", "stat_value", "seeds", "diverged_seeds", "outlier_seeds",
              *raced]
    observed = analysis.cells.filter(pl.col("gamma0").is_not_null() & pl.col("theta_lambda").is_not_null()).select(*keys, *values)
    expected = analysis.expected
    if not analysis.complete and "gamma0" in expected.columns and "theta_lambda" in expected.columns:
        expected = expected.filter(pl.col("gamma0").is_not_null() & pl.col("theta_lambda").is_not_null()).select(keys).unique()
        observed = expected.join(observed, on=keys, how="full", coalesce=True, nulls_equal=True)
    grid = observed.filter(pl.col("gamma0").is_not_null() & pl.col("theta_lambda").is_not_null()).sort(
        [*variant, "optimizer", "alpha", *own],
        descending=[*([False] * len(variant)), False, True, *([False] * len(own))], nulls_last=True
    )
    tables = []
    for group_key, group in grid.group_by([*variant, "optimizer", "alpha", *own], maintain_order=True):
        axes = group.select("gamma0").unique().join(group.select("theta_lambda").unique(), how="cross")
        full = axes.join(group.drop(variant), on=["gamma0", "theta_lambda"], how="left")
        full = full.with_columns(
            lambda0=pl.col("gamma0").exp(),
            status=pl.when(pl.col("seeds").fill_null(0) == 0)
            .then(pl.lit("missing"))
            .when(pl.col("diverged_seeds") > 0)
            .then(pl.lit("diverged"))
            .when(~pl.col("stat_value").is_finite())
            .then(pl.lit("diverged"))
            .otherwise(pl.lit("ok")),
            task=pl.lit(group_key[0]),
            stat=pl.lit(stat),
        )
        ok = full.filter(pl.col("status") == "ok")
        # an eliminated cell (fewer seeds, worse than the best with confidence) is never the best nor tied with it
        contenders = ok.filter(pl.col("race_status") != "eliminated") if raced else ok
        ranked = contenders.with_columns(_key=queries.ranking_key("stat_value")).sort("_key", "config_id")
        if ranked.height:
            top = ranked.row(0, named=True)
            tolerance = ROBUST_WITHIN * abs(top["stat_value"])
            usable = pl.col("status") == "ok"
            contender = usable & (pl.col("race_status") != "eliminated") if raced else usable
            # one seed: no interval, so nothing is tied (comparing with None would warn, and give null)
            overlaps = ((pl.col("ci_low") <= top["ci_high"]) & (pl.col("ci_high") >= top["ci_low"])
                        if top["ci_low"] is not None and top["ci_high"] is not None else pl.lit(False))
            full = full.with_columns(
                best=(pl.col("config_id") == top["config_id"]).fill_null(False),
                within_5pct=(usable & ((pl.col("stat_value") - top["stat_value"]).abs() <= tolerance)).fill_null(False),
                tied=(contender & (pl.col("config_id") != top["config_id"]) & overlaps).fill_null(False),
            )
        else:
            full = full.with_columns(best=pl.lit(False), within_5pct=pl.lit(False), tied=pl.lit(False))
        full = full.sort("gamma0", "theta_lambda", descending=[True, False])
        variant_values, (optimizer, alpha) = group_key[: len(variant)], group_key[len(variant): len(variant) + 2]
        fixed = group_key[len(variant) + 2:]
        tables.append(
            SensitivityTable(
                dict(zip(variant, variant_values)),
                optimizer,
                alpha,
                full.select(*_SENSITIVITY_COLUMNS, *raced, *across),
                stat,
                int(full["within_5pct"].sum()),
                ok.height,
                {k: v for k, v in zip(own, fixed) if v is not None},
            )
        )
    return tables


# ---------------------------------------------------------------- rendering


def sensitivity_frame(tables: list[SensitivityTable]) -> pl.DataFrame:
    """All sensitivity tables as one frame (the CSV): their cells with task settings, optimizer,
    alpha, and each table's robustness (`robust_within_5pct`, `usable_cells`)."""
    return pl.concat(
        [
            t.cells.with_columns(
                *(pl.lit(v).alias(k) for k, v in t.variant.items()),
                optimizer=pl.lit(t.optimizer),
                alpha=pl.lit(t.alpha),
                *(pl.lit(v, pl.Float64).alias(k) for k, v in t.fixed.items()),
                robust_within_5pct=pl.lit(t.robust, pl.Float64),
                usable_cells=pl.lit(t.usable, pl.Int64),
            )
            for t in tables
        ],
        how="diagonal_relaxed",
    )
