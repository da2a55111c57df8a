"""Figures over a method's whole grid: parallel coordinates and sensitivity heatmaps.

Parallel coordinates are drawn as plain SVG line traces, not plotly's WebGL `Parcoords`:
browsers keep only a handful of live WebGL contexts (Chromium 16) and a report of one sweep
easily holds more plots than that, so WebGL figures went blank. Lines are grouped into a few
colour bands (one trace each), so a grid of thousands of cells is still a handful of traces.
Colours follow `style.colour_range` (robust, stated on the colorbar).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.colors import sample_colorscale

from sweeps.analysis import style, tables
from sweeps.analysis.summaries import SensitivityTable
from tasks import get_task

COLOUR_BANDS = 16  # parallel-coordinate lines are drawn in this many colour steps


def _colorbar(variant: dict, stat: str, scale: style.ColourRange) -> dict:
    title = f"{tables.STAT_NAMES[stat]} {tables.direction(variant['task'])}".replace(", ", ",<br>")
    if scale.note():
        title += "<br><sub>" + scale.note().replace("; ", "<br>") + "</sub>"
    return {"title": {"text": title}, **scale.ticks()}


def _axis(values: np.ndarray) -> tuple[np.ndarray, list[float], list[str], bool]:
    """One parallel axis: positions in [0, 1], tick positions and labels, whether log10."""
    finite = values[np.isfinite(values)]
    log = finite.size > 1 and bool((finite > 0).all()) and finite.max() / finite.min() >= 10
    shown = np.log10(values) if log else values
    low, high = (float(np.nanmin(shown)), float(np.nanmax(shown))) if finite.size else (0.0, 1.0)
    span = high - low or 1.0
    levels = np.unique(finite)
    if levels.size <= 12:
        ticks, labels = list(levels), [f"{v:g}" for v in levels]
    elif log:
        found = style.log_ticks(float(levels.min()), float(levels.max()))
        ticks, labels = found["tickvals"], found["ticktext"]
    else:
        ticks = list(np.linspace(levels.min(), levels.max(), 5))
        labels = [f"{v:.3g}" for v in ticks]

    def position(v):
        return ((np.log10(v) if log else v) - low) / span

    return position(values), [float(position(t)) for t in ticks], labels, log


def _score_axis(scale: style.ColourRange) -> tuple[np.ndarray, list[float], list[str], bool]:
    """The score's parallel axis on the colour scale's range: a blown-up cell sits at the end,
    as in the colours, instead of squeezing every other line together."""
    span = scale.cmax - scale.cmin
    position = np.clip((scale.values - scale.cmin) / span, 0, 1)
    if scale.log:
        ticks = scale.ticks()
        shown = [(t, label) for t, label in zip(ticks["tickvals"], ticks["ticktext"]) if scale.cmin <= t <= scale.cmax]
    else:
        shown = [(t, f"{t:.3g}") for t in np.linspace(scale.cmin, scale.cmax, 5)]
    return position, [(t - scale.cmin) / span for t, _ in shown], [label for _, label in shown], scale.log


def parallel(cells: pl.DataFrame, hyper: list[str], method: str, variant: dict, stat: str) -> go.Figure:
    """Every configuration of one method as a line across its hyperparameters and its score."""
    ok = cells.filter((pl.col("diverged_seeds") == 0) & pl.col("stat_value").is_finite())
    score = ok["stat_value"].to_numpy()
    higher = get_task(variant["task"]).higher_is_better
    scale = style.colour_range(score, higher)
    columns = [ok[h].to_numpy().astype(float) for h in hyper] + [score]
    names = hyper + [f"{tables.STAT_NAMES[stat]} {tables.score_name(variant['task'])}"
                     + (" (clipped as the colours)" if scale.clipped else "")]
    axes = [_axis(c) for c in columns[:-1]] + [_score_axis(scale)]
    positions = np.stack([a[0] for a in axes], axis=1)  # (cells, axes)
    fraction = np.clip((scale.values - scale.cmin) / (scale.cmax - scale.cmin), 0, 1)
    better = fraction if higher else 1 - fraction  # 1 = best end of the scale
    band = np.minimum((better * COLOUR_BANDS).astype(int), COLOUR_BANDS - 1)
    colours = sample_colorscale(style.BETTER_SCALE, [(b + 0.5) / COLOUR_BANDS for b in range(COLOUR_BANDS)])
    fig = go.Figure()
    x = list(range(len(names)))
    for b in range(COLOUR_BANDS):  # worst first, so the best lines are drawn on top
        rows = np.flatnonzero(band == b)
        if rows.size == 0:
            continue
        xs = [v for _ in rows for v in (*x, None)]
        ys = [v for r in rows for v in (*positions[r], None)]
        text = [v for r in rows for v in (*(f"{n}={c[r]:g}" for n, c in zip(names, columns)), None)]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": colours[b], "width": 1.5}, opacity=0.8,
                                 hovertext=text, hoverinfo="text", showlegend=False))
    fig.add_trace(go.Scatter(  # the colorbar (an invisible marker carries the scale)
        x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
        marker={"color": [scale.cmin], "cmin": scale.cmin, "cmax": scale.cmax, "colorscale": style.BETTER_SCALE,
                "reversescale": not higher, "showscale": True, "colorbar": _colorbar(variant, stat, scale)},
    ))
    for i, (name, (_, ticks, labels, log)) in enumerate(zip(names, axes)):
        fig.add_shape(type="line", x0=i, x1=i, y0=0, y1=1, line={"color": "#444", "width": 1})
        for t, label in zip(ticks, labels):
            fig.add_annotation(x=i, y=t, text=label, showarrow=False, xanchor="right", xshift=-4, font={"size": 10})
        fig.add_annotation(x=i, y=1.08, text=name + (" (log)" if log else ""), showarrow=False, font={"size": 12})
    dropped = cells.height - ok.height
    fig.update_layout(
        title=f"All configurations of {method}: {tables.variant_title(variant)}<br><sub>{ok.height} cells"
              + (f" ({dropped} diverged or without a score, not shown)" if dropped else "")
              + f", coloured by the {tables.STAT_NAMES[stat]}; hover a line for its values</sub>",
        xaxis={"visible": False, "range": [-0.6, len(names) - 0.1]},  # room for the last axis title
        yaxis={"visible": False, "range": [-0.05, 1.15]},
        plot_bgcolor="white", margin={"l": 60, "r": 40, "t": 110}, hovermode="closest",
    )
    return fig


def heatmap(table: SensitivityTable, unstable: frozenset[str] = frozenset()) -> go.Figure | None:
    """gamma0 x theta_lambda at one alpha; None for a grid with one row or one column (the slices
    plot shows that). Cells whose config id is in `unstable` are marked so."""
    cells = table.cells
    gammas = sorted(cells["gamma0"].unique(), reverse=True)
    thetas = sorted(cells["theta_lambda"].unique())
    if len(gammas) < 2 or len(thetas) < 2:
        return None
    lookup = {(r["gamma0"], r["theta_lambda"]): r for r in cells.iter_rows(named=True)}

    def text(r: dict) -> str:
        if r["status"] != "ok":
            return f"diverged ({r['diverged_seeds']}/{r['seeds']})" if r["status"] == "diverged" else r["status"]
        label = tables.cell_text(r, table.stat).replace(" [", "<br>[")
        label += (f" {tables.OUTLIER_MARK}" if r["outlier_seeds"] else "") + (f" {tables.TIED_MARK}" if r["tied"] else "")
        return label + ("<br>unstable" if r["config_id"] in unstable else "")

    raw = np.array([[lookup[(g, t)]["stat_value"] if lookup[(g, t)]["status"] == "ok" else np.nan for t in thetas]
                    for g in gammas], dtype=float)
    higher = get_task(table.variant["task"]).higher_is_better
    scale = style.colour_range(raw.ravel(), higher)
    z = np.where(np.isfinite(scale.values), scale.values, np.nan).reshape(raw.shape)
    fig = go.Figure(go.Heatmap(
        z=[[None if math.isnan(v) else v for v in row] for row in z], x=[f"{t:g}" for t in thetas],
        y=[f"{g:g} (λ0={math.exp(g):.3g})" for g in gammas], zmin=scale.cmin, zmax=scale.cmax,
        text=[[text(lookup[(g, t)]) for t in thetas] for g in gammas], texttemplate="%{text}", hoverinfo="text",
        colorscale=style.BETTER_SCALE, reversescale=not higher, colorbar=_colorbar(table.variant, table.stat, scale),
    ))
    outlines = [  # tied first, the best last (on top); set at once (add_shape re-validates every shape each call)
        {"type": "rect", "x0": j - 0.5, "x1": j + 0.5, "y0": i - 0.5, "y1": i + 0.5, "xref": "x", "yref": "y",
         "line": {"color": "#e41a1c" if r["best"] else "#000000", "width": 4 if r["best"] else 2,
                  "dash": "solid" if r["best"] else "dash"}}
        for i, g in enumerate(gammas) for j, t in enumerate(thetas)
        for r in (lookup[(g, t)],) if r["best"] or r["tied"]
    ]
    fig.update_layout(shapes=sorted(outlines, key=lambda shape: shape["line"]["color"] == "#e41a1c"))
    robust = f"{table.within}/{table.usable} non-diverged cells within 5% of the best" if table.usable else "no usable cell"
    fig.update_layout(
        title=f"Sensitivity: {tables.variant_title(table.variant)}, {table.optimizer}, {table.at}"
              f"<br><sub>{tables.STAT_NAMES[table.stat]} over seeds; best cell outlined red; {tables.TIED_MARK} dashed black: "
              f"tied with the best (95% CIs overlap); unstable: a finite blow-up (docs/tables.md, statistics); {robust}</sub>",
        xaxis_title="theta_lambda (0 = fixed decay)", yaxis_title="gamma0", xaxis_type="category", yaxis_type="category",
        margin={"t": 100},
    )
    return fig
