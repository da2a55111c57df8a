"""The linear tracking stream of tasks.md: x ~ N(0, I_20), y* = <w*_t, x> + noise.

w* has 5 relevant components (+-1) and 15 that are 0 forever; after every `period`
steps one relevant component, chosen uniformly, flips its sign. The sign schedule is
drawn once per seed; inputs and noise come in counter-based blocks (`tasks.stream`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.stream import BLOCK, CounterStream, check_settings, counter_rng

DIM = 20
RELEVANT = 5

# Purposes for the counter-based generators; never reorder (streams would change).
_SIGNS, _FLIPS, _INPUTS = 0, 1, 2


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


class LinearTrackingStream(CounterStream):
    """One seed's stream; `chunk(start, n)` gives float64 inputs (n, 20) and targets (n,)."""

    dim = DIM
    relevant = RELEVANT

    def __init__(self, settings: LinearTrackingSettings, seed: int):
        super().__init__(settings, seed)
        # Weight columns whose decay and step-size rates are logged apart (tasks.md), as the
        # nonlinear stream's `groups` name its output rows; the same for every seed.
        self.groups = {"relevant": np.arange(RELEVANT), "irrelevant": np.arange(RELEVANT, DIM)}
        signs0 = counter_rng(seed, _SIGNS).choice([-1.0, 1.0], size=RELEVANT)
        flips = counter_rng(seed, _FLIPS).integers(0, RELEVANT, size=settings.steps // settings.period)
        # parity[k, i] = 1 if component i has flipped an odd number of times after k flips.
        onehot = np.zeros((len(flips) + 1, RELEVANT), dtype=np.int64)
        onehot[np.arange(1, len(flips) + 1), flips] = 1
        parity = np.cumsum(onehot, axis=0) % 2
        self._relevant_weights = signs0 * (1 - 2 * parity)  # (n_flips + 1, RELEVANT)
        self.flips = flips

    def target_weights(self, start: int, n: int) -> np.ndarray:
        """w*_t for t in [start, start + n): (n, DIM)."""
        return self._weights_at(np.arange(start, start + n))

    def _weights_at(self, steps: np.ndarray) -> np.ndarray:
        w = np.zeros((len(steps), DIM))
        w[:, :RELEVANT] = self._relevant_weights[steps // self.settings.period]
        return w

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        rng = counter_rng(self.seed, _INPUTS, b)
        x, eps = rng.standard_normal((BLOCK, DIM)), rng.standard_normal(BLOCK)
        # A block may run past the stream's end: hold w* there (those steps are never returned).
        steps = np.minimum(np.arange(b * BLOCK, (b + 1) * BLOCK), self.settings.steps - 1)
        y = np.einsum("td,td->t", self._weights_at(steps), x) + self.settings.noise * eps
        return x, y
