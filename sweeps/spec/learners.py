"""Which optimizers run on which task family, and the hyperparameters each takes.

The learner registries live in fade_core; this is the one place that maps a task's
family onto them, so validation, presets and the engine agree.
"""

from __future__ import annotations

from fade_core.linear import LINEAR_LEARNERS
from fade_core.neural import NEURAL_LEARNERS
from tasks import TaskSpec

_FAMILIES = {"linear": LINEAR_LEARNERS, "neural": NEURAL_LEARNERS}


def optimizers_for(task: TaskSpec) -> tuple[str, ...]:
    return tuple(_FAMILIES[task.family])


def optimizer_hyperparameters(task: TaskSpec, optimizer: str) -> tuple[str, ...]:
    return _FAMILIES[task.family][optimizer].hyperparameters
