"""Best-configuration tables (tables.md) rendered as Markdown, LaTeX (booktabs) or CSV.

Cells are "mean +- std" over seeds (std with ddof=1; the CSV also has the standard
error and the seed count). Diverged configurations are never selected; a method whose
configurations all diverged, or whose runs are missing, says so.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import polars as pl

from sweeps import results
from tasks import get_task

FORMATS = ("md", "latex", "csv")


def best_table(results_dir: str | Path) -> pl.DataFrame:
    """One row per (task, settings, optimizer): the best configuration and its statistics."""
    frame = results.scores(results_dir)
    best = results.best_configs(results.cells(frame)).collect()
    missing = results.missing_runs(results_dir).group_by("task", "optimizer").agg(missing_runs=pl.len())
    best = best.join(missing, on=["task", "optimizer"], how="left").with_columns(pl.col("missing_runs").fill_null(0))
    variant = [c for c in results.variant_columns(frame)]
    winners = best.filter(~pl.col("all_diverged")).with_columns(
        key=pl.when(pl.col("task").map_elements(lambda t: get_task(t).higher_is_better, return_dtype=pl.Boolean))
        .then(-pl.col("mean"))
        .otherwise(pl.col("mean"))
    )
    best_method = winners.sort("key").group_by(variant, maintain_order=True).agg(pl.col("optimizer").first().alias("_best"))
    return (
        best.join(best_method, on=variant, how="left", nulls_equal=True)
        .with_columns(best_method=pl.col("optimizer") == pl.col("_best"))
        .drop("_best")
        .sort([*variant, "optimizer"])
    )


def _hyperparameters(row: dict) -> str:
    return ", ".join(f"{n}={row[n]:g}" for n in results.HYPERPARAMETER_COLUMNS if row.get(n) is not None)


def _score(row: dict) -> str:
    if row["all_diverged"]:
        return "all diverged"
    std = row["std"]
    return f"{row['mean']:.4g} ± {std:.2g}" if std is not None and math.isfinite(std) else f"{row['mean']:.4g}"


def _variant_title(row: dict, variant: list[str]) -> str:
    settings = ", ".join(f"{c}={row[c]}" for c in variant if c != "task")
    return f"{row['task']} ({settings})"


def render(table: pl.DataFrame, fmt: str, variant: list[str]) -> str:
    """Render `best_table` output; one sub-table per (task, settings)."""
    if fmt == "csv":
        buffer = io.StringIO()
        table.write_csv(buffer)
        return buffer.getvalue()
    out = []
    for _, group in table.group_by(variant, maintain_order=True):
        rows = group.to_dicts()
        task = get_task(rows[0]["task"])
        title = _variant_title(rows[0], variant)
        note = (
            f"Score: {task.score}, {'higher' if task.higher_is_better else 'lower'} is better; "
            f"mean ± std over seeds (std with ddof={results.DDOF}). Best method marked."
        )
        body = [
            (
                r["optimizer"],
                _score(r),
                str(r["seeds"]),
                _hyperparameters(r),
                f"{r['diverged_configs']}/{r['configs']}",
                str(r["missing_runs"]),
                r["best_method"],
            )
            for r in rows
        ]
        header = ("method", "score", "seeds", "selected hyperparameters", "diverged configs", "missing runs")
        out.append(_markdown(title, note, header, body) if fmt == "md" else _latex(title, note, header, body))
    return "\n".join(out)


def _markdown(title, note, header, body) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for *cells, best in body:
        if best:
            cells[0], cells[1] = f"**{cells[0]}**", f"**{cells[1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", note, ""])


def _latex_escape(text: str) -> str:
    return text.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&").replace("±", r"$\pm$")


def _latex(title, note, header, body) -> str:
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{_latex_escape(title)}. {_latex_escape(note)}}}",
        r"\begin{tabular}{" + "l" * len(header) + "}",
        r"\toprule",
        " & ".join(_latex_escape(h) for h in header) + r" \\",
        r"\midrule",
    ]
    for *cells, best in body:
        cells = [_latex_escape(c) for c in cells]
        if best:
            cells[0], cells[1] = rf"\textbf{{{cells[0]}}}", rf"\textbf{{{cells[1]}}}"
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def best_table_text(results_dir: str | Path, fmt: str = "md") -> str:
    """The best-configuration table of a results directory, rendered."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return render(best_table(results_dir), fmt, results.variant_columns(results.scores(results_dir)))
