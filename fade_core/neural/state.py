"""R runs of one neural learner: their state (`NeuralRuns`) and the per-bin sums.

`NeuralRuns` holds the network, the optimizer state (Adam's moments, FADE's gamma and
trace) and the per-run hyperparameters; it computes nothing itself: its engine (made from
the engine's name by `runs.make_runs`) advances it. Hyperparameters are per run ([R]
tensors), so one pack holds many grid cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Protocol

import torch

from fade_core.mlp import Architecture, BatchedMLP, ForwardCache
from fade_core.neural.rules import BETA1, BETA2, NeuralLearner

Loss = Literal["squared_error", "cross_entropy"]


@dataclass
class StepResult:
    """What one batched step produced for every run (before its update)."""

    cache: ForwardCache
    loss: torch.Tensor  # [R]: 1/2 summed squared error, or cross-entropy
    sq_error: torch.Tensor | None  # [R, out] squared error per output (regression)
    correct: torch.Tensor | None  # [R] bool: argmax == label (classification)


@dataclass
class StepSums:
    """Per-run sums over the steps since the last reset, float64 and in step order (so a
    sum never depends on how the steps were chunked), and the hidden units that fired."""

    loss: torch.Tensor  # [R]
    sq_error: torch.Tensor  # [R, out] squared error per output (regression; [R, 0] otherwise)
    correct: torch.Tensor  # [R] steps whose argmax was the label (classification)
    active: torch.Tensor  # [R, hidden units of all hidden layers] bool: positive pre-activation at least once

    @classmethod
    def zeros(cls, runs: int, arch: Architecture, loss: Loss, device: torch.device | str) -> StepSums:
        f64 = {"device": device, "dtype": torch.float64}
        out = arch.sizes[-1] if loss == "squared_error" else 0
        hidden = sum(arch.sizes[1:-1])
        return cls(torch.zeros(runs, **f64), torch.zeros(runs, out, **f64), torch.zeros(runs, **f64),
                   torch.zeros(runs, hidden, device=device, dtype=torch.bool))

    def tensors(self) -> list[torch.Tensor]:
        return [self.loss, self.sq_error, self.correct, self.active]

    def reset(self) -> None:
        for tensor in self.tensors():
            tensor.zero_()

    def add(self, result: StepResult) -> None:
        """One step's contribution (graph-capturable: no host synchronisation)."""
        self.loss.add_(result.loss)
        if result.sq_error is not None:
            self.sq_error.add_(result.sq_error)
        if result.correct is not None:
            self.correct.add_(result.correct)
        fired = torch.cat([pre > 0 for pre in result.cache.preactivations], dim=1)
        torch.logical_or(self.active, fired, out=self.active)


class NeuralEngine(Protocol):
    """What advances a `NeuralRuns`: x.shape[0] steps, sums accumulated in `sums`."""

    name: str

    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: StepSums) -> None: ...


class NeuralRuns:
    """R runs of one learner on one architecture: the network and its optimizer state.

    `hp` maps each of the learner's hyperparameters to an [R] tensor; `engine` makes the
    engine that advances the runs from them (an engine class of cpu_engine or torch_ops).
    """

    def __init__(self, learner: NeuralLearner, net: BatchedMLP, hp: dict[str, torch.Tensor], loss: Loss,
                 engine: Callable[[NeuralRuns], NeuralEngine]):
        missing = set(learner.hyperparameters) - set(hp)
        if missing:
            raise ValueError(f"{learner.name} needs hyperparameter(s) {', '.join(sorted(missing))}")
        self.learner = learner
        self.net = net
        self.loss = loss
        like = net.weights[0]
        self.hp = {k: v.to(like.device, like.dtype) for k, v in hp.items()}
        arch, flat = net.arch, net.flat
        # State lives in flat [R, n] buffers laid out like the parameters (views per parameter). The
        # base step's: Adam's m and v, or a researcher's base step's state (in m, then v), from 0.
        slots = learner.state_slots
        self.adam_m_flat = torch.zeros_like(flat) if slots > 0 else flat.new_zeros(flat.shape[0], 0)
        self.adam_v_flat = torch.zeros_like(flat) if slots > 1 else flat.new_zeros(flat.shape[0], 0)
        self.adam_m = arch.views(self.adam_m_flat) if slots > 0 else []
        self.adam_v = arch.views(self.adam_v_flat) if slots > 1 else []
        # A float64 tensor: graph-capture safe, and Adam's bias corrections are computed in float64
        # (as torch.optim.Adam does on the host) before they meet the run's dtype.
        self.adam_steps = torch.zeros((), device=like.device, dtype=torch.float64)
        # FADE's gamma and trace cover the parameters from `fade_start` on: the head's, or all.
        starts = arch.offsets()
        self.fade_start = {"none": starts[-1], "head": starts[-3], "all": 0}[learner.fade]
        fade_params = len(starts) - 1 - starts.index(self.fade_start)
        self.fade_index = set(range(len(starts) - 1 - fade_params, len(starts) - 1))
        width = starts[-1] - self.fade_start
        self.gamma_flat = flat.new_zeros(flat.shape[0], width) + (self.hp["gamma0"].unsqueeze(1) if width else 0)
        self.trace_flat = flat.new_zeros(flat.shape[0], width)
        first = min(self.fade_index, default=0)
        self.gamma = {first + i: v for i, v in enumerate(arch.views(self.gamma_flat))} if width else {}
        self.trace = {first + i: v for i, v in enumerate(arch.views(self.trace_flat))} if width else {}
        self.engine: NeuralEngine = engine(self)

    # -- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor a continued run needs (weights, moments, gamma, traces)."""
        return {
            "params": self.net.flat, "adam_m": self.adam_m_flat, "adam_v": self.adam_v_flat,
            "adam_steps": self.adam_steps, "gamma": self.gamma_flat, "trace": self.trace_flat,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, tensor in self.state_dict().items():
            tensor.copy_(state[name])

    # -- stepping: the engine's -----------------------------------------------------------
    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: StepSums) -> None:
        """x.shape[0] steps by the runs' engine; run r reads slot run_slot[r] of x ([T, S, in])
        and target ([T, S, out] values or [T, S] labels). Sums accumulate in `sums`."""
        self.engine.advance(x, target, run_slot, sums)

    # -- what the metrics read -----------------------------------------------------------
    def head_decay(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """exp(gamma) of the head's weight [R, C, H] and bias [R, C]; None without FADE."""
        if not self.fade_index:
            return None
        n = 2 * self.net.arch.layers
        return self.gamma[n - 2].exp(), self.gamma[n - 1].exp()


def adam_table(adam_steps: torch.Tensor, steps: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Adam's per-step scalars of the segment's steps k = adam_steps + 1 ... + steps, on the
    device and without a host synchronisation, as TorchOps.adam_scalars computes them (the segment
    kernels, persistent and cuda, read them per step):
    1 - beta1^k (float64: the step alpha / (1 - beta1^k) is divided in float64 per run),
    sqrt(1 - beta2^k) and 1 / (1 - beta2^(k-1)) (0 before the first step) in the run's dtype."""
    k = adam_steps + torch.arange(1, steps + 1, device=adam_steps.device, dtype=torch.float64)
    before = k - 1
    inv_before = torch.where(before > 0, 1 / (1 - BETA2**before), 0.0)
    return 1 - BETA1**k, (1 - BETA2**k).sqrt().to(dtype), inv_before.to(dtype)
