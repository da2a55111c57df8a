"""The CPU kernel of a learner whose base step is the researcher's own (`own.OwnBase`).

The base step is printed as a numba function like the built-in parts (`cpu_elements`), in the
shape of `cpu_layers.own_step`: (w, grad, m, v, j, alpha, oh, fc) -> the new w, its state
written to m[j] (and v[j]), reading its hyperparameters and then its constants from the run's
row `oh` (`own_columns`: values in the parameters' dtype, made once per segment, never a
float64 literal in a float32 rule). The kernel itself is the built-in one: `segment(own)` is
`cpu_kernel.run_segment` with `own_step` rebound, and `cpu_layers.OWN_STEP` set, in its copies of
the rows that call it (OWN_ROWS: `own_rank_one` and `fade_sgd_rank_one`, the built-in learners'
fast rows with the own step in place of theirs; `any_rank_one`, for coupled weight decay or FADE
with weight decay or clipping; `update_bias`) and in the kernel (which then always passes the
state arrays) (fade_core.rulebind.bind: the same code, other globals), compiled once per base step
and cached by numba under a digest of the printed step and the kernel's sources.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from typing import Callable, Mapping

import numba
import numpy as np

from fade_core.expression import constants, trace
from fade_core.neural import cpu_arith, cpu_elements, cpu_exp, cpu_kernel, cpu_layers
from fade_core.neural.cpu_elements import ERRORS, FASTMATH, numba_source, printed_function
from fade_core.neural.own import OwnBase
from fade_core.rulebind import bind, parameters


@functools.cache
def _graph(own: OwnBase) -> tuple:
    return trace(own.rule, parameters(own.rule))


def step_source(own: OwnBase) -> str:
    """The base step printed in `cpu_layers.own_step`'s shape."""
    state = dict(zip(own.state, ("m[j]", "v[j]")))
    count = len(own.hyperparameters)
    inputs = {**state, **{name: f"oh[{k}]" for k, name in enumerate(own.hyperparameters)}}
    graph = _graph(own)
    values = constants(graph)
    return numba_source("own_step", graph, ("w", "grad", "m", "v", "j", "alpha", "oh", "fc"),
                        inputs,
                        constant=lambda value: f"oh[{count + values.index(value)}]", stores=tuple(state.values()))


def own_columns(own: OwnBase, hp: Mapping[str, np.ndarray], runs: int, dtype: np.dtype) -> np.ndarray:
    """(runs, K) in `dtype`: each run's row `oh`, the step's hyperparameters then its constants."""
    values = constants(_graph(own))
    columns = [np.asarray(hp[name], dtype=dtype) for name in own.hyperparameters]
    columns += [np.full(runs, value, dtype=dtype) for value in values]
    return np.ascontiguousarray(np.stack(columns, axis=1) if columns else np.zeros((runs, 0), dtype=dtype))


OWN_ROWS = ("own_rank_one", "fade_sgd_rank_one", "any_rank_one", "update_bias")  # cpu_layers' callers of own_step


@functools.cache
def segment(own: OwnBase) -> Callable:
    """`cpu_kernel.run_segment` with `own` as its base step (compiled on its first call)."""
    text = step_source(own)
    step = printed_function("own_step", text, own.rule.__doc__)
    sources = "".join(inspect.getsource(m) for m in (cpu_kernel, cpu_layers, cpu_elements, cpu_arith, cpu_exp))
    digest = hashlib.sha256((text + sources).encode()).hexdigest()[:12]  # (the printed step's, not own.digest)
    dense = numba.njit(fastmath=FASTMATH, error_model=ERRORS, cache=True)
    layers = {}
    for name in OWN_ROWS:
        function = bind(getattr(cpu_layers, name).py_func, {"own_step": step, "OWN_STEP": True})
        function.__qualname__ = f"{name}_{own.name}_{digest}"  # its cache file's name
        layers[name] = dense(function)
    run = bind(cpu_kernel.run_segment.py_func, {**layers, "OWN_STEP": True})
    run.__qualname__ = f"run_segment_{own.name}_{digest}"
    return numba.njit(fastmath=FASTMATH, error_model=ERRORS, parallel=True, cache=True)(run)

