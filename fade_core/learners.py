"""The one registry of learners, both families: the built-in ones and researchers' own.

Every learner is a `fade_core.learner.Learner` (name, family, rule, hyperparameters read from
its rules' signatures, what it adapts). The built-in ones are the families' tables
(`linear/rules.py:LINEAR_LEARNERS`, `neural/rules.py:NEURAL_LEARNERS`); a researcher's learner
is registered here at run time (`register`, by `linear/own.py` for a linear rule) under its key
(`name@digest` of its source), which is what the compiled kernels look a rule up by
(`learner_for_key`: numba's typer and cache files see a literal key, never an object). A name
means one learner per family ("sgd" is a linear and a neural learner). Imports neither torch
nor numba.
"""

from __future__ import annotations

from fade_core.learner import Learner
from fade_core.linear.rules import LINEAR_LEARNERS
from fade_core.neural.rules import NEURAL_LEARNERS

FAMILIES = ("linear", "neural")
BUILT_IN: dict[str, dict[str, Learner]] = {"linear": LINEAR_LEARNERS, "neural": NEURAL_LEARNERS}
_OWN: dict[str, Learner] = {}  # researchers' learners registered in this process, by key


def builtin(family: str) -> dict[str, Learner]:
    """The built-in learners of `family`, by name."""
    return BUILT_IN[family]


def is_builtin_name(name: str) -> bool:
    """Whether `name` is a built-in learner's in some family (a researcher's learner may not take it)."""
    return any(name in learners for learners in BUILT_IN.values())


def register(learner: Learner) -> Learner:
    """Make a researcher's learner known under its key (to the compiled kernels, `learner_for_key`);
    returns the one registered under that key (the same source gives the same key). ValueError for the
    name of a built-in learner of its family."""
    if learner.name in BUILT_IN[learner.family]:
        raise ValueError(f"{learner.name}: the name of a built-in {learner.family} learner; give the rule another name")
    return _OWN.setdefault(learner.key, learner)


def learner_for_key(key: str, family: str = "linear") -> Learner:
    """The learner the compiled kernels know by `key`: a built-in's name or a registered learner's key."""
    return BUILT_IN[family][key] if key in BUILT_IN[family] else _OWN[key]


def registered(learner: Learner) -> bool:
    """Whether `learner` is the one found under its key."""
    return (BUILT_IN[learner.family].get(learner.key) or _OWN.get(learner.key)) is learner


def get_learner(family: str, name: str) -> Learner:
    """The built-in learner `name` of `family`; ValueError naming the choices otherwise."""
    if family not in BUILT_IN:
        raise ValueError(f"unknown learner family {family!r}; choose one of {', '.join(FAMILIES)}")
    try:
        return BUILT_IN[family][name]
    except KeyError:
        raise ValueError(f"unknown {family} learner {name!r}; choose one of {', '.join(BUILT_IN[family])}") from None


def every_learner() -> tuple[Learner, ...]:
    """Every built-in learner of every family, linear first (in each table's order)."""
    return tuple(learner for family in FAMILIES for learner in BUILT_IN[family].values())
