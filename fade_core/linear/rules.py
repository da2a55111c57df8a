"""The seven online linear learners of algorithms.md section 1: their rules and registry.

Each learner is one per-component update rule, written to read like its row of the
table (same symbols, same order), and one `LinearLearner` record built from it: its
hyperparameters are the rule's trailing parameters, and `fade_core.linear.kernel`
compiles the rule into the batched chunk driver on first use. So a new learner is one
rule and one registration, and this module (the registry) needs neither numba nor torch.

The rules are plain Python and run as they are (`exp`, `clamp` below are the scalar
versions); the kernel rebinds `exp` to its vectorisable one and gives the numeric
literals the state's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from fade_core.learner import DECAY, KEYWORDS, STEP_SIZE, Learner
from fade_core.rulebind import parameters

exp = math.exp


def clamp(v: float, lo: float, hi: float) -> float:
    return min(max(v, lo), hi)


# A rule updates component i of one run. It takes the per-component state, then the
# optional gamma clamp [lo, hi], then the learner's hyperparameters in order: those
# trailing parameter names ARE the learner's `hyperparameters` (`lam` stands for
# `lambda`, a Python keyword), so the column order of the (R, P) matrix cannot drift
# from what the rule reads. beta0 and gamma0 only set the initial state: the rules
# that take them leave them unread. Returns the new (w, beta, h, gamma, g).
STATE_ARGS = ("x", "delta", "w", "beta", "h", "gamma", "g", "lo", "hi")


def sgd(x, delta, w, beta, h, gamma, g, lo, hi, alpha):
    w = w + alpha * delta * x
    return w, beta, h, gamma, g


def sgd_wd(x, delta, w, beta, h, gamma, g, lo, hi, alpha, lam):
    w = (1 - lam) * w + alpha * delta * x
    return w, beta, h, gamma, g


def idbd(x, delta, w, beta, h, gamma, g, lo, hi, theta_alpha, beta0):
    beta = beta + theta_alpha * delta * x * h
    a = exp(beta)
    w = w + a * delta * x
    h = h * max(1 - a * x * x, 0) + a * delta * x
    return w, beta, h, gamma, g


def idbd_wd(x, delta, w, beta, h, gamma, g, lo, hi, theta_alpha, beta0, lam):
    beta = beta + theta_alpha * delta * x * h
    a = exp(beta)
    w = (1 - lam) * w + a * delta * x
    h = h * max(1 - lam - a * x * x, 0) + a * delta * x
    return w, beta, h, gamma, g


def fade(x, delta, w, beta, h, gamma, g, lo, hi, alpha, theta_lambda, gamma0):
    gamma = clamp(gamma + theta_lambda * delta * x * g, lo, hi)
    l = exp(gamma)
    g = g * max(1 - l - alpha * x * x, 0) - l * w  # w is still w_old here
    w = (1 - l) * w + alpha * delta * x
    return w, beta, h, gamma, g


def fade_idbd(x, delta, w, beta, h, gamma, g, lo, hi, theta, beta0, gamma0):
    beta = beta + theta * delta * x * h  # both meta updates use the old traces
    a = exp(beta)
    gamma = clamp(gamma + theta * delta * x * g, lo, hi)
    l = exp(gamma)
    c = max(1 - l - a * x * x, 0)
    h = h * c + a * delta * x
    g = g * c - l * w
    w = (1 - l) * w + a * delta * x
    return w, beta, h, gamma, g


def coupled(x, delta, w, beta, h, gamma, g, lo, hi, theta, beta0, gamma0):
    beta = beta + theta * delta * x * h
    a = exp(beta)
    gamma = clamp(gamma + theta * delta * x * g, lo, hi)
    l = exp(gamma)
    c = max(1 - a * l - a * x * x, 0)
    h = h * c + a * delta * x - a * l * w
    g = g * c - a * l * w
    w = (1 - a * l) * w + a * delta * x
    return w, beta, h, gamma, g


@dataclass(frozen=True)
class LinearLearner(Learner):
    """A linear learner (`fade_core.learner.Learner`): its rule, and what is derived from it.

    `hyperparameters` (the column order of the (R, P) matrix) come from the rule's
    trailing parameters; the learner adapts its step size / decay rate when it starts
    them from beta0 / gamma0.
    """

    family: ClassVar[str] = "linear"
    name: str
    rule: Callable = field(repr=False)  # the per-component update (plain Python, compiled by the kernel)
    summary: str
    own: tuple[Hyperparameter, ...] = ()  # a researcher's rule: its hyperparameters not in HYPERPARAMETERS (own.py)
    key: str = ""  # what the compiled kernels look the rule up by (`learners.learner_for_key`); the name by default
    hyperparameters: tuple[str, ...] = field(init=False)
    adapts: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = parameters(self.rule)
        if names[: len(STATE_ARGS)] != STATE_ARGS:
            raise ValueError(f"linear learner {self.name!r}: a rule starts with the parameters {', '.join(STATE_ARGS)}")
        hyperparameters = tuple(KEYWORDS.get(n, n) for n in names[len(STATE_ARGS) :])
        unknown = [n for n in hyperparameters if n not in HYPERPARAMETERS and n not in {h.name for h in self.own}]
        if unknown:
            raise ValueError(f"linear learner {self.name!r}: {', '.join(unknown)} not in HYPERPARAMETERS")
        object.__setattr__(self, "hyperparameters", hyperparameters)
        adapts = {STEP_SIZE: "beta0", DECAY: "gamma0"}  # what it adapts: the state it starts from a hyperparameter
        object.__setattr__(self, "adapts", frozenset(a for a, start in adapts.items() if start in hyperparameters))
        object.__setattr__(self, "key", self.key or self.name)


LINEAR_LEARNERS: dict[str, LinearLearner] = {
    learner.name: learner
    for learner in (
        LinearLearner("sgd", sgd, "LMS / delta rule"),
        LinearLearner("sgd_wd", sgd_wd, "LMS with fixed weight decay"),
        LinearLearner("idbd", idbd, "IDBD step-size adaptation"),
        LinearLearner("idbd_wd", idbd_wd, "IDBD with fixed weight decay"),
        LinearLearner("fade", fade, "FADE: adaptive decay"),
        LinearLearner("fade_idbd", fade_idbd, "FADE + IDBD, decoupled, tied theta"),
        LinearLearner("coupled", coupled, "L2-derived coupled FADE + IDBD, tied theta"),
    )
}


def get_linear_learner(name: str) -> LinearLearner:
    try:
        return LINEAR_LEARNERS[name]
    except KeyError:
        raise ValueError(
            f"unknown linear learner {name!r}; choose one of {', '.join(LINEAR_LEARNERS)}"
        ) from None
