"""`best`: one row per method, its best configuration by the task's score and the chosen statistic (mean,
median or IQM), "mean ± std" over seeds (or the median / IQM) with the 95% bootstrap CI; every method of
the recorded sweep has a row ("missing" when none of its runs finished). Made from the tuning cells."""

from __future__ import annotations

import polars as pl

from sweeps.analysis.kinds import TableSource
from sweeps.analysis.summaries import DIVERGED_RULE, best_table
from sweeps.analysis.tables import (
    OUTLIER_MARK,
    PARTIAL_BEST,
    STAT_NAMES,
    Grid,
    score_note,
    cell_text,
    csv_text,
    interval,
    outlier_footnote,
    outlier_note,
    race_note,
    render_tuning,
    selected_hyperparameters,
    variant_title,
)


def text(source: TableSource, fmt: str) -> str:
    analysis = source.analysis
    table = best_table(analysis)
    if fmt == "csv":
        return csv_text(table)
    return render_tuning(grids(table, analysis.variant, analysis.stat, race_note(analysis)), analysis, fmt)


def grids(table: pl.DataFrame, variant: list[str], stat: str, race: str = "") -> list[Grid]:
    grids = []
    for _, group in table.group_by(variant, maintain_order=True):
        rows, marked, footnotes = [], set(), []
        for i, r in enumerate(group.to_dicts()):
            ok = r["status"] == "ok"
            score = cell_text(r, stat, ci=False) if ok else r["status"]
            note = outlier_footnote(r["optimizer"], r.get("outlier_seeds")) if ok else None
            if note:
                score += f" {OUTLIER_MARK}"
                footnotes.append(note)
            ci = interval(r.get("ci_low"), r.get("ci_high")) if ok else ""
            rows.append([r["optimizer"], score, str(r["seeds"]), ci, selected_hyperparameters(r),
                         f"{r['diverged_configs']}/{r['configs']}", str(r["missing_runs"])])
            if r["best_method"]:
                marked |= {(i, 0), (i, 1)}
        first = group.row(0, named=True)
        if footnotes:
            footnotes.insert(0, outlier_note())
        if group["missing_runs"].sum():
            footnotes.append(PARTIAL_BEST)
        grids.append(
            Grid(
                variant_title({k: first[k] for k in variant}),
                score_note(first["task"], stat) + " Best method in bold. " + DIVERGED_RULE + race,
                ("method", "score", "seeds", f"95% CI ({STAT_NAMES[stat]})", "selected hyperparameters",
                 "diverged configs", "missing runs"),
                rows,
                marked,
                footnotes=tuple(footnotes),
            )
        )
    return grids
