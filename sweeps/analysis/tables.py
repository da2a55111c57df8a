"""The tables of tables.md rendered as Markdown, LaTeX (booktabs), HTML or CSV (their frames: summaries.py).

- Best-configuration tables (`best`): one row per method, its best configuration by the
  task's score and the chosen statistic (`stat`: mean, median or iqm), "mean ± std" over
  seeds (or the median / IQM) with the 95% bootstrap CI.
- Sensitivity tables (`sensitivity`): rows gamma0 (with lambda0 = exp(gamma0)), columns
  theta_lambda, at one alpha; one table per (task settings, optimizer, alpha) present. The
  best cell is marked, and so is every cell whose CI overlaps the best cell's ("tied");
  each table states the fraction of its non-diverged cells within 5% of the best.
- Paired comparisons (`compare`, see compare.py) and hyperparameter importance
  (`importance`, see importance.py).

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

from sweeps.analysis import TABLES, queries, stats
from sweeps.analysis.importance import importance_table
from sweeps.analysis.queries import Analysis
from sweeps.analysis.summaries import DIVERGED_RULE, SensitivityTable, best_table, compare_table, sensitivity_frame, sensitivity_tables
from sweeps.spec import LOCATION_SETTINGS
from tasks import get_task

FORMATS = ("md", "latex", "csv", "html")


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


def _score_note(task_name: str, stat: str = "mean") -> str:
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


def _best_grids(table: pl.DataFrame, variant: list[str], stat: str, race: str = "") -> list[Grid]:
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
                _score_note(first["task"], stat) + " Best method in bold. " + DIVERGED_RULE + race,
                ("method", "score", "seeds", f"95% CI ({STAT_NAMES[stat]})", "selected hyperparameters",
                 "diverged configs", "missing runs"),
                rows,
                marked,
                footnotes=tuple(footnotes),
            )
        )
    return grids


def _sensitivity_grid(table: SensitivityTable, race: str = "") -> Grid:
    thetas = sorted(table.cells["theta_lambda"].unique())
    rows, marked, tied, footnotes = [], set(), set(), []
    for i, (gamma0, cells) in enumerate(table.cells.group_by("gamma0", maintain_order=True)):
        by_theta = {r["theta_lambda"]: r for r in cells.to_dicts()}
        row = [f"{gamma0[0]:g} (λ0={math.exp(gamma0[0]):.3g})"]
        for j, theta in enumerate(thetas, start=1):
            r = by_theta[theta]
            if r["status"] == "missing":
                text = "missing"
            elif r["status"] == "diverged":
                text = f"diverged ({r['diverged_seeds']}/{r['seeds']})"
            elif r.get("race_status") == "eliminated":  # its own, fewer, seeds: said in the cell
                text = f"{cell_text(r, table.stat)} (out after round {r['eliminated_round']}, {r['seeds']} seeds)"
            else:
                text = cell_text(r, table.stat)
                note = outlier_footnote(f"gamma0={gamma0[0]:g}, theta_lambda={theta:g}", r["outlier_seeds"])
                if note:
                    text += f" {OUTLIER_MARK}"
                    footnotes.append(note)
            if r["best"]:
                marked.add((i, j))
            elif r["tied"]:
                text += f" {TIED_MARK}"
                tied.add((i, j))
            row.append(text)
        rows.append(row)
    title = f"{variant_title(table.variant)}: {table.optimizer}, {table.at}"
    robust = (f"Robustness: {table.within} of {table.usable} non-diverged cells "
              f"({100 * table.robust:.0f}%) within 5% of the best." if table.usable else "Robustness: no usable cell.")
    note = (_score_note(table.variant["task"], table.stat)
            + " Rows gamma0 (lambda0 = exp(gamma0)), columns theta_lambda; theta_lambda = 0 is fixed decay. Best cell in bold; "
            + f"{TIED_MARK} (italic): tied with the best (95% CIs overlap). " + robust
            + (race and f"{race} An eliminated cell shows its statistic over its own seeds and is never best or tied."))
    if footnotes:
        footnotes.insert(0, outlier_note())
    return Grid(title, note, ("gamma0 \\ theta_lambda", *(f"{t:g}" for t in thetas)), rows, marked, tied, tuple(footnotes))


def _compare_grids(table: pl.DataFrame, variant: list[str], stat: str) -> list[Grid]:
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


def _importance_grids(table: pl.DataFrame, variant: list[str], stat: str, raced: str = "") -> list[Grid]:
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


def _csv(frame: pl.DataFrame) -> str:
    buffer = io.StringIO()
    frame.write_csv(buffer)
    return buffer.getvalue()


def table_text(analysis: Analysis, kind: str = "best", fmt: str = "md", reference: str | None = None) -> str:
    """The best, sensitivity, compare or importance tables, rendered.

    The analysis' statistic (mean, median, iqm) is shown and selects the best configurations;
    `reference` (compare only) is the method the others are compared with (default: the best method).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if kind not in TABLES:
        raise ValueError(f"unknown table kind {kind!r}; choose one of {', '.join(TABLES)}")
    variant, stat = analysis.variant, analysis.stat
    race = f" {analysis.race.sentence()}" if analysis.race is not None else ""
    if kind == "best":
        table = best_table(analysis)
        if fmt == "csv":
            return _csv(table)
        grids = _best_grids(table, variant, stat, race)
    elif kind == "compare":
        table = compare_table(analysis, reference)
        if fmt == "csv":
            return _csv(table)
        grids = _compare_grids(table, variant, stat)
    elif kind == "importance":
        table = importance_table(analysis)
        if table.height == 0:
            return "No importance: no method with a hyperparameter that takes more than one value.\n"
        if fmt == "csv":
            return _csv(table)
        raced = (" Raced: every cell's statistic over the seeds every configuration holds (round 1's), eliminated "
                 "or not."
                 if analysis.race is not None else "")
        grids = _importance_grids(table, variant, stat, raced)
    else:
        tables = sensitivity_tables(analysis)
        if not tables:
            return "No sensitivity grids: no optimizer with both gamma0 and theta_lambda in these results.\n"
        if fmt == "csv":
            return _csv(sensitivity_frame(tables))
        grids = [_sensitivity_grid(t, race) for t in tables]
    note = left_out_note(analysis)
    if note:  # on every table it affects (CSV: its missing-runs column counts the runs)
        grids = [dataclasses.replace(g, footnotes=(*g.footnotes, note)) for g in grids]
    return render(grids, fmt)


def render(grids: list[Grid], fmt: str) -> str:
    """Grids as Markdown, LaTeX (booktabs) or HTML (for CSV, write the frame itself: `csv_text`)."""
    if fmt not in ("md", "latex", "html"):
        raise ValueError(f"unknown table format {fmt!r}; choose one of md, latex, html (or csv)")
    return "\n".join({"md": _markdown, "latex": _latex, "html": _html}[fmt](g) for g in grids)


csv_text = _csv
