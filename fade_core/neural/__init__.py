"""The neural-network learners of algorithms.md §2, batched over runs.

`rules` defines the learners as parts (the registry), `torch_ops` the batched torch
step and the runs' state (the CUDA path), `cpu_kernel` the compiled CPU path that
`NeuralRuns.advance` uses on CPUs.
"""

import importlib

from fade_core.neural.rules import GAMMA_MAX, GAMMA_MIN, NEURAL_LEARNERS, NeuralLearner, get_neural_learner

_TORCH_OPS = ("Loss", "NeuralRuns", "StepResult", "StepSums", "hyperparameter_tensors", "make_runs")


def __getattr__(name: str):
    """The torch path's names, loaded on first use (the registry above needs no torch)."""
    if name in _TORCH_OPS:
        return getattr(importlib.import_module("fade_core.neural.torch_ops"), name)
    raise AttributeError(f"module 'fade_core.neural' has no attribute {name!r}")

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
