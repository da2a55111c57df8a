"""The linear tracking stream of tasks.md: x ~ N(0, I_20), y* = <w*_t, x> + noise.

w* has 5 relevant components (+-1) and 15 that are 0 forever; after every `period`
steps one relevant component, chosen uniformly, flips its sign.

The stream is a pure function of (settings, seed) with random access: inputs and noise
come in fixed blocks of `BLOCK` steps, each drawn from its own counter-based generator
(seed, purpose, block index), and the sign schedule is drawn once. So a chunk of 1000
steps equals chunks of 400 and 600 joined, and resuming at step t needs only t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DIM = 20
RELEVANT = 5
BLOCK = 4096

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
        if self.noise < 0 or self.steps <= 0 or self.period <= 0 or self.bin <= 0:
            raise ValueError("linear_tracking needs noise >= 0 and positive steps, period and bin")


def _rng(seed: int, purpose: int, index: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, purpose, index]))


class LinearTrackingStream:
    """Random-access linear tracking stream of one seed (float64 NumPy arrays)."""

    dim = DIM
    relevant = RELEVANT

    def __init__(self, settings: LinearTrackingSettings, seed: int):
        self.settings = settings
        self.seed = seed
        signs0 = _rng(seed, _SIGNS).choice([-1.0, 1.0], size=RELEVANT)
        flips = _rng(seed, _FLIPS).integers(0, RELEVANT, size=settings.steps // settings.period)
        # parity[k, i] = 1 if component i has flipped an odd number of times after k flips.
        onehot = np.zeros((len(flips) + 1, RELEVANT), dtype=np.int64)
        onehot[np.arange(1, len(flips) + 1), flips] = 1
        parity = np.cumsum(onehot, axis=0) % 2
        self._relevant_weights = signs0 * (1 - 2 * parity)  # (n_flips + 1, RELEVANT)
        self.flips = flips

    def target_weights(self, start: int, n: int) -> np.ndarray:
        """w*_t for t in [start, start + n): (n, DIM)."""
        w = np.zeros((n, DIM))
        w[:, :RELEVANT] = self._relevant_weights[np.arange(start, start + n) // self.settings.period]
        return w

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        rng = _rng(self.seed, _INPUTS, b)
        return rng.standard_normal((BLOCK, DIM)), rng.standard_normal(BLOCK)

    def chunk(self, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Inputs (n, DIM) and targets (n,) of steps [start, start + n)."""
        if start < 0 or start + n > self.settings.steps:
            raise ValueError(f"steps [{start}, {start + n}) outside the stream's {self.settings.steps} steps")
        first, last = start // BLOCK, (start + n - 1) // BLOCK if n else start // BLOCK
        blocks = [self._block(b) for b in range(first, last + 1)]
        offset = start - first * BLOCK
        x = np.concatenate([b[0] for b in blocks])[offset : offset + n]
        eps = np.concatenate([b[1] for b in blocks])[offset : offset + n]
        y = np.einsum("td,td->t", self.target_weights(start, n), x) + self.settings.noise * eps
        return x, y
