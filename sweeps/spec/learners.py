"""Which optimizers run on which task family, the hyperparameters each takes, and their ranges.

The learner registry lives in fade_core (`fade_core/learners.py`); this is the one place that maps a task's
family onto them, so validation, presets and the engine agree. The allowed range of a
hyperparameter is `fade_core.HYPERPARAMETERS`' unless `RANGE_OVERRIDES` narrows it for
one (family, optimizer): the same name can mean a different rule in another learner.
"""

from __future__ import annotations

from dataclasses import replace

from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from fade_core.learners import BUILT_IN
from tasks import TaskSpec

_LINEAR_DECAY_WHY = "the linear rule w <- (1 - lambda) w flips the sign of w for lambda > 1"

# (family, optimizer, hyperparameter) -> (its narrower spec, why: shown in the error message).
# Neural sgd_wd (L2 in the gradient) and adamw (decoupled, scaled by alpha) keep lambda >= 0:
# AdamW lambda = 10 is valid there.
RANGE_OVERRIDES: dict[tuple[str, str, str], tuple[Hyperparameter, str]] = {
    ("linear", "sgd_wd", "lambda"): (replace(HYPERPARAMETERS["lambda"], high=1.0), _LINEAR_DECAY_WHY),
    ("linear", "idbd_wd", "lambda"): (replace(HYPERPARAMETERS["lambda"], high=1.0), _LINEAR_DECAY_WHY),
}


def optimizers_for(task: TaskSpec) -> tuple[str, ...]:
    return tuple(BUILT_IN[task.family])


def every_optimizer() -> dict[str, tuple[str, ...]]:
    """Every optimizer of any family with the hyperparameters it takes (a name means the same rule, with the
    same hyperparameters, in every family that has it); for the sweep file's schema."""
    return {name: learner.hyperparameters for learners in BUILT_IN.values() for name, learner in learners.items()}


def optimizer_hyperparameters(task: TaskSpec, optimizer: str) -> tuple[str, ...]:
    return BUILT_IN[task.family][optimizer].hyperparameters


def hyperparameter_spec(task: TaskSpec, optimizer: str, name: str) -> tuple[Hyperparameter, str]:
    """The allowed range of `name` for `optimizer` on `task`, and why it differs from the default ("" if not)."""
    return RANGE_OVERRIDES.get((task.family, optimizer, name), (HYPERPARAMETERS[name], ""))
