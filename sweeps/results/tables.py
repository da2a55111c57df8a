"""The tables of tables.md, as polars DataFrames and rendered as Markdown, LaTeX (booktabs) or CSV.

- Best-configuration tables: one row per method, its best configuration by the task's
  score, "mean ± std" over seeds.
- Sensitivity tables: rows gamma0 (with lambda0 = exp(gamma0)), columns theta_lambda, at
  one alpha; one table per (task settings, optimizer, alpha) present.

Std is across seeds with ddof=1 (the CSV adds the standard error and the seed count).
Diverged configurations are never selected; missing and diverged cells are shown as such, and
every method of the recorded sweep has a row in the best table ("missing" when none of its
runs finished). Only the (config, seed) pairs of the store's current sweep are counted.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

import polars as pl

from sweeps.results import queries
from sweeps.spec import LOCATION_SETTINGS
from tasks import get_task

FORMATS = ("md", "latex", "csv", "html")
KINDS = ("best", "sensitivity")


def _missing_by(results_dir: str | Path, keys: list[str], name: str) -> pl.DataFrame | None:
    missing = queries.missing_runs(results_dir)
    if missing.height == 0:
        return None
    return missing.group_by(keys).agg(pl.len().alias(name))


def best_table(results_dir: str | Path) -> pl.DataFrame:
    """One row per (task, settings, optimizer) of the recorded sweep: the best configuration and its statistics.

    `status` is "ok", "all diverged" (no configuration usable) or "missing" (no run of the
    method finished: a row of nulls, so a method never silently vanishes from the table).
    """
    frame = queries.scores(results_dir)
    variant = queries.variant_columns(frame)
    best = queries.best_configs(queries.cells(frame)).collect()
    best = best.with_columns(status=pl.when(pl.col("all_diverged")).then(pl.lit("all diverged")).otherwise(pl.lit("ok")))
    sweep = queries.recorded_sweep(results_dir)
    if sweep is not None:  # every method of the sweep gets a row, "missing" where no run finished
        methods = (
            queries.expected_runs(sweep)
            .group_by([*variant, "optimizer"])
            .agg(configs=pl.col("config_id").n_unique())
        )
        absent = methods.join(best.select(*variant, "optimizer"), on=[*variant, "optimizer"], how="anti", nulls_equal=True)
        if absent.height:
            absent = absent.with_columns(
                status=pl.lit("missing"), all_diverged=pl.lit(False), seeds=pl.lit(0, pl.UInt32),
                diverged_configs=pl.lit(0, pl.UInt32),
            )
            best = pl.concat([best, absent], how="diagonal_relaxed")
    missing = _missing_by(results_dir, [*variant, "optimizer"], "missing_runs")
    if missing is None:
        best = best.with_columns(missing_runs=pl.lit(0, pl.UInt32))
    else:
        best = best.join(missing, on=[*variant, "optimizer"], how="left", nulls_equal=True)
        best = best.with_columns(pl.col("missing_runs").fill_null(0))
    winners = best.filter(pl.col("status") == "ok").with_columns(_key=queries.ranking_key()).sort("_key")
    best_method = winners.group_by(variant, maintain_order=True).agg(pl.col("optimizer").first().alias("_best"))
    return (
        best.join(best_method, on=variant, how="left", nulls_equal=True)
        .with_columns(best_method=(pl.col("optimizer") == pl.col("_best")).fill_null(False))
        .drop("_best")
        .sort([*variant, "optimizer"])
    )


@dataclass(frozen=True)
class SensitivityTable:
    """One gamma0 x theta_lambda grid at a fixed alpha; `cells` has one row per grid cell."""

    variant: dict  # task and its settings
    optimizer: str
    alpha: float
    cells: pl.DataFrame  # gamma0, lambda0, theta_lambda, mean, std, sem, seeds, diverged_seeds, status, best


def sensitivity_tables(results_dir: str | Path) -> list[SensitivityTable]:
    """Every (task settings, optimizer with gamma0 and theta_lambda, alpha) grid in the results.

    The grid's axes come from the recorded sweep (so cells with no runs show as
    missing) and from the results themselves.
    """
    frame = queries.scores(results_dir)
    variant = queries.variant_columns(frame)
    keys = [*variant, "optimizer", "config_id", "alpha", "gamma0", "theta_lambda"]
    observed = queries.cells(frame).select(*keys, "mean", "std", "sem", "seeds", "diverged_seeds").collect()
    sweep = queries.recorded_sweep(results_dir)
    if sweep is not None:
        expected = queries.expected_runs(sweep).select(keys).unique()
        observed = expected.join(observed, on=keys, how="full", coalesce=True, nulls_equal=True)
    grid = observed.filter(pl.col("gamma0").is_not_null() & pl.col("theta_lambda").is_not_null()).sort(
        [*variant, "optimizer", "alpha"], descending=[*([False] * len(variant)), False, True], nulls_last=True
    )
    tables = []
    for group_key, group in grid.group_by([*variant, "optimizer", "alpha"], maintain_order=True):
        axes = group.select("gamma0").unique().join(group.select("theta_lambda").unique(), how="cross")
        full = axes.join(group, on=["gamma0", "theta_lambda"], how="left")
        full = full.with_columns(
            lambda0=pl.col("gamma0").exp(),
            status=pl.when(pl.col("seeds").fill_null(0) == 0)
            .then(pl.lit("missing"))
            .when(pl.col("diverged_seeds") > 0)
            .then(pl.lit("diverged"))
            .otherwise(pl.lit("ok")),
            task=pl.lit(group_key[0]),
        )
        ranked = full.filter(pl.col("status") == "ok").with_columns(_key=queries.ranking_key()).sort("_key")
        best_pair = ranked.select("gamma0", "theta_lambda").head(1).rows()
        full = full.with_columns(
            best=pl.struct("gamma0", "theta_lambda").map_elements(
                lambda r, best_pair=best_pair: (r["gamma0"], r["theta_lambda"]) in best_pair, return_dtype=pl.Boolean
            )
        ).sort("gamma0", "theta_lambda", descending=[True, False])
        *variant_values, optimizer, alpha = group_key
        tables.append(
            SensitivityTable(
                dict(zip(variant, variant_values)),
                optimizer,
                alpha,
                full.select("gamma0", "lambda0", "theta_lambda", "mean", "std", "sem", "seeds", "diverged_seeds", "status", "best"),
            )
        )
    return tables


# ---------------------------------------------------------------- rendering


def _num(value: float | None, digits: int = 4) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def mean_std(mean: float | None, std: float | None) -> str:
    return _num(mean) if std is None or not math.isfinite(std) else f"{_num(mean)} ± {_num(std, 2)}"


def variant_title(variant: dict) -> str:
    """"task (setting=value, ...)", without where the data lives (not part of what was run)."""
    settings = ", ".join(f"{k}={v}" for k, v in variant.items() if k != "task" and k not in LOCATION_SETTINGS)
    return f"{variant['task']} ({settings})"


def _score_note(task_name: str) -> str:
    task = get_task(task_name)
    return (
        f"Score: {task.score}, {'higher' if task.higher_is_better else 'lower'} is better; "
        f"mean ± std over seeds (std with ddof={queries.DDOF})."
    )


@dataclass(frozen=True)
class _Grid:
    """A table ready to render: header, rows of cell strings, and which cells are marked best."""

    title: str
    note: str
    header: tuple[str, ...]
    rows: list[list[str]]
    marked: set[tuple[int, int]]  # (row, column) to emphasise


def _markdown(grid: _Grid) -> str:
    lines = [f"### {grid.title}", "", "| " + " | ".join(grid.header) + " |", "|" + "---|" * len(grid.header)]
    for i, row in enumerate(grid.rows):
        cells = [f"**{c}**" if (i, j) in grid.marked else c for j, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", grid.note, ""])


def _latex_escape(text: str) -> str:
    for old, new in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("±", r"$\pm$"), ("λ", r"$\lambda$")):
        text = text.replace(old, new)
    return text


def _latex(grid: _Grid) -> str:
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{_latex_escape(grid.title)}. {_latex_escape(grid.note)}}}",
        r"\begin{tabular}{" + "l" * len(grid.header) + "}",
        r"\toprule",
        " & ".join(_latex_escape(h) for h in grid.header) + r" \\",
        r"\midrule",
    ]
    for i, row in enumerate(grid.rows):
        cells = [rf"\textbf{{{_latex_escape(c)}}}" if (i, j) in grid.marked else _latex_escape(c) for j, c in enumerate(row)]
        lines.append(" & ".join(cells) + r" \\")
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def _html(grid: _Grid) -> str:
    """An HTML table (for the report), best cells in bold."""
    head = "".join(f"<th>{escape(h)}</th>" for h in grid.header)
    body = "".join(
        "<tr>"
        + "".join(f"<td><b>{escape(c)}</b></td>" if (i, j) in grid.marked else f"<td>{escape(c)}</td>" for j, c in enumerate(row))
        + "</tr>"
        for i, row in enumerate(grid.rows)
    )
    return (
        f"<h3>{escape(grid.title)}</h3><table class='results'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table><p class='note'>{escape(grid.note)}</p>"
    )


def _best_grids(table: pl.DataFrame, variant: list[str]) -> list[_Grid]:
    grids = []
    for _, group in table.group_by(variant, maintain_order=True):
        rows, marked = [], set()
        for i, r in enumerate(group.to_dicts()):
            score = r["status"] if r["status"] != "ok" else mean_std(r["mean"], r["std"])
            chosen = ", ".join(f"{n}={r[n]:g}" for n in queries.HYPERPARAMETER_COLUMNS if r.get(n) is not None)
            rows.append([r["optimizer"], score, str(r["seeds"]), chosen, f"{r['diverged_configs']}/{r['configs']}", str(r["missing_runs"])])
            if r["best_method"]:
                marked |= {(i, 0), (i, 1)}
        first = group.row(0, named=True)
        grids.append(
            _Grid(
                variant_title({k: first[k] for k in variant}),
                _score_note(first["task"]) + " Best method in bold.",
                ("method", "score", "seeds", "selected hyperparameters", "diverged configs", "missing runs"),
                rows,
                marked,
            )
        )
    return grids


def _sensitivity_grid(table: SensitivityTable) -> _Grid:
    thetas = sorted(table.cells["theta_lambda"].unique())
    rows, marked = [], set()
    for i, (gamma0, cells) in enumerate(table.cells.group_by("gamma0", maintain_order=True)):
        by_theta = {r["theta_lambda"]: r for r in cells.to_dicts()}
        row = [f"{gamma0[0]:g} (λ0={math.exp(gamma0[0]):.3g})"]
        for j, theta in enumerate(thetas, start=1):
            r = by_theta[theta]
            if r["status"] == "missing":
                row.append("missing")
            elif r["status"] == "diverged":
                row.append(f"diverged ({r['diverged_seeds']}/{r['seeds']})")
            else:
                row.append(mean_std(r["mean"], r["std"]))
            if r["best"]:
                marked.add((i, j))
        rows.append(row)
    title = f"{variant_title(table.variant)}: {table.optimizer}, alpha={table.alpha:g}"
    note = _score_note(table.variant["task"]) + " Rows gamma0 (lambda0 = exp(gamma0)), columns theta_lambda; theta_lambda = 0 is fixed decay. Best cell in bold."
    return _Grid(title, note, ("gamma0 \\ theta_lambda", *(f"{t:g}" for t in thetas)), rows, marked)


def _csv(frame: pl.DataFrame) -> str:
    buffer = io.StringIO()
    frame.write_csv(buffer)
    return buffer.getvalue()


def table_text(results_dir: str | Path, kind: str = "best", fmt: str = "md") -> str:
    """A results directory's best or sensitivity tables, rendered."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if kind not in KINDS:
        raise ValueError(f"unknown table kind {kind!r}; choose one of {', '.join(KINDS)}")
    if kind == "best":
        table = best_table(results_dir)
        if fmt == "csv":
            return _csv(table)
        grids = _best_grids(table, queries.variant_columns(queries.scores(results_dir)))
    else:
        tables = sensitivity_tables(results_dir)
        if not tables:
            return "No sensitivity grids: no optimizer with both gamma0 and theta_lambda in these results.\n"
        if fmt == "csv":
            return _csv(
                pl.concat(
                    [
                        t.cells.with_columns(
                            *(pl.lit(v).alias(k) for k, v in t.variant.items()),
                            optimizer=pl.lit(t.optimizer),
                            alpha=pl.lit(t.alpha),
                        )
                        for t in tables
                    ],
                    how="diagonal_relaxed",
                )
            )
        grids = [_sensitivity_grid(t) for t in tables]
    render = {"md": _markdown, "latex": _latex, "html": _html}[fmt]
    return "\n".join(render(g) for g in grids)
