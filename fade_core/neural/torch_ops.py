"""The batched torch path of the neural learners: R runs, one step as a fixed sequence of
tensor ops, and the `NeuralRuns` state that both execution paths update.

Hyperparameters are per run ([R] tensors), so one pack holds many grid cells. A step
runs forward, backward and every update of algorithms.md §2 for all R runs with no
host synchronisation, so on CUDA a block of steps can be captured in a graph. On CPU,
`NeuralRuns.advance` hands whole segments to the compiled kernel (cpu_kernel) instead:
batched ops stream every run's weights through memory once per op and step there.
On CUDA, when Triton imports, `advance` runs whole steps as the fused kernels of
triton_fused_step (FADE_TRITON_STEP=0: only each Adam or FADE parameter update as one
triton_update kernel); FADE_TRITON=0 keeps the torch ops, the reference both are tested against.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

import numpy as np
import torch

from fade_core.mlp import Architecture, BatchedMLP, ForwardCache
from fade_core.neural import cpu_kernel
from fade_core.neural.cached_build import call_cached
from fade_core.neural.rules import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN, WEIGHT_DECAY_MODES, NeuralLearner, get_neural_learner

Loss = Literal["squared_error", "cross_entropy"]


def _per_run(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[R] -> [R, 1, ...] broadcasting against a parameter shaped like `like`."""
    return values.view(-1, *([1] * (like.dim() - 1)))


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


@dataclass
class StepResult:
    """What one step produced for every run (before its update)."""

    cache: ForwardCache
    loss: torch.Tensor  # [R]: 1/2 summed squared error, or cross-entropy
    sq_error: torch.Tensor | None  # [R, out] squared error per output (regression)
    correct: torch.Tensor | None  # [R] bool: argmax == label (classification)


class NeuralRuns:
    """R runs of one learner on one architecture: the network, its optimizer state, one step.

    `hp` maps each of the learner's hyperparameters to an [R] tensor.
    """

    def __init__(self, learner: NeuralLearner, net: BatchedMLP, hp: dict[str, torch.Tensor], loss: Loss,
                 compiled_cpu: bool = True):
        missing = set(learner.hyperparameters) - set(hp)
        if missing:
            raise ValueError(f"{learner.name} needs hyperparameter(s) {', '.join(sorted(missing))}")
        self.learner = learner
        self.net = net
        self.loss = loss
        self.compiled_cpu = compiled_cpu  # CPU segments in one compiled call (False: batched torch ops)
        self._compiled_update = None
        like = net.weights[0]
        self.hp = {k: v.to(like.device, like.dtype) for k, v in hp.items()}
        arch, flat = net.arch, net.flat
        # State lives in flat [R, n] buffers laid out like the parameters (views per parameter).
        adam = learner.base == "adam"
        self.adam_m_flat = torch.zeros_like(flat) if adam else flat.new_zeros(flat.shape[0], 0)
        self.adam_v_flat = torch.zeros_like(flat) if adam else flat.new_zeros(flat.shape[0], 0)
        self.adam_m = arch.views(self.adam_m_flat) if adam else []
        self.adam_v = arch.views(self.adam_v_flat) if adam else []
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
        # Parameters whose whole update runs as one fused Triton kernel (see `fused_kernels`).
        self._triton = fused_kernels(like.device)
        adam_fused = adam and learner.weight_decay != "coupled"
        fused = range(len(starts) - 1) if self._triton else ()
        self._fused_params = {i for i in fused if adam_fused or i in self.fade_index}
        self._fused_step = fused_step() if self._triton else None

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

    # -- many steps ----------------------------------------------------------------------
    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: StepSums) -> None:
        """x.shape[0] steps; run r reads slot run_slot[r] of x ([T, S, in]) and target
        ([T, S, out] values or [T, S] labels). Sums accumulate in `sums`.

        On CPU the whole segment is one compiled call (cpu_kernel, unless compiled_cpu is
        False); with the fused Triton step (`fused_step`) a few kernels per step
        (triton_fused_step); else one batched `step` per step.
        """
        if self.net.flat.device.type == "cpu" and self.compiled_cpu:
            self._advance_compiled(x, target, run_slot, sums)
            return
        if self._fused_step is not None:
            self._fused_step.advance(self, x, target, run_slot, sums)
            return
        for t in range(x.shape[0]):
            sums.add(self.step(x[t].index_select(0, run_slot), target[t].index_select(0, run_slot)))

    def _advance_compiled(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: StepSums) -> None:
        learner, arch = self.learner, self.net.arch
        classification = self.loss == "cross_entropy"
        zeros = torch.zeros(self.net.runs, dtype=self.net.flat.dtype)

        def column(name: str) -> np.ndarray:
            return self.hp.get(name, zeros).contiguous().numpy()

        target = target.contiguous().numpy()
        call_cached(
            cpu_kernel.run_segment,
            cpu_kernel.Setup(
                sizes=np.array(arch.sizes, dtype=np.int64), starts=np.array(arch.offsets(), dtype=np.int64),
                negative_slope=float(arch.negative_slope), classification=classification,
                adam=learner.base == "adam", weight_decay=WEIGHT_DECAY_MODES[learner.weight_decay], clip=learner.clip,
                fade_start=self.fade_start, adam_steps=int(self.adam_steps.item()),
            ),
            cpu_kernel.RunHyperparameters(
                alpha=column("alpha"), lam=column("lambda"), kappa=column("kappa"), theta_lambda=column("theta_lambda")
            ),
            cpu_kernel.RunState(
                params=self.net.flat.numpy(), adam_m=self.adam_m_flat.numpy(), adam_v=self.adam_v_flat.numpy(),
                gamma=self.gamma_flat.numpy(), trace=self.trace_flat.numpy(),
            ),
            cpu_kernel.Stream(
                run_slot=run_slot.numpy(), x=x.contiguous().numpy(),
                y_values=np.zeros((0, 0, 0), dtype=self.net.flat.numpy().dtype) if classification else target,
                y_labels=target if classification else np.zeros((0, 0), dtype=np.int64),
            ),
            cpu_kernel.Sums(
                loss=sums.loss.numpy(), sq_error=sums.sq_error.numpy(), correct=sums.correct.numpy(),
                active=sums.active.numpy(),
            ),
        )
        if learner.base == "adam":
            self.adam_steps += x.shape[0]

    # -- one step ------------------------------------------------------------------------
    def step(self, x: torch.Tensor, target: torch.Tensor) -> StepResult:
        """Predict x ([R, in]), score against target ([R, out] values or [R] labels), then update."""
        cache = self.net.forward(x)
        result, delta, head_factor = self.score(cache, target)
        deltas = self.net.backward(cache, delta)
        self._updater()(cache, deltas, head_factor)
        return result

    def score(self, cache: ForwardCache, target: torch.Tensor) -> tuple[StepResult, torch.Tensor, torch.Tensor | None]:
        """The step's result, the loss's gradient with respect to the output, and p(1-p) on a
        classification head (FADE's curvature factor there; None for regression)."""
        out = cache.output
        if self.loss == "squared_error":
            delta = out - target
            sq_error = delta * delta
            return StepResult(cache, 0.5 * sq_error.sum(dim=1), sq_error, None), delta, None
        log_p = torch.log_softmax(out, dim=1)
        p = log_p.exp()
        delta = p.scatter_add(1, target.unsqueeze(1), torch.full_like(p[:, :1], -1.0))
        loss = -log_p.gather(1, target.unsqueeze(1)).squeeze(1)
        return StepResult(cache, loss, None, out.argmax(dim=1) == target), delta, p * (1 - p)

    def _updater(self):
        """`_update`, compiled by torch.compile on CUDA when FADE_TORCH_COMPILE=1: the
        optimizer's elementwise chain (gradient outer product, Adam moments, FADE) becomes
        one fused kernel per parameter instead of a dozen passes over the runs' state."""
        if self._compiled_update is None:
            wanted = self.net.flat.device.type == "cuda" and os.environ.get("FADE_TORCH_COMPILE", "0") == "1"
            self._compiled_update = torch.compile(self._update, dynamic=False) if wanted else self._update
        return self._compiled_update

    def _curvature(self, index: int, cache: ForwardCache, head_factor: torch.Tensor | None) -> torch.Tensor:
        """FADE's q of parameter `index`: (layer input)^2 or 1 (a bias), times p(1-p) on a classification head."""
        layer, is_bias = divmod(index, 2)
        head = layer == self.net.arch.layers - 1
        q = torch.ones_like(cache.output[:, :1]) if is_bias else (cache.inputs[layer] ** 2).unsqueeze(1)
        if head and head_factor is not None:
            q = q * (head_factor if is_bias else head_factor.unsqueeze(2))
        return q

    def _update(self, cache: ForwardCache, deltas: list[torch.Tensor], head_factor: torch.Tensor | None) -> None:
        learner, hp = self.learner, self.hp
        params = self.net.parameters()
        k = self.adam_steps  # Adam steps taken before this one
        k_now = k + 1
        adam = self.adam_scalars(k) if learner.base == "adam" else None
        for index, param in enumerate(params):
            layer, is_bias = divmod(index, 2)
            delta = deltas[layer]
            if index in self._fused_params:
                self._fused_update(index, param, delta, cache, head_factor, adam)
                continue
            alpha = _per_run(hp["alpha"], param)
            fused_sgd = learner.base == "sgd" and index not in self.fade_index
            if not is_bias and fused_sgd:
                if learner.weight_decay == "coupled":
                    # As torch.optim.SGD(weight_decay): d = G + lambda * P, then P -= alpha * d, per
                    # element. (A shrink factor 1 - alpha*lambda rounds to a multiple of 2^-24 in float32:
                    # the decay would vanish for alpha*lambda < 3e-8.)
                    d = torch.baddbmm(_per_run(hp["lambda"], param) * param, delta.unsqueeze(2), cache.inputs[layer].unsqueeze(1))
                    param.addcmul_(d, -alpha)
                else:
                    # Rank-one SGD step without materialising the gradient: P -= alpha * delta input^T.
                    param.baddbmm_((delta * -alpha.squeeze(2)).unsqueeze(2), cache.inputs[layer].unsqueeze(1))
                continue
            grad = delta if is_bias else delta.unsqueeze(2) * cache.inputs[layer].unsqueeze(1)  # outer product
            if index in self.fade_index:
                self._fade(index, param, grad, self._curvature(index, cache, head_factor), self._alpha_eff(index, alpha, adam))
            if learner.weight_decay == "coupled":
                grad = grad + _per_run(hp["lambda"], param) * param
            elif learner.weight_decay == "decoupled":
                param.mul_(1 - alpha * _per_run(hp["lambda"], param))
            if learner.base == "sgd":
                param.sub_(alpha * grad)
            else:
                self._adam(index, param, grad, adam)
        if learner.base == "adam":
            self.adam_steps.copy_(k_now)
        if learner.clip:
            self._clip()

    def _fused_update(self, index: int, param: torch.Tensor, delta: torch.Tensor, cache: ForwardCache,
                      head_factor: torch.Tensor | None, adam: tuple | None) -> None:
        """`_update`'s work on one parameter (FADE, decay, Adam or SGD step, clipping) in one Triton kernel."""
        learner, hp, kernels = self.learner, self.hp, self._triton
        layer, is_bias = divmod(index, 2)
        fade = index in self.fade_index
        kernels.update(
            param, delta, None if is_bias else cache.inputs[layer], hp["alpha"],
            adam=kernels.AdamStep(self.adam_m[index], self.adam_v[index], *adam[:3]) if adam else None,
            fade=kernels.FadeState(self.gamma[index], self.trace[index], hp["theta_lambda"]) if fade else None,
            lam=hp["lambda"] if learner.weight_decay == "decoupled" else None,
            bound=self.clip_bound(layer) if learner.clip else None,
            head_factor=head_factor if fade and layer == self.net.arch.layers - 1 else None,
        )

    def adam_scalars(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Adam's per-step scalars for the step after k, computed in float64 and then rounded to
        the run's dtype (the CPU kernel's `_adam_constants` does the same): per run
        alpha / (1 - beta1^(k+1)) [R, 1, ...], sqrt(1 - beta2^(k+1)), 1 / (1 - beta2^k) for
        FADE's v_hat before the update, and whether an Adam step was taken before."""
        dtype = self.net.flat.dtype
        k_now = k + 1
        step = (self.hp["alpha"].double() / (1 - BETA1**k_now)).to(dtype)
        sqrt_bc2 = (1 - BETA2**k_now).sqrt().to(dtype)
        inv_bc2_before = torch.where(k > 0, 1 / (1 - BETA2**k), 0.0).to(dtype)
        return step, sqrt_bc2, inv_bc2_before, k > 0

    def _alpha_eff(self, index: int, alpha: torch.Tensor, adam: tuple | None) -> torch.Tensor:
        """alpha for SGD; for Adam alpha / (sqrt(v_hat) + eps) with v_hat as it stands before
        this step's update (alpha on the very first step, when there is no v_hat yet)."""
        if adam is None:
            return alpha
        _, _, inv_bc2_before, started = adam
        v_hat = self.adam_v[index] * inv_bc2_before
        return torch.where(started, alpha / (v_hat.sqrt() + EPS), alpha)

    def _fade(self, index: int, param: torch.Tensor, grad: torch.Tensor, q: torch.Tensor, alpha_eff: torch.Tensor) -> None:
        """algorithms.md §2: gamma, decay, trace, then decay the parameter (the base step follows)."""
        gamma, trace = self.gamma[index], self.trace[index]
        gamma.sub_(_per_run(self.hp["theta_lambda"], param) * grad * trace).clamp_(GAMMA_MIN, GAMMA_MAX)
        decay = gamma.exp()
        c = (1 - decay - alpha_eff * q).clamp_(min=0)
        trace.mul_(c).sub_(decay * param)
        param.mul_(1 - decay)

    def _adam(self, index: int, param: torch.Tensor, grad: torch.Tensor, adam: tuple) -> None:
        """torch.optim.Adam's step with a per-run learning rate (scalars from `adam_scalars`)."""
        step, sqrt_bc2, _, _ = adam
        m, v = self.adam_m[index], self.adam_v[index]
        m.lerp_(grad, 1 - BETA1)
        v.mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
        # As torch.optim.Adam: sqrt(v) divided by sqrt(bias correction 2) (not times its reciprocal)
        param.sub_(_per_run(step, param) * m / (v.sqrt() / sqrt_bc2 + EPS))

    def clip_bound(self, layer: int) -> torch.Tensor:
        """[R] kappa / sqrt(fan_in) of a layer."""
        return self.hp["kappa"] / math.sqrt(self.net.weights[layer].shape[2])

    def _clip(self) -> None:
        """Clamp every parameter the fused kernel did not already clamp."""
        for index, param in enumerate(self.net.parameters()):
            if index not in self._fused_params:
                bound = _per_run(self.clip_bound(index // 2), param)
                param.clamp_(min=-bound, max=bound)

    # -- what the metrics read -----------------------------------------------------------
    def head_decay(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """exp(gamma) of the head's weight [R, C, H] and bias [R, C]; None without FADE."""
        if not self.fade_index:
            return None
        n = 2 * self.net.arch.layers
        return self.gamma[n - 2].exp(), self.gamma[n - 1].exp()


def fused_kernels(device: torch.device) -> ModuleType | None:
    """The triton_update module when this device's packs should use it, else None.

    FADE_TRITON=auto (default): for CUDA tensors when Triton imports, unless FADE_TORCH_COMPILE=1
    asks for torch.compile's fusion instead; 1: always (CPU tensors need TRITON_INTERPRET=1,
    which the tests set); 0: never (the torch ops, the fused kernels' reference).
    """
    mode = os.environ.get("FADE_TRITON", "auto")
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"FADE_TRITON must be auto, 0 or 1, not {mode!r}")
    compiled = os.environ.get("FADE_TORCH_COMPILE", "0") == "1"
    if mode == "0" or (mode == "auto" and (device.type != "cuda" or compiled)):
        return None
    try:
        from fade_core.neural import triton_update
    except ImportError as err:
        if mode == "1":
            raise ValueError(f"FADE_TRITON=1 needs Triton, which does not import here ({err})") from None
        return None
    return triton_update


def fused_step() -> ModuleType | None:
    """triton_fused_step (whole steps, few passes over the weights), unless FADE_TRITON_STEP=0."""
    mode = os.environ.get("FADE_TRITON_STEP", "1")
    if mode not in ("0", "1"):
        raise ValueError(f"FADE_TRITON_STEP must be 0 or 1, not {mode!r}")
    if mode == "0":
        return None
    from fade_core.neural import triton_fused_step

    return triton_fused_step


def hyperparameter_tensors(learner: NeuralLearner, values: dict[str, list[float]], dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Per-run hyperparameter lists -> [R] tensors, checked against what the learner takes."""
    unknown = set(values) - set(learner.hyperparameters)
    if unknown:
        raise ValueError(f"{learner.name} does not take {', '.join(sorted(unknown))}; it takes {', '.join(learner.hyperparameters)}")
    return {k: torch.tensor(v, dtype=dtype) for k, v in values.items()}


def make_runs(learner: str, arch: Architecture, seeds: list[int], hp: dict[str, list[float]], loss: Loss,
              device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, compiled_cpu: bool = True) -> NeuralRuns:
    """Notebook entry point: R = len(seeds) runs, run r initialised from seeds[r] with hp[...][r]."""
    spec = get_neural_learner(learner)
    net = BatchedMLP.from_seeds(arch, list(seeds), device, dtype)
    return NeuralRuns(spec, net, hyperparameter_tensors(spec, hp, dtype), loss, compiled_cpu)
