"""The neural-network learners of algorithms.md §2, batched over runs.

`rules` defines the learners as parts (the registry), `state` the runs' state
(`NeuralRuns`), `runs` makes runs on an engine named by fade_core.engines: `cpu_engine`
(the compiled kernel `cpu_kernel`), `torch_ops` (batched torch ops, the reference; with
`triton_update`'s fused updates, the "triton" engine).

The torch and numba exports load on first use (module `__getattr__`): the registry is
what a sweep's validation, the command line and the cluster jobs read, and torch plus a
numba compile cache cost seconds to import there.
"""

from __future__ import annotations

import importlib
from typing import Any

from fade_core.neural.rules import GAMMA_MAX, GAMMA_MIN, NEURAL_LEARNERS, NeuralLearner, get_neural_learner

_LAZY = {**dict.fromkeys(("Loss", "NeuralRuns", "StepResult", "StepSums"), "fade_core.neural.state"),
         **dict.fromkeys(("OwnBase", "RuleError", "hyperparameter", "own_learner"), "fade_core.neural.own"),
         # the primitives a base step of one's own calls (own.py): `from fade_core.neural import sqrt`
         **dict.fromkeys(("exp", "sqrt", "fma", "div_approx", "where", "maximum", "minimum", "clamp", "lerp"),
                         "fade_core.rulebind"),
         **dict.fromkeys(("NEURAL_ENGINES", "hyperparameter_tensors", "make_runs"), "fade_core.neural.runs")}

__all__ = ["GAMMA_MAX", "GAMMA_MIN", "NEURAL_LEARNERS", "NeuralLearner", "get_neural_learner", *_LAZY]


def __getattr__(name: str) -> Any:
    """The torch-backed exports, imported when first asked for (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
