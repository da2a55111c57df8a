"""What every learner is, whatever its family: the one learner model.

A learner is a name, a family ("linear" | "neural"), a rule (plain, branch-free Python that
the family's engines compile or bind, `fade_core/rulebind.py`), the hyperparameters read from
its rules' signatures (`rulebind.parameters`, the one reader), and what it adapts (a step
size, a decay rate). `LinearLearner` (`linear/rules.py`) and `NeuralLearner`
(`neural/rules.py`) are its two kinds; `fade_core/learners.py` is the one registry of both,
built-in and researchers' own. This module imports neither torch nor numba.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Iterable

from fade_core.hyperparameters import HYPERPARAMETERS
from fade_core.rulebind import parameters

OWN_BASE = "own"  # a neural learner's base-step choice when the step is the researcher's own (fade_core.engines lists it)

STEP_SIZE, DECAY = "step_size", "decay"  # what a learner may adapt: its log step size beta, its log decay rate gamma
KEYWORDS = {"lam": "lambda"}  # a rule's parameter name -> the hyperparameter it is (`lambda` is a Python keyword)


def hyperparameter_names(rules: Iterable[Callable], known: Iterable[str] = ()) -> tuple[str, ...]:
    """The hyperparameters named by `rules`' parameters, in order, each once: a parameter whose name
    (through KEYWORDS) is in HYPERPARAMETERS or in `known` (a researcher's own names)."""
    names = set(HYPERPARAMETERS) | set(known)
    found = (KEYWORDS.get(p, p) for rule in rules for p in parameters(rule))
    return tuple(dict.fromkeys(p for p in found if p in names))


class Learner:
    """A learner of either family. Subclasses are frozen dataclasses with a `name`, and set
    `hyperparameters` (from the rules' signatures) and `adapts` when made."""

    family: ClassVar[str]
    name: str
    rule: Callable  # the plain rule its engines compile or bind (a neural learner's: `parts.update` with its flags)
    hyperparameters: tuple[str, ...]  # the per-run values it takes, in the order of its rules' signatures
    adapts: frozenset[str]  # STEP_SIZE and/or DECAY: the state it adapts (reported as exp of the log)

    @property
    def key(self) -> str:
        """What the compiled kernels look it up by: its name, or a researcher's `name@digest`."""
        return self.name

    @property
    def adapts_step_size(self) -> bool:
        """Has beta = log step size (reports exp(beta))."""
        return STEP_SIZE in self.adapts

    @property
    def adapts_decay(self) -> bool:
        """Has gamma = log decay rate (reports exp(gamma))."""
        return DECAY in self.adapts

    @property
    def adaptive(self) -> bool:
        """Adapts a step size or a decay rate: a meta-update and an exp per component."""
        return bool(self.adapts)
