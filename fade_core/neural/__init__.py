"""The neural-network learners of algorithms.md §2, batched over runs.

`rules` defines the learners as parts (the registry), `torch_ops` the batched torch
step and the runs' state (the CUDA path), `cpu_kernel` the compiled CPU path that
`NeuralRuns.advance` uses on CPUs.
"""

from fade_core.neural.rules import GAMMA_MAX, GAMMA_MIN, NEURAL_LEARNERS, NeuralLearner, get_neural_learner
from fade_core.neural.torch_ops import Loss, NeuralRuns, StepResult, StepSums, hyperparameter_tensors, make_runs

__all__ = [
    "GAMMA_MAX",
    "GAMMA_MIN",
    "NEURAL_LEARNERS",
    "Loss",
    "NeuralLearner",
    "NeuralRuns",
    "StepResult",
    "StepSums",
    "get_neural_learner",
    "hyperparameter_tensors",
    "make_runs",
]
