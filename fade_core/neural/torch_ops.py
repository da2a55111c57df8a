"""The "torch" and "triton" engines of the neural learners: one step for R runs as a fixed
sequence of batched tensor ops, on the state a `NeuralRuns` holds (fade_core.neural.runs).

The torch ops are the neural reference: the CPU kernel (cpu_engine) and the fused Triton
updates are tested against them learner by learner (tests/test_neural_engines.py,
tests/test_triton.py), and they are tested against a plain one-run PyTorch loop
(tests/test_neural_learners.py). A step runs forward, backward and every update of
algorithms.md §2 for all R runs with no host synchronisation, so on CUDA a block of steps
can be captured in a graph. With `fused` (the "triton" engine) the Adam and FADE parameter
updates run as one Triton kernel each (triton_update); with `whole_step` (the "triton_step"
engine) each step's backward products and updates run as the few fused passes over the
weights of triton_fused_step, the score and forward as torch ops.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch

from fade_core.engines import TORCH, TRITON, TRITON_STEP, EngineError
from fade_core.mlp import ForwardCache
from fade_core.neural.rules import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN
from fade_core.neural.state import NeuralRuns, StepResult, StepSums


def _per_run(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[R] -> [R, 1, ...] broadcasting against a parameter shaped like `like`."""
    return values.view(-1, *([1] * (like.dim() - 1)))


class TorchOps:
    """Advances `runs` one batched step at a time; `fused`: each Adam-family or FADE
    parameter's whole update as one Triton kernel (the "triton" engine); `whole_step`: the
    backward products and updates in triton_fused_step's passes (the "triton_step" engine)."""

    def __init__(self, runs: NeuralRuns, fused: bool = False, whole_step: bool = False):
        self.runs = runs
        self.name = TRITON_STEP if whole_step else TRITON if fused else TORCH
        self._triton = _triton_kernels() if fused else None
        self._whole_step = _fused_step_kernels() if whole_step else None
        learner, starts = runs.learner, runs.net.arch.offsets()
        adam_fused = learner.base == "adam" and learner.weight_decay != "coupled"
        fusable = range(len(starts) - 1) if fused else ()
        # Parameters whose whole update runs as one fused Triton kernel.
        self.fused_params = {i for i in fusable if adam_fused or i in runs.fade_index}

    # -- many steps ----------------------------------------------------------------------
    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: StepSums) -> None:
        """One batched `step` per step (see NeuralRuns.advance), or triton_fused_step's segment."""
        if self._whole_step is not None:
            self._whole_step.advance(self, x, target, run_slot, sums)
            return
        for t in range(x.shape[0]):
            sums.add(self.step(x[t].index_select(0, run_slot), target[t].index_select(0, run_slot)))

    # -- one step ------------------------------------------------------------------------
    def step(self, x: torch.Tensor, target: torch.Tensor) -> StepResult:
        """Predict x ([R, in]), score against target ([R, out] values or [R] labels), then update."""
        cache = self.runs.net.forward(x)
        result, delta, head_factor = self.score(cache, target)
        deltas = self.runs.net.backward(cache, delta)
        self._update(cache, deltas, head_factor)
        return result

    def score(self, cache: ForwardCache, target: torch.Tensor) -> tuple[StepResult, torch.Tensor, torch.Tensor | None]:
        """The step's result, the loss's gradient with respect to the output, and p(1-p) on a
        classification head (FADE's curvature factor there; None for regression)."""
        out = cache.output
        if self.runs.loss == "squared_error":
            delta = out - target
            sq_error = delta * delta
            return StepResult(cache, 0.5 * sq_error.sum(dim=1), sq_error, None), delta, None
        log_p = torch.log_softmax(out, dim=1)
        p = log_p.exp()
        delta = p.scatter_add(1, target.unsqueeze(1), torch.full_like(p[:, :1], -1.0))
        loss = -log_p.gather(1, target.unsqueeze(1)).squeeze(1)
        return StepResult(cache, loss, None, out.argmax(dim=1) == target), delta, p * (1 - p)

    def _curvature(self, index: int, cache: ForwardCache, head_factor: torch.Tensor | None) -> torch.Tensor:
        """FADE's q for parameter `index`: (layer input)^2 for weights, 1 for biases, times
        p(1-p) on the classification head."""
        layer, is_bias = divmod(index, 2)
        head = layer == self.runs.net.arch.layers - 1
        q = torch.ones_like(cache.output[:, :1]) if is_bias else (cache.inputs[layer] ** 2).unsqueeze(1)
        if head and head_factor is not None:
            q = q * (head_factor if is_bias else head_factor.unsqueeze(2))
        return q

    def _update(self, cache: ForwardCache, deltas: list[torch.Tensor], head_factor: torch.Tensor | None) -> None:
        learner, hp = self.runs.learner, self.runs.hp
        params = self.runs.net.parameters()
        k = self.runs.adam_steps  # Adam steps taken before this one
        k_now = k + 1
        adam = self.adam_scalars(k) if learner.base == "adam" else None
        for index, param in enumerate(params):
            layer, is_bias = divmod(index, 2)
            delta = deltas[layer]
            if index in self.fused_params:
                self._fused_update(index, param, delta, cache, head_factor, adam)
                continue
            alpha = _per_run(hp["alpha"], param)
            fused_sgd = learner.base == "sgd" and index not in self.runs.fade_index
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
            if index in self.runs.fade_index:
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
            self.runs.adam_steps.copy_(k_now)
        if learner.clip:
            self._clip()

    def _fused_update(self, index: int, param: torch.Tensor, delta: torch.Tensor, cache: ForwardCache,
                      head_factor: torch.Tensor | None, adam: tuple | None) -> None:
        """`_update`'s work on one parameter (FADE, decay, Adam or SGD step, clipping) in one Triton kernel."""
        learner, hp, kernels = self.runs.learner, self.runs.hp, self._triton
        layer, is_bias = divmod(index, 2)
        fade = index in self.runs.fade_index
        kernels.update(
            param, delta, None if is_bias else cache.inputs[layer], hp["alpha"],
            adam=kernels.AdamStep(self.runs.adam_m[index], self.runs.adam_v[index], *adam[:3]) if adam else None,
            fade=kernels.FadeState(self.runs.gamma[index], self.runs.trace[index], hp["theta_lambda"]) if fade else None,
            lam=hp["lambda"] if learner.weight_decay == "decoupled" else None,
            bound=self.clip_bound(layer) if learner.clip else None,
            head_factor=head_factor if fade and layer == self.runs.net.arch.layers - 1 else None,
        )

    def adam_scalars(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Adam's per-step scalars for the step after k, computed in float64 and then rounded to
        the run's dtype (the CPU kernel's `_adam_constants` does the same): per run
        alpha / (1 - beta1^(k+1)) [R, 1, ...], sqrt(1 - beta2^(k+1)), 1 / (1 - beta2^k) for
        FADE's v_hat before the update, and whether an Adam step was taken before."""
        dtype = self.runs.net.flat.dtype
        k_now = k + 1
        step = (self.runs.hp["alpha"].double() / (1 - BETA1**k_now)).to(dtype)
        sqrt_bc2 = (1 - BETA2**k_now).sqrt().to(dtype)
        inv_bc2_before = torch.where(k > 0, 1 / (1 - BETA2**k), 0.0).to(dtype)
        return step, sqrt_bc2, inv_bc2_before, k > 0

    def _alpha_eff(self, index: int, alpha: torch.Tensor, adam: tuple | None) -> torch.Tensor:
        """alpha for SGD; for Adam alpha / (sqrt(v_hat) + eps) with v_hat as it stands before
        this step's update (alpha on the very first step, when there is no v_hat yet)."""
        if adam is None:
            return alpha
        _, _, inv_bc2_before, started = adam
        v_hat = self.runs.adam_v[index] * inv_bc2_before
        return torch.where(started, alpha / (v_hat.sqrt() + EPS), alpha)

    def _fade(self, index: int, param: torch.Tensor, grad: torch.Tensor, q: torch.Tensor, alpha_eff: torch.Tensor) -> None:
        """algorithms.md §2: gamma, decay, trace, then decay the parameter (the base step follows)."""
        gamma, trace = self.runs.gamma[index], self.runs.trace[index]
        gamma.sub_(_per_run(self.runs.hp["theta_lambda"], param) * grad * trace).clamp_(GAMMA_MIN, GAMMA_MAX)
        decay = gamma.exp()
        c = (1 - decay - alpha_eff * q).clamp_(min=0)
        trace.mul_(c).sub_(decay * param)
        param.mul_(1 - decay)

    def _adam(self, index: int, param: torch.Tensor, grad: torch.Tensor, adam: tuple) -> None:
        """torch.optim.Adam's step with a per-run learning rate (scalars from `adam_scalars`)."""
        step, sqrt_bc2, _, _ = adam
        m, v = self.runs.adam_m[index], self.runs.adam_v[index]
        m.lerp_(grad, 1 - BETA1)
        v.mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
        # As torch.optim.Adam: sqrt(v) divided by sqrt(bias correction 2) (not times its reciprocal)
        param.sub_(_per_run(step, param) * m / (v.sqrt() / sqrt_bc2 + EPS))

    def clip_bound(self, layer: int) -> torch.Tensor:
        """[R] kappa / sqrt(fan_in) of a layer."""
        return self.runs.hp["kappa"] / math.sqrt(self.runs.net.weights[layer].shape[2])

    def _clip(self) -> None:
        """Clamp every parameter the fused kernel did not already clamp."""
        for index, param in enumerate(self.runs.net.parameters()):
            if index not in self.fused_params:
                bound = _per_run(self.clip_bound(index // 2), param)
                param.clamp_(min=-bound, max=bound)


def _triton_kernels() -> ModuleType:
    """triton_update, or EngineError (one line) where Triton does not import."""
    try:
        from fade_core.neural import triton_update
    except ImportError as err:
        raise EngineError(f"engine 'triton' needs Triton, which does not import here ({err}); choose torch") from None
    return triton_update


def _fused_step_kernels() -> ModuleType:
    """triton_fused_step (Triton loads only for the engine that uses it)."""
    _triton_kernels()  # the one-line error where Triton does not import
    from fade_core.neural import triton_fused_step

    return triton_fused_step
