"""The learners of algorithms.md, each advancing many runs at once (a leading run axis).

Usable without Ray or the sweep service, e.g. in a notebook:

    from fade_core import run_linear, make_runs

`linear`: the seven online linear learners (compiled, CPU). `neural`: the MLP learners
(compiled on CPU, batched torch ops on CUDA). `mlp`: the batched networks.
`hyperparameters`: the names and ranges every learner draws from. `learners`: the one
registry of both families (`get_learner(family, name)`, `every_learner()`).

Names are imported on first use, so `import fade_core` (and reading a registry) loads
neither torch nor numba.
"""

from fade_core._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["HYPERPARAMETERS", "Hyperparameter"], "fade_core.hyperparameters"),
    **dict.fromkeys(["LINEAR_LEARNERS", "LinearLearner", "LinearRun", "LinearState", "get_linear_learner",
                     "initial_weights", "run_linear"], "fade_core.linear"),
    "Learner": "fade_core.learner",
    **dict.fromkeys(["every_learner", "get_learner"], "fade_core.learners"),
    "Architecture": "fade_core.architecture",
    "BatchedMLP": "fade_core.mlp",
    **dict.fromkeys(["NEURAL_LEARNERS", "NeuralLearner", "NeuralRuns", "StepSums", "get_neural_learner", "make_runs"],
                    "fade_core.neural"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
