"""The seven online linear learners of algorithms.md section 1, batched over runs.

Each learner is one per-component update rule, written to read like its row of the
table (same symbols, same order), and one `LinearLearner` record built from it: its
hyperparameters are the rule's parameters and its compiled chunk driver is the rule
inlined into a shared template, so a new learner is one rule and one registration.
A driver runs a chunk of steps for R runs at once: it computes every run's prediction
error, then applies the rule to each of the d components. It is machine code (numba),
so Python is touched once per chunk, never per step or per run: at d = 20, a step is
~100 flops, far below what one eager torch kernel launch costs.

Every run keeps the five per-component slots (w, beta, h, gamma, g); a learner reads
and writes the ones its row uses and leaves the others untouched. Hyperparameters
come as an (R, P) matrix whose columns are the learner's `hyperparameters` in order,
so runs of one batch can differ in every value.
"""

from __future__ import annotations

import inspect
import math
import types
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

import numba
import numpy as np
import torch

from fade_core.hyperparameters import HYPERPARAMETERS

# Reassociation and fused multiply-add let LLVM vectorise the component loop; we keep
# IEEE NaN/inf semantics (no 'nnan'/'ninf') so diverging runs stay visible as NaN/inf.
_FASTMATH = {"nsz", "arcp", "contract", "reassoc"}


@numba.njit(inline="always", fastmath=_FASTMATH, cache=True)
def _clamp(v, lo, hi):
    return min(max(v, lo), hi)


# A rule updates component i of one run. It takes the per-component state, then the
# optional gamma clamp [lo, hi], then the learner's hyperparameters in order: those
# trailing parameter names ARE the learner's `hyperparameters` (`lam` stands for
# `lambda`, a Python keyword), so the column order of the (R, P) matrix cannot drift
# from what the rule reads. beta0 and gamma0 only set the initial state: the rules
# that take them leave them unread. Returns the new (w, beta, h, gamma, g).
_rule = numba.njit(inline="always", fastmath=_FASTMATH, cache=True)
_STATE_ARGS = ("x", "delta", "w", "beta", "h", "gamma", "g", "lo", "hi")
_KEYWORDS = {"lam": "lambda"}


@_rule
def _sgd(x, delta, w, beta, h, gamma, g, lo, hi, alpha):
    w = w + alpha * delta * x
    return w, beta, h, gamma, g


@_rule
def _sgd_wd(x, delta, w, beta, h, gamma, g, lo, hi, alpha, lam):
    w = (1 - lam) * w + alpha * delta * x
    return w, beta, h, gamma, g


@_rule
def _idbd(x, delta, w, beta, h, gamma, g, lo, hi, theta_alpha, beta0):
    beta = beta + theta_alpha * delta * x * h
    a = math.exp(beta)
    w = w + a * delta * x
    h = h * max(1 - a * x * x, 0) + a * delta * x
    return w, beta, h, gamma, g


@_rule
def _idbd_wd(x, delta, w, beta, h, gamma, g, lo, hi, theta_alpha, beta0, lam):
    beta = beta + theta_alpha * delta * x * h
    a = math.exp(beta)
    w = (1 - lam) * w + a * delta * x
    h = h * max(1 - lam - a * x * x, 0) + a * delta * x
    return w, beta, h, gamma, g


@_rule
def _fade(x, delta, w, beta, h, gamma, g, lo, hi, alpha, theta_lambda, gamma0):
    gamma = _clamp(gamma + theta_lambda * delta * x * g, lo, hi)
    l = math.exp(gamma)
    g = g * max(1 - l - alpha * x * x, 0) - l * w  # w is still w_old here
    w = (1 - l) * w + alpha * delta * x
    return w, beta, h, gamma, g


@_rule
def _fade_idbd(x, delta, w, beta, h, gamma, g, lo, hi, theta, beta0, gamma0):
    beta = beta + theta * delta * x * h  # both meta updates use the old traces
    a = math.exp(beta)
    gamma = _clamp(gamma + theta * delta * x * g, lo, hi)
    l = math.exp(gamma)
    c = max(1 - l - a * x * x, 0)
    h = h * c + a * delta * x
    g = g * c - l * w
    w = (1 - l) * w + a * delta * x
    return w, beta, h, gamma, g


@_rule
def _coupled(x, delta, w, beta, h, gamma, g, lo, hi, theta, beta0, gamma0):
    beta = beta + theta * delta * x * h
    a = math.exp(beta)
    gamma = _clamp(gamma + theta * delta * x * g, lo, hi)
    l = math.exp(gamma)
    c = max(1 - a * l - a * x * x, 0)
    h = h * c + a * delta * x - a * l * w
    g = g * c - a * l * w
    w = (1 - a * l) * w + a * delta * x
    return w, beta, h, gamma, g


# Calls a rule with a run's row p of the (R, P) matrix as its trailing arguments, one
# adapter per arity (numba cannot IR-inline a call with *args, and inlining keeps the
# machine code, hence the bits, of a hand-written call).
_call = numba.njit(inline="always", fastmath=_FASTMATH, cache=True)


@_call
def _call1(rule, p, x, delta, w, beta, h, gamma, g, lo, hi):
    return rule(x, delta, w, beta, h, gamma, g, lo, hi, p[0])


@_call
def _call2(rule, p, x, delta, w, beta, h, gamma, g, lo, hi):
    return rule(x, delta, w, beta, h, gamma, g, lo, hi, p[0], p[1])


@_call
def _call3(rule, p, x, delta, w, beta, h, gamma, g, lo, hi):
    return rule(x, delta, w, beta, h, gamma, g, lo, hi, p[0], p[1], p[2])


_CALLS = {1: _call1, 2: _call2, 3: _call3}


@numba.njit(inline="always", fastmath=_FASTMATH)
def _advance_run(rule, call, pr, lo, hi, s, x, y, W, B, H, G, GT, losses_r, total):
    """T steps of one run (state in W, B, H, G, GT) with one learner's rule, called
    through `call` with the run's hyperparameter row `pr`.

    Returns `total` plus this chunk's squared errors, added one step at a time in float64:
    the same order whatever the chunking, so binned sums are chunk-invariant to the bit.
    """
    d = W.shape[0]
    for t in range(x.shape[0]):
        xt = x[t, s]
        pred = 0.0  # accumulate the prediction in float64
        for i in range(d):
            pred += W[i] * xt[i]
        delta = y[t, s] - pred
        losses_r[t] = delta * delta
        total += delta * delta
        for i in range(d):
            W[i], B[i], H[i], G[i], GT[i] = call(rule, pr, xt[i], delta, W[i], B[i], H[i], G[i], GT[i], lo, hi)
    return total


def _run_chunk(p, lo, hi, run_slot, x, y, w, beta, h, gamma, g, losses, loss_sums):
    """Advance R runs by T steps in place; write each step's pre-update loss delta^2
    and add them to loss_sums (R,) float64.

    x: (T, S, d) and y: (T, S) hold one stream per slot s; run r reads slot run_slot[r],
    so all configurations of a seed share one copy of its stream. A template:
    `_chunk_driver` compiles one copy per learner, with _RULE and _CALL bound.
    """
    for r in numba.prange(w.shape[0]):
        # The run's state lives in small local arrays for the whole chunk.
        W, B, H, G, GT = w[r].copy(), beta[r].copy(), h[r].copy(), gamma[r].copy(), g[r].copy()
        loss_sums[r] = _advance_run(_RULE, _CALL, p[r], lo, hi, run_slot[r], x, y, W, B, H, G, GT,  # noqa: F821
                                    losses[r], loss_sums[r])
        w[r], beta[r], h[r], gamma[r], g[r] = W, B, H, G, GT


def _chunk_driver(name: str, rule: Callable, arity: int) -> Callable:
    """`_run_chunk` compiled for one rule (on first call), the rule bound as a global.

    Not a closure: numba's cache key hashes a closure's cells, and a dispatcher pickles
    with a per-process id, so a closure over the rule would miss the cache in every new
    process. Globals are frozen into the machine code instead, and the function's name,
    unique per learner, names its cache file.
    """
    if arity not in _CALLS:
        raise ValueError(f"linear learner {name!r}: rules take 1 to {max(_CALLS)} hyperparameters, not {arity}")
    template = _run_chunk
    scope = {**template.__globals__, "_RULE": rule, "_CALL": _CALLS[arity]}
    driver = types.FunctionType(template.__code__, scope, f"_run_chunk_{name}")
    driver.__qualname__ = driver.__name__
    return numba.njit(fastmath=_FASTMATH, parallel=True, cache=True)(driver)


@dataclass(frozen=True)
class LinearLearner:
    """A linear learner: its rule, and what is derived from it.

    `hyperparameters` (the column order of the (R, P) matrix) come from the rule's
    trailing parameters; the learner adapts its step size / decay rate when it starts
    them from beta0 / gamma0.
    """

    name: str
    rule: Callable = field(repr=False)  # the per-component update (a numba function)
    summary: str
    hyperparameters: tuple[str, ...] = field(init=False)
    run_chunk: Callable = field(init=False, repr=False, compare=False)  # the compiled chunk driver

    def __post_init__(self) -> None:
        names = tuple(inspect.signature(self.rule.py_func).parameters)
        if names[: len(_STATE_ARGS)] != _STATE_ARGS:
            raise ValueError(f"linear learner {self.name!r}: a rule starts with the parameters {', '.join(_STATE_ARGS)}")
        hyperparameters = tuple(_KEYWORDS.get(n, n) for n in names[len(_STATE_ARGS) :])
        unknown = [n for n in hyperparameters if n not in HYPERPARAMETERS]
        if unknown:
            raise ValueError(f"linear learner {self.name!r}: {', '.join(unknown)} not in HYPERPARAMETERS")
        object.__setattr__(self, "hyperparameters", hyperparameters)
        object.__setattr__(self, "run_chunk", _chunk_driver(self.name, self.rule, len(hyperparameters)))

    @property
    def adapts_step_size(self) -> bool:
        """Has beta = log step size (reports exp(beta))."""
        return "beta0" in self.hyperparameters

    @property
    def adapts_decay(self) -> bool:
        """Has gamma = log decay rate (reports exp(gamma))."""
        return "gamma0" in self.hyperparameters


LINEAR_LEARNERS: dict[str, LinearLearner] = {
    learner.name: learner
    for learner in (
        LinearLearner("sgd", _sgd, "LMS / delta rule"),
        LinearLearner("sgd_wd", _sgd_wd, "LMS with fixed weight decay"),
        LinearLearner("idbd", _idbd, "IDBD step-size adaptation"),
        LinearLearner("idbd_wd", _idbd_wd, "IDBD with fixed weight decay"),
        LinearLearner("fade", _fade, "FADE: adaptive decay"),
        LinearLearner("fade_idbd", _fade_idbd, "FADE + IDBD, decoupled, tied theta"),
        LinearLearner("coupled", _coupled, "L2-derived coupled FADE + IDBD, tied theta"),
    )
}


class LinearState(NamedTuple):
    """Per-run state of a linear learner; every field is (R, d). Unused slots stay zero."""

    w: torch.Tensor  # weights
    beta: torch.Tensor  # log step sizes (IDBD family)
    h: torch.Tensor  # step-size trace (IDBD family)
    gamma: torch.Tensor  # log decay rates (FADE family)
    g: torch.Tensor  # decay trace (FADE family)


class LinearRun(NamedTuple):
    """What `run_linear` returns."""

    losses: torch.Tensor  # (T, R) squared error of the prediction made before each update
    state: LinearState  # final state


def get_linear_learner(name: str) -> LinearLearner:
    try:
        return LINEAR_LEARNERS[name]
    except KeyError:
        raise ValueError(
            f"unknown linear learner {name!r}; choose one of {', '.join(LINEAR_LEARNERS)}"
        ) from None


def hyperparameter_matrix(
    learner: LinearLearner, hp: Mapping[str, float | Sequence[float] | torch.Tensor], runs: int, dtype: torch.dtype
) -> torch.Tensor:
    """Stack per-run hyperparameters into the (R, P) matrix the driver reads.

    Scalars broadcast to every run; missing or extra names are errors.
    """
    missing = [n for n in learner.hyperparameters if n not in hp]
    extra = [n for n in hp if n not in learner.hyperparameters]
    if missing or extra:
        raise ValueError(
            f"{learner.name} takes exactly {', '.join(learner.hyperparameters)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; does not take {', '.join(extra)}" if extra else "")
        )
    columns = [torch.as_tensor(hp[n], dtype=torch.float64).reshape(-1).expand(runs) for n in learner.hyperparameters]
    return torch.stack(columns, dim=1).to(dtype).contiguous()


def initial_weights(seeds: Sequence[int], d: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """w0 ~ N(0, 0.1^2) per component, drawn from each seed alone: (len(seeds), d).

    A run's initial weights depend on its seed only, never on its batch (pack invariance).
    """
    rows = [0.1 * torch.randn(d, generator=torch.Generator().manual_seed(int(s)), dtype=torch.float64) for s in seeds]
    return torch.stack(rows).to(dtype)


def init_state(learner: LinearLearner, hp_matrix: torch.Tensor, w0: torch.Tensor) -> LinearState:
    """Initial state of algorithms.md section 1: traces 0, beta = beta0, gamma = gamma0."""
    runs, d = w0.shape
    dtype = hp_matrix.dtype

    def broadcast(name: str) -> torch.Tensor:
        if name not in learner.hyperparameters:
            return torch.zeros(runs, d, dtype=dtype)
        return hp_matrix[:, learner.hyperparameters.index(name)][:, None].expand(runs, d).clone()

    zeros = torch.zeros(runs, d, dtype=dtype)
    return LinearState(w0.to(dtype).clone(), broadcast("beta0"), zeros.clone(), broadcast("gamma0"), zeros.clone())


def advance(
    learner: LinearLearner,
    hp_matrix: torch.Tensor,
    state: LinearState,
    x: torch.Tensor,
    y: torch.Tensor,
    run_slot: torch.Tensor,
    losses: torch.Tensor,
    loss_sums: np.ndarray | None = None,
    gamma_bounds: tuple[float, float] = (-math.inf, math.inf),
) -> None:
    """Advance the state in place by x.shape[0] steps (the engine's entry point).

    x: (T, S, d), y: (T, S) streams by slot; run_slot: (R,) int64 slot of each run;
    losses: (R, T) output buffer. All CPU tensors of the state's dtype. loss_sums, if
    given: (R,) float64 running sums the steps' losses are added to, in step order.
    """
    if loss_sums is None:
        loss_sums = np.zeros(state.w.shape[0])
    lo, hi = (np.dtype(state.w.numpy().dtype).type(b) for b in gamma_bounds)
    learner.run_chunk(
        hp_matrix.numpy(),
        lo,
        hi,
        run_slot.numpy(),
        x.numpy(),
        y.numpy(),
        *(t.numpy() for t in state),
        losses.numpy(),
        loss_sums,
    )


def run_linear(
    learner: str,
    hp: Mapping[str, float | Sequence[float] | torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    w0: torch.Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    gamma_bounds: tuple[float, float] = (-math.inf, math.inf),
) -> LinearRun:
    """Run a linear learner on caller-supplied streams, one per run.

    Args:
      learner: a name of `LINEAR_LEARNERS`, e.g. "fade".
      hp: the learner's hyperparameters by name (algorithms.md), each a scalar shared
        by all runs or a sequence / tensor of R per-run values.
      x: (T, R, d) inputs; y: (T, R) targets.
      w0: (R, d) initial weights; zeros if omitted (`initial_weights` gives the spec's
        seeded N(0, 0.1^2) draw).
      dtype: torch.float32 (default) or torch.float64 for state and arithmetic.
      gamma_bounds: optional clamp of gamma, applied right after its update.

    Returns:
      `LinearRun(losses (T, R), final LinearState)`.
    """
    spec = get_linear_learner(learner)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if x.dim() != 3 or y.shape != x.shape[:2]:
        raise ValueError(f"expected x of shape (T, R, d) and y of shape (T, R); got {tuple(x.shape)} and {tuple(y.shape)}")
    steps, runs, d = x.shape
    w0 = torch.zeros(runs, d) if w0 is None else w0
    if w0.shape != (runs, d):
        raise ValueError(f"w0 must have shape ({runs}, {d}), got {tuple(w0.shape)}")
    hp_matrix = hyperparameter_matrix(spec, hp, runs, dtype)
    state = init_state(spec, hp_matrix, w0)
    losses = torch.empty(runs, steps, dtype=dtype)
    advance(
        spec,
        hp_matrix,
        state,
        x.detach().to("cpu", dtype).contiguous(),
        y.detach().to("cpu", dtype).contiguous(),
        torch.arange(runs),
        losses,
        gamma_bounds=gamma_bounds,
    )
    return LinearRun(losses.T, state)
