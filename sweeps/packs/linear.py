"""A pack of a linear task, advanced by a fade_core linear engine ("cpu": the compiled vector
kernel; "reference": the plain loop over the rule).

Python runs once per chunk piece; the steps run inside the compiled learner, which adds
each step's squared error to the bin's float64 running sum in step order (so binned
sums and scores do not depend on chunking). At each bin's end the mean exp(gamma) and
exp(beta) of every weight group the stream names (e.g. relevant / irrelevant) are logged.
"""

from __future__ import annotations

import numpy as np
import torch

from fade_core.engines import CPU
from fade_core.linear import LinearLearner, advance, get_linear_learner, hyperparameter_matrix, init_state, initial_weights
from sweeps.packs.outcome import PackOutcome
from sweeps.packs.runner import DEFAULT_CHUNK_STEPS, PackRunner
from sweeps.packs.rowwise import row_means, trailing_sums
from sweeps.plan import Pack
from sweeps.spec.own import load_rule
from tasks.stream import stacked

# Adaptive per-weight slot of the state -> the curve prefix of its mean rate.
_RATES = (("gamma", "decay", "adapts_decay"), ("beta", "step_size", "adapts_step_size"))


class LinearPackRunner(PackRunner):
    """Runs a pack of a linear task on CPUs."""

    def __init__(self, pack: Pack, chunk_steps: int = DEFAULT_CHUNK_STEPS, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", engine: str = CPU):
        if torch.device(device).type != "cpu":
            raise ValueError(f"linear learners run on CPUs only, not {device}")
        super().__init__(pack, chunk_steps, dtype, engine)
        own = pack.experiment.learner  # a researcher's rule: imported where the run took it, its source checked
        self.learner: LinearLearner = (load_rule(own) if own is not None
                                       else get_linear_learner(pack.experiment.optimizer))
        self.hp = hyperparameter_matrix(self.learner, self.hyperparameter_columns(self.learner.hyperparameters),
                                        pack.runs, dtype)
        w0 = initial_weights(pack.seeds, self.streams[0].dim, dtype)[self.run_slot]
        self.state = init_state(self.learner, self.hp, w0)
        self.groups: dict[str, np.ndarray] = self.streams[0].groups  # the same for every seed
        self.loss_sum = np.zeros((len(self.bin_end), pack.runs))  # (B, R): bin b's float64 running sum
        shape = (pack.runs, len(self.bin_end))
        self.rate_curves = {f"{prefix}_{g}": adapts for _, prefix, adapts in _RATES for g in self.groups}
        self.curves = {name: np.full(shape, np.nan) for name in ["mse", *self.rate_curves]}

    def load(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = stacked(self.streams, start, n, self.state.w.numpy().dtype)  # the state's dtype
        return torch.from_numpy(x), torch.from_numpy(y)  # (n, S, d), (n, S)

    def advance(self, batch: tuple[torch.Tensor, torch.Tensor], lo: int, hi: int, bin_index: int) -> None:
        x, y = batch
        advance(self.learner, self.hp, self.state, x[lo:hi], y[lo:hi], self.run_slot, loss_sums=self.loss_sum[bin_index],
                engine=self.engine)

    def close_bin(self, bin_index: int) -> None:
        self.curves["mse"][:, bin_index] = self.loss_sum[bin_index] / self.bin_len[bin_index]
        for slot, prefix, adapts in _RATES:
            if getattr(self.learner, adapts):
                with np.errstate(over="ignore"):  # a diverged run's rate may overflow: inf, recorded as such
                    rate = np.exp(getattr(self.state, slot).numpy().astype(np.float64))
                for group, columns in self.groups.items():
                    self.curves[f"{prefix}_{group}"][:, bin_index] = row_means(rate[:, columns])

    def loss_curve(self) -> np.ndarray:
        return self.curves["mse"]

    def outcome(self) -> PackOutcome:
        total = trailing_sums(self.loss_sum.T)  # each run's bins in order, whatever the pack's size
        # Curves of rates the learner does not adapt are stored as nulls.
        curves = {k: v if k not in self.rate_curves or getattr(self.learner, self.rate_curves[k]) else None
                  for k, v in self.curves.items()}
        return PackOutcome(score=total / self.settings.steps, diverged=~np.isfinite(total), bin_end=self.bin_end,
                           curves=curves, wall_seconds=self.wall_seconds, engine=self.engine)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {**self.state._asdict(), "loss_sum": torch.from_numpy(self.loss_sum),
                **{f"curve.{k}": torch.from_numpy(v) for k, v in self.curves.items()}}
