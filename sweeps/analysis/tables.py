"""What every table of tables.md renders through: the `Grid` (header, rows of cell strings, marked and
tied cells, footnotes) as Markdown, LaTeX (booktabs) or HTML, a frame as CSV, and the cells' words
(a score with its CI, a setting's title, the notes). Each table kind builds its grids in its own module
(`sweeps/analysis/kinds/`); their frames come from summaries.py.

Std is across seeds with ddof=1; the statistics are defined in stats.py. Outlier seeds are
marked (†) and named in a footnote. Diverged configurations are never selected; missing
and diverged cells are shown as such, and every method of the recorded sweep has a row in
the best table ("missing" when none of its runs finished). Only the (config, seed) pairs of
the store's current sweep are counted.
"""

from __future__ import annotations

import dataclasses
import io
import math
from dataclasses import dataclass
from html import escape

import polars as pl

from sweeps.analysis import queries, stats
from sweeps.analysis.queries import Analysis
from sweeps.spec import LOCATION_SETTINGS
from tasks import get_task

STAT_NAMES = {"mean": "mean", "median": "median", "iqm": "IQM"}
OUTLIER_MARK, TIED_MARK = "†", "≈"


def number(value: float | None, digits: int = 4) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def mean_std(mean: float | None, std: float | None) -> str:
    return number(mean) if std is None or not math.isfinite(std) else f"{number(mean)} ± {number(std, 2)}"


def interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{number(low, 3)}, {number(high, 3)}]"


def cell_text(row: dict, stat: str, ci: bool = True) -> str:
    """A cell's score as shown: "mean ± std" for the mean, "value [CI]" for the median and IQM
    (just the value with `ci=False`, where the table has a CI column)."""
    if stat == "mean":
        return mean_std(row["mean"], row["std"])
    return f"{number(row[stat])} {interval(row['ci_low'], row['ci_high']) if ci else ''}".rstrip()


def variant_title(variant: dict) -> str:
    """"task (setting=value, ...)", without where the data lives (not part of what was run) and
    with only the task's own settings (a store of two tasks has the union of their settings)."""
    own = {f.name for f in dataclasses.fields(get_task(variant["task"]).settings_type)}
    settings = ", ".join(f"{k}={v}" for k, v in variant.items() if k in own and k not in LOCATION_SETTINGS and v is not None)
    return f"{variant['task']} ({settings})" if settings else variant["task"]


def score_name(task_name: str) -> str:
    """The score in a word or two: "MSE", "accuracy" (axis and colorbar titles)."""
    score = get_task(task_name).score
    return "MSE" if "MSE" in score else "accuracy" if "accuracy" in score else score


def direction(task_name: str) -> str:
    """E.g. "MSE, lower is better" (plot axes and colorbars)."""
    return f"{score_name(task_name)}, {'higher' if get_task(task_name).higher_is_better else 'lower'} is better"


def score_note(task_name: str, stat: str = "mean") -> str:
    task = get_task(task_name)
    shown = (f"mean ± std over seeds (std with ddof={queries.DDOF})" if stat == "mean"
             else f"{STAT_NAMES[stat]} over seeds [95% CI]" + ("; IQM = mean of the seeds left after dropping floor(n/4) from each end" if stat == "iqm" else ""))
    return (
        f"Score: {task.score}, {'higher' if task.higher_is_better else 'lower'} is better; "
        f"{shown}; best selected by the {STAT_NAMES[stat]}; 95% CI: percentile bootstrap of the "
        f"{STAT_NAMES[stat]} over seeds ({stats.BOOTSTRAP_RESAMPLES} resamples, fixed seed)."
    )


def outlier_note() -> str:
    return (f"{OUTLIER_MARK} outlier seed: |score - median| > {stats.OUTLIER_THRESHOLD:g} x {stats.MAD_SCALE} x MAD "
            f"(MAD = 0: {stats.MEAN_AD_SCALE} x mean absolute deviation) and > {stats.OUTLIER_MIN_RELATIVE:.0%} of the "
            f"median; only with {stats.OUTLIER_MIN_SEEDS} or more seeds")


@dataclass(frozen=True)
class Grid:
    """A table ready to render: header, rows of cell strings, which cells are marked best (bold)
    and tied (italic), and footnotes."""

    title: str
    note: str
    header: tuple[str, ...]
    rows: list[list[str]]
    marked: set[tuple[int, int]]  # (row, column) to emphasise
    tied: set[tuple[int, int]] = frozenset()
    footnotes: tuple[str, ...] = ()


def _markdown(grid: Grid) -> str:
    lines = [f"### {grid.title}", "", "| " + " | ".join(grid.header) + " |", "|" + "---|" * len(grid.header)]
    for i, row in enumerate(grid.rows):
        cells = [f"**{c}**" if (i, j) in grid.marked else f"*{c}*" if (i, j) in grid.tied else c for j, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", grid.note, *(["", *(f"- {f}" for f in grid.footnotes)] if grid.footnotes else []), ""])


def _latex_escape(text: str) -> str:
    for old, new in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                     ("±", r"$\pm$"), ("λ", r"$\lambda$"), (TIED_MARK, r"$\approx$"), (OUTLIER_MARK, r"\textsuperscript{\dag}")):
        text = text.replace(old, new)
    return text


def _latex(grid: Grid) -> str:
    notes = " ".join([grid.note, *grid.footnotes])
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{_latex_escape(grid.title)}. {_latex_escape(notes)}}}",
        r"\begin{tabular}{" + "l" * len(grid.header) + "}",
        r"\toprule",
        " & ".join(_latex_escape(h) for h in grid.header) + r" \\",
        r"\midrule",
    ]
    for i, row in enumerate(grid.rows):
        cells = [rf"\textbf{{{_latex_escape(c)}}}" if (i, j) in grid.marked
                 else rf"\textit{{{_latex_escape(c)}}}" if (i, j) in grid.tied else _latex_escape(c) for j, c in enumerate(row)]
        lines.append(" & ".join(cells) + r" \\")
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def _html(grid: Grid) -> str:
    """An HTML table (for the report), best cells in bold, tied cells in italics."""
    head = "".join(f"<th>{escape(h)}</th>" for h in grid.header)

    def cell(i: int, j: int, c: str) -> str:
        if (i, j) in grid.marked:
            return f"<td class='best'><b>{escape(c)}</b></td>"
        if (i, j) in grid.tied:
            return f"<td class='tied'><i>{escape(c)}</i></td>"
        return f"<td>{escape(c)}</td>"

    body = "".join("<tr>" + "".join(cell(i, j, c) for j, c in enumerate(row)) + "</tr>" for i, row in enumerate(grid.rows))
    foot = "".join(f"<li>{escape(f)}</li>" for f in grid.footnotes)
    return (
        f"<h3>{escape(grid.title)}</h3><table class='results'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table><p class='note'>{escape(grid.note)}</p>"
        + (f"<ul class='note'>{foot}</ul>" if foot else "")
    )


def selected_hyperparameters(row: dict) -> str:
    return ", ".join(f"{n}={row[n]:g}" for n in queries.hyperparameter_columns(row) if row.get(n) is not None)


def outlier_footnote(label: str, outliers: str | None) -> str | None:
    if not outliers:
        return None
    seeds = ", ".join(f"seed {seed} ({score})" for seed, score in (o.split(":", 1) for o in outliers.split("; ")))
    return f"{OUTLIER_MARK} {label}: outlier {seeds}"


PARTIAL_BEST = ("Some methods have missing runs: the best (bold) is the best among the runs that are in; a method's "
                "missing runs may change it.")


def left_out_note(analysis: Analysis) -> str | None:
    """The footnote of every table made while damaged scores files are left out: which, and the repair."""
    if not analysis.left_out:
        return None
    many = len(analysis.left_out) > 1
    return (f"Left out: the runs of {len(analysis.left_out)} damaged scores file{'s' if many else ''} "
            f"({', '.join(analysis.left_out)}), counted as missing runs; `{analysis.repair}` runs "
            f"{'their packs' if many else 'its pack'} again.")


def csv_text(frame: pl.DataFrame) -> str:
    buffer = io.StringIO()
    frame.write_csv(buffer)
    return buffer.getvalue()


def render(grids: list[Grid], fmt: str) -> str:
    """Grids as Markdown, LaTeX (booktabs) or HTML (for CSV, write the frame itself: `csv_text`)."""
    if fmt not in ("md", "latex", "html"):
        raise ValueError(f"unknown table format {fmt!r}; choose one of md, latex, html (or csv)")
    return "\n".join({"md": _markdown, "latex": _latex, "html": _html}[fmt](g) for g in grids)


def race_note(analysis: Analysis) -> str:
    """A raced sweep's sentence, after a tuning table's note ('' for a sweep not raced)."""
    return f" {analysis.race.sentence()}" if analysis.race is not None else ""


def render_tuning(grids: list[Grid], analysis: Analysis, fmt: str) -> str:
    """Grids of the tuning cells rendered, `left_out_note` on every one where damaged scores files were left
    out (CSV: the frame's missing-runs column counts those runs)."""
    note = left_out_note(analysis)
    if note:
        grids = [dataclasses.replace(g, footnotes=(*g.footnotes, note)) for g in grids]
    return render(grids, fmt)
