"""Per-run reductions at bin ends (sweeps/packs/rowwise.py) give a run the same bits in a pack of any size.

NumPy's own `values.mean(axis=1)` does not: its order follows the array's shape, and a resumed pack's decay
curves came out different in the last bits from the uninterrupted run's when the re-run was packed anew."""

import numpy as np

from sweeps.packs.rowwise import row_means, trailing_sums


COLUMNS = np.arange(5, 20)  # a group's columns, as linear packs select them (a fresh copy per pack)


def _rates(rows: int = 40) -> np.ndarray:
    """Decay rates as a linear pack sees them: exp of float32 state, in float64."""
    return np.exp(np.random.default_rng(0).normal(-3, 1, size=(rows, 20)).astype(np.float32).astype(np.float64))


def test_a_row_gets_the_same_bits_whatever_rows_share_its_array():
    values = _rates()
    alone = np.array([row_means(values[r : r + 1][:, COLUMNS])[0] for r in range(len(values))])
    for size in (2, 3, 5, 6, 7, 12, 17, 40):
        for start in range(0, len(values) - size + 1, size):
            assert np.array_equal(row_means(values[start : start + size][:, COLUMNS]), alone[start : start + size]), size
    np.testing.assert_allclose(alone, values[:, COLUMNS].mean(axis=1), rtol=1e-15)  # the mean, to rounding


def test_numpy_alone_does_not_keep_that_promise():
    """Why the module exists (if NumPy ever makes its reductions shape-independent, it can go)."""
    values = _rates()
    alone = np.array([values[r : r + 1][:, COLUMNS].mean(axis=1)[0] for r in range(len(values))])
    packed = [np.array_equal(values[s : s + n][:, COLUMNS].mean(axis=1), alone[s : s + n])
              for n in (2, 3, 5, 6, 7, 12, 17, 40) for s in range(0, len(values) - n + 1, n)]
    assert not all(packed)


def test_trailing_sums_keep_the_leading_axes():
    values = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
    assert np.array_equal(trailing_sums(values), values.sum(axis=2))
    assert np.array_equal(trailing_sums(values, 2), values.sum(axis=(1, 2)))
