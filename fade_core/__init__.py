"""The learners of algorithms.md, each advancing many runs at once (a leading run axis).

Usable without Ray or the sweep service, e.g. in a notebook:

    from fade_core import run_linear, make_runs

`linear`: the seven online linear learners (compiled, CPU). `neural`: the MLP learners
(compiled on CPU, batched torch ops on CUDA). `mlp`: the batched networks.
`hyperparameters`: the names and ranges every learner draws from.
"""

import importlib

from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter

_LAZY = {  # name -> module: loaded on first use, so `import fade_core` (and the task registry) stays light
    **dict.fromkeys(("LINEAR_LEARNERS", "LinearLearner", "LinearRun", "LinearState", "get_linear_learner",
                     "initial_weights", "run_linear"), "fade_core.linear"),
    **dict.fromkeys(("Architecture", "BatchedMLP"), "fade_core.mlp"),
    **dict.fromkeys(("NEURAL_LEARNERS", "NeuralLearner", "NeuralRuns", "StepSums", "get_neural_learner", "make_runs"),
                    "fade_core.neural"),
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fade_core' has no attribute {name!r}")


__all__ = [
    "HYPERPARAMETERS",
    "LINEAR_LEARNERS",
    "NEURAL_LEARNERS",
    "Architecture",
    "BatchedMLP",
    "Hyperparameter",
    "LinearLearner",
    "LinearRun",
    "LinearState",
    "NeuralLearner",
    "NeuralRuns",
    "StepSums",
    "get_linear_learner",
    "get_neural_learner",
    "initial_weights",
    "make_runs",
    "run_linear",
]
