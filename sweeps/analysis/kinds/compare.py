"""`compare`: paired comparisons (compare.py): each method's selected configuration against the reference
method's (`--reference`, default the best method) on the seeds both ran."""

from __future__ import annotations

import polars as pl

from sweeps.analysis import stats
from sweeps.analysis.kinds import TableSource
from sweeps.analysis.summaries import compare_table
from sweeps.analysis.tables import STAT_NAMES, Grid, csv_text, interval, number, render_tuning, selected_hyperparameters, variant_title
from tasks import get_task


def text(source: TableSource, fmt: str) -> str:
    analysis = source.analysis
    table = compare_table(analysis, source.reference)
    if fmt == "csv":
        return csv_text(table)
    return render_tuning(grids(table, analysis.variant, analysis.stat), analysis, fmt)


def grids(table: pl.DataFrame, variant: list[str], stat: str) -> list[Grid]:
    grids = []
    name = STAT_NAMES[stat]
    for _, group in table.group_by(variant, maintain_order=True):
        first = group.row(0, named=True)
        reference = first["reference"]
        rows, marked = [], set()
        for i, r in enumerate(group.to_dicts()):
            if r["status"] in ("ok", "reference"):
                diff = f"{number(r['difference'])} {interval(r['diff_ci_low'], r['diff_ci_high'])}".rstrip()
                p = f"{number(r['p_improvement'], 3)} {interval(r['p_ci_low'], r['p_ci_high'])}".rstrip()
                value = number(r["stat_value"])
            else:
                diff, p, value = r["status"], "", ""
            if r["status"] == "reference":
                diff, p = "reference", "0.5"
                marked |= {(i, 0)}
            rows.append([r["optimizer"], selected_hyperparameters(r), value, diff, p, str(r["shared_seeds"])])
        task = get_task(first["task"])
        better = "higher" if task.higher_is_better else "lower"
        note = (
            f"Seeds are paired (every method sees the same stream for a given seed): each method's selected "
            f"configuration is compared with the reference's ({reference or 'none'}) on the seeds both ran. "
            f"Difference = {name}(method) - {name}(reference) ({better} is better); P(better) = probability that "
            f"a seed of the method scores better ({better} {task.score}) than a seed of the reference, over all pairs "
            f"of shared seeds, ties 1/2 (as rliable). 95% CIs: paired percentile bootstrap over seeds "
            f"({stats.BOOTSTRAP_RESAMPLES} resamples, fixed seed)."
        )
        grids.append(Grid(
            f"{variant_title({k: first[k] for k in variant})}: paired comparison with {reference or 'no reference'}",
            note,
            ("method", "selected hyperparameters", name, "difference [95% CI]", f"P(better than {reference}) [95% CI]",
             "shared seeds"),
            rows, marked))
    return grids
