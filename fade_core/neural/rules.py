"""The neural learners of algorithms.md §2 as combinations of parts, and their constants.

Every learner is a combination of four independent parts, each written once as a rule in
parts.py, from which every engine takes its arithmetic:
  base step      sgd | adam (torch.optim conventions, betas 0.9/0.999, eps 1e-8) | a
                 researcher's own (own.py: its state and hyperparameters beside alpha)
  weight decay   none | coupled (L2 in the gradient, SGD's weight_decay) | decoupled (AdamW)
  clipping       every Linear's weight and bias clamped to +-kappa/sqrt(fan_in) after the step
  FADE           none | head | all: per-parameter decay exp(gamma) adapted by the meta-gradient
                 trace g, applied (decay first) before the weight decay and the base step
A learner's hyperparameters follow from its parts; any combination of the built-in parts runs on
every engine, one with a base step of one's own on the cpu, torch and triton engines.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Literal, Mapping

from fade_core.learner import DECAY, OWN_BASE, Learner, hyperparameter_names
from fade_core.neural import parts
from fade_core.neural.parts import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN  # noqa: F401 (the learners' constants)

# Weight-decay modes as the compiled kernel reads them.
WD_NONE, WD_COUPLED, WD_DECOUPLED = 0, 1, 2
WEIGHT_DECAY_MODES = {"none": WD_NONE, "coupled": WD_COUPLED, "decoupled": WD_DECOUPLED}


@dataclass(frozen=True)
class Part:
    """One part of the neural learners, a line of `PARTS`: the `NeuralLearner` field that chooses it,
    each choice's rules in parts.py (the hyperparameters it takes are read from their signatures),
    and the flag of `parts.update` it sets."""

    field: str
    choices: Mapping[object, tuple[Callable, ...]]  # its first choice is the default
    flag: str  # the keyword-only flag of parts.update
    flag_value: Callable[[object], object] = lambda choice: choice  # the choice -> the flag's value
    starts: tuple[str, ...] = ()  # hyperparameters that only start its state (no rule reads them)
    adapts: str = ""  # what a learner with it (any choice but the first) adapts (learner.DECAY)


_FADE = (parts.fade_decay, parts.fade_apply)
# In the order of the hyperparameters' columns; parts.update applies them in its own order.
PARTS: tuple[Part, ...] = (
    Part("base", {"sgd": (parts.sgd,), "adam": (parts.adam_scalars, parts.adam)}, "base"),
    Part("weight_decay", {"none": (), "coupled": (parts.coupled_decay,), "decoupled": (parts.shrink, parts.decoupled_decay)},
         "weight_decay"),
    Part("clip", {False: (), True: (parts.clip_bound, parts.clip)}, "clip_on"),
    Part("fade", {"none": (), "head": _FADE, "all": _FADE}, "fade_on", lambda fade: fade != "none", ("gamma0",), DECAY),
)
BASES, FADE_MODES = (tuple(p.choices) for p in (PARTS[0], PARTS[3]))


@dataclass(frozen=True)
class NeuralLearner(Learner):
    """One optimizer of algorithms.md §2 as its parts (`PARTS`); `hyperparameters` follow from them.

    Raises ValueError for an unknown part. The order of the parts is `parts.update`'s.
    """

    family: ClassVar[str] = "neural"
    name: str
    base: Literal["sgd", "adam"] | Any  # or a researcher's base step, an own.OwnBase (own.py imports this module)
    weight_decay: Literal["none", "coupled", "decoupled"] = "none"
    clip: bool = False
    fade: Literal["none", "head", "all"] = "none"
    hyperparameters: tuple[str, ...] = field(init=False)
    adapts: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        for part in PARTS:
            value = getattr(self, part.field)
            if not (part.field == "base" and self.own_base) and value not in part.choices:
                allowed = ", ".join(str(c) for c in part.choices)
                raise ValueError(f"neural learner {self.name!r}: {part.field} must be one of {allowed}, not {value!r}")
        chosen = [(part, getattr(self, part.field)) for part in PARTS]
        names = tuple(n for part, value in chosen for n in self._hyperparameters(part, value))
        object.__setattr__(self, "hyperparameters", tuple(dict.fromkeys(names)))
        object.__setattr__(self, "adapts", frozenset(p.adapts for p, value in chosen if p.adapts and value != next(iter(p.choices))))

    def flags(self, fade_on: bool | None = None) -> dict[str, object]:
        """`parts.update`'s flags for this learner's parameters (`fade_on`: FADE on them or not, as under
        fade "head" only the head's parameters are FADE's; None: whether the learner has FADE). A
        researcher's base step is its `OwnBase`: a caller binds it (`OwnBase.step`) before calling update."""
        flags = {part.flag: part.flag_value(getattr(self, part.field)) for part in PARTS}
        return flags if fade_on is None else {**flags, "fade_on": fade_on}

    def parts_beyond(self, known: Mapping[str, Iterable[object]]) -> tuple[str, ...]:
        """Its parts (as "field=choice") outside `known`, field -> choices: what code written by hand for
        those choices does not run (a part at its default, its first choice, is always known)."""
        return tuple(f"{p.field}={self.choice(p.field)!r}" for p in PARTS
                     if self.choice(p.field) != next(iter(p.choices)) and self.choice(p.field) not in known.get(p.field, ()))

    def choice(self, field_name: str) -> object:
        """Its choice of a part (a researcher's base step: OWN_BASE, "own")."""
        return OWN_BASE if field_name == "base" and self.own_base else getattr(self, field_name)

    def _hyperparameters(self, part: Part, value: object) -> tuple[str, ...]:
        """What a part's choice takes, from its rules' signatures (a researcher's base step: alpha and its own)."""
        if part.field == "base" and self.own_base:
            return hyperparameter_names((self.own_base.rule,), self.own_base.hyperparameters)
        return hyperparameter_names(part.choices[value]) + part.starts * bool(part.choices[value])

    @property
    def rule(self) -> Callable:
        """One parameter's update for this learner: `parts.update` with its flags."""
        return functools.partial(parts.update, **self.flags())

    @property
    def key(self) -> str:
        """Its name; with a researcher's base step, name@digest of the step's source and the parts around it
        (fade_core.learners: one learner per key; the same name and step with other parts is another learner)."""
        if not self.own_base:
            return self.name
        return f"{self.name}@{self.own_base.digest}:{self.weight_decay},{self.clip},{self.fade}"

    @property
    def own_base(self) -> Any:
        """The researcher's base step (own.OwnBase), None for sgd and adam."""
        return None if isinstance(self.base, str) else self.base

    @property
    def state_slots(self) -> int:
        """Per-parameter state buffers the base step keeps (Adam: m and v; an own step: its state)."""
        return len(self.base.state) if self.own_base else 2 * (self.base == "adam")


NEURAL_LEARNERS: dict[str, NeuralLearner] = {
    learner.name: learner
    for learner in (
        NeuralLearner("sgd", "sgd"),
        NeuralLearner("sgd_wd", "sgd", weight_decay="coupled"),
        NeuralLearner("adam", "adam"),
        NeuralLearner("adamw", "adam", weight_decay="decoupled"),
        NeuralLearner("sgd_wclip", "sgd", clip=True),
        NeuralLearner("adam_wclip", "adam", clip=True),
        NeuralLearner("fade_sgd", "sgd", fade="head"),
        NeuralLearner("fade_adam", "adam", fade="head"),
        NeuralLearner("fade_sgd_all", "sgd", fade="all"),
    )
}


def get_neural_learner(name: str) -> NeuralLearner:
    """The registered learner `name`; ValueError naming the choices otherwise."""
    try:
        return NEURAL_LEARNERS[name]
    except KeyError:
        raise ValueError(f"unknown neural optimizer {name!r}; choose one of {', '.join(NEURAL_LEARNERS)}") from None
