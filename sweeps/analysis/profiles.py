"""Performance profiles (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice",
NeurIPS 2021, rliable's `create_performance_profile`): for each method's selected
configuration, the fraction of its runs (seeds) scoring better than tau, as a function of
tau. "Better" follows the task: score > tau where higher is better, score < tau where
lower is better; a diverged (not finite) run is never better. One curve per method and
setting; a curve that lies above another everywhere dominates it at every threshold.
Functions of frames, never of paths. plotly loads in `profile_figure` alone: the confirmation stage
reads `selected_runs` on the path of `fade-sweep run --no-report`, which draws nothing (and the GPU
image has no plotly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from sweeps.analysis import queries, tables
from sweeps.analysis.style import method_color

if TYPE_CHECKING:
    import plotly.graph_objects as go

TAU_POINTS = 101  # thresholds per setting: evenly spaced over the range of its runs' finite scores


def selected_runs(runs: pl.LazyFrame | pl.DataFrame, selected: pl.DataFrame) -> pl.DataFrame:
    """The runs (one row per seed) of the selected configurations (`selected` holds their config_id)."""
    return runs.lazy().join(selected.select("config_id").lazy(), on="config_id", how="semi").collect()


def performance_profile(runs: pl.DataFrame, taus: np.ndarray | None = None) -> pl.DataFrame:
    """One row per (setting, method, tau): `fraction` of the method's runs better than tau.

    `runs` are the runs of ONE configuration per (setting, method). Thresholds: `taus` for every
    setting, else TAU_POINTS evenly spaced from the smallest to the largest finite score of the
    setting's runs."""
    variant = queries.variant_columns(runs.lazy())
    frames = []
    for key, setting in runs.group_by(variant, maintain_order=True):
        scores = setting["score"].to_numpy().astype(float)
        finite = scores[np.isfinite(scores)]
        grid = taus if taus is not None else np.linspace(finite.min(), finite.max(), TAU_POINTS) if finite.size else np.array([])
        higher = queries.higher_is_better(pl.lit(key[variant.index("task")]))
        for (optimizer,), method in setting.group_by("optimizer", maintain_order=True):
            values = method["score"].to_numpy().astype(float)[:, None]
            better = (values > grid) if pl.select(higher).item() else (values < grid)  # NaN compares False
            frames.append(pl.DataFrame({**{c: [v] * grid.size for c, v in zip(variant, key)}, "optimizer": optimizer,
                                        "tau": grid, "fraction": better.mean(axis=0), "runs": values.shape[0]}))
    return pl.concat(frames, how="diagonal_relaxed").sort(*variant, "optimizer", "tau") if frames else pl.DataFrame()


def profile_figure(runs: pl.DataFrame) -> go.Figure:
    """The performance profiles of `runs` (see performance_profile), one panel per setting, each
    method in its report-wide colour."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    profile = performance_profile(runs)
    variant = queries.variant_columns(runs.lazy())
    settings = profile.select(variant).unique(maintain_order=True).to_dicts() if profile.height else []
    fig = make_subplots(rows=1, cols=max(len(settings), 1), subplot_titles=[tables.variant_title(s) for s in settings])
    for col, setting in enumerate(settings, start=1):
        part = profile.filter(*(pl.col(k).eq_missing(v) for k, v in setting.items()))
        for (optimizer,), curve in part.group_by("optimizer", maintain_order=True):
            fig.add_trace(go.Scatter(x=curve["tau"].to_list(), y=curve["fraction"].to_list(), name=optimizer,
                                     legendgroup=optimizer, showlegend=col == 1, line={"color": method_color(optimizer), "shape": "hv"}),
                          row=1, col=col)
        fig.update_xaxes(title_text=f"tau ({tables.direction(setting['task'])})", row=1, col=col)
    fig.update_yaxes(title_text="fraction of runs better than tau", range=[0, 1.02])
    fig.update_layout(title="Performance profiles of the selected configurations<br><sub>fraction of runs (seeds) "
                            "scoring better than tau; higher curves dominate</sub>", margin={"t": 100})
    return fig
