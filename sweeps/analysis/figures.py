"""The per-task-setting figures of the report, built from frames (no store access here):

- learning curves of each method's selected configuration, mean ± std over seeds, every seed's
  curve on demand, and beside FADE's curve its fixed-decay counterpart (the same configuration
  with theta_lambda = 0, dashed, same colour);
- decay-rate evolution per parameter group of each FADE-family selected configuration;
- per-group MSE over time, FADE vs its fixed-decay counterpart (tasks that log group MSEs);
- slice plots per method (the statistic against each hyperparameter, the others held at the
  selected values, 95% bootstrap CI bars) and hyperparameter importance.

Each method keeps its colour (`style.method_color`) in every figure.
"""

from __future__ import annotations

from html import escape

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from sweeps.analysis import queries, style, tables
from sweeps.analysis.grid_figures import parallel
from tasks import get_task

DASHES = ("solid", "dash", "dot", "dashdot")


def counterparts(usable: pl.DataFrame, cells: pl.DataFrame, variant: dict) -> dict[str, dict]:
    """Selected config id -> the cell of the same configuration with theta_lambda = 0 (fixed
    decay, not diverged), for selected configurations of `variant` that adapt their decay."""
    if "theta_lambda" not in usable.columns:
        return {}
    found = {}
    for row in usable.filter(pl.col("theta_lambda").is_not_null() & (pl.col("theta_lambda") > 0)).iter_rows(named=True):
        same = [n for n in queries.HYPERPARAMETER_COLUMNS if n != "theta_lambda" and row.get(n) is not None]
        fixed = cells.filter(pl.col("optimizer") == row["optimizer"], pl.col("theta_lambda") == 0,
                             pl.col("diverged_seeds") == 0, *(pl.col(n) == row[n] for n in same),
                             *(pl.col(k).eq_missing(v) for k, v in variant.items()))
        if fixed.height:
            found[row["config_id"]] = fixed.row(0, named=True)
    return found


def _band(fig: go.Figure, s: pl.DataFrame, column: str, name: str, color: str, dash: str = "solid", **where) -> None:
    x, mean, std = s["step"].to_list(), s[f"{column}_mean"].to_list(), s[f"{column}_std"].to_list()
    upper = [m + d for m, d in zip(mean, std)]
    lower = [m - d for m, d in zip(mean, std)]
    fig.add_trace(go.Scatter(x=x + x[::-1], y=upper + lower[::-1], fill="toself", fillcolor=color, opacity=0.15,
                             line={"width": 0}, hoverinfo="skip", showlegend=False, legendgroup=name), **where)
    fig.add_trace(go.Scatter(x=x, y=mean, name=name, line={"color": color, "dash": dash}, legendgroup=name), **where)


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


def _log_y(fig: go.Figure, summary: pl.DataFrame, columns: list[str], **where) -> None:
    """A log y axis with full tick labels over the plotted means."""
    values = np.concatenate([summary[f"{c}_mean"].drop_nulls().to_numpy() for c in columns]) if columns else np.array([])
    values = values[np.isfinite(values) & (values > 0)]
    ticks = style.log_ticks(float(values.min()), float(values.max())) if values.size else {}
    fig.update_yaxes(type="log", **ticks, **where)


def variant_figures(variant: dict, usable: pl.DataFrame, cells: pl.DataFrame, importance: pl.DataFrame,
                    summary: pl.DataFrame, per_seed: pl.DataFrame, curve_columns: list[str], stat: str,
                    fixed: dict[str, dict]) -> list[tuple[str, go.Figure]]:
    """The figures of one task setting: `usable` its selected configurations with a score,
    `summary`/`per_seed` their curves (and their fixed-decay counterparts' `fixed`)."""
    title = tables.variant_title(variant)
    task = get_task(variant["task"])
    metric, better = task.curve_metric, "higher" if task.higher_is_better else "lower"
    curves = go.Figure()
    for row in usable.iter_rows(named=True):
        color = style.method_color(row["optimizer"])
        _band(curves, summary.filter(pl.col("config_id") == row["config_id"]), metric, style.config_label(row), color)
        _per_seed_trace(curves, per_seed.filter(pl.col("config_id") == row["config_id"]), metric, row["optimizer"], color)
        if row["config_id"] in fixed:
            _band(curves, summary.filter(pl.col("config_id") == fixed[row["config_id"]]["config_id"]), metric,
                  f"{row['optimizer']}, fixed decay (theta_lambda=0)", color, "dash")
    curves.update_layout(title=f"Learning curves: {title}<br><sub>configuration selected by the {tables.STAT_NAMES[stat]} "
                               "per method; mean ± std over seeds; dashed: the same configuration with fixed decay; "
                               "per-seed curves: the button</sub>",
                         xaxis_title="step", yaxis_title=f"{metric} ({better} is better)", legend={"font": {"size": 10}})
    if metric.startswith("mse"):
        _log_y(curves, summary, [metric])
    _seed_toggle(curves)
    figures = [("curves", curves)]
    decay_cols = [c for c in curve_columns if c.startswith("decay_")]
    decay = go.Figure()
    for row in usable.iter_rows(named=True):
        s = summary.filter(pl.col("config_id") == row["config_id"])
        for j, col in enumerate(decay_cols):
            if s[f"{col}_mean"].null_count() < s.height:
                _band(decay, s, col, f"{style.config_label(row)}: {col.removeprefix('decay_')}", style.method_color(row["optimizer"]),
                      DASHES[j % len(DASHES)])
    if decay.data:
        decay.update_layout(title=f"Decay-rate evolution: {title}<br><sub>mean exp(gamma) per parameter group, "
                                  "mean ± std over seeds</sub>", xaxis_title="step", yaxis_title="decay rate",
                            legend={"font": {"size": 10}})
        _log_y(decay, summary.filter(pl.col("config_id").is_in(usable["config_id"].to_list())), decay_cols)
        figures.append(("decay", decay))
    group_mse = [c for c in curve_columns if c.startswith("mse_")]
    for row in usable.iter_rows(named=True) if group_mse else ():
        if row["config_id"] in fixed:
            figures.append(("group-mse", _group_mse(row, fixed[row["config_id"]], summary, group_mse, title)))
    return figures + grid_figures(variant, usable, cells, importance, stat)


def _group_mse(row: dict, fixed: dict, summary: pl.DataFrame, group_mse: list[str], title: str) -> go.Figure:
    """FADE's selected config vs the same config with theta_lambda = 0, per output group (one colour per group)."""
    fig = go.Figure()
    palette = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a")
    for config_id, label, dash in ((row["config_id"], "FADE", "solid"), (fixed["config_id"], "theta_lambda = 0", "dash")):
        s = summary.filter(pl.col("config_id") == config_id)
        for j, col in enumerate(group_mse):
            _band(fig, s, col, f"{label}: {col.removeprefix('mse_')}", palette[j % len(palette)], dash)
    fig.update_layout(title=f"Per-group MSE, {row['optimizer']} vs fixed decay: {title}<br><sub>{style.config_label(row)} against "
                            "the same configuration with theta_lambda = 0</sub>", xaxis_title="step",
                      yaxis_title="MSE (lower is better)")
    _log_y(fig, summary.filter(pl.col("config_id").is_in([row["config_id"], fixed["config_id"]])), group_mse)
    return fig


def grid_figures(variant: dict, usable: pl.DataFrame, cells: pl.DataFrame, importance: pl.DataFrame,
                 stat: str) -> list[tuple[str, go.Figure]]:
    """Parallel coordinates and slices per method, then the importance bars."""
    figures = []
    method_cells = cells.filter(*(pl.col(k).eq_missing(v) for k, v in variant.items()))
    for row in usable.iter_rows(named=True):
        mine = method_cells.filter(pl.col("optimizer") == row["optimizer"])
        hyper = varied(mine)
        if len(hyper) >= 2:
            figures.append(("parallel", parallel(mine, hyper, row["optimizer"], variant, stat)))
        if hyper:
            figures.append(("slices", _slices(mine, hyper, row, variant, stat)))
    shares = importance.filter(*(pl.col(k).eq_missing(v) for k, v in variant.items()))
    if shares.filter(pl.col("status") == "ok").height:
        figures.append(("importance", _importance(shares, variant, stat)))
    return figures


def varied(cells: pl.DataFrame) -> list[str]:
    return [h for h in queries.hyperparameter_columns(cells.columns) if cells[h].drop_nulls().n_unique() > 1]


def _slices(cells: pl.DataFrame, hyper: list[str], best: dict, variant: dict, stat: str) -> go.Figure:
    """The statistic against each hyperparameter, the others at the selected configuration's values; CI bars."""
    fig = make_subplots(rows=1, cols=len(hyper), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{h} (others at the selected values)" for h in hyper])
    name = tables.STAT_NAMES[stat]
    color = style.method_color(best["optimizer"])
    for j, h in enumerate(hyper, start=1):
        others = [o for o in hyper if o != h]
        line = cells.filter(*(pl.col(o) == best[o] for o in others), pl.col("stat_value").is_finite(),
                            pl.col("diverged_seeds") == 0).sort(h)
        x, y = line[h].to_list(), line["stat_value"].to_list()
        high = [(c - v) if c is not None else None for c, v in zip(line["ci_high"].to_list(), y)]
        low = [(v - c) if c is not None else None for c, v in zip(line["ci_low"].to_list(), y)]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=f"{name} [95% CI]", showlegend=j == 1,
                                 legendgroup="stat", line={"color": color},
                                 error_y={"type": "data", "array": high, "arrayminus": low, "visible": True}),
                      row=1, col=j)
        fig.add_trace(go.Scatter(x=[best[h]], y=[best["stat_value"]], mode="markers", name="selected configuration",
                                 showlegend=j == 1, legendgroup="best",
                                 marker={"symbol": "star", "size": 14, "color": "#000000"}), row=1, col=j)
        levels = sorted(cells[h].drop_nulls().unique())
        ticks = {"tickvals": levels, "ticktext": [f"{v:g}" for v in levels]} if len(levels) <= 12 else {}
        log = style.colour_range(np.array(levels, dtype=float), False).log
        fig.update_xaxes(title_text=h, type="log" if log else None, row=1, col=j, **ticks)
        diverged = cells.filter(*(pl.col(o) == best[o] for o in others), pl.col("diverged_seeds") > 0)
        if diverged.height:
            fig.add_annotation(text=f"diverged at {h} = " + ", ".join(f"{v:g}" for v in diverged[h].sort()),
                               xref=f"x{j if j > 1 else ''} domain", yref="y domain", x=0.5, y=1.0, showarrow=False,
                               font={"size": 10, "color": "#e41a1c"})
    better = "higher" if get_task(variant["task"]).higher_is_better else "lower"
    fig.update_yaxes(title_text=f"{name} {tables.score_name(variant['task'])} ({better} is better)", row=1, col=1)
    shown = cells.filter(pl.col("stat_value").is_finite(), pl.col("diverged_seeds") == 0)["stat_value"].to_numpy()
    if style.colour_range(shown, False).log:
        fig.update_yaxes(type="log", **style.log_ticks(float(shown.min()), float(shown.max())))
    fig.update_layout(title=f"Slices of {best['optimizer']}: {tables.variant_title(variant)}<br><sub>the {name} against "
                            f"each hyperparameter, the others at the selected {tables.selected_hyperparameters(best)}; "
                            "bars: 95% bootstrap CI</sub>", margin={"t": 120})
    return fig


def _importance(shares: pl.DataFrame, variant: dict, stat: str) -> go.Figure:
    """Main-effect variance shares per method (grouped bars); skipped methods named in the title."""
    fig = go.Figure()
    ok = shares.filter(pl.col("status") == "ok")
    for (method,), group in ok.group_by("optimizer", maintain_order=True):
        fig.add_trace(go.Bar(x=group["hyperparameter"].to_list(), y=group["share"].to_list(), name=method,
                             marker_color=style.method_color(method),
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
