"""Per-run reductions whose result never depends on how many runs share the pack.

NumPy picks the order of a 2-D reduction over the last axis by the array's shape: a run's
row sum comes out different in the last bits with 3 runs beside it than with 6 (seen as a
resumed pack's decay curves differing from the uninterrupted run's once the planner cut the
re-run into packs of another size). Here each row is summed on its own: a 1-D NumPy sum's
order depends on the row's length only. Used at bin ends, not per step.
"""

from __future__ import annotations

import numpy as np


def trailing_sums(values: np.ndarray, trailing: int = 1) -> np.ndarray:
    """float64 sums over the last `trailing` axes, one 1-D sum per row of the leading axes."""
    leading = values.shape[: values.ndim - trailing]
    rows = values.reshape(int(np.prod(leading, dtype=np.int64)), -1)
    sums = np.fromiter((row.sum(dtype=np.float64) for row in rows), dtype=np.float64, count=len(rows))
    return sums.reshape(leading)


def row_means(values: np.ndarray) -> np.ndarray:
    """[R, k] -> [R]: each run's mean over its row, in an order independent of R."""
    return trailing_sums(values) / values.shape[1]
