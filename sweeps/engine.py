"""Run one pack: every (config, seed) of it as one batched program, chunk by chunk.

The stream of each seed is generated once per chunk and shared by all configurations
of that seed (run r reads slot `run_slot[r]`). Steps run inside the compiled learner;
Python runs once per chunk and once per logged bin. Metrics are binned as they come:
loss sums per bin, and per-group means of exp(gamma) / exp(beta) at each bin's end.

No Ray here: a notebook can run a pack directly.
"""

from __future__ import annotations

import math
import time
from typing import Iterator

import numpy as np
import torch

from fade_core.linear import (
    LinearLearner,
    advance,
    get_linear_learner,
    hyperparameter_matrix,
    init_state,
    initial_weights,
)
from sweeps.neural_engine import NeuralPackRunner
from sweeps.outcome import ChunkProgress, PackOutcome
from sweeps.plan import Pack
from tasks import get_task
from tasks.linear_tracking import RELEVANT

DEFAULT_CHUNK_STEPS = 10_000


LINEAR_CURVES = ("mse", "decay_relevant", "decay_irrelevant", "step_size_relevant", "step_size_irrelevant")


class LinearPackRunner:
    """Runs a linear-tracking pack with a fade_core linear learner."""

    curve_metrics = LINEAR_CURVES

    def __init__(self, pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32):
        experiment = pack.experiment
        self.pack = pack
        self.settings = experiment.settings
        self.learner: LinearLearner = get_linear_learner(experiment.optimizer)
        self.chunk_steps = chunk_steps
        self.dtype = dtype
        task = get_task(experiment.task)
        self.streams = [task.make_stream(self.settings, s) for s in pack.seeds]
        n_seeds = len(pack.seeds)
        # Run r = config (r // n_seeds), seed slot (r % n_seeds).
        self.run_slot = torch.arange(pack.runs) % n_seeds
        hp = {n: [dict(c.hyperparameters)[n] for c in pack.configs for _ in pack.seeds] for n in self.learner.hyperparameters}
        self.hp = hyperparameter_matrix(self.learner, hp, pack.runs, dtype)
        w0 = initial_weights(pack.seeds, self.streams[0].dim, dtype)[self.run_slot]
        self.state = init_state(self.learner, self.hp, w0)
        steps, bin_ = self.settings.steps, self.settings.bin
        self.bin_end = np.minimum(np.arange(1, math.ceil(steps / bin_) + 1) * bin_, steps)
        self.loss_sum = np.zeros((len(self.bin_end), pack.runs))  # (B, R): bin b's row is a contiguous running sum
        self.group_means = {m: np.full((pack.runs, len(self.bin_end)), np.nan) for m in LINEAR_CURVES[1:]}
        self.steps_done = 0
        self.wall_seconds = 0.0

    def state_dict(self) -> dict:
        """Everything needed to continue this pack exactly where it stands (streams are
        random-access, so their position is `steps_done`)."""
        return {
            "pack_id": self.pack.pack_id,
            "steps_done": self.steps_done,
            "wall_seconds": self.wall_seconds,
            "state": self.state._asdict(),
            "loss_sum": self.loss_sum,
            "group_means": self.group_means,
        }

    def load_state_dict(self, saved: dict) -> None:
        if saved["pack_id"] != self.pack.pack_id:
            raise ValueError(f"checkpoint of pack {saved['pack_id']} cannot resume pack {self.pack.pack_id}")
        for name, tensor in saved["state"].items():
            getattr(self.state, name).copy_(tensor)
        self.loss_sum[...] = saved["loss_sum"]
        for name, values in saved["group_means"].items():
            self.group_means[name][...] = values
        self.steps_done = saved["steps_done"]
        self.wall_seconds = saved["wall_seconds"]

    def run(self) -> Iterator[ChunkProgress]:
        """Advance to the end of the stream, yielding a summary after each chunk."""
        start_time = time.perf_counter() - self.wall_seconds
        total = self.settings.steps
        while self.steps_done < total:
            start = self.steps_done
            n = min(self.chunk_steps, total - start)
            pieces = [s.chunk(start, n) for s in self.streams]
            x = torch.from_numpy(np.stack([p[0] for p in pieces], axis=1)).to(self.dtype)  # (n, S, d)
            y = torch.from_numpy(np.stack([p[1] for p in pieces], axis=1)).to(self.dtype)  # (n, S)
            chunk_loss = np.zeros(self.pack.runs)
            # Split the chunk at bin boundaries so each bin's end state can be summarised.
            t = start
            while t < start + n:
                b = t // self.settings.bin
                end = min(start + n, int(self.bin_end[b]))
                losses = torch.empty(self.pack.runs, end - t, dtype=self.dtype)
                advance(
                    self.learner, self.hp, self.state, x[t - start : end - start], y[t - start : end - start],
                    self.run_slot, losses, self.loss_sum[b],
                )
                chunk_loss += losses.numpy().sum(axis=1, dtype=np.float64)
                if end == self.bin_end[b]:
                    self._record_bin_end(b)
                t = end
            self.steps_done = start + n
            self.wall_seconds = time.perf_counter() - start_time
            finite = np.isfinite(chunk_loss)
            yield ChunkProgress(
                steps_done=self.steps_done,
                total_steps=total,
                runs=self.pack.runs,
                mean_loss=float(chunk_loss[finite].mean() / n) if finite.any() else math.nan,
                diverged=int((~np.isfinite(self.loss_sum.sum(axis=0))).sum()),
            )

    def _record_bin_end(self, b: int) -> None:
        groups = {"relevant": slice(0, RELEVANT), "irrelevant": slice(RELEVANT, None)}
        for slot, adapts, prefix in (
            (self.state.gamma, self.learner.adapts_decay, "decay"),
            (self.state.beta, self.learner.adapts_step_size, "step_size"),
        ):
            if adapts:
                with np.errstate(over="ignore"):  # a diverged run's gamma may overflow: inf, recorded as such
                    rate = np.exp(slot.numpy().astype(np.float64))
                for group, cols in groups.items():
                    self.group_means[f"{prefix}_{group}"][:, b] = rate[:, cols].mean(axis=1)

    def outcome(self) -> PackOutcome:
        """Scores and curves; call after `run` is exhausted."""
        bin_len = np.diff(np.concatenate([[0], self.bin_end]))
        total = self.loss_sum.sum(axis=0)
        curves: dict[str, np.ndarray | None] = {"mse": self.loss_sum.T / bin_len}
        for name, values in self.group_means.items():
            adapts = self.learner.adapts_decay if name.startswith("decay") else self.learner.adapts_step_size
            curves[name] = values if adapts else None
        return PackOutcome(
            score=total / self.settings.steps,
            diverged=~np.isfinite(total),
            bin_end=self.bin_end,
            curves=curves,
            wall_seconds=self.wall_seconds,
        )


def make_runner(pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu"):
    """The runner for a pack's task family (neural tasks may run on a CUDA device)."""
    family = get_task(pack.experiment.task).family
    if family == "linear":
        return LinearPackRunner(pack, chunk_steps, dtype)
    return NeuralPackRunner(pack, chunk_steps, dtype, device)
