"""`importance`: main-effect variance shares of each hyperparameter (importance.py), per method."""

from __future__ import annotations

import polars as pl

from sweeps.analysis.importance import importance_table
from sweeps.analysis.kinds import TableSource
from sweeps.analysis.tables import STAT_NAMES, Grid, csv_text, render_tuning, variant_title

RACED = " Raced: every cell's statistic over the seeds every configuration holds (round 1's), eliminated or not."


def text(source: TableSource, fmt: str) -> str:
    analysis = source.analysis
    table = importance_table(analysis)
    if table.height == 0:
        return "No importance: no method with a hyperparameter that takes more than one value.\n"
    if fmt == "csv":
        return csv_text(table)
    return render_tuning(grids(table, analysis.variant, analysis.stat, RACED if analysis.race is not None else ""),
                         analysis, fmt)


def grids(table: pl.DataFrame, variant: list[str], stat: str, raced: str = "") -> list[Grid]:
    grids = []
    for _, group in table.group_by(variant, maintain_order=True):
        first = group.row(0, named=True)
        rows = []
        for r in group.to_dicts():
            if r["status"] != "ok":
                rows.append([r["optimizer"], "", "", r["status"]])
            else:
                rows.append([r["optimizer"], r["hyperparameter"], "" if r["levels"] is None else str(r["levels"]),
                             f"{100 * r['share']:.1f}%"])
        note = (
            f"Main-effect variance decomposition of the cell {STAT_NAMES[stat]} over each method's full-factorial grid: "
            "the share of the variance across cells explained by each hyperparameter alone; 'interactions' is the rest "
            "(exact on a full grid; the shares sum to 100%). Diverged cells are excluded; a method whose grid is then "
            f"not full (or has missing cells) is skipped, and says so.{raced}"
        )
        grids.append(Grid(f"{variant_title({k: first[k] for k in variant})}: hyperparameter importance", note,
                           ("method", "hyperparameter", "values", "share of variance"), rows, set()))
    return grids
