"""`robustness`: does a method need retuning per setting? Per-setting against cross-setting tuned scores
on normalised scores (robustness.py; Adkins et al. 2024). Made from the tuning scores; tuned on the mean."""

from __future__ import annotations

from sweeps.analysis.kinds import TableError, TableSource
from sweeps.analysis.robustness import robustness_table, robustness_text
from sweeps.plan import TUNING


def text(source: TableSource, fmt: str) -> str:
    if source.stat != "mean":
        raise TableError(f"--stat {source.stat}: the robustness table tunes on the mean of normalised scores (Adkins et "
                         "al. 2024) and offers no other statistic; drop --stat for --kind robustness")
    table = robustness_table(source.scores(TUNING))
    return robustness_text(table, fmt) if table.height else "No method runs in two or more settings of this sweep.\n"
