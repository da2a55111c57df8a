"""The report: one self-contained HTML page (plotly.js embedded, works offline).

The answer first: one sentence per task setting, the best table and where the numbers come
from (store, sweep, package version, dtype, dates, wall time); then the figures (figures.py:
learning curves with FADE's fixed-decay counterpart, decay rates, per-group MSE, slices,
importance; grid_figures.py: parallel coordinates in plain SVG and the sensitivity
heatmaps); then the compare, sensitivity and importance tables and a sortable table of every
configuration (page.py). Colours, ticks and colour ranges: style.py.

This module is the only part of the report that reads the store: the figures and the page
are built from the frames it passes down. Curves are read lazily (only the plotted
configurations' rows and columns) and averaged into at most MAX_POINTS points per line, so a
store of tens of millions of curve rows reports in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path
from typing import TypeVar

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

from sweeps.analysis import figures, grid_figures, kinds, live, page, queries, summaries, tables
from sweeps.analysis.across import report_frames
from sweeps.analysis.completeness import ANCHOR, completeness_html
from sweeps.analysis.confirm import confirmation_section
from sweeps.analysis.importance import importance_table, unstable_cells
from sweeps.analysis.queries import Analysis
from sweeps.store import Store, StoreLocation
from sweeps.store.sweep_record import SWEEP_RECORD
from sweeps.store.records import RecordError
from tasks import get_task

MAX_POINTS = 400


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


def build_figures(analysis: Analysis, curves: pl.LazyFrame) -> list[tuple[str, go.Figure]]:
    """Every figure of the report, as (kind, figure); configurations selected by the analysis' statistic.

    The store is read by the caller only; the figures are built from the frames passed down."""
    variant_cols, stat, cells = analysis.variant, analysis.stat, analysis.cells
    best = summaries.best_table(analysis)
    importance = importance_table(analysis)
    curve_columns = [c for c in curves.collect_schema().names()
                     if c not in ("step",) and c not in analysis.scores.collect_schema().names()]
    out = []
    for key, group in best.group_by(variant_cols, maintain_order=True):
        variant = dict(zip(variant_cols, key))
        usable = group.filter(pl.col("status") == "ok")  # not all diverged, not missing
        if usable.height == 0:
            continue
        fixed = figures.counterparts(usable, cells, variant)
        ids = usable["config_id"].to_list() + [row["config_id"] for row in fixed.values()]
        metrics = [get_task(variant["task"]).curve_metric, *(c for c in curve_columns if c.startswith(("decay_", "mse_")))]
        summary, per_seed = _curve_data(curves, ids, list(dict.fromkeys(metrics)))
        out.extend(figures.variant_figures(variant, usable, cells, importance, summary, per_seed, curve_columns, stat, fixed))
    unstable = frozenset(cells.filter(unstable_cells(cells, [*variant_cols, "optimizer"]))["config_id"])
    for table in summaries.sensitivity_tables(analysis):
        fig = grid_figures.heatmap(table, unstable)
        if fig is not None:
            out.append(("heatmap", fig))
    return out


def _plain_title(fig: go.Figure) -> str:
    return (fig.layout.title.text or "").split("<br>")[0]


T = TypeVar("T")


def _readable(read: Callable[[], T]) -> T | None:
    """What `read()` returns, or None when its record is damaged: the report answers from the rest
    (the command says once what it skipped: Store.damage_notice)."""
    try:
        return read()
    except RecordError:
        return None


def provenance(store: Store) -> page.Provenance:
    """What the store records about how its numbers were made (store.json, sweep.yaml, status.json)."""
    location = store.location
    record, status = _readable(lambda: store.record), _readable(store.status)  # damaged: as not recorded
    try:
        sweep = location.read_bytes(SWEEP_RECORD).decode()
    except FileNotFoundError:
        sweep = "not recorded"
    return page.Provenance(
        store=location.absolute().display, sweep=sweep,
        package_version=record.package_version if record else "not recorded",
        dtype=record.dtype if record else "not recorded",
        created_at=record.created_at if record else None, updated_at=record.updated_at if record else None,
        wall_seconds=None if status is None else status.updated_at - status.started_at,
    )


def write_report(store: Store | Sequence[Store], out: StoreLocation, images: Path | None = None,
                 stat: str = "mean", live_every: float | None = None) -> list[tuple[str, go.Figure]]:
    """Write the self-contained HTML report of `store` (or of several sweeps of the same task settings,
    compared: across.py) to `out` (a file's location: a local path or an object; written atomically) and
    then PNGs into `images` if given (NoImages, after the HTML is written, without kaleido); returns the
    figures. `stat` (mean, median, iqm) selects the configurations and is shown. `live_every`: see
    `report_page`."""
    html, built = report_page(store, stat, live_every)
    out.parent.write_bytes(out.name, html.encode("utf-8"))
    if images is not None:  # after the HTML: without kaleido the report is still written
        export_images(built, images)
    return built


def report_page(store: Store | Sequence[Store], stat: str = "mean",
                live_every: float | None = None) -> tuple[str, list[tuple[str, go.Figure]]]:
    """The report's HTML and its figures. Everything is read through the stores, once. `live_every`: the
    page is a live report of a sweep still running (live.py), reloading itself every that many seconds;
    otherwise it is the static report."""
    stores = [store] if isinstance(store, Store) else list(store)
    analysis, curves, confirmation = report_frames(stores, stat)
    built = build_figures(analysis, curves)
    sure_tables, sure_figures = confirmation_section(analysis.scores, confirmation, stat)  # "How sure are we?"
    built.extend(sure_figures)
    variant_cols = analysis.variant
    best = summaries.best_table(analysis)
    cells = analysis.cells.sort([*variant_cols, "optimizer", "stat_value"], nulls_last=True)
    unstable = unstable_cells(cells, [*variant_cols, "optimizer"])
    chosen = f"<p class='note'>Configurations selected and shown by the {escape(tables.STAT_NAMES[stat])} over seeds.</p>"
    if analysis.race is not None:  # how many run-steps racing saved against the full grid
        chosen += f"<p class='note'>{escape(analysis.race.sentence())}</p>"
    fixed = {}
    for key, group in best.filter(pl.col("status") == "ok").group_by(variant_cols, maintain_order=True):
        fixed.update(figures.counterparts(group, cells, dict(zip(variant_cols, key))))
    missing = completeness_html(analysis)  # an unfinished sweep: what is in, what is missing
    summary = [
        *([(ANCHOR, "What is in so far", missing)] if missing else []),
        ("answer", "The answer", page.answer(best, variant_cols, stat, fixed) + chosen),
        ("best", "Best configurations", kinds.table_text(analysis, "best", "html")),
        ("how-sure", "How sure are we?", "".join(f"<h3>{escape(title)}</h3>{html}" for title, html in sure_tables)),
        ("provenance", "Where these numbers come from", _provenances(stores)),
    ]
    drawn = [(kind, _plain_title(fig), pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%",
                                                   default_height="560px")) for kind, fig in built]
    after = [("compare", "Paired comparisons", kinds.table_text(analysis, "compare", "html")),
             ("sensitivity", "Sensitivity", kinds.table_text(analysis, "sensitivity", "html")),
             ("importance", "Hyperparameter importance", kinds.table_text(analysis, "importance", "html")),
             ("configurations", "All configurations", page.configurations_table(cells, variant_cols, stat, unstable))]
    head, banner = live.live_parts(live_every) if live_every else ("", "")
    title = f"FADE sweep report: {stores[0].location.name}" if len(stores) == 1 else \
        f"FADE sweeps compared: {', '.join(s.location.name for s in stores)}"
    html = page.page(title, summary, drawn, after, get_plotlyjs(), head, banner)
    return html, built


def _provenances(stores: list[Store]) -> str:
    if len(stores) == 1:
        return page.provenance_html(provenance(stores[0]))
    return "".join(f"<h3>{escape(s.location.name)}</h3>{page.provenance_html(provenance(s))}" for s in stores)


class NoImages(RuntimeError):
    """Static images were asked for but the optional `kaleido` package is not installed."""


def export_images(figures: list[tuple[str, go.Figure]], directory: str | Path) -> None:
    """Static PNGs of every figure; needs the optional `kaleido` package (NoImages without it)."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise NoImages("no images written: static image export needs kaleido; install it with "
                       "`pip install -e \".[images]\"` in the fade-sweep checkout (or `pip install kaleido`)") from None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for i, (kind, fig) in enumerate(figures):
        fig.write_image(directory / f"{i:02d}-{kind}.png", width=1200, height=600)
