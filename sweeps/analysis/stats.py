"""The statistics behind every table: per-cell aggregates over seeds, bootstrap confidence
intervals, outlier seeds, paired comparisons between methods and main-effect importance.

Everything is vectorised with numpy: cells are grouped by seed count n and each group is
one (cells, n) score matrix; no Python loop runs per cell.

Definitions (also in docs/tables.md):

- **std** with ddof=1, **sem** = std / sqrt(n); null when n < 2.
- **median**: the middle order statistic (mean of the two middle ones for even n).
- **IQM** (interquartile mean, as rliable's `metrics.aggregate_iqm`, which is
  `scipy.stats.trim_mean(x, 0.25)`): sort the n seeds, drop g = floor(n / 4) from each end,
  mean of the n - 2g that remain. (n < 4: g = 0, the IQM is the mean; n = 10: the middle 6.)
- **95% CI**: percentile bootstrap of the chosen statistic over seeds, B = 2,000 resamples
  of n seeds with replacement, the 2.5% and 97.5% quantiles (numpy's linear interpolation).
  The resample indices come from `numpy.random.default_rng([BOOTSTRAP_SEED, n])`: a cell's
  CI depends only on its own scores, and tables are identical run to run. Null when n < 2
  or when a seed is not finite (diverged).
  Implementation: every statistic here is a weighted sum of order statistics. Sort each
  cell's scores once; a resample drawn with SORTED indices from a sorted row is itself
  sorted, so each resample's statistic is a fixed weight vector over the row, and all B
  statistics of all cells are one matrix product (cells, n) @ (n, B) (in float32: about
  1e-7 relative error in the CI bounds), then one partial sort per row for the quantiles.
- **Outlier seeds**: among a cell's finite scores, x is an outlier when
  |x - median| > 5 * s, s = 1.4826 * MAD (median absolute deviation; 1.4826 makes it the
  standard deviation for normal data), AND |x - median| > 10% of |median| (a minimum effect
  size: a seed 0.3% away from tightly clustered others is not worth a mark). When MAD = 0
  (at least half the seeds share one value) s falls back to 1.2533 * mean absolute deviation
  from the median (Iglewicz and Hoaglin's fallback; sqrt(pi/2) makes it the standard
  deviation for normal data); when that is 0 too all seeds are equal and none is flagged.
  With fewer than 5 finite seeds nothing is flagged (with 3 the MAD is one distance, and
  any spread looks extreme). Diverged seeds are counted as diverged, not as outliers.
- **Unstable cells**: blow-ups that stayed finite, for a lower-is-better score: a cell whose
  worst seed is more than 100 times its median (seeds that disagree by orders of
  magnitude), or whose median is more than 100 times the typical cell of its method's grid
  (the median of the cell medians of that method and task setting). Like diverged cells,
  unstable cells are marked in the report and left out of the importance decomposition,
  whose shares they would dominate.
- **Paired comparison** of method A against reference R on the seeds they share (the
  streams of a seed are the same for every method, so scores pair by seed): the difference
  stat(A) - stat(R) (for the mean: the mean paired difference) with a paired bootstrap CI
  (the same resampled seeds for both), and the probability of improvement
  P(A better than R) = 1/(n^2) * sum_{i,j} S(a_i, r_j), S = 1 if a_i is better than r_j
  (lower MSE, higher accuracy), 1/2 on ties, 0 otherwise: the Mann-Whitney estimate over
  all seed pairs, as rliable's `probability_of_improvement`; its CI is the paired
  bootstrap of the same estimate.
- **Importance** (main-effect variance decomposition) of a cell statistic y over a full
  factorial grid of k hyperparameters: SS_total = sum (y - mean y)^2; the main effect of
  hyperparameter j is SS_j = sum over its levels of (cells at that level) x (level mean -
  mean y)^2; share_j = SS_j / SS_total and the rest, 1 - sum_j share_j, is the share of the
  interactions. On a full grid (every combination exactly once) the main effects are
  orthogonal, so this is exact and the shares are non-negative and sum to 1.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from sweeps.analysis import STATS

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240607
CI_LEVEL = 0.95
IQM_TRIM = 0.25
OUTLIER_THRESHOLD = 5.0
OUTLIER_MIN_SEEDS = 5  # fewer finite seeds: no outlier is flagged
OUTLIER_MIN_RELATIVE = 0.1  # and none closer to the median than 10% of it
UNSTABLE_RATIO = 100.0  # worst seed / median beyond which a cell is unstable
MAD_SCALE = 1.4826
MEAN_AD_SCALE = 1.2533  # sqrt(pi / 2)
_CHUNK = 2048  # cells per bootstrap block: (2048, B) float64 = 33 MB


def check_stat(stat: str) -> str:
    if stat not in STATS:
        raise ValueError(f"unknown statistic {stat!r}; choose one of {', '.join(STATS)}")
    return stat


def trimmed(n: int) -> int:
    """Seeds the IQM drops from each end: floor(n / 4), as scipy.stats.trim_mean(x, 0.25)."""
    return int(IQM_TRIM * n)


def order_weights(stat: str, n: int) -> np.ndarray:
    """The statistic as weights over the n order statistics (ascending)."""
    check_stat(stat)
    w = np.zeros(n)
    if stat == "mean":
        w[:] = 1.0 / n
    elif stat == "median":
        if n % 2:
            w[n // 2] = 1.0
        else:
            w[n // 2 - 1 : n // 2 + 1] = 0.5
    else:
        g = trimmed(n)
        w[g : n - g] = 1.0 / (n - 2 * g)
    return w


def resample_indices(n: int, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """(B, n) bootstrap indices for samples of size n; the same for every call with the same n."""
    return np.random.default_rng([seed, n]).integers(0, n, size=(resamples, n))


def _resample_weights(stat: str, n: int, resamples: int, seed: int) -> np.ndarray:
    """(n, B): column b applied to a SORTED row gives the statistic of resample b."""
    idx = np.sort(resample_indices(n, resamples, seed), axis=1)
    w = order_weights(stat, n)
    weights = np.zeros((resamples, n))
    np.add.at(weights, (np.repeat(np.arange(resamples), n), idx.ravel()), np.tile(w, resamples))
    return weights.T


def _quantiles(boot: np.ndarray, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The (1 - level)/2 and (1 + level)/2 quantiles along the last axis, numpy's default
    (linear) definition, by one partial sort (np.quantile sorts more than it needs)."""
    b = boot.shape[-1]
    tail = (1 - level) / 2
    positions = [tail * (b - 1), (1 - tail) * (b - 1)]
    kth = sorted({min(math.floor(h) + d, b - 1) for h in positions for d in (0, 1)})
    part = np.partition(boot, kth, axis=-1)
    out = []
    for h in positions:
        lo = math.floor(h)
        hi = min(lo + 1, b - 1)
        frac = h - lo
        out.append(part[..., lo] + frac * (part[..., hi] - part[..., lo]))
    return out[0], out[1]


def block_statistics(scores: np.ndarray, stat: str, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> dict[str, np.ndarray]:
    """All aggregates of an (m cells, n seeds) score matrix: mean, std, sem, median, iqm, min,
    max, and the bootstrap CI (ci_low, ci_high) of `stat`; each (m,). Non-finite scores
    propagate into mean/std/min/max; median, iqm and the CI are NaN for such rows."""
    scores = np.asarray(scores, dtype=np.float64)
    m, n = scores.shape
    finite = np.isfinite(scores).all(axis=1)
    ordered = np.sort(np.where(finite[:, None], scores, 0.0), axis=1)
    out: dict[str, np.ndarray] = {}
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        out["mean"] = scores.mean(axis=1)
        out["std"] = scores.std(axis=1, ddof=1) if n > 1 else np.full(m, np.nan)
        out["sem"] = out["std"] / math.sqrt(n)
        out["min"] = scores.min(axis=1) if n else np.full(m, np.nan)
        out["max"] = scores.max(axis=1) if n else np.full(m, np.nan)
    for name in ("median", "iqm"):
        out[name] = np.where(finite, ordered @ order_weights(name, n), np.nan)
    low = np.full(m, np.nan)
    high = np.full(m, np.nan)
    if n > 1:
        weights = _resample_weights(stat, n, resamples, seed)
        weights32 = weights.astype(np.float32)
        rows = np.flatnonzero(finite)
        for start in range(0, rows.size, _CHUNK):
            chunk = rows[start : start + _CHUNK]
            block = ordered[chunk]
            # float32 halves the memory traffic of the (cells, B) product and its partial sort; a CI
            # needs ~1e-7 relative precision no more (float64 where float32 would overflow)
            small = np.abs(block).max(initial=0.0) < 1e30
            boot = block.astype(np.float32) @ weights32 if small else block @ weights
            low[chunk], high[chunk] = _quantiles(boot)
    out["ci_low"], out["ci_high"] = low, high
    return out


def outlier_mask(scores: np.ndarray) -> np.ndarray:
    """(m, n) bool: the outlier seeds of each row by the median +- 5 * scaled-MAD rule, with at
    least 5 finite seeds and a 10% minimum distance from the median (module doc)."""
    x = np.where(np.isfinite(scores), scores, np.nan)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(x, axis=1, keepdims=True)
        dev = np.abs(x - med)
        scale = MAD_SCALE * np.nanmedian(dev, axis=1, keepdims=True)
        scale = np.where(scale > 0, scale, MEAN_AD_SCALE * np.nanmean(dev, axis=1, keepdims=True))
        enough = np.isfinite(x).sum(axis=1, keepdims=True) >= OUTLIER_MIN_SEEDS
        return enough & (scale > 0) & (dev > OUTLIER_THRESHOLD * scale) & (dev > OUTLIER_MIN_RELATIVE * np.abs(med))


def unstable(median: np.ndarray, worst: np.ndarray, typical: np.ndarray) -> np.ndarray:
    """Cells of a lower-is-better score whose worst seed exceeds 100 x their median, or whose median
    exceeds 100 x `typical` (the median cell median of the method's grid; module doc)."""
    median, worst, typical = (np.asarray(a, dtype=float) for a in (median, worst, typical))
    with np.errstate(invalid="ignore"):
        spread = np.isfinite(worst) & (worst > UNSTABLE_RATIO * median)
        return (median > 0) & (spread | (np.isfinite(median) & (median > UNSTABLE_RATIO * typical)))


def paired_comparisons(a: np.ndarray, r: np.ndarray, higher_is_better: np.ndarray, stat: str,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, np.ndarray]:
    """k comparisons at once: a and r are (k, n) scores aligned by seed (finite), higher_is_better (k,).

    Returns difference = stat(a) - stat(r) with its paired bootstrap CI (diff_ci_low/high),
    and p_improvement = P(a better than r) (Mann-Whitney over all seed pairs, ties 1/2) with
    its paired bootstrap CI (p_ci_low/high); each (k,). CIs are NaN when n < 2."""
    a = np.asarray(a, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    k, n = a.shape
    w = order_weights(stat, n)
    difference = np.sort(a, axis=1) @ w - np.sort(r, axis=1) @ w
    sign = np.where(np.asarray(higher_is_better, bool), 1.0, -1.0)[:, None, None]
    delta = sign * (a[:, :, None] - r[:, None, :])  # (k, i, j): > 0 where a_i is better than r_j
    wins = (delta > 0) + 0.5 * (delta == 0)
    p = wins.mean(axis=(1, 2))
    out = {"difference": difference, "p_improvement": p}
    nan = np.full(k, np.nan)
    out.update(diff_ci_low=nan, diff_ci_high=nan.copy(), p_ci_low=nan.copy(), p_ci_high=nan.copy())
    if n > 1:
        idx = resample_indices(n, resamples, seed)  # (B, n), shared by a and r: the pairing
        boot_diff = np.sort(a[:, idx], axis=2) @ w - np.sort(r[:, idx], axis=2) @ w  # (k, B)
        counts = np.zeros((resamples, n))
        np.add.at(counts, (np.repeat(np.arange(resamples), n), idx.ravel()), 1.0)
        boot_p = np.einsum("bi,kij,bj->kb", counts, wins, counts) / n**2
        out["diff_ci_low"], out["diff_ci_high"] = _quantiles(boot_diff)
        out["p_ci_low"], out["p_ci_high"] = _quantiles(boot_p)
    return out


def main_effect_shares(codes: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Shares of the variance of y explained by each factor's main effect, and the
    interactions' share (1 - their sum). `codes` (m, k): each cell's level index per factor.
    None unless the cells are a full factorial grid (every combination exactly once) with
    finite y that is not constant."""
    codes = np.asarray(codes, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    m, k = codes.shape
    levels = codes.max(axis=0) + 1 if m else np.zeros(k, int)
    if m == 0 or not np.isfinite(y).all() or m != int(np.prod(levels)):
        return None
    flat = np.ravel_multi_index(tuple(codes.T), tuple(levels))
    if np.unique(flat).size != m:
        return None
    centred = y - y.mean()
    total = float(centred @ centred)
    if total <= 0:
        return None
    shares = np.empty(k)
    for j in range(k):  # per factor (a handful), not per cell
        count = np.bincount(codes[:, j], minlength=levels[j])
        means = np.bincount(codes[:, j], weights=centred, minlength=levels[j]) / count
        shares[j] = float(count @ means**2) / total
    return shares, float(max(0.0, 1.0 - shares.sum()))
