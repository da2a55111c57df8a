"""`sensitivity`: rows gamma0 (with lambda0 = exp(gamma0)), columns theta_lambda, at one alpha; one table per
(task settings, optimizer, alpha) present. The best cell is marked, and so is every cell whose CI overlaps
the best cell's ("tied"); each table states the fraction of its non-diverged cells within 5% of the best."""

from __future__ import annotations

import math

from sweeps.analysis import tables
from sweeps.analysis.kinds import TableSource
from sweeps.analysis.summaries import SensitivityTable, sensitivity_frame, sensitivity_tables


def text(source: TableSource, fmt: str) -> str:
    analysis = source.analysis
    found = sensitivity_tables(analysis)
    if not found:
        return "No sensitivity grids: no optimizer with both gamma0 and theta_lambda in these results.\n"
    if fmt == "csv":
        return tables.csv_text(sensitivity_frame(found))
    return tables.render_tuning([grid(t, tables.race_note(analysis)) for t in found], analysis, fmt)


def grid(table: SensitivityTable, race: str = "") -> tables.Grid:
    thetas = sorted(table.cells["theta_lambda"].unique())
    rows, marked, tied, footnotes = [], set(), set(), []
    for i, (gamma0, cells) in enumerate(table.cells.group_by("gamma0", maintain_order=True)):
        by_theta = {r["theta_lambda"]: r for r in cells.to_dicts()}
        row = [f"{gamma0[0]:g} (λ0={math.exp(gamma0[0]):.3g})"]
        for j, theta in enumerate(thetas, start=1):
            r = by_theta[theta]
            if r["status"] == "missing":
                text = "missing"
            elif r["status"] == "diverged":
                text = f"diverged ({r['diverged_seeds']}/{r['seeds']})"
            elif r.get("race_status") == "eliminated":  # its own, fewer, seeds: said in the cell
                text = f"{tables.cell_text(r, table.stat)} (out after round {r['eliminated_round']}, {r['seeds']} seeds)"
            else:
                text = tables.cell_text(r, table.stat)
                note = tables.outlier_footnote(f"gamma0={gamma0[0]:g}, theta_lambda={theta:g}", r["outlier_seeds"])
                if note:
                    text += f" {tables.OUTLIER_MARK}"
                    footnotes.append(note)
            if r["best"]:
                marked.add((i, j))
            elif r["tied"]:
                text += f" {tables.TIED_MARK}"
                tied.add((i, j))
            row.append(text)
        rows.append(row)
    title = f"{tables.variant_title(table.variant)}: {table.optimizer}, {table.at}"
    robust = (f"Robustness: {table.within} of {table.usable} non-diverged cells "
              f"({100 * table.robust:.0f}%) within 5% of the best." if table.usable else "Robustness: no usable cell.")
    note = (tables.score_note(table.variant["task"], table.stat)
            + " Rows gamma0 (lambda0 = exp(gamma0)), columns theta_lambda; theta_lambda = 0 is fixed decay. Best cell in bold; "
            + f"{tables.TIED_MARK} (italic): tied with the best (95% CIs overlap). " + robust
            + (race and f"{race} An eliminated cell shows its statistic over its own seeds and is never best or tied."))
    if footnotes:
        footnotes.insert(0, tables.outlier_note())
    return tables.Grid(title, note, ("gamma0 \\ theta_lambda", *(f"{t:g}" for t in thetas)), rows, marked, tied, tuple(footnotes))
