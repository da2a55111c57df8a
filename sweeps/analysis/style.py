"""How the report draws things, the same in every figure: one colour per method, readable log
ticks, colour ranges that survive a blow-up cell.

Colour range rule (heatmaps and parallel coordinates): lower-is-better scores (losses) that
are positive and span a factor 10 or more are coloured by log10(score); the worse end of the
range is clipped at the fence median + 3 x |median - best| of those values (median - 3 x ... for higher-is-better
scores; the quartile on the worse side stands in for the median when more than half the
cells tie with the best; not the IQR, which on a 2 x 2 grid is the blow-up itself), so one
blown-up cell is drawn at the end colour instead of squeezing every other cell into one
colour; and the range is at least 5% of the best value wide (log10(1.05) on a log scale), so
cells within a few per mille of each other are not drawn as opposite ends of the scale. The
colorbar title says when the scale is logarithmic and when it is clipped.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np

from sweeps.analysis import tables


FENCE_SPREADS = 3.0  # the clipping fence: median + 3 x |median - best| on the worse side
MIN_RELATIVE_SPAN = 0.05  # the narrowest colour range, relative to the best value
BETTER_SCALE = "Viridis"  # better cells bright (yellow), worse dark, whatever the direction

# One colour per method across the report: FADE variants warm, baselines cool, fixed decay grey-brown.
METHOD_COLORS = {
    "fade": "#d62728", "fade_sgd": "#d62728", "fade_idbd": "#ff7f0e", "fade_adam": "#e377c2", "fade_sgd_all": "#9c2a00",
    "sgd": "#1f77b4", "sgd_wd": "#8c564b", "sgd_wclip": "#17becf", "idbd": "#2ca02c", "idbd_wd": "#98df8a",
    "adam": "#9467bd", "adamw": "#7f7f7f", "adam_wclip": "#bcbd22", "coupled": "#393b79",
}
_SPARE = ("#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1")


def config_label(row: dict) -> str:
    """"method (hyperparameter=value, ...)": how legends and sentences name a configuration."""
    chosen = tables.selected_hyperparameters(row)
    return f"{row['optimizer']} ({chosen})" if chosen else row["optimizer"]


def method_color(method: str) -> str:
    """The method's colour in every figure (a fixed spare colour for a method not listed)."""
    return METHOD_COLORS.get(method) or _SPARE[zlib.crc32(method.encode()) % len(_SPARE)]


def log_ticks(low: float, high: float) -> dict:
    """Tick values and labels for a log axis showing [low, high]: 1-2-5 per decade (every digit
    within one decade, decades only over many), each labelled in full ("0.02", not plotly's
    bare "2" minor labels). Ticks cover whole decades: plotly draws those inside the axis range."""
    if not (low > 0 and high > 0 and math.isfinite(low) and math.isfinite(high)):
        return {}
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    decades = math.log10(high / low)
    mantissas = (1,) if decades > 4 else (1, 2, 5) if decades > 1 else range(1, 10)
    values = [m * 10.0**e for e in range(first, last + 1) for m in mantissas]
    return {"tickvals": values, "ticktext": [f"{v:.3g}" for v in values]}


@dataclasses.dataclass(frozen=True)
class ColourRange:
    """What a colour scale maps: `values` (log10 of the scores when `log`) onto [cmin, cmax]."""

    values: np.ndarray
    cmin: float
    cmax: float
    log: bool
    clipped: int  # cells beyond the fence, drawn at the end colour

    def note(self) -> str:
        parts = ["log scale"] if self.log else []
        if self.clipped:
            parts.append(f"{self.clipped} cell{'s' if self.clipped > 1 else ''} beyond median + 3 x |median - best| drawn at the end colour")
        return "; ".join(parts)

    def ticks(self) -> dict:
        """Colorbar ticks in score units."""
        if not self.log:
            return {}
        ticks = log_ticks(10**self.cmin, 10**self.cmax)
        return {"tickvals": [math.log10(v) for v in ticks.get("tickvals", [])], "ticktext": ticks.get("ticktext", [])}


def colour_range(scores: np.ndarray, higher_is_better: bool) -> ColourRange:
    """The robust colour range of the module rule for finite `scores` (NaN kept as NaN)."""
    scores = np.asarray(scores, dtype=float)
    finite = scores[np.isfinite(scores)]
    log = not higher_is_better and finite.size > 1 and bool((finite > 0).all()) and finite.max() / finite.min() >= 10
    values = np.log10(np.where(scores > 0, scores, np.nan)) if log else scores
    shown = values[np.isfinite(values)]
    if shown.size == 0:
        return ColourRange(values, 0.0, 1.0, log, 0)
    q1, median, q3 = np.quantile(shown, [0.25, 0.5, 0.75])
    low, high = float(shown.min()), float(shown.max())
    best = high if higher_is_better else low
    spread = abs(median - best) or abs((q1 if higher_is_better else q3) - best)  # the quartile when half tie
    reach = FENCE_SPREADS * spread
    if higher_is_better:
        low = max(low, median - reach)
        clipped = int((shown < low).sum())
    else:
        high = min(high, median + reach)
        clipped = int((shown > high).sum())
    span = math.log10(1 + MIN_RELATIVE_SPAN) if log else MIN_RELATIVE_SPAN * max(abs(best), 1e-12)
    if high - low < span:
        low, high = (high - span, high) if higher_is_better else (low, low + span)
    return ColourRange(values, low, high, log, clipped)
