"""Per-run reductions whose result never depends on how many runs share the pack.

NumPy picks the order of a 2-D reduction over the last axis by the array's shape: a run's
row sum comes out different in the last bits with 3 runs beside it than with 6 (seen as a
resumed pack's decay curves differing from the uninterrupted run's once the planner cut the
re-run into packs of another size). Here a row is summed left to right as a cumulative sum,
whose order is defined element by element (no pairwise blocks): the same for every shape,
and vectorised. Used at bin ends, not per step.
"""

from __future__ import annotations

import numpy as np


def trailing_sums(values: np.ndarray, trailing: int = 1) -> np.ndarray:
    """float64 sums over the last `trailing` axes, each row of the leading axes left to right."""
    leading = values.shape[: values.ndim - trailing]
    rows = values.reshape(int(np.prod(leading, dtype=np.int64)), -1)
    if rows.shape[1] == 0:
        return np.zeros(leading)
    return np.cumsum(rows, axis=1, dtype=np.float64)[:, -1].reshape(leading)


def row_means(values: np.ndarray) -> np.ndarray:
    """[R, k] -> [R]: each run's mean over its row, in an order independent of R."""
    return trailing_sums(values) / values.shape[1]
