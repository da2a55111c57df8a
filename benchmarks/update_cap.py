"""The per-parameter update alone: a cap on any exact implementation of a neural learner.

Every run-step applies the learner's rule to every parameter: Adam's moments, its two
IEEE divisions and square root (torch.optim.Adam's arithmetic, which the project and the
peer both keep); FADE's meta-update, clamp, exp and trace on the head, SGD on the rest.
Timed here on one run's parameter arrays with the project's own compiled element rules
(fade_core.neural.cpu_elements), with nothing else (no forward or backward pass, one fixed
gradient): the rate of run-steps no implementation of the same arithmetic can pass on this
core, however it does the rest. Divisions and square roots run on one divider unit whose
throughput, not the FMA peak, sets Adam's share of it.
"""

from __future__ import annotations

import time

import numba
import numpy as np

from fade_core.neural.cpu_elements import ERRORS, FASTMATH, adam, adam_constants, fade, fade_constants


_compiled = numba.njit(fastmath=FASTMATH, error_model=ERRORS)


@_compiled
def _adam(p, m, v, grad, ac):
    for i in range(p.shape[0]):
        m[i], v[i], p[i] = adam(m[i], v[i], p[i], grad[i], ac)


@_compiled
def _sgd(p, grad, alpha):
    for i in range(p.shape[0]):
        p[i] = p[i] - alpha * grad[i]


@_compiled
def _fade_sgd(p, gm, tr, grad, alpha, fc):
    for i in range(p.shape[0]):
        gm[i], tr[i], w = fade(gm[i], tr[i], p[i], grad[i], grad[i] * grad[i], alpha, alpha, fc)
        p[i] = w - alpha * grad[i]


@_compiled
def _updates(adam_base: bool, fade_from: int, steps: int, alpha, p, m, v, gm, tr, grad, scalars):
    """`steps` updates of one run's parameters. (Loops over slices that start at 0, as the kernel's
    rows: LLVM vectorises those.)"""
    fc = fade_constants(p)
    for k in range(1, steps + 1):
        if adam_base:
            _adam(p, m, v, grad, adam_constants(alpha, k, scalars))
        else:
            _sgd(p[:fade_from], grad[:fade_from], alpha)
            _fade_sgd(p[fade_from:], gm, tr, grad[fade_from:], alpha, fc)


def update_cap(learner: str, parameters: int, head: int, seconds: float = 0.5) -> float:
    """Run-steps per second of `learner`'s ("adam" or "fade_sgd") update alone over one float32
    run of `parameters` parameters, FADE on the last `head`; best of five timings."""
    rng = np.random.default_rng(0)
    p = rng.standard_normal(parameters).astype(np.float32) * np.float32(0.1)
    grad = rng.standard_normal(parameters).astype(np.float32) * np.float32(1e-3)
    m, v = np.zeros_like(p), np.full_like(p, 1e-6)
    gm, tr = np.full(head, -9.0, np.float32), np.zeros(head, np.float32)
    args = (learner == "adam", parameters - head, np.float32(1e-4), p, m, v, gm, tr, grad, np.empty(7, np.float32))
    _updates(args[0], args[1], 1, *args[2:])  # compile
    steps = max(1, int(seconds * 2e9 / 20 / parameters))  # about `seconds` at ~20 cycles per 8 parameters
    best = np.inf
    for _ in range(5):
        start = time.process_time()
        _updates(args[0], args[1], steps, *args[2:])
        best = min(best, time.process_time() - start)
    return steps / best
