"""The pack runner protocol: ONE chunk / bin / checkpoint loop for every task family.

A pack is R = configs x seeds runs of one (task, optimizer), advanced together. The
loop here is the same for all of them:

    for each chunk of `chunk_steps` steps:
        batch = load(start, n)               # every seed's stream, once, shared by its configs
        for each piece of the chunk inside one logged bin:
            advance(batch, lo, hi, bin)      # R runs through steps [lo, hi) of the chunk
            if the bin ends here: close_bin(bin)
        yield a short ChunkProgress          # what Tune sees

A family's runner supplies only `load`, `advance`, `close_bin`, `loss_curve`, `outcome`
and `state_tensors` (the live tensors a checkpoint must hold). Streams are random
access, so a checkpoint is the state tensors plus `steps_done`; it holds tensors and
numbers only and loads with `torch.load(weights_only=True)`. On disk it is a folder of two
files: CHECKPOINT_FILE (the tensors, `save_checkpoint`) and CHECKPOINT_META (the pack id,
its progress and dtype, so a resume finds the newest checkpoint of a pack from the files
alone: a store record, `records.CheckpointRecord`, written beside it by the trainable).
"""

from __future__ import annotations

import io
import math
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from sweeps.packs.checkpoint_files import CHECKPOINT_FILE
from sweeps.packs.outcome import ChunkProgress, PackOutcome
from sweeps.plan import Pack
from sweeps.plan.packing import DEFAULT_CHUNK_STEPS
from tasks import TaskSpec, get_task

__all__ = ["DEFAULT_CHUNK_STEPS", "PackRunner", "bin_ends"]

Checkpoint = dict[str, Any]  # str -> torch.Tensor | int | float | str


def bin_ends(steps: int, bin_steps: int) -> np.ndarray:
    """Step at the end of each logged bin (the last bin may be short)."""
    return np.minimum(np.arange(1, math.ceil(steps / bin_steps) + 1) * bin_steps, steps)


class PackRunner(ABC):
    """Runs one pack chunk by chunk; see the module docstring for what a family supplies.

    Run r is configuration r // S with seed slot r % S (S seeds), so `run_slot[r]` says
    which seed's stream run r reads, and every configuration of a seed shares it.
    """

    def __init__(self, pack: Pack, chunk_steps: int, dtype: torch.dtype, engine: str):
        if chunk_steps <= 0:
            raise ValueError(f"chunk_steps must be positive, got {chunk_steps}")
        self.pack = pack
        self.task: TaskSpec = get_task(pack.experiment.task)
        self.settings = pack.experiment.settings
        self.chunk_steps = chunk_steps
        self.dtype = dtype
        self.engine = engine  # the fade_core.engines name advancing the runs (recorded in the pack's manifest)
        self.streams = [self.task.make_stream(self.settings, s) for s in pack.seeds]
        self.run_slot = torch.arange(pack.runs) % len(pack.seeds)
        self.bin_end = bin_ends(self.settings.steps, self.settings.bin)
        self.bin_len = np.diff(np.concatenate([[0], self.bin_end]))
        self.steps_done = 0
        self.wall_seconds = 0.0

    def hyperparameter_columns(self, names: tuple[str, ...]) -> dict[str, list[float]]:
        """Each named hyperparameter as one value per run, in run order."""
        return {n: [dict(c.hyperparameters)[n] for c in self.pack.configs for _ in self.pack.seeds] for n in names}

    # -- what a task family supplies -------------------------------------------------------
    @abstractmethod
    def load(self, start: int, n: int) -> Any:
        """The streams of every seed for steps [start, start + n)."""

    @abstractmethod
    def advance(self, batch: Any, lo: int, hi: int, bin_index: int) -> None:
        """Advance every run through steps [lo, hi) of the loaded chunk, all inside one bin."""

    @abstractmethod
    def close_bin(self, bin_index: int) -> None:
        """Record the summaries of a bin that has just ended."""

    @abstractmethod
    def loss_curve(self) -> np.ndarray:
        """(R, B) the per-bin online loss (NaN for bins not closed yet)."""

    @abstractmethod
    def outcome(self) -> PackOutcome:
        """Scores and curves; call after `run` is exhausted."""

    @abstractmethod
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The live tensors a continued run needs (loading copies into them in place)."""

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> Iterator[ChunkProgress]:
        """Advance to the end of the stream, yielding a summary after each chunk."""
        start_time = time.perf_counter() - self.wall_seconds
        total, bin_steps = self.settings.steps, self.settings.bin
        while self.steps_done < total:
            start = self.steps_done
            n = min(self.chunk_steps, total - start)
            batch = self.load(start, n)
            t = start
            while t < start + n:  # split the chunk at bin ends
                b = t // bin_steps
                end = min(start + n, int(self.bin_end[b]))
                self.advance(batch, t - start, end - start, b)
                t = end
                if end == self.bin_end[b]:
                    self.close_bin(b)
            self.steps_done = start + n
            self.wall_seconds = time.perf_counter() - start_time
            yield self._progress()

    def completed_bins(self) -> int:
        return int(np.searchsorted(self.bin_end, self.steps_done, side="right"))

    def diverged(self) -> np.ndarray:
        """(R,) runs whose loss was not finite in some completed bin."""
        return ~np.isfinite(self.loss_curve()[:, : self.completed_bins()]).all(axis=1)

    def _progress(self) -> ChunkProgress:
        done = self.completed_bins()
        latest = self.loss_curve()[:, done - 1] if done else np.full(self.pack.runs, np.nan)
        finite = np.isfinite(latest)
        return ChunkProgress(
            steps_done=self.steps_done,
            total_steps=self.settings.steps,
            runs=self.pack.runs,
            mean_loss=float(latest[finite].mean()) if finite.any() else math.nan,
            diverged=int(self.diverged().sum()),
        )

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> Checkpoint:
        """Everything needed to continue exactly where the pack stands: tensors and numbers only."""
        return {
            "pack_id": self.pack.pack_id,
            "steps_done": self.steps_done,
            "wall_seconds": self.wall_seconds,
            **{f"state.{k}": v for k, v in self.state_tensors().items()},
        }

    def load_state_dict(self, saved: Checkpoint) -> None:
        if saved.get("pack_id") != self.pack.pack_id:
            raise ValueError(f"checkpoint of pack {saved.get('pack_id')} cannot resume pack {self.pack.pack_id}")
        for name, tensor in self.state_tensors().items():
            tensor.copy_(saved[f"state.{name}"])
        self.steps_done = int(saved["steps_done"])
        self.wall_seconds = float(saved["wall_seconds"])

    def save_checkpoint(self, directory: Path) -> None:
        """Write the state into the checkpoint folder (CHECKPOINT_FILE)."""
        torch.save(self.state_dict(), directory / CHECKPOINT_FILE)

    def load_checkpoint(self, state: Path | bytes) -> None:
        """Continue from a checkpoint: its folder, or the bytes of its CHECKPOINT_FILE (read from a store)."""
        source = io.BytesIO(state) if isinstance(state, bytes) else state / CHECKPOINT_FILE
        self.load_state_dict(torch.load(source, map_location="cpu", weights_only=True))
