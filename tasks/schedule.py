"""A stream's change schedule made lazily, a segment at a time: memory bounded by the segment, not the stream.

A schedule is a running state (which signs are flipped) after each of a sequence of random draws. Up to
`legacy` draws it is the one sequential generator the streams always used (`Walk`), made segment by
segment with the generator's state checkpointed at each segment start, so the numbers are the ones the
whole table drawn up front gave, bit for bit (a consecutive draw of n values equals draws of its pieces),
and reading a segment again costs one segment's draws. Past `legacy` the state is drawn from counters
(`tasks.stream.counter_rng`, keyed by the segment), so a segment far along costs no walk from the start:
a stream of 1e12 steps costs per block what one of 1e6 does. The limits are far past the paper's lengths
(tasks.md), which therefore keep their numbers.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import numpy as np

Draw = Callable[[np.random.Generator, int], np.ndarray]  # n draws of the generator
Fold = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (state before, n draws) -> the n states after each draw

KEPT_SEGMENTS = 2  # tables kept per schedule: a block reads one segment, or two at a boundary


class Walk:
    """The states after each draw of ONE sequential generator, for draws [0, limit), by segment.

    `states(lo, hi)` is the state after k draws for k in [lo, hi] (k = 0: `initial`). Segment m (draws
    [m * size, (m + 1) * size)) is drawn from the checkpoint at its start: the generator's state and the
    running state there, recorded the first time the walk passed (limit / size checkpoints at most).
    """

    def __init__(self, rng: np.random.Generator, draw: Draw, fold: Fold, initial: np.ndarray, size: int, limit: int):
        if limit % size:
            raise ValueError(f"a walk's limit {limit} must be whole segments of {size}")
        self.size, self.limit = size, limit
        self._rng, self._draw, self._fold = rng, draw, fold
        self._checkpoints = {0: (rng.bit_generator.state, initial)}
        self._tables: OrderedDict[int, np.ndarray] = OrderedDict()

    def table(self, m: int) -> np.ndarray:
        """(size + 1, ...): the states after m * size, ..., (m + 1) * size draws."""
        if m in self._tables:
            self._tables.move_to_end(m)
            return self._tables[m]
        if not 0 <= m < self.limit // self.size:
            raise ValueError(f"segment {m} is past the walk's {self.limit} draws")
        at = max(s for s in self._checkpoints if s <= m)
        generator, carry = self._checkpoints[at]
        self._rng.bit_generator.state = generator
        for s in range(at, m + 1):
            table = np.concatenate([carry[None], self._fold(carry, self._draw(self._rng, self.size))])
            carry = table[-1]
            self._checkpoints[s + 1] = (self._rng.bit_generator.state, carry)
        return _keep(self._tables, m, table)

    def state(self, k: int) -> np.ndarray:
        """The state after k draws (k <= limit)."""
        m = min(k // self.size, self.limit // self.size - 1)
        return self.table(m)[k - m * self.size]


def _keep(tables: OrderedDict[int, np.ndarray], key: int, table: np.ndarray) -> np.ndarray:
    if len(tables) >= KEPT_SEGMENTS:
        tables.popitem(last=False)
    tables[key] = table
    return table


class Schedule:
    """States for k = 0, 1, ... changes: `legacy`'s walk up to its limit, then segments of `far_size`
    changes each drawn by `far(j, state at its start)`, whose table's last row the next segment starts from.

    `far(j, start)` must give (far_size + 1, ...) states, row 0 `start`, and its last row must not depend on
    `start` (it is drawn from counters alone), so segment j needs no walk through segments before it.
    """

    def __init__(self, legacy: Walk, far: Callable[[int, np.ndarray], np.ndarray], far_end: Callable[[int], np.ndarray],
                 far_size: int):
        self.legacy, self._far, self._far_end, self.far_size = legacy, far, far_end, far_size
        self._tables: OrderedDict[int, np.ndarray] = OrderedDict()

    def _far_table(self, j: int) -> np.ndarray:
        if j in self._tables:
            self._tables.move_to_end(j)
            return self._tables[j]
        start = self.legacy.state(self.legacy.limit) if j == 0 else self._far_end(j - 1)
        return _keep(self._tables, j, self._far(j, start))

    def states(self, lo: int, hi: int) -> np.ndarray:
        """The states after k changes, k in [lo, hi], stacked: (hi - lo + 1, ...)."""
        pieces, k = [], lo
        while k <= hi:
            if k < self.legacy.limit:
                m = k // self.legacy.size
                table, first = self.legacy.table(m), m * self.legacy.size
                last = first + self.legacy.size - 1  # a segment's last row is the next one's first
            else:
                j = (k - self.legacy.limit) // self.far_size
                table, first = self._far_table(j), self.legacy.limit + j * self.far_size
                last = first + self.far_size - 1
            end = min(hi, last)
            pieces.append(table[k - first : end - first + 1])
            k = end + 1
        return np.concatenate(pieces)
