"""Running the linear learners on torch tensors: state, hyperparameter matrix, `advance`.

A learner's rule and record are in `rules`, the compiled driver in `kernel`; this is the
entry point for the pack engine (`advance`) and for notebooks (`run_linear`). Every run
keeps the five per-component slots (w, beta, h, gamma, g); a learner reads and writes the
ones its row uses and leaves the others untouched. Hyperparameters come as an (R, P)
matrix whose columns are the learner's `hyperparameters` in order, so runs of one batch
can differ in every value.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import torch

from fade_core.engines import CPU, family_engines, get_engine
from fade_core.linear.rules import LinearLearner, get_linear_learner

LINEAR_ENGINES = tuple(e.name for e in family_engines("linear"))


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
    losses: torch.Tensor | None = None,
    loss_sums: np.ndarray | None = None,
    gamma_bounds: tuple[float, float] = (-math.inf, math.inf),
    engine: str = CPU,
) -> None:
    """Advance the state in place by x.shape[0] steps (the pack runner's entry point).

    x: (T, S, d), y: (T, S) streams by slot; run_slot: (R,) int64 slot of each run;
    losses: (R, T) buffer for each step's loss, or None where only the sums are wanted
    (the pack engine). All CPU tensors of the state's dtype. loss_sums, if given: (R,)
    float64 running sums the steps' losses are added to, in step order.
    The arrays written in place (state, losses, loss_sums) must be contiguous.
    engine: "cpu" (the vector-traced kernel) or "reference" (the plain loop over the rule), fade_core.engines.
    """
    advance_chunk = get_engine(engine, "linear").load()
    if loss_sums is None:
        loss_sums = np.zeros(state.w.shape[0])
    if losses is None:
        losses = torch.empty(state.w.shape[0], 0, dtype=state.w.dtype)
    written = [t.numpy() for t in (*state, losses)] + [loss_sums]
    if not all(a.flags.c_contiguous for a in written):
        raise ValueError("advance writes the state, losses and loss_sums in place: they must be contiguous")
    _check_shapes(state, x, y, run_slot, losses)
    if x.shape[0] == 0 or state.w.shape[0] == 0:  # no step or no run: nothing to advance
        return
    dtype = written[0].dtype
    lo, hi = (dtype.type(b) for b in gamma_bounds)
    slots = np.ascontiguousarray(run_slot.numpy(), dtype=np.int64)
    x_, y_ = (np.ascontiguousarray(t.numpy()) for t in (x, y))
    hp = np.ascontiguousarray(hp_matrix.numpy())
    advance_chunk(learner, hp, lo, hi, slots, x_, y_, tuple(written[:5]), written[5], loss_sums)


def _check_shapes(state: LinearState, x: torch.Tensor, y: torch.Tensor, run_slot: torch.Tensor,
                  losses: torch.Tensor) -> None:
    """What the compiled driver reads without checking: a wrong shape, dtype or slot would read
    outside the arrays (a segfault, or silently wrong numbers)."""
    runs, d = state.w.shape
    if x.dim() != 3 or x.shape[2] != d or tuple(y.shape) != tuple(x.shape[:2]):
        raise ValueError(f"advance: x must be (T, S, {d}) and y (T, S) for a state of {d} inputs; got x "
                         f"{tuple(x.shape)}, y {tuple(y.shape)}")
    if x.dtype != state.w.dtype or y.dtype != state.w.dtype:
        raise ValueError(f"advance: x and y must have the state's dtype {state.w.dtype}; got {x.dtype}, {y.dtype}")
    if tuple(run_slot.shape) != (runs,) or (runs and not 0 <= int(run_slot.min()) <= int(run_slot.max()) < x.shape[1]):
        raise ValueError(f"advance: run_slot must give each of the {runs} runs a slot in 0..{x.shape[1] - 1} of x")
    if losses.shape[0] != runs or losses.shape[1] not in (0, x.shape[0]):
        raise ValueError(f"advance: losses must be ({runs}, {x.shape[0]}) or ({runs}, 0); got {tuple(losses.shape)}")


def run_linear(
    learner: str,
    hp: Mapping[str, float | Sequence[float] | torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    w0: torch.Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    gamma_bounds: tuple[float, float] = (-math.inf, math.inf),
    engine: str = CPU,
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
      engine: "cpu" (the fast kernel, default) or "reference" (the plain loop it is tested against).

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
        engine=engine,
    )
    return LinearRun(losses.T, state)
