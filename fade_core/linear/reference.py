"""The "reference" engine of the linear learners: the rules of `rules.py`, as written, in a
plain compiled loop: for each run, for each step, the float64 prediction, then the rule
on every component.

It is what the fast engine ("cpu": `kernel.py` and its vector tracer) must compute, and
it is written to be checked by reading: no lanes, no tiles, no traced code. Arithmetic is
float64 whatever the state's dtype (algorithms.md's rules on one run; a float32 state is
read into float64 and rounded back once per step), so the rule runs exactly as plain Python
would run it, with `math.exp`. The stated distance to the fast engine is in
tests/test_linear_engines.py and docs/architecture.md.
"""

from __future__ import annotations

import functools
from typing import Callable

import numba
import numpy as np
from numba.extending import overload

from fade_core.linear import rules
from fade_core.linear.rules import LinearLearner


@overload(rules.clamp)
def _clamp(v, lo, hi):
    """rules.clamp inside compiled code (the rules call it by name)."""
    return lambda v, lo, hi: min(max(v, lo), hi)


@functools.cache
def _apply(count: int) -> Callable:
    """The adapter that passes a run's row of the (R, P) matrix to a rule as its `count` trailing
    arguments (numba calls a function with a fixed number of arguments): written out once per count."""
    row = ", ".join(f"p[{j}]" for j in range(count))
    source = (f"def apply(rule, x, delta, w, beta, h, gamma, g, lo, hi, p):\n"
              f"    return rule(x, delta, w, beta, h, gamma, g, lo, hi, {row})\n")
    namespace: dict = {}
    exec(compile(source, f"<reference adapter of {count} hyperparameters>", "exec"), namespace)  # our own text only
    return numba.njit(namespace["apply"])


@numba.njit
def _advance(apply, rule, p, lo, hi, run_slot, x, y, w, beta, h, gamma, g, losses, loss_sums):
    """Every run r, step after step, on its slot's stream: delta = y - <w, x> (float64, over
    components in order), the loss delta^2 into loss_sums[r] (and losses[r, t] if losses
    has columns), then the rule on each component."""
    keep_losses = losses.shape[1] > 0
    for r in range(w.shape[0]):
        s = run_slot[r]
        hp = p[r].astype(np.float64)
        for t in range(x.shape[0]):
            prediction = 0.0
            for i in range(w.shape[1]):
                prediction += np.float64(w[r, i]) * np.float64(x[t, s, i])
            delta = np.float64(y[t, s]) - prediction
            loss_sums[r] += delta * delta
            if keep_losses:
                losses[r, t] = delta * delta
            for i in range(w.shape[1]):
                new = apply(rule, np.float64(x[t, s, i]), delta, np.float64(w[r, i]), np.float64(beta[r, i]),
                            np.float64(h[r, i]), np.float64(gamma[r, i]), np.float64(g[r, i]), lo, hi, hp)
                w[r, i], beta[r, i], h[r, i], gamma[r, i], g[r, i] = new


@functools.cache
def _compiled_rule(rule: Callable) -> Callable:
    return numba.njit(rule)


def advance_reference(learner: LinearLearner, p: np.ndarray, lo: float, hi: float, run_slot: np.ndarray,
                      x: np.ndarray, y: np.ndarray, state: tuple[np.ndarray, ...], losses: np.ndarray,
                      loss_sums: np.ndarray) -> None:
    """The reference engine on C-contiguous arrays: `state` = (w, beta, h, gamma, g), each (R, d),
    updated in place; the rest as `kernel.driver`'s drivers take them."""
    _advance(_apply(len(learner.hyperparameters)), _compiled_rule(learner.rule), p, float(lo), float(hi), run_slot,
             x, y, *state, losses, loss_sums)
