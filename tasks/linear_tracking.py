"""The linear tracking stream of tasks.md: x ~ N(0, I_20), y* = <w*_t, x> + noise.

w* has 5 relevant components (+-1) and 15 that are 0 forever; after every `period`
steps one relevant component, chosen uniformly, flips its sign. The sign schedule is
drawn once per seed; inputs and noise come in counter-based blocks (`tasks.stream`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.schedule import Schedule, Walk
from tasks.stream import BLOCK, CounterStream, check_settings, counter_rng

DIM = 20
RELEVANT = 5

# Purposes for the counter-based generators; never reorder (streams would change).
_SIGNS, _FLIPS, _INPUTS, _FAR_STATES, _FAR_FLIPS = range(5)

LEGACY_FLIPS = 2**20  # flips drawn by the one sequential generator (21M steps at period 20: 100x the paper's)
LEGACY_SEGMENT = 2**16  # flips per segment of that walk (a checkpoint of the generator at each start)
FAR_FLIPS = 2**12  # flips per counter-drawn segment past LEGACY_FLIPS
_CANDIDATES = 32  # candidate flip sequences drawn at once for a far segment (each fits with probability 1/16)
# Version 2: flips past LEGACY_FLIPS are drawn from counters (version 1 drew them all from the sequential generator).
STREAM_VERSION = 2


@dataclass(frozen=True)
class LinearTrackingSettings:
    """Settings of tasks.md / interface.md; defaults are the paper's."""

    noise: float = 0.0  # sigma_n, standard deviation of the target noise
    steps: int = 200_000  # stream length
    period: int = 20  # steps between sign flips
    bin: int = 1_000  # steps per logged bin

    def check(self) -> None:
        if self.noise < 0:
            raise ValueError(f"linear_tracking: noise must be >= 0, got {self.noise:g}")
        check_settings("linear_tracking", steps=self.steps, period=self.period, bin=self.bin)
        if self.bin < self.steps and self.steps % self.bin:  # the last bin would be shorter, unlike the others
            near = range(self.bin - 1, max(self.bin - 10_000, 0), -1)  # a bounded search: steps may be huge
            fits = next((b for b in near if self.steps % b == 0), None)
            raise ValueError(f"linear_tracking: bin {self.bin} does not divide steps {self.steps} (the last bin would "
                             f"hold {self.steps % self.bin} steps); choose a bin that divides it"
                             + (f", e.g. {fits}" if fits else ""))


def shared_steps(settings: LinearTrackingSettings) -> int:
    """The first steps every version of the stream draws the same: those before flip LEGACY_FLIPS + 1."""
    return (LEGACY_FLIPS + 1) * settings.period


class LinearTrackingStream(CounterStream):
    """One seed's stream; `chunk(start, n)` gives float64 inputs (n, 20) and targets (n,)."""

    dim = DIM
    relevant = RELEVANT

    def __init__(self, settings: LinearTrackingSettings, seed: int):
        super().__init__(settings, seed)
        # Weight columns whose decay and step-size rates are logged apart (tasks.md), as the
        # nonlinear stream's `groups` name its output rows; the same for every seed.
        self.groups = {"relevant": np.arange(RELEVANT), "irrelevant": np.arange(RELEVANT, DIM)}
        self.signs0 = counter_rng(seed, _SIGNS).choice([-1.0, 1.0], size=RELEVANT)
        # parity[k, i] = 1 if component i has flipped an odd number of times after k flips.
        legacy = Walk(counter_rng(seed, _FLIPS), lambda rng, n: rng.integers(0, RELEVANT, size=n), _flipped,
                      np.zeros(RELEVANT, np.int8), LEGACY_SEGMENT, LEGACY_FLIPS)
        self.parity = Schedule(legacy, self._far_parity, self._far_end, FAR_FLIPS)

    def _far_end(self, j: int) -> np.ndarray:
        """The parity after far segment j: uniform over the even-weight vectors, from its counter alone.

        Exact (to 1e-900) for the flips' law: the parity of 4096 uniform flips of 5 components is uniform
        over the vectors of even weight up to terms of (3/5)**4096, and parities of disjoint segments are
        independent, so the ends are i.i.d. and segment j's flips are drawn given both ends."""
        bits = counter_rng(self.seed, _FAR_STATES, j).integers(0, 2, size=RELEVANT).astype(np.int8)
        bits[-1] = bits[:-1].sum() % 2
        return bits

    def _far_parity(self, j: int, start: np.ndarray) -> np.ndarray:
        """(FAR_FLIPS + 1, RELEVANT) parities of far segment j: its flips drawn uniformly given that they take
        the parity from `start` to `_far_end(j)` (rejection sampling, exact)."""
        wanted = start ^ self._far_end(j)
        rng = counter_rng(self.seed, _FAR_FLIPS, j)
        while True:
            flips = rng.integers(0, RELEVANT, size=(_CANDIDATES, FAR_FLIPS))
            counts = np.stack([(flips == i).sum(axis=1) for i in range(RELEVANT)], axis=1) % 2
            fits = np.flatnonzero((counts == wanted).all(axis=1))
            if len(fits):
                return np.concatenate([start[None], _flipped(start, flips[fits[0]])])

    def target_weights(self, start: int, n: int) -> np.ndarray:
        """w*_t for t in [start, start + n): (n, DIM)."""
        return self._weights_at(np.arange(start, start + n))

    def _weights_at(self, steps: np.ndarray) -> np.ndarray:
        w = np.zeros((len(steps), DIM))
        if len(steps):
            flips = steps // self.settings.period
            parity = self.parity.states(int(flips.min()), int(flips.max()))[flips - flips.min()]
            w[:, :RELEVANT] = self.signs0 * (1 - 2 * parity)
        return w

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        rng = counter_rng(self.seed, _INPUTS, b)
        x, eps = rng.standard_normal((BLOCK, DIM)), rng.standard_normal(BLOCK)
        # A block may run past the stream's end: hold w* there (those steps are never returned).
        steps = np.minimum(np.arange(b * BLOCK, (b + 1) * BLOCK), self.settings.steps - 1)
        y = np.einsum("td,td->t", self._weights_at(steps), x) + self.settings.noise * eps
        return x, y


def _flipped(parity: np.ndarray, flips: np.ndarray) -> np.ndarray:
    """(n, RELEVANT) the parity after each of `flips` (component indices), starting from `parity`."""
    onehot = np.zeros((len(flips), RELEVANT), dtype=np.int8)
    onehot[np.arange(len(flips)), flips] = 1
    return np.bitwise_xor.accumulate(onehot, axis=0) ^ parity
