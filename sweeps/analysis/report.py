"""The figures of tables.md as one self-contained HTML report (plotly.js embedded, works offline).

Figures, per task settings:
- learning curves of each method's selected configuration (legend: the method and its
  hyperparameters): mean over seeds with a ±std band, and every seed's curve (legend group
  "<method>: each seed", hidden until clicked, or all at once with the "per-seed curves" button);
- decay-rate evolution per parameter group (mean exp(gamma)) of each FADE-family selected config;
- per-group MSE over time, FADE vs its theta_lambda = 0 counterpart (tasks that log group MSEs);
- parallel coordinates of every configuration of each method with two or more varied
  hyperparameters, coloured by the cell statistic;
- slice plots per method: the statistic against each hyperparameter, the others held at
  the selected configuration's values, with 95% bootstrap CI bars;
- hyperparameter importance: main-effect variance shares per method (bars);
then a heatmap per sensitivity table (colorbar titled with the direction, the best cell
outlined, tied cells marked ≈ with a dashed outline), and the best, compare, sensitivity
and importance tables. A table of contents links every section.

Curves are read lazily (only the plotted configurations' rows and columns) and averaged
into at most MAX_POINTS points per line, so a store of tens of millions of curve rows
reports in seconds.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from sweeps.analysis import queries, tables
from sweeps.analysis.importance import importance_table
from sweeps.analysis.queries import Analysis
from sweeps.store import Store, StoreLocation
from tasks import get_task

MAX_POINTS = 400
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_BETTER_SCALE = "Viridis"  # better cells bright (yellow), worse dark, whatever the direction


def _curve_data(curves: pl.LazyFrame, config_ids: list[str], metrics: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(summary, per_seed): per_seed has each seed's bucket means (config_id, seed, step,
    metrics); summary their mean and std over seeds per (config, bucket), as summarise_curves."""
    frame = curves.filter(pl.col("config_id").is_in(config_ids)).select("config_id", "seed", "step", *metrics)
    max_step = frame.select(pl.col("step").max()).collect().item()
    n_bins = frame.filter(pl.col("config_id") == config_ids[0]).select(pl.col("step").n_unique()).collect().item()
    width = max(1, math.ceil(n_bins / MAX_POINTS)) * math.ceil(max_step / max(n_bins, 1))
    per_seed = (
        frame.group_by("config_id", "seed", bucket=(pl.col("step") - 1) // width)
        .agg(pl.col("step").max(), *(pl.col(m).mean() for m in metrics))
        .sort("config_id", "seed", "step")
        .collect()
    )
    summary = (
        per_seed.group_by("config_id", "bucket")
        .agg(
            pl.col("step").max(),
            *(pl.col(m).mean().alias(f"{m}_mean") for m in metrics),
            *(pl.col(m).std(ddof=queries.DDOF).fill_null(0).alias(f"{m}_std") for m in metrics),
        )
        .sort("config_id", "step")
    )
    return summary, per_seed


def summarise_curves(curves: pl.LazyFrame, config_ids: list[str], metrics: list[str]) -> pl.DataFrame:
    """Mean and std over seeds of `metrics` per (config, step bucket), at most MAX_POINTS buckets per config.

    Each seed's bins are first averaged within the bucket; the band is the std across seeds
    (ddof=1) of those averages.
    """
    return _curve_data(curves, config_ids, metrics)[0]


def _band(fig: go.Figure, x, mean, std, name: str, color: str, dash: str | None = None) -> None:
    upper = [m + s for m, s in zip(mean, std)]
    lower = [m - s for m, s in zip(mean, std)]
    fig.add_trace(go.Scatter(x=list(x) + list(x)[::-1], y=upper + lower[::-1], fill="toself", fillcolor=color,
                             opacity=0.2, line={"width": 0}, hoverinfo="skip", showlegend=False, legendgroup=name))
    fig.add_trace(go.Scatter(x=x, y=mean, name=name, line={"color": color, "dash": dash}, legendgroup=name))


def _per_seed_trace(fig: go.Figure, seeds: pl.DataFrame, metric: str, name: str, color: str) -> None:
    """Every seed's curve as ONE trace (seeds separated by gaps), hidden until its legend entry is clicked."""
    xs, ys, labels = [], [], []
    for (seed,), s in seeds.group_by("seed", maintain_order=True):  # a handful of seeds
        xs += [*s["step"].to_list(), None]
        ys += [*s[metric].to_list(), None]
        labels += [seed] * s.height + [None]
    fig.add_trace(go.Scatter(x=xs, y=ys, name=f"{name}: each seed", legendgroup=f"seeds: {name}", visible="legendonly",
                             mode="lines", line={"color": color, "width": 0.8}, opacity=0.6, customdata=labels,
                             hovertemplate="seed %{customdata}: %{y:.4g} at step %{x}<extra>" + escape(name) + "</extra>"))


def _seed_toggle(fig: go.Figure) -> None:
    """Buttons that show or hide every per-seed trace at once."""
    seeds = [bool(t.legendgroup and t.legendgroup.startswith("seeds: ")) for t in fig.data]
    if not any(seeds):
        return
    fig.update_layout(updatemenus=[{
        "type": "buttons", "direction": "right", "x": 1.0, "xanchor": "right", "y": -0.1, "yanchor": "top",
        "buttons": [
            {"label": "means ± std", "method": "restyle", "args": [{"visible": [True if not s else "legendonly" for s in seeds]}]},
            {"label": "with per-seed curves", "method": "restyle", "args": [{"visible": [True] * len(seeds)}]},
        ],
    }])


def _label(row: dict) -> str:
    chosen = tables.selected_hyperparameters(row)
    return f"{row['optimizer']} ({chosen})" if chosen else row["optimizer"]


def _figures_for_variant(curves: pl.LazyFrame, best: pl.DataFrame, variant: dict, columns: list[str], stat: str,
                         cells: pl.DataFrame, importance: pl.DataFrame) -> list[tuple[str, go.Figure]]:
    title = tables.variant_title(variant)
    usable = best.filter(pl.col("status") == "ok")  # not all diverged, not missing
    if usable.height == 0:
        return []
    metric = get_task(variant["task"]).curve_metric
    better = "higher" if get_task(variant["task"]).higher_is_better else "lower"
    decay_cols = [c for c in columns if c.startswith("decay_")]
    group_mse = [c for c in columns if c.startswith("mse_")]
    ids = usable["config_id"].to_list()
    summary, per_seed = _curve_data(curves, ids, [metric, *decay_cols])
    figures = []

    learning = go.Figure()
    for i, row in enumerate(usable.iter_rows(named=True)):
        s = summary.filter(pl.col("config_id") == row["config_id"])
        color = _COLORS[i % len(_COLORS)]
        _band(learning, s["step"].to_list(), s[f"{metric}_mean"].to_list(), s[f"{metric}_std"].to_list(), _label(row), color)
        _per_seed_trace(learning, per_seed.filter(pl.col("config_id") == row["config_id"]), metric, row["optimizer"], color)
    learning.update_layout(title=f"Learning curves: {title}<br><sub>configuration selected by the {tables.STAT_NAMES[stat]} "
                               "per method; mean ± std over seeds; per-seed curves: click '... each seed' or the button</sub>",
                         xaxis_title="step", yaxis_title=f"{metric} ({better} is better)",
                         yaxis_type="log" if metric.startswith("mse") else None, legend={"font": {"size": 10}})
    _seed_toggle(learning)
    figures.append(("curves", learning))

    decay = go.Figure()
    for i, row in enumerate(usable.iter_rows(named=True)):
        s = summary.filter(pl.col("config_id") == row["config_id"])
        for j, col in enumerate(decay_cols):
            if s[f"{col}_mean"].null_count() == s.height:
                continue
            _band(decay, s["step"].to_list(), s[f"{col}_mean"].to_list(), s[f"{col}_std"].to_list(),
                  f"{_label(row)}: {col.removeprefix('decay_')}", _COLORS[i % len(_COLORS)], ("solid", "dash", "dot")[j % 3])
    if decay.data:
        decay.update_layout(title=f"Decay-rate evolution: {title}<br><sub>mean exp(gamma) per parameter group, mean ± std over seeds</sub>",
                            xaxis_title="step", yaxis_title="decay rate", yaxis_type="log", legend={"font": {"size": 10}})
        figures.append(("decay", decay))

    if group_mse:
        figures.extend(_group_mse_figures(curves, usable, group_mse, title, cells))
    method_cells = cells.filter(*(pl.col(k).eq_missing(v) for k, v in variant.items()))
    for row in usable.iter_rows(named=True):
        mine = method_cells.filter(pl.col("optimizer") == row["optimizer"])
        hyper = _varied(mine)
        if len(hyper) >= 2:
            figures.append(("parallel", _parallel(mine, hyper, row, variant, stat)))
        if hyper:
            figures.append(("slices", _slices(mine, hyper, row, variant, stat)))
    shares = importance.filter(*(pl.col(k).eq_missing(v) for k, v in variant.items()))
    if shares.filter(pl.col("status") == "ok").height:
        figures.append(("importance", _importance(shares, variant, stat)))
    return figures


def _group_mse_figures(curves: pl.LazyFrame, usable: pl.DataFrame, group_mse: list[str], title: str,
                       cells: pl.DataFrame) -> list[tuple[str, go.Figure]]:
    """FADE's selected config vs the same config with theta_lambda = 0 (fixed decay), per output group."""
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
        summary = summarise_curves(curves, ids, group_mse)
        fig = go.Figure()
        for config_id, label, dash in ((ids[0], "FADE", "solid"), (ids[1], "theta_lambda = 0", "dash")):
            s = summary.filter(pl.col("config_id") == config_id)
            for j, col in enumerate(group_mse):
                _band(fig, s["step"].to_list(), s[f"{col}_mean"].to_list(), s[f"{col}_std"].to_list(),
                      f"{label}: {col.removeprefix('mse_')}", _COLORS[j % len(_COLORS)], dash)
        fig.update_layout(title=f"Per-group MSE, {row['optimizer']} vs fixed decay: {title}<br><sub>{_label(row)} against "
                                "the same configuration with theta_lambda = 0</sub>", xaxis_title="step",
                          yaxis_title="MSE (lower is better)", yaxis_type="log")
        figures.append(("group-mse", fig))
    return figures


def _varied(cells: pl.DataFrame) -> list[str]:
    return [h for h in queries.HYPERPARAMETER_COLUMNS if h in cells.columns and cells[h].drop_nulls().n_unique() > 1]


def _log_axis(values: np.ndarray) -> bool:
    """Plot on a log scale: positive values spanning at least a factor 10."""
    values = values[np.isfinite(values)]
    return values.size > 1 and bool((values > 0).all()) and values.max() / values.min() >= 10


def _colorbar_title(variant: dict, stat: str) -> str:
    return f"{tables.STAT_NAMES[stat]} {tables.direction(variant['task'])}".replace(" MSE,", " MSE,<br>").replace(
        " accuracy,", " accuracy,<br>")


def _parallel(cells: pl.DataFrame, hyper: list[str], best: dict, variant: dict, stat: str) -> go.Figure:
    """Every configuration of one method as a line across its hyperparameters and its score."""
    ok = cells.filter((pl.col("diverged_seeds") == 0) & pl.col("stat_value").is_finite())
    dimensions = []
    for h in hyper:
        values = ok[h].to_numpy().astype(float)
        log = _log_axis(values)
        shown = np.log10(values) if log else values
        dim = {"label": f"{h} (log10)" if log else h, "values": shown}
        levels = np.unique(values)
        if levels.size <= 12:
            dim.update(tickvals=list(np.log10(levels) if log else levels), ticktext=[f"{v:g}" for v in levels])
        dimensions.append(dim)
    score = ok["stat_value"].to_numpy()
    log = _log_axis(score)
    dimensions.append({"label": f"{tables.STAT_NAMES[stat]} {tables.score_name(variant['task'])}" + (" (log10)" if log else ""),
                       "values": np.log10(score) if log else score})
    higher = get_task(variant["task"]).higher_is_better
    fig = go.Figure(go.Parcoords(
        line={"color": score, "colorscale": _BETTER_SCALE, "reversescale": not higher, "showscale": True,
              "colorbar": {"title": {"text": _colorbar_title(variant, stat)}, "x": 1.06}},
        dimensions=dimensions,
    ))
    dropped = cells.height - ok.height
    fig.update_layout(
        title=f"All configurations of {best['optimizer']}: {tables.variant_title(variant)}<br><sub>{ok.height} cells"
              + (f" ({dropped} diverged or without a score, not shown)" if dropped else "")
              + f", coloured by the {tables.STAT_NAMES[stat]}; drag along an axis to filter</sub>",
        margin={"l": 80, "r": 140, "t": 120},
    )
    return fig


def _slices(cells: pl.DataFrame, hyper: list[str], best: dict, variant: dict, stat: str) -> go.Figure:
    """The statistic against each hyperparameter, the others at the selected configuration's values; CI bars."""
    fig = make_subplots(rows=1, cols=len(hyper), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{h} (others at the selected values)" for h in hyper])
    name = tables.STAT_NAMES[stat]
    for j, h in enumerate(hyper, start=1):
        others = [o for o in hyper if o != h]
        line = cells.filter(*(pl.col(o) == best[o] for o in others), pl.col("stat_value").is_finite(),
                            pl.col("diverged_seeds") == 0).sort(h)
        x, y = line[h].to_list(), line["stat_value"].to_list()
        high = [(c - v) if c is not None else None for c, v in zip(line["ci_high"].to_list(), y)]
        low = [(v - c) if c is not None else None for c, v in zip(line["ci_low"].to_list(), y)]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=f"{name} [95% CI]", showlegend=j == 1,
                                 legendgroup="stat", line={"color": _COLORS[0]},
                                 error_y={"type": "data", "array": high, "arrayminus": low, "visible": True}),
                      row=1, col=j)
        fig.add_trace(go.Scatter(x=[best[h]], y=[best["stat_value"]], mode="markers", name="selected configuration",
                                 showlegend=j == 1, legendgroup="best",
                                 marker={"symbol": "star", "size": 14, "color": _COLORS[1]}), row=1, col=j)
        levels = sorted(cells[h].drop_nulls().unique())
        ticks = {"tickvals": levels, "ticktext": [f"{v:g}" for v in levels]} if len(levels) <= 12 else {}
        fig.update_xaxes(title_text=h, type="log" if _log_axis(np.array(levels, dtype=float)) else None, row=1, col=j, **ticks)
        diverged = cells.filter(*(pl.col(o) == best[o] for o in others), pl.col("diverged_seeds") > 0)
        if diverged.height:
            fig.add_annotation(text=f"diverged at {h} = " + ", ".join(f"{v:g}" for v in diverged[h].sort()),
                               xref=f"x{j if j > 1 else ''} domain", yref="y domain", x=0.5, y=1.0, showarrow=False,
                               font={"size": 10, "color": _COLORS[1]})
    yaxis = f"{name} {tables.score_name(variant['task'])} ({'higher' if get_task(variant['task']).higher_is_better else 'lower'} is better)"
    fig.update_yaxes(title_text=yaxis, row=1, col=1)
    if _log_axis(cells["stat_value"].to_numpy()):
        fig.update_yaxes(type="log")
    fig.update_layout(title=f"Slices of {best['optimizer']}: {tables.variant_title(variant)}<br><sub>the {name} against "
                            f"each hyperparameter, the others at the selected {tables.selected_hyperparameters(best)}; "
                            "bars: 95% bootstrap CI</sub>", margin={"t": 120})
    return fig


def _importance(shares: pl.DataFrame, variant: dict, stat: str) -> go.Figure:
    """Main-effect variance shares per method (grouped bars); skipped methods named in the title."""
    fig = go.Figure()
    ok = shares.filter(pl.col("status") == "ok")
    for i, ((method,), group) in enumerate(ok.group_by("optimizer", maintain_order=True)):
        fig.add_trace(go.Bar(x=group["hyperparameter"].to_list(), y=group["share"].to_list(), name=method,
                             marker_color=_COLORS[i % len(_COLORS)],
                             hovertemplate="%{x}: %{y:.1%}<extra>" + escape(method) + "</extra>"))
    skipped = shares.filter(pl.col("status") != "ok")
    note = ("<br><sub>skipped: " + "; ".join(f"{r['optimizer']} ({r['status'].removeprefix('skipped: ')})"
                                               for r in skipped.iter_rows(named=True)) + "</sub>") if skipped.height else ""
    order = [h for h in queries.HYPERPARAMETER_COLUMNS if h in set(ok["hyperparameter"])] + ["interactions"]
    fig.update_layout(title=f"Hyperparameter importance: {tables.variant_title(variant)}<br><sub>share of the variance of "
                            f"the cell {tables.STAT_NAMES[stat]} across each method's grid explained by each main effect</sub>{note}",
                      barmode="group", yaxis={"title": "share of variance", "tickformat": ".0%", "range": [0, 1]},
                      xaxis={"title": "hyperparameter (interactions: the rest)", "categoryorder": "array", "categoryarray": order},
                      margin={"t": 130})
    return fig


def _heatmap(table: tables.SensitivityTable) -> go.Figure:
    cells = table.cells
    gammas = sorted(cells["gamma0"].unique(), reverse=True)
    thetas = sorted(cells["theta_lambda"].unique())
    lookup = {(r["gamma0"], r["theta_lambda"]): r for r in cells.iter_rows(named=True)}

    def text(r: dict) -> str:
        if r["status"] != "ok":
            return f"diverged ({r['diverged_seeds']}/{r['seeds']})" if r["status"] == "diverged" else r["status"]
        label = tables.cell_text(r, table.stat).replace(" [", "<br>[")
        return label + (f" {tables.OUTLIER_MARK}" if r["outlier_seeds"] else "") + (f" {tables.TIED_MARK}" if r["tied"] else "")

    z = [[lookup[(g, t)]["stat_value"] if lookup[(g, t)]["status"] == "ok" else None for t in thetas] for g in gammas]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"{t:g}" for t in thetas], y=[f"{g:g} (λ0={math.exp(g):.3g})" for g in gammas],
        text=[[text(lookup[(g, t)]) for t in thetas] for g in gammas], texttemplate="%{text}", colorscale=_BETTER_SCALE,
        reversescale=not get_task(table.variant["task"]).higher_is_better,
        colorbar={"title": {"text": _colorbar_title(table.variant, table.stat)}},
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
        title=f"Sensitivity: {tables.variant_title(table.variant)}, {table.optimizer}, alpha={table.alpha:g}"
              f"<br><sub>{tables.STAT_NAMES[table.stat]} over seeds; best cell outlined red; {tables.TIED_MARK} dashed black: "
              f"tied with the best (95% CIs overlap); {robust}</sub>",
        xaxis_title="theta_lambda (0 = fixed decay)", yaxis_title="gamma0", xaxis_type="category", yaxis_type="category",
        margin={"t": 100},
    )
    return fig


def build_figures(analysis: Analysis, curves: pl.LazyFrame) -> list[tuple[str, go.Figure]]:
    """Every figure of the report, as (kind, figure); configurations selected by the analysis' statistic."""
    variant_cols, stat, cells = analysis.variant, analysis.stat, analysis.cells
    best = tables.best_table(analysis)
    importance = importance_table(analysis)
    curve_columns = [c for c in curves.collect_schema().names()
                     if c not in ("step",) and c not in analysis.scores.collect_schema().names()]
    figures = []
    for key, group in best.group_by(variant_cols, maintain_order=True):
        figures.extend(_figures_for_variant(curves, group, dict(zip(variant_cols, key)), curve_columns, stat,
                                            cells, importance))
    figures.extend(("heatmap", _heatmap(t)) for t in tables.sensitivity_tables(analysis))
    return figures


def _plain_title(fig: go.Figure) -> str:
    return (fig.layout.title.text or "").split("<br>")[0]


def write_report(store: Store, out: StoreLocation, images: Path | None = None,
                 stat: str = "mean") -> list[tuple[str, go.Figure]]:
    """Write the self-contained HTML report of `store` to `out` (a file's location: a local path or
    an object) and PNGs into `images` if given; returns the figures. `stat` (mean, median, iqm)
    selects the configurations and is shown. Everything is read through `store`, once."""
    location = store.location
    analysis = Analysis.of(store, stat)
    figures = build_figures(analysis, store.scan("curves"))
    if images is not None:
        export_images(figures, images)
    parts = [
        f"<div class='figure' id='figure-{i}' data-kind='{kind}'>"
        + pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%", default_height="560px")
        + "</div>"
        for i, (kind, fig) in enumerate(figures)
    ]
    sections = [(kind, name, tables.table_text(analysis, kind, "html")) for kind, name in (
        ("best", "Best configurations"), ("compare", "Paired comparisons"), ("sensitivity", "Sensitivity"),
        ("importance", "Hyperparameter importance"))]
    toc = "".join(f"<li><a href='#figure-{i}'>{escape(_plain_title(fig))}</a></li>" for i, (_, fig) in enumerate(figures))
    toc = (f"<nav id='contents'><h2>Contents</h2><ol><li><a href='#figures'>Figures</a><ol>{toc}</ol></li>"
           + "".join(f"<li><a href='#{anchor}'>{escape(name)}</a></li>" for anchor, name, _ in sections) + "</ol></nav>")
    body_tables = "".join(f"<h2 id='{anchor}'>{escape(name)}</h2>{html}" for anchor, name, html in sections)
    html = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>FADE sweep report: {escape(location.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}} table.results{{border-collapse:collapse;margin:1em 0}}
table.results td,table.results th{{border:1px solid #ccc;padding:4px 8px;text-align:left}} .note{{color:#555;font-size:90%}}
td.best{{background:#fde0dd}} td.tied{{background:#f0f0f0}} nav#contents ol{{margin:0.2em 0;font-size:95%}}
div.figure{{margin:1.5em 0;border-top:1px solid #eee}}</style>
<script type="text/javascript">{get_plotlyjs()}</script></head>
<body><h1>FADE sweep report: {escape(location.name)}</h1>
<p>{escape(str(location.local_path.resolve()) if location.local else location.display)}</p>
<p>Configurations selected and shown by the {escape(tables.STAT_NAMES[stat])} over seeds.</p>
{toc}
<h2 id='figures'>Figures</h2>{''.join(parts)}
{body_tables}
</body></html>"""
    out.parent.write_bytes(out.name, html.encode("utf-8"))
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
