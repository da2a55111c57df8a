"""The nonlinear teacher-student tracking stream of tasks.md.

x_t ~ N(0, I_32); target = W2_t relu(W1 x_t) from a teacher with PyTorch's default
Linear initialisation (no biases). The 20 outputs are split at random per seed into 6
stable, 7 fast and 7 slow ones; after every `period` steps each weight into a fast
output is multiplied by an independent random sign, after every `slow_multiplier *
period` steps the same happens to the slow outputs.

The sign schedule is made lazily by segment (`tasks.schedule`): the first LEGACY_CHANGES
changes are the per-seed sequential draws the stream always had (bit for bit), later ones
are drawn from counters; inputs and targets come in counter-based blocks (`tasks.stream`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fade_core.architecture import Architecture
from tasks.schedule import Schedule, Walk
from tasks.stream import BLOCK, CounterStream, check_settings, counter_rng

INPUTS, HIDDEN, OUTPUTS = 32, 256, 20
GROUP_SIZES = {"stable": 6, "fast": 7, "slow": 7}
STUDENT = Architecture((INPUTS, HIDDEN, OUTPUTS), negative_slope=0.0)

# Purposes of the counter-based generators; never reorder (streams would change).
_TEACHER, _GROUPS, _FAST_SIGNS, _SLOW_SIGNS, _INPUTS, _FAR_FAST_SIGNS, _FAR_SLOW_SIGNS = range(7)

LEGACY_CHANGES = 2**13  # sign changes drawn by the one sequential generator (4.1M steps at period 500: 2x the paper's)
LEGACY_SEGMENT = 2**8  # changes per segment of that walk (a checkpoint of the generator at each start)
FAR_CHANGES = 2**6  # changes per counter-drawn segment past LEGACY_CHANGES
_SIGNS = np.array([-1, 1], dtype=np.int8)
# Version 2: changes past LEGACY_CHANGES are drawn from counters (version 1 drew them all from the sequential generator).
STREAM_VERSION = 2


@dataclass(frozen=True)
class NonlinearTrackingSettings:
    """Settings of interface.md; defaults are the paper's."""

    steps: int = 2_000_000
    score_window: int = 500_000  # the score is the MSE over the last score_window steps
    period: int = 500  # steps between sign changes of the fast outputs
    slow_multiplier: int = 15  # the slow outputs change every slow_multiplier * period steps
    bin: int = 10_000  # steps per logged bin

    def check(self) -> None:
        check_settings("nonlinear_tracking", steps=self.steps, bin=self.bin, score_window=self.score_window, period=self.period,
                       slow_multiplier=self.slow_multiplier)
        if self.score_window > self.steps:
            window = self.steps - (self.steps - self.steps // 4) // self.bin * self.bin  # starts on a bin boundary
            raise ValueError(
                f"nonlinear_tracking: score_window {self.score_window} exceeds steps {self.steps}; "
                f"set task_settings.score_window (e.g. {window}, about the final quarter as in the paper, "
                f"starting on a bin of {self.bin} steps)"
            )
        if (self.steps - self.score_window) % self.bin:
            raise ValueError(
                f"nonlinear_tracking: the score window must start on a bin boundary, but steps - score_window = "
                f"{self.steps - self.score_window} is not a multiple of bin {self.bin}; adjust score_window or bin"
            )


def shared_steps(settings: NonlinearTrackingSettings) -> int:
    """The first steps every version of the stream draws the same: those before the fast outputs' change
    LEGACY_CHANGES + 1 (the slow outputs change slow_multiplier times less often)."""
    return (LEGACY_CHANGES + 1) * settings.period


def _sign_schedule(seed: int, legacy_purpose: int, far_purpose: int, rows: int) -> Schedule:
    """The sign pattern of `rows` teacher rows (rows, HIDDEN) int8 after k sign changes, made lazily.

    The legacy walk is the draw of (changes + 1, rows, HIDDEN) signs whose first pattern is replaced by
    ones, multiplied up: its first pattern is drawn and dropped, then each change multiplies its draw in.
    Past it, the pattern after each change is drawn afresh: a running product of independent uniform signs
    is itself a sequence of independent uniform signs, so a counter draw of it is the same law."""
    rng = counter_rng(seed, legacy_purpose)
    initial = rng.choice(_SIGNS, size=(rows, HIDDEN))
    initial[:] = 1
    legacy = Walk(rng, lambda g, n: g.choice(_SIGNS, size=(n, rows, HIDDEN)),
                  lambda carry, draws: carry * np.cumprod(draws, axis=0, dtype=np.int8),
                  initial, LEGACY_SEGMENT, LEGACY_CHANGES)

    def far(j: int) -> np.ndarray:
        return counter_rng(seed, far_purpose, j).choice(_SIGNS, size=(FAR_CHANGES, rows, HIDDEN))

    return Schedule(legacy, lambda j, start: np.concatenate([start[None], far(j)]), lambda j: far(j)[-1], FAR_CHANGES)


class NonlinearTrackingStream(CounterStream):
    """One seed's stream; `chunk(start, n)` gives float32 inputs (n, 32) and targets (n, 20)."""

    def __init__(self, settings: NonlinearTrackingSettings, seed: int):
        super().__init__(settings, seed)
        import torch  # here, not at import time: the task registry is read by commands that never run a stream

        generator = torch.Generator().manual_seed(int(counter_rng(seed, _TEACHER).integers(2**62)))
        w1, w2 = torch.empty(HIDDEN, INPUTS), torch.empty(OUTPUTS, HIDDEN)
        for w in (w1, w2):  # nn.Linear's default initialisation (kaiming_uniform_, a = sqrt(5))
            torch.nn.init.kaiming_uniform_(w, a=5**0.5, generator=generator)
        self.teacher_hidden = w1.double().numpy()
        self.teacher_head = w2.double().numpy()  # before any sign change
        order = counter_rng(seed, _GROUPS).permutation(OUTPUTS)
        bounds = np.cumsum([0, *GROUP_SIZES.values()])
        self.groups = {name: np.sort(order[a:b]) for name, a, b in zip(GROUP_SIZES, bounds[:-1], bounds[1:])}
        self.slow_period = settings.period * settings.slow_multiplier
        self._fast_signs = _sign_schedule(seed, _FAST_SIGNS, _FAR_FAST_SIGNS, GROUP_SIZES["fast"])
        self._slow_signs = _sign_schedule(seed, _SLOW_SIGNS, _FAR_SLOW_SIGNS, GROUP_SIZES["slow"])

    def teacher_head_at(self, step: int) -> np.ndarray:
        """The teacher's head W2 in force at `step` (20, 256)."""
        w = self.teacher_head.copy()
        for rows, signs, period in (("fast", self._fast_signs, self.settings.period),
                                    ("slow", self._slow_signs, self.slow_period)):
            w[self.groups[rows]] *= signs.states(step // period, step // period)[0]
        return w

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        start = b * BLOCK
        x = counter_rng(self.seed, _INPUTS, b).standard_normal((BLOCK, INPUTS))
        hidden = np.maximum(x @ self.teacher_hidden.T, 0.0)
        y = np.empty((BLOCK, OUTPUTS))
        # The head changes only at multiples of `period`: one matrix product per segment.
        period = self.settings.period
        for seg in range(start - start % period, start + BLOCK, period):
            lo, hi = max(seg, start) - start, min(seg + period, start + BLOCK) - start
            at = min(max(seg, start), self.settings.steps - 1)  # a block may run past the stream's end
            y[lo:hi] = hidden[lo:hi] @ self.teacher_head_at(at).T
        return x.astype(np.float32), y.astype(np.float32)
