"""Confirmation on fresh seeds: the unbiased score of each method's selected configuration.

Every sweep tool reports the best configuration's score on the seeds that selected it, and
that score is biased upwards: the maximum of noisy estimates overestimates the best true
score (Eimer et al., ICML 2023; Patterson et al., "Empirical Design in Reinforcement
Learning", JMLR 2024). The confirmation stage re-runs the selected configuration of each
(setting, method) on fresh seeds, disjoint from the tuning seeds; its score is the estimate
to report, and the gap between the two is the selection bias, unless a fresh seed blew up:
a fresh seed that diverged, or an outlier (the tuning tables' rule, stats.outlier_mask) that
makes the confirmation score worse than the median of the fresh seeds, is instability of the
method, not bias of the selection (`gap_cause`, `GAP_RULE`). Methods are ranked by the
confirmation score (the statistic asked for, flagged seeds included: said beside the table).
Functions of frames (scores of one stage each), never of paths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import polars as pl

from sweeps.analysis import queries, tables
from sweeps.analysis.profiles import profile_figure, selected_runs
from sweeps.analysis.robustness import robustness_table, robustness_text

CONFIRM_COLUMNS = ("tuning_score", "tuning_seeds", "confirmation_score", "ci_low", "ci_high", "confirmation_seeds",
                   "diverged_seeds", "outlier_seeds", "gap", "gap_cause", "rank", "status")
GAP_RULE = ("gap cause: instability when a fresh seed diverged, or when an outlier fresh seed (†) makes the "
            "confirmation score worse than the median of the fresh seeds (and the gap is positive); otherwise "
            "selection bias when the gap is positive, none when it is not")


def _frame(frame: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    return frame.lazy() if isinstance(frame, pl.DataFrame) else frame


def _hyperparameters(frame: pl.LazyFrame | pl.DataFrame) -> list[str]:
    names = _frame(frame).collect_schema().names()
    return queries.hyperparameter_columns(names)


def selected_configs(tuning: pl.LazyFrame | pl.DataFrame, stat: str = "mean") -> pl.DataFrame:
    """The configuration `stat` selects per (setting, method) on the tuning runs (queries.best_configs),
    methods whose every configuration diverged left out (`unconfirmable` names them): setting columns,
    optimizer, config_id and hyperparameters (null where the optimizer does not take them), one row each."""
    tuning = _frame(tuning)
    variant = queries.variant_columns(tuning)
    best = queries.best_configs(queries.cells(tuning, stat)).filter(~pl.col("all_diverged"))
    return best.select(*variant, "optimizer", "config_id", *_hyperparameters(tuning)).sort(*variant, "optimizer")


def unconfirmable(tuning: pl.LazyFrame | pl.DataFrame, stat: str = "mean") -> list[str]:
    """One line per (setting, method) that `selected_configs` leaves out because every configuration
    diverged on the tuning seeds: nothing to confirm, said rather than dropped without a word."""
    tuning = _frame(tuning)
    variant = queries.variant_columns(tuning)
    best = queries.best_configs(queries.cells(tuning, stat)).filter(pl.col("all_diverged")).sort(*variant, "optimizer")
    return [f"{row['optimizer']} on {tables.variant_title({k: row[k] for k in variant})}: not confirmed, every "
            "configuration diverged on the tuning seeds" for row in best.iter_rows(named=True)]


def confirmation_table(tuning: pl.LazyFrame | pl.DataFrame, confirmation: pl.LazyFrame | pl.DataFrame,
                       stat: str = "mean") -> pl.DataFrame:
    """Per (setting, method) confirmed: the tuning score (`stat` over the tuning seeds) of the confirmed
    configuration, its confirmation score (`stat` over the fresh seeds) with the 95% bootstrap CI,
    and `gap`, how much better the tuning score looks than the confirmation score (in the score's units,
    direction-aware: tuning - confirmation where higher is better, confirmation - tuning where lower is
    better), and `gap_cause` ("selection bias" | "instability" | "none", GAP_RULE) with the fresh seeds'
    `diverged_seeds` and `outlier_seeds` ("seed:score; ...", the tuning tables' rule). `rank` orders
    methods within a setting by the confirmation score (1 = best); a method with a diverged
    confirmation seed is ranked last (status "diverged"). The confirmed configurations are those of the
    confirmation frame."""
    confirmation = _frame(confirmation)
    variant = queries.variant_columns(confirmation)
    keys = [*variant, "optimizer", "config_id"]
    confirmed = queries.cells(confirmation, stat)
    chosen = confirmed.select(keys)
    tuned = queries.cells(_frame(tuning).join(chosen.lazy(), on=keys, how="semi", nulls_equal=True), stat)
    better = queries.higher_is_better()
    table = (
        confirmed.select(*keys, *_hyperparameters(confirmation), "ci_low", "ci_high", "diverged_seeds", "outlier_seeds",
                         "outliers", "median", confirmation_score="stat_value", confirmation_seeds="seeds")
        .join(tuned.select(*keys, tuning_score="stat_value", tuning_seeds="seeds"), on=keys, how="left", nulls_equal=True)
        .with_columns(status=pl.when(pl.col("diverged_seeds") > 0).then(pl.lit("diverged")).otherwise(pl.lit("ok")))
        .with_columns(
            gap=pl.when(better).then(pl.col("tuning_score") - pl.col("confirmation_score"))
            .otherwise(pl.col("confirmation_score") - pl.col("tuning_score")),
            _key=pl.when(pl.col("status") == "ok").then(queries.ranking_key("confirmation_score")),
        )
        .with_columns(gap_cause=_gap_cause())
        .sort([*variant, "_key", "optimizer"], nulls_last=True)
    )
    ranked = table.with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32).over(variant))
    return ranked.select(*keys, *_hyperparameters(confirmation), *CONFIRM_COLUMNS).with_columns(stat=pl.lit(stat))


def _gap_cause() -> pl.Expr:
    """GAP_RULE as an expression over the confirmation table's columns."""
    worse_than_median = queries.ranking_key("confirmation_score") > queries.ranking_key("median")
    outlier_drives = (pl.col("outliers") > 0) & worse_than_median
    return (
        pl.when((pl.col("diverged_seeds") > 0) | ((pl.col("gap") > 0) & outlier_drives)).then(pl.lit("instability"))
        .when(pl.col("gap") > 0).then(pl.lit("selection bias"))
        .otherwise(pl.lit("none"))
    )


def confirmation_grids(table: pl.DataFrame, stat: str, seeds_note: str = "", unconfirmed: Sequence[str] = ()) -> list:
    """The confirmation table as renderable grids (tables.render), one per setting; `unconfirmed` (the lines of
    `unconfirmable`) are footnotes of the first, so a method the best table lists is never missing without a word."""
    variant = [c for c in table.columns if c not in (*CONFIRM_COLUMNS, "optimizer", "config_id", "stat",
                                                        *queries.hyperparameter_columns(table.columns))]
    name = tables.STAT_NAMES[stat]
    grids = []
    for _, group in table.group_by(variant, maintain_order=True):
        first = group.row(0, named=True)
        rows, marked, footnotes = [], set(), []
        for i, r in enumerate(group.to_dicts()):
            ok = r["status"] == "ok"
            score = f"{tables.number(r['confirmation_score'])} ({r['confirmation_seeds']} seeds)" if ok \
                else f"diverged ({r['diverged_seeds']}/{r['confirmation_seeds']})"
            note = tables.outlier_footnote(r["optimizer"], r["outlier_seeds"]) if ok else None
            if note:
                score += f" {tables.OUTLIER_MARK}"
                footnotes.append(note)
            rows.append([str(r["rank"]), r["optimizer"], tables.selected_hyperparameters(r),
                         f"{tables.number(r['tuning_score'])} ({r['tuning_seeds']} seeds)", score,
                         tables.interval(r["ci_low"], r["ci_high"]) if ok else "",
                         tables.number(r["gap"]) if ok else "", r["gap_cause"]])
            if ok and r["rank"] == 1:
                marked |= {(i, 1), (i, 4)}
        if footnotes:
            footnotes.insert(0, tables.outlier_note())
        task = first["task"]
        note = (f"{tables.direction(task)}. The configuration selected by the {name} on the tuning seeds, re-run on "
                f"fresh seeds (disjoint from the tuning seeds{seeds_note}). Confirmation: the {name} over the fresh "
                "seeds, the unbiased estimate, with its 95% percentile bootstrap CI; gap: how much better the tuning "
                "score looks (Patterson et al. 2024, Eimer et al. 2023); "
                f"{GAP_RULE}. Methods ranked by the confirmation {name}, every fresh seed counted (an outlier † "
                "included" + ("; `--stat median` ranks by a statistic it does not move" if stat == "mean" else "")
                + "); a diverged method last; the best in bold.")
        grids.append(tables.Grid(
            f"{tables.variant_title({k: first[k] for k in variant})}: confirmation on fresh seeds", note,
            ("rank", "method", "selected hyperparameters", f"tuning {name}", f"confirmation {name}", "95% CI", "gap",
             "gap cause"),
            rows, marked, footnotes=tuple(footnotes)))
    if grids and unconfirmed:
        grids[0] = dataclasses.replace(grids[0], footnotes=(*grids[0].footnotes, *unconfirmed))
    return grids


def confirmation_text(table: pl.DataFrame, fmt: str, stat: str = "mean", seeds_note: str = "",
                      unconfirmed: Sequence[str] = ()) -> str:
    """The confirmation table rendered (md, latex, html), with the methods it could not confirm in a
    footnote, or as CSV (the confirmed configurations' rows)."""
    if fmt == "csv":
        return tables.csv_text(table)
    return tables.render(confirmation_grids(table, stat, seeds_note, unconfirmed), fmt)


def confirmation_section(tuning: pl.LazyFrame | pl.DataFrame, confirmation: pl.LazyFrame | pl.DataFrame | None,
                         stat: str = "mean") -> tuple[list[tuple[str, str]], list[tuple[str, object]]]:
    """The report's "How sure are we?" section: (title, HTML) tables (confirmation on fresh seeds,
    robustness across settings) and (kind, plotly figure) performance profiles of each method's
    selected configuration (on the confirmation seeds when confirmed, else the tuning seeds)."""
    parts = []
    if confirmation is None:
        parts.append(("Confirmation on fresh seeds", "<p class='note'>No confirmation stage: `fade-sweep confirm "
                      "RESULTS_DIR --seeds N` re-runs each selected configuration on fresh seeds.</p>"))
        runs = selected_runs(tuning, selected_configs(tuning, stat))
    else:
        parts.append(("Confirmation on fresh seeds", confirmation_text(confirmation_table(tuning, confirmation, stat), "html",
                                                                       stat, unconfirmed=unconfirmable(tuning, stat))))
        runs = _frame(confirmation).collect()
    robust = robustness_table(tuning)
    parts.append(("Robustness across settings", robustness_text(robust, "html") if robust.height else
                  "<p class='note'>No method runs in two or more settings of this sweep.</p>"))
    return parts, [("profile", profile_figure(runs))]
