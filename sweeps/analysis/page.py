"""The report page: the answer first (one sentence per task setting, the best table, where the
numbers come from), then the figures, then every table, including a sortable table of every
configuration (plain inline JavaScript, works offline). Built from frames and strings; the
report's entry (report.py) reads the store.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from html import escape

import polars as pl

from sweeps.analysis import queries, stats, style, tables
from tasks import get_task

SORT_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th, column) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var up = th.dataset.order !== 'up';
    th.closest('tr').querySelectorAll('th').forEach(function (h) { delete h.dataset.order; });
    th.dataset.order = up ? 'up' : 'down';
    var key = function (row) {
      var cell = row.cells[column], v = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent;
      var n = parseFloat(v);
      return isNaN(n) ? v : n;
    };
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b), c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
      return up ? c : -c;
    }).forEach(function (row) { body.appendChild(row); });
  });
});
"""

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px} table.results{border-collapse:collapse;margin:1em 0}
table.results td,table.results th{border:1px solid #ccc;padding:4px 8px;text-align:left} .note{color:#555;font-size:90%}
td.best{background:#fde0dd} td.tied{background:#f0f0f0} nav#contents ol{margin:0.2em 0;font-size:95%}
div.figure{margin:1.5em 0;border-top:1px solid #eee} p.answer{font-size:110%} dl.provenance dt{font-weight:bold;float:left;
width:9em} dl.provenance dd{margin-left:10em} table.sortable th{cursor:pointer} table.sortable th[data-order=up]::after{content:' ▲'}
table.sortable th[data-order=down]::after{content:' ▼'} span.swatch{display:inline-block;width:0.8em;height:0.8em;margin-right:0.3em}
td.missing{background:#fde0dd;font-weight:bold} td.complete{color:#555}"""


@dataclass(frozen=True)
class Provenance:
    """Where the numbers come from: the store, the sweep document, what ran it, when and how long."""

    store: str
    sweep: str  # the recorded sweep document (YAML)
    package_version: str
    dtype: str
    created_at: float | None
    updated_at: float | None
    wall_seconds: float | None  # of the last run of the sweep (status.json), when recorded


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def provenance_html(p: Provenance) -> str:
    wall = "not recorded" if p.wall_seconds is None else f"{p.wall_seconds:.0f} s ({p.wall_seconds / 60:.1f} min)"
    rows = [("store", p.store), ("sweep run", f"{_when(p.created_at)} to {_when(p.updated_at)}"), ("packs wall time", wall),
            ("package", f"fade-sweep {p.package_version}"), ("dtype", p.dtype),
            ("report made", _when(datetime.datetime.now(datetime.timezone.utc).timestamp()))]
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
    return (f"<dl class='provenance'>{items}</dl><details><summary>The sweep (as recorded in the store)</summary>"
            f"<pre>{escape(p.sweep)}</pre></details>")


def answer(best: pl.DataFrame, variant_cols: list[str], stat: str, fixed: dict[str, dict]) -> str:
    """One sentence per task setting: the best method, its score, and the runner-up; then, for
    each selected FADE configuration with a fixed-decay counterpart (`fixed`: config id -> its
    theta_lambda = 0 cell), the two side by side."""
    sentences = []
    for key, group in best.group_by(variant_cols, maintain_order=True):
        variant = dict(zip(variant_cols, key))
        task = get_task(variant["task"])
        ok = group.filter(pl.col("status") == "ok").with_columns(_key=queries.ranking_key("stat_value")).sort("_key")
        title = escape(tables.variant_title(variant))
        if ok.height == 0:
            sentences.append(f"<li><b>{title}</b>: no method has a usable score yet.</li>")
            continue
        first = ok.row(0, named=True)
        text = (f"<li><b>{title}</b>: {_swatch(first['optimizer'])}<b>{escape(style.config_label(first))}</b> has the best "
                f"{escape(tables.STAT_NAMES[stat])} {escape(tables.score_name(variant['task']))}, "
                f"{escape(tables.cell_text(first, stat))} over {first['seeds']} seeds")
        if ok.height > 1:
            second = ok.row(1, named=True)
            gap = abs(second["stat_value"] - first["stat_value"]) / abs(first["stat_value"]) if first["stat_value"] else math.nan
            text += (f"; next is {_swatch(second['optimizer'])}{escape(style.config_label(second))} at "
                     f"{escape(tables.cell_text(second, stat))} ({gap:.1%} {'lower' if task.higher_is_better else 'higher'})")
        versus = [f"{escape(r['optimizer'])} {escape(tables.cell_text(r, stat))} against "
                  f"{escape(tables.cell_text(fixed[r['config_id']], stat))} with fixed decay (theta_lambda = 0)"
                  for r in ok.iter_rows(named=True) if r["config_id"] in fixed]
        sentences.append(text + "." + (f" Adapted vs fixed decay: {'; '.join(versus)}." if versus else "") + "</li>")
    return f"<ul class='answer'>{''.join(sentences)}</ul>"


def _swatch(method: str) -> str:
    return f"<span class='swatch' style='background:{style.method_color(method)}'></span>"


def configurations_table(cells: pl.DataFrame, variant_cols: list[str], stat: str, unstable: pl.Series) -> str:
    """Every configuration, one row each, sortable by clicking a column heading."""
    hyper = [h for h in queries.hyperparameter_columns(cells.columns) if cells[h].drop_nulls().len()]
    shown = [c for c in variant_cols if cells[c].n_unique() > 1]
    header = [*shown, "method", *hyper, tables.STAT_NAMES[stat], "std", "95% CI", "seeds", "diverged seeds", "note"]
    rows = []
    for r, shaky in zip(cells.iter_rows(named=True), unstable.to_list()):
        value = r["stat_value"]
        note = "; ".join(n for n in (
            f"{r['diverged_seeds']} diverged" if r["diverged_seeds"] else "",
            f"unstable (median {r['median']:.4g}, worst seed {r['max']:.4g})" if shaky else "",
            f"outlier {r['outlier_seeds']}" if r["outlier_seeds"] else "") if n)
        cells_html = [*(escape(str(r[c])) for c in shown), escape(r["optimizer"]),
                      *("" if r[h] is None else f"{r[h]:g}" for h in hyper)]
        numbers = [(value, _num(value)), (r["std"], _num(r["std"], 2))]
        row = "".join(f"<td>{c}</td>" for c in cells_html)
        row += "".join(f"<td data-value='{'' if v is None or not math.isfinite(v) else repr(v)}'>{t}</td>" for v, t in numbers)
        row += f"<td>{escape(tables.interval(r['ci_low'], r['ci_high']))}</td><td>{r['seeds']}</td><td>{r['diverged_seeds']}</td>"
        rows.append(f"<tr>{row}<td>{escape(note)}</td></tr>")
    head = "".join(f"<th title='click to sort'>{escape(h)}</th>" for h in header)
    return (f"<p class='note'>{cells.height} configurations; click a column heading to sort. Unstable: the worst seed "
            f"is more than {stats.UNSTABLE_RATIO:g} times the cell's median, or the median more than "
            f"{stats.UNSTABLE_RATIO:g} times the method's typical cell.</p><table class='results sortable'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _section(anchor: str, heading: str, html: str) -> str:
    return f"<h2 id='{anchor}'>{escape(heading)}</h2>{html}"


def _num(value: float | None, digits: int = 4) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def page(title: str, summary: list[tuple[str, str, str]], figures: list[tuple[str, str, str]],
         tables_after: list[tuple[str, str, str]], plotly_js: str, head: str = "", banner: str = "") -> str:
    """The HTML document. `summary` and `tables_after`: (anchor, heading, html) sections before and
    after the figures; `figures`: (kind, title, html) in order; `head` and `banner`: what a live
    report adds in the head and above everything (live.py)."""
    contents = [(a, h) for a, h, _ in summary] + [("figures", f"Figures ({len(figures)})")] + [(a, h) for a, h, _ in tables_after]
    toc = "".join(f"<li><a href='#{a}'>{escape(h)}</a></li>" for a, h in contents)
    figure_toc = "".join(f"<li><a href='#figure-{i}'>{escape(t)}</a></li>" for i, (_, t, _) in enumerate(figures))
    parts = "".join(f"<div class='figure' id='figure-{i}' data-kind='{kind}'>{html}</div>"
                    for i, (kind, _, html) in enumerate(figures))
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{STYLE}</style>{head}
<script type="text/javascript">{plotly_js}</script></head>
<body>{banner}<h1>{escape(title)}</h1>
<nav id='contents'><ol>{toc}</ol></nav>
{''.join(_section(*s) for s in summary)}
<h2 id='figures'>Figures</h2><details><summary>List of figures</summary><ol>{figure_toc}</ol></details>{parts}
{''.join(_section(*s) for s in tables_after)}
<script type="text/javascript">{SORT_SCRIPT}</script>
</body></html>"""
