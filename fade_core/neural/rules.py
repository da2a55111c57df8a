"""The neural learners of algorithms.md §2 as combinations of parts, and their constants.

Every learner is a combination of four independent parts, each written once as a rule in
parts.py, from which every engine takes its arithmetic:
  base step      sgd | adam (torch.optim conventions, betas 0.9/0.999, eps 1e-8)
  weight decay   none | coupled (L2 in the gradient, SGD's weight_decay) | decoupled (AdamW)
  clipping       every Linear's weight and bias clamped to +-kappa/sqrt(fan_in) after the step
  FADE           none | head | all: per-parameter decay exp(gamma) adapted by the meta-gradient
                 trace g, applied (decay first) before the weight decay and the base step
A learner's hyperparameters follow from its parts; any combination runs on every engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fade_core.neural.parts import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN  # noqa: F401 (the learners' constants)

# Weight-decay modes as the compiled kernel reads them.
WD_NONE, WD_COUPLED, WD_DECOUPLED = 0, 1, 2
WEIGHT_DECAY_MODES = {"none": WD_NONE, "coupled": WD_COUPLED, "decoupled": WD_DECOUPLED}
BASES = ("sgd", "adam")
FADE_MODES = ("none", "head", "all")


@dataclass(frozen=True)
class NeuralLearner:
    """One optimizer of algorithms.md §2 as its parts; `hyperparameters` follow from them.

    Raises ValueError for an unknown part. The order of the parts is `parts.update`'s.
    """

    name: str
    base: Literal["sgd", "adam"]
    weight_decay: Literal["none", "coupled", "decoupled"] = "none"
    clip: bool = False
    fade: Literal["none", "head", "all"] = "none"
    hyperparameters: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        for part, value, allowed in (("base", self.base, BASES), ("weight_decay", self.weight_decay, tuple(WEIGHT_DECAY_MODES)),
                                     ("fade", self.fade, FADE_MODES)):
            if value not in allowed:
                raise ValueError(f"neural learner {self.name!r}: {part} must be one of {', '.join(allowed)}, not {value!r}")
        names = ("alpha",) + ("lambda",) * (self.weight_decay != "none") + ("kappa",) * self.clip
        names += ("theta_lambda", "gamma0") * (self.fade != "none")
        object.__setattr__(self, "hyperparameters", names)

    @property
    def adapts_decay(self) -> bool:
        return self.fade != "none"


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
