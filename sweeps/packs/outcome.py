"""What a pack runner reports: a short summary per chunk (for Tune) and the finished pack."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChunkProgress:
    """A short summary after each chunk (what Tune sees)."""

    steps_done: int
    total_steps: int
    runs: int
    mean_loss: float  # mean over non-diverged runs of the chunk's mean loss
    diverged: int  # runs with a non-finite loss so far


@dataclass(frozen=True)
class PackOutcome:
    """Per-run scores and per-(run, bin) curves of a finished pack."""

    score: np.ndarray  # (R,) the task's score
    diverged: np.ndarray  # (R,) bool
    bin_end: np.ndarray  # (B,) step at the end of each bin
    curves: dict[str, np.ndarray | None]  # metric -> (R, B) or (R, B, outputs); None where the learner lacks it
    wall_seconds: float
    engine: str | None = None  # the fade_core.engines name that ran the pack (None: rows not made by an engine)
