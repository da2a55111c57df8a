"""The seven online linear learners of algorithms.md section 1, batched over runs.

`rules`: the per-component update rules and the `LINEAR_LEARNERS` registry (plain
Python); `own`: a researcher's rule checked, given ranges and registered at run time;
`kernel`: their compiled chunk drivers, runs in SIMD lanes (numba); `simd`: a rule
traced into vector code; `vexp`: the exp it traces; `runs`: state, hyperparameter matrix, `advance` and
`run_linear` on torch tensors. The registry imports neither numba nor torch; the other
names load their module on first access.
"""

from fade_core._lazy import lazy_exports
from fade_core.linear.rules import LINEAR_LEARNERS, LinearLearner, get_linear_learner

_EXPORTS = {
    **dict.fromkeys(["LINEAR_LEARNERS", "LinearLearner", "clamp", "exp", "get_linear_learner"],
                    "fade_core.linear.rules"),
    **dict.fromkeys(["RuleError", "hyperparameter", "own_learner"], "fade_core.linear.own"),
    **dict.fromkeys(["LINEAR_ENGINES", "LinearRun", "LinearState", "advance", "hyperparameter_matrix", "init_state", "initial_weights",
                     "run_linear"], "fade_core.linear.runs"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
