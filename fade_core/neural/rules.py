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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from fade_core.neural.parts import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN  # noqa: F401 (the learners' constants)

if TYPE_CHECKING:
    from fade_core.neural.own import OwnBase

# Weight-decay modes as the compiled kernel reads them.
WD_NONE, WD_COUPLED, WD_DECOUPLED = 0, 1, 2
WEIGHT_DECAY_MODES = {"none": WD_NONE, "coupled": WD_COUPLED, "decoupled": WD_DECOUPLED}
BASES = ("sgd", "adam")
FADE_MODES = ("none", "head", "all")
OWN_BASE_ENGINES = ("cpu", "torch", "triton")  # what runs a base step of one's own (triton: as the torch ops)


@dataclass(frozen=True)
class NeuralLearner:
    """One optimizer of algorithms.md §2 as its parts; `hyperparameters` follow from them.

    Raises ValueError for an unknown part. The order of the parts is `parts.update`'s.
    """

    name: str
    base: Literal["sgd", "adam"] | OwnBase  # OwnBase: a researcher's base step (own.py)
    weight_decay: Literal["none", "coupled", "decoupled"] = "none"
    clip: bool = False
    fade: Literal["none", "head", "all"] = "none"
    hyperparameters: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        base = BASES[0] if self.own_base else self.base  # an own base step is checked by own.own_base
        for part, value, allowed in (("base", base, BASES), ("weight_decay", self.weight_decay, tuple(WEIGHT_DECAY_MODES)),
                                     ("fade", self.fade, FADE_MODES)):
            if value not in allowed:
                raise ValueError(f"neural learner {self.name!r}: {part} must be one of {', '.join(allowed)}, not {value!r}")
        names = ("alpha", *(self.own_base.hyperparameters if self.own_base else ()))
        names += ("lambda",) * (self.weight_decay != "none") + ("kappa",) * self.clip
        names += ("theta_lambda", "gamma0") * (self.fade != "none")
        object.__setattr__(self, "hyperparameters", names)

    @property
    def adapts_decay(self) -> bool:
        return self.fade != "none"

    @property
    def own_base(self) -> OwnBase | None:
        """The researcher's base step, None for sgd and adam."""
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
