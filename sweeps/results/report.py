"""The figures of tables.md as one self-contained HTML report (plotly.js embedded, works offline).

Figures, per task settings:
- learning curves of each method's best configuration: mean over seeds with a ±std band;
- decay-rate evolution per parameter group (mean exp(gamma)) of each FADE-family best config;
- per-group MSE over time, FADE vs its theta_lambda = 0 counterpart (tasks that log group MSEs);
- a heatmap per sensitivity table;
then the best and sensitivity tables themselves.

Curves are read lazily (only the plotted configurations' rows and columns) and averaged
into at most MAX_POINTS points per line, so a store of tens of millions of curve rows
reports in seconds.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

from sweeps.results import queries, tables
from sweeps.results.location import StoreLocation, as_location
from tasks import get_task

MAX_POINTS = 400
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def summarise_curves(results_dir: str | Path, config_ids: list[str], metrics: list[str]) -> pl.DataFrame:
    """Mean and std over seeds of `metrics` per (config, step bucket), at most MAX_POINTS buckets per config.

    Each seed's bins are first averaged within the bucket; the band is the std across seeds
    (ddof=1) of those averages.
    """
    frame = queries.curves(results_dir).filter(pl.col("config_id").is_in(config_ids)).select("config_id", "seed", "step", *metrics)
    max_step = frame.select(pl.col("step").max()).collect().item()
    n_bins = frame.filter(pl.col("config_id") == config_ids[0]).select(pl.col("step").n_unique()).collect().item()
    width = max(1, math.ceil(n_bins / MAX_POINTS)) * math.ceil(max_step / max(n_bins, 1))
    per_seed = frame.group_by("config_id", "seed", bucket=(pl.col("step") - 1) // width).agg(
        pl.col("step").max(), *(pl.col(m).mean() for m in metrics)
    )
    return (
        per_seed.group_by("config_id", "bucket")
        .agg(
            pl.col("step").max(),
            *(pl.col(m).mean().alias(f"{m}_mean") for m in metrics),
            *(pl.col(m).std(ddof=queries.DDOF).fill_null(0).alias(f"{m}_std") for m in metrics),
        )
        .sort("config_id", "step")
        .collect()
    )


def _band(fig: go.Figure, x, mean, std, name: str, color: str, dash: str | None = None) -> None:
    upper = [m + s for m, s in zip(mean, std)]
    lower = [m - s for m, s in zip(mean, std)]
    fig.add_trace(go.Scatter(x=list(x) + list(x)[::-1], y=upper + lower[::-1], fill="toself", fillcolor=color,
                             opacity=0.2, line={"width": 0}, hoverinfo="skip", showlegend=False, legendgroup=name))
    fig.add_trace(go.Scatter(x=x, y=mean, name=name, line={"color": color, "dash": dash}, legendgroup=name))


def _figures_for_variant(results_dir, best: pl.DataFrame, variant: dict, columns: list[str]) -> list[tuple[str, go.Figure]]:
    title = tables.variant_title(variant)
    usable = best.filter(pl.col("status") == "ok")  # not all diverged, not missing
    if usable.height == 0:
        return []
    metric = get_task(variant["task"]).curve_metric
    decay_cols = [c for c in columns if c.startswith("decay_")]
    group_mse = [c for c in columns if c.startswith("mse_")]
    ids = usable["config_id"].to_list()
    summary = summarise_curves(results_dir, ids, [metric, *decay_cols])
    figures = []

    curves = go.Figure()
    for i, row in enumerate(usable.iter_rows(named=True)):
        s = summary.filter(pl.col("config_id") == row["config_id"])
        _band(curves, s["step"].to_list(), s[f"{metric}_mean"].to_list(), s[f"{metric}_std"].to_list(),
              row["optimizer"], _COLORS[i % len(_COLORS)])
    curves.update_layout(title=f"Learning curves (best configuration per method, mean ± std over seeds): {title}",
                         xaxis_title="step", yaxis_title=metric, yaxis_type="log" if metric.startswith("mse") else None)
    figures.append(("curves", curves))

    decay = go.Figure()
    for i, row in enumerate(usable.iter_rows(named=True)):
        s = summary.filter(pl.col("config_id") == row["config_id"])
        for j, col in enumerate(decay_cols):
            if s[f"{col}_mean"].null_count() == s.height:
                continue
            _band(decay, s["step"].to_list(), s[f"{col}_mean"].to_list(), s[f"{col}_std"].to_list(),
                  f"{row['optimizer']}: {col.removeprefix('decay_')}", _COLORS[i % len(_COLORS)], ("solid", "dash", "dot")[j % 3])
    if decay.data:
        decay.update_layout(title=f"Decay-rate evolution, mean exp(gamma) per parameter group: {title}",
                            xaxis_title="step", yaxis_title="decay rate", yaxis_type="log")
        figures.append(("decay", decay))

    if group_mse:
        figures.extend(_group_mse_figures(results_dir, usable, group_mse, title))
    return figures


def _group_mse_figures(results_dir, usable: pl.DataFrame, group_mse: list[str], title: str) -> list[tuple[str, go.Figure]]:
    """FADE's best config vs the same config with theta_lambda = 0 (fixed decay), per output group."""
    cells = queries.cells(queries.scores(results_dir)).collect()
    figures = []
    for row in usable.filter(pl.col("theta_lambda").is_not_null() & (pl.col("theta_lambda") > 0)).iter_rows(named=True):
        same = [n for n in queries.HYPERPARAMETER_COLUMNS if n != "theta_lambda" and row.get(n) is not None]
        fixed = cells.filter(
            (pl.col("optimizer") == row["optimizer"]) & (pl.col("theta_lambda") == 0) & (pl.col("task") == row["task"]),
            *(pl.col(n) == row[n] for n in same),
        )
        if fixed.height == 0:
            continue
        ids = [row["config_id"], fixed["config_id"][0]]
        summary = summarise_curves(results_dir, ids, group_mse)
        fig = go.Figure()
        for config_id, label, dash in ((ids[0], "FADE", "solid"), (ids[1], "theta_lambda = 0", "dash")):
            s = summary.filter(pl.col("config_id") == config_id)
            for j, col in enumerate(group_mse):
                _band(fig, s["step"].to_list(), s[f"{col}_mean"].to_list(), s[f"{col}_std"].to_list(),
                      f"{label}: {col.removeprefix('mse_')}", _COLORS[j % len(_COLORS)], dash)
        fig.update_layout(title=f"Per-group MSE, {row['optimizer']} vs fixed decay: {title}", xaxis_title="step",
                          yaxis_title="MSE", yaxis_type="log")
        figures.append(("group-mse", fig))
    return figures


def _heatmap(table: tables.SensitivityTable) -> go.Figure:
    cells = table.cells
    gammas = sorted(cells["gamma0"].unique(), reverse=True)
    thetas = sorted(cells["theta_lambda"].unique())
    lookup = {(r["gamma0"], r["theta_lambda"]): r for r in cells.iter_rows(named=True)}
    z = [[lookup[(g, t)]["mean"] if lookup[(g, t)]["status"] == "ok" else None for t in thetas] for g in gammas]
    text = [[tables.mean_std(lookup[(g, t)]["mean"], lookup[(g, t)]["std"]) if lookup[(g, t)]["status"] == "ok"
             else lookup[(g, t)]["status"] for t in thetas] for g in gammas]
    fig = go.Figure(go.Heatmap(z=z, x=[f"{t:g}" for t in thetas], y=[f"{g:g} (λ0={math.exp(g):.3g})" for g in gammas],
                               text=text, texttemplate="%{text}", colorscale="Viridis",
                               reversescale=not get_task(table.variant["task"]).higher_is_better))
    fig.update_layout(title=f"Sensitivity: {tables.variant_title(table.variant)}, {table.optimizer}, alpha={table.alpha:g}",
                      xaxis_title="theta_lambda", yaxis_title="gamma0", xaxis_type="category", yaxis_type="category")
    return fig


def build_figures(results_dir: str | Path) -> list[tuple[str, go.Figure]]:
    """Every figure of the report, as (kind, figure)."""
    frame = queries.scores(results_dir)
    variant_cols = queries.variant_columns(frame)
    best = tables.best_table(results_dir)
    curve_columns = [c for c in queries.curves(results_dir).collect_schema().names()
                     if c not in ("step",) and c not in frame.collect_schema().names()]
    figures = []
    for key, group in best.group_by(variant_cols, maintain_order=True):
        figures.extend(_figures_for_variant(results_dir, group, dict(zip(variant_cols, key)), curve_columns))
    figures.extend(("heatmap", _heatmap(t)) for t in tables.sensitivity_tables(results_dir))
    return figures


def write_report(results_dir: str | Path | StoreLocation, out: str | Path | StoreLocation,
                 images: str | Path | None = None) -> list[tuple[str, go.Figure]]:
    """Write the self-contained HTML report (and PNGs into `images` if given); returns the figures.

    `results_dir` and `out` may be local paths or object-store URIs / locations."""
    location = as_location(results_dir)
    figures = build_figures(results_dir)
    if images is not None:
        export_images(figures, images)
    parts = [
        f"<div class='figure' id='figure-{i}' data-kind='{kind}'>"
        + pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%", default_height="520px")
        + "</div>"
        for i, (kind, fig) in enumerate(figures)
    ]
    html = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>FADE sweep report: {escape(location.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}} table.results{{border-collapse:collapse;margin:1em 0}}
table.results td,table.results th{{border:1px solid #ccc;padding:4px 8px;text-align:left}} .note{{color:#555;font-size:90%}}</style>
<script type="text/javascript">{get_plotlyjs()}</script></head>
<body><h1>FADE sweep report: {escape(location.name)}</h1>
<p>{escape(str(location.local_path.resolve()) if location.local else location.display)}</p>
<h2>Figures</h2>{''.join(parts)}
<h2>Best configurations</h2>{tables.table_text(results_dir, "best", "html")}
<h2>Sensitivity</h2>{tables.table_text(results_dir, "sensitivity", "html")}
</body></html>"""
    target = as_location(out)
    target.parent.write_bytes(target.name, html.encode("utf-8"))
    return figures


def export_images(figures: list[tuple[str, go.Figure]], directory: str | Path) -> None:
    """Static PNGs of every figure; needs the optional `kaleido` package."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise RuntimeError("static image export needs kaleido: pip install 'fade-sweep[images]'") from None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for i, (kind, fig) in enumerate(figures):
        fig.write_image(directory / f"{i:02d}-{kind}.png", width=1200, height=600)
