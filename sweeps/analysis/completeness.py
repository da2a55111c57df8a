"""What a report of an unfinished sweep holds and lacks: per task setting and method, the runs in
out of the runs its recorded sweep asks for, and the configurations still missing seeds.

A report read while its sweep runs (the live report) or after an interrupt says so before
anything else: its tables and figures are made of what is in, and this section marks what is
not. A finished sweep's report has no such section. Built from the `Analysis`' frames of
expected and missing runs (key columns only: the manifests, no data file read).
"""

from __future__ import annotations

from html import escape

import polars as pl

from sweeps.analysis import tables
from sweeps.analysis.queries import Analysis

ANCHOR = "completeness"


def completeness_counts(analysis: Analysis) -> pl.DataFrame:
    """One row per (task setting, optimizer) of the recorded sweep: `runs`, `runs_in`, `configs` and
    `configs_complete` (every seed it asks for is in); ordered as the sweep lists them."""
    expected, missing = analysis.expected, analysis.missing
    keys = [c for c in ("task", *analysis.variant, "optimizer") if c in expected.columns]
    keys = list(dict.fromkeys(keys))
    lacking = (missing.group_by(keys).agg(missing_runs=pl.len(), incomplete=pl.col("config_id").n_unique())
               if missing.height else pl.DataFrame(schema={**{k: expected.schema[k] for k in keys},
                                                           "missing_runs": pl.UInt32, "incomplete": pl.UInt32}))
    return (
        expected.group_by(keys, maintain_order=True).agg(runs=pl.len(), configs=pl.col("config_id").n_unique())
        .join(lacking, on=keys, how="left", nulls_equal=True)
        .with_columns(pl.col("missing_runs", "incomplete").fill_null(0))
        .select(*keys, "runs", runs_in=pl.col("runs") - pl.col("missing_runs"), configs="configs",
                configs_complete=pl.col("configs") - pl.col("incomplete"))
    )


def completeness_html(analysis: Analysis) -> str | None:
    """The section's HTML: a sentence and a table with every method's missing runs marked; None when
    nothing the recorded sweep asks for is missing."""
    if analysis.missing.height == 0 or analysis.expected.height == 0:
        return None
    counts = completeness_counts(analysis)
    total, have = int(counts["runs"].sum()), int(counts["runs_in"].sum())
    shown = [c for c in analysis.variant if c in counts.columns and counts[c].n_unique() > 1]
    head = "".join(f"<th>{escape(h)}</th>" for h in ("task setting", "method", "runs in", "configurations complete", ""))
    rows = []
    for row in counts.iter_rows(named=True):
        lacking = row["runs"] - row["runs_in"]
        mark = (f"<td class='missing'>{lacking} run{'s' if lacking != 1 else ''} missing</td>" if lacking
                else "<td class='complete'>complete</td>")
        setting = tables.variant_title({k: row[k] for k in ("task", *shown)})
        rows.append(f"<tr><td>{escape(setting)}</td><td>{escape(row['optimizer'])}</td>"
                    f"<td>{row['runs_in']} of {row['runs']}</td><td>{row['configs_complete']} of {row['configs']}</td>{mark}</tr>")
    note = tables.left_out_note(analysis)
    return (f"<p class='answer'><b>{have:,} of {total:,} runs are in ({have / total:.0%})</b>; the tables and figures "
            f"below are made of these. A configuration still missing seeds is ranked on the seeds it has; a "
            f"configuration with none is marked <i>missing</i> in the sensitivity tables.</p>"
            + (f"<p class='answer'>{escape(note)}</p>" if note else "") +
            f"<table class='results'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
