"""The "torch" and "triton" engines of the neural learners: one step for R runs as a fixed
sequence of batched tensor ops, on the state a `NeuralRuns` holds (fade_core.neural.runs).

The torch ops are the neural reference: the CPU kernel (cpu_engine) and the fused Triton
updates are tested against them learner by learner (tests/test_triton.py), and they and the
CPU kernel against a plain one-run PyTorch loop (tests/test_neural_learners.py). The update
arithmetic is `parts.update` with torch's ops bound to its primitives (`TORCH_PRIMITIVES`). A step runs forward, backward and every update of
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
from fade_core.rulebind import bind
from fade_core.neural import parts
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
        adam_fused = learner.base == "adam"
        fusable = range(len(starts) - 1) if fused and learner.weight_decay != "coupled" and not learner.own_base else ()
        # Parameters whose whole update runs as one fused Triton kernel (its launch passes no
        # coupled decay, nor a researcher's base step: those run the torch ops).
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
        adam = self.adam_scalars(k) if learner.base == "adam" else None
        rank_one_parts = not learner.parts_beyond(_RANK_ONE_PARTS)  # else every update is parts.update's
        for index, param in enumerate(params):
            layer, is_bias = divmod(index, 2)
            delta = deltas[layer]
            if index in self.fused_params:
                self._fused_update(index, param, delta, cache, head_factor, adam)
                continue
            alpha = _per_run(hp["alpha"], param)
            rank_one = rank_one_parts and index not in self.runs.fade_index
            if not is_bias and rank_one:
                if learner.weight_decay == "coupled":
                    # As torch.optim.SGD(weight_decay): d = G + lambda * P, then P -= alpha * d, per
                    # element. (A shrink factor 1 - alpha*lambda rounds to a multiple of 2^-24 in float32:
                    # the decay would vanish for alpha*lambda < 3e-8.)
                    d = torch.baddbmm(_per_run(hp["lambda"], param) * param, delta.unsqueeze(2), cache.inputs[layer].unsqueeze(1))
                    param.addcmul_(d, -alpha)
                else:
                    # Rank-one SGD step without materialising the gradient: P -= alpha * delta input^T.
                    param.baddbmm_((delta * -alpha.squeeze(2)).unsqueeze(2), cache.inputs[layer].unsqueeze(1))
                if learner.clip:
                    bound = _per_run(self.clip_bound(layer), param)
                    param.clamp_(min=-bound, max=bound)
                continue
            grad = delta if is_bias else delta.unsqueeze(2) * cache.inputs[layer].unsqueeze(1)  # outer product
            self._rule_update(index, param, grad, alpha, cache, head_factor, adam)
        if learner.base == "adam":
            self.runs.adam_steps.copy_(k + 1)

    def _rule_update(self, index: int, param: torch.Tensor, grad: torch.Tensor, alpha: torch.Tensor, cache: ForwardCache,
                     head_factor: torch.Tensor | None, adam: tuple | None) -> None:
        """`parts.update` on one parameter, its parts the learner's, on tensors; the state in place."""
        learner, hp, runs = self.runs.learner, self.runs.hp, self.runs
        fade_on = index in runs.fade_index

        def per_run(name: str) -> torch.Tensor | None:
            return _per_run(hp[name], param) if name in hp else None

        lam = per_run("lambda")
        slots = learner.state_slots
        m, v = runs.adam_m[index] if slots > 0 else None, runs.adam_v[index] if slots > 1 else None
        gamma, trace = (runs.gamma[index], runs.trace[index]) if fade_on else (None, None)
        if adam:
            step, sqrt_bc2, inv_bc2, first = (_per_run(s, param) for s in adam)
            ac = (first, step, sqrt_bc2, inv_bc2, *_ADAM_COEFFICIENTS)
        else:
            ac = (None,) * 8
        own = learner.own_base
        base = own.step(TORCH_PRIMITIVES, {n: per_run(n) for n in own.hyperparameters}) if own else learner.base
        new = _TORCH_PARTS.update(
            param, grad, self._curvature(index, cache, head_factor) if fade_on else None, alpha, lam,
            _TORCH_PARTS.shrink(alpha, lam) if learner.weight_decay == "decoupled" else None, per_run("theta_lambda"),
            _per_run(self.clip_bound(index // 2), param) if "kappa" in hp else None, m, v, gamma, trace, *ac,
            **{**learner.flags(fade_on), "base": base})
        for state, value in zip((param, m, v, gamma, trace), new):
            if state is not None and value is not state:
                state.copy_(value)

    def _fused_update(self, index: int, param: torch.Tensor, delta: torch.Tensor, cache: ForwardCache,
                      head_factor: torch.Tensor | None, adam: tuple | None) -> None:
        """`_update`'s work on one parameter (FADE, decay, Adam or SGD step, clipping) in one Triton kernel."""
        learner, hp, kernels = self.runs.learner, self.runs.hp, self._triton
        layer, is_bias = divmod(index, 2)
        fade = index in self.runs.fade_index
        kernels.update(
            learner, param, delta, None if is_bias else cache.inputs[layer], hp["alpha"],
            adam=kernels.AdamStep(self.runs.adam_m[index], self.runs.adam_v[index], *adam[:3]) if adam else None,
            fade=kernels.FadeState(self.runs.gamma[index], self.runs.trace[index], hp["theta_lambda"]) if fade else None,
            lam=hp.get("lambda"),
            bound=self.clip_bound(layer) if learner.clip else None,
            head_factor=head_factor if fade and layer == self.runs.net.arch.layers - 1 else None,
        )

    def adam_scalars(self, k: torch.Tensor) -> tuple:
        """`parts.adam_scalars` for the step after k (k: [R] Adam steps taken), its per-run
        scalars computed in float64 and then rounded to the run's dtype (the CPU kernel's
        `adam_constants` does the same) -> (alpha / (1 - beta1^(k+1)), sqrt(1 - beta2^(k+1)),
        1 / (1 - beta2^k), whether this is the first Adam step) [R] each; the constant coefficients
        are _ADAM_COEFFICIENTS."""
        dtype = self.runs.net.flat.dtype
        step, sqrt_bc2, inv_bc2, *_ = _TORCH_PARTS.adam_scalars(self.runs.hp["alpha"].double(), (k + 1).double())
        return step.to(dtype), sqrt_bc2.to(dtype), inv_bc2.to(dtype), k == 0

    def clip_bound(self, layer: int) -> torch.Tensor:
        """[R] kappa / sqrt(fan_in) of a layer (`parts.clip_bound`)."""
        return _TORCH_PARTS.clip_bound(self.runs.hp["kappa"], self.runs.net.weights[layer].shape[2])


def _sqrt(x):
    return torch.sqrt(x) if isinstance(x, torch.Tensor) else math.sqrt(x)


def _clamp(x, lo, hi):
    return torch.clamp(x, lo, hi)


# The rule's primitives as torch ops (rulebind.bind): maximum/minimum/clamp as torch.clamp,
# which keeps a NaN value NaN; fma unfused (torch has none; the reference rounds twice);
# lerp as torch.lerp (torch.optim.Adam's lerp_).
TORCH_PRIMITIVES = {
    "exp": torch.exp, "sqrt": _sqrt, "fma": lambda a, b, c: a * b + c, "div_approx": lambda a, b: a / b,
    "where": torch.where, "maximum": lambda a, b: torch.clamp(a, min=b), "minimum": lambda a, b: torch.clamp(a, max=b),
    "clamp": _clamp, "lerp": torch.lerp,
}


class _BoundParts:
    """`parts`' rules bound to torch's ops."""

    def __init__(self) -> None:
        for name in ("update", "shrink", "adam_scalars", "clip_bound"):
            setattr(self, name, bind(getattr(parts, name), TORCH_PRIMITIVES, parts=True))


_TORCH_PARTS = _BoundParts()
_ADAM_COEFFICIENTS = parts.adam_scalars(1.0, 2)[3:]  # 1 - beta1, beta2, 1 - beta2, eps: Python floats
# The parts the rank-one SGD step of `_update` is written for (on the parameters FADE leaves alone)
_RANK_ONE_PARTS = {"base": ("sgd",), "weight_decay": ("none", "coupled"), "clip": (False, True), "fade": ("none", "head", "all")}


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
