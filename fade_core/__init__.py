"""The learners of algorithms.md, each advancing many runs at once (a leading run axis).

Usable without Ray or the sweep service, e.g. in a notebook:

    from fade_core import run_linear, make_runs

`linear`: the seven online linear learners (compiled, CPU). `neural`: the MLP learners
(compiled on CPU, batched torch ops on CUDA). `mlp`: the batched networks.
`hyperparameters`: the names and ranges every learner draws from.
"""

from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from fade_core.linear import (
    LINEAR_LEARNERS,
    LinearLearner,
    LinearRun,
    LinearState,
    get_linear_learner,
    initial_weights,
    run_linear,
)
from fade_core.mlp import Architecture, BatchedMLP
from fade_core.neural import NEURAL_LEARNERS, NeuralLearner, NeuralRuns, StepSums, get_neural_learner, make_runs

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
