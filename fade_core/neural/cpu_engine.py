"""The "cpu" engine of the neural learners: a whole segment of steps for R runs in one call of
the compiled kernel (cpu_kernel.run_segment), on the state a `NeuralRuns` holds.

Batched torch ops stream every run's weights through memory once per op and step; the
kernel keeps a run in one thread and its parameters in cache instead. It and the torch ops
(the reference) are tested learner by learner against a plain one-run PyTorch loop in
tests/test_neural_learners.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from fade_core.engines import CPU
from fade_core.neural import cpu_kernel, cpu_own
from fade_core.neural.rules import WEIGHT_DECAY_MODES

if TYPE_CHECKING:
    from fade_core.neural.state import NeuralRuns, StepSums


class CpuKernel:
    """Advances the CPU tensors of `runs` with cpu_kernel.run_segment."""

    name = CPU

    def __init__(self, runs: NeuralRuns):
        self.runs = runs

    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: StepSums) -> None:
        """x.shape[0] steps in one compiled call (see NeuralRuns.advance)."""
        runs = self.runs
        learner, arch, flat = runs.learner, runs.net.arch, runs.net.flat
        classification = runs.loss == "cross_entropy"
        zeros = torch.zeros(runs.net.runs, dtype=flat.dtype)

        def column(name: str) -> np.ndarray:
            return runs.hp.get(name, zeros).contiguous().numpy()

        target = target.contiguous().numpy()
        own = learner.own_base
        run_segment = cpu_own.segment(own) if own else cpu_kernel.run_segment
        run_segment(
            cpu_kernel.Setup(
                sizes=np.array(arch.sizes, dtype=np.int64), starts=np.array(arch.offsets(), dtype=np.int64),
                negative_slope=float(arch.negative_slope), classification=classification,
                adam=learner.base == "adam", own=own is not None, weight_decay=WEIGHT_DECAY_MODES[learner.weight_decay], clip=learner.clip,
                fade_start=runs.fade_start, adam_steps=int(runs.adam_steps.item()),
            ),
            cpu_kernel.RunHyperparameters(
                alpha=column("alpha"), lam=column("lambda"), kappa=column("kappa"), theta_lambda=column("theta_lambda"),
                own=(cpu_own.own_columns(own, {n: column(n) for n in own.hyperparameters}, runs.net.runs, flat.numpy().dtype)
                     if own else np.zeros((runs.net.runs, 0), dtype=flat.numpy().dtype)),
            ),
            cpu_kernel.RunState(
                params=flat.numpy(), adam_m=runs.adam_m_flat.numpy(), adam_v=runs.adam_v_flat.numpy(),
                gamma=runs.gamma_flat.numpy(), trace=runs.trace_flat.numpy(),
            ),
            cpu_kernel.Stream(
                run_slot=run_slot.numpy(), x=x.contiguous().numpy(),
                y_values=np.zeros((0, 0, 0), dtype=flat.numpy().dtype) if classification else target,
                y_labels=target if classification else np.zeros((0, 0), dtype=np.int64),
            ),
            cpu_kernel.Sums(
                loss=sums.loss.numpy(), sq_error=sums.sq_error.numpy(), correct=sums.correct.numpy(),
                active=sums.active.numpy(),
            ),
        )
        if learner.base == "adam":
            runs.adam_steps += x.shape[0]
