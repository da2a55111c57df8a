"""The hyperparameters of algorithms.md: names, allowed ranges and one-line descriptions.

Every learner (linear or neural) takes a subset of these names; sweep-file validation,
the results store's typed columns and error messages all read this one table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Hyperparameter:
    """A named hyperparameter with its allowed interval (bounds are inclusive unless open)."""

    name: str
    meaning: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def allowed(self) -> str:
        """Human-readable interval, e.g. '> 0' or 'in [0, 1)'."""
        lo_finite, hi_finite = math.isfinite(self.low), math.isfinite(self.high)
        if lo_finite and hi_finite:
            return (
                f"in {'(' if self.low_open else '['}{self.low:g}, "
                f"{self.high:g}{')' if self.high_open else ']'}"
            )
        if lo_finite:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if hi_finite:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return "a finite number"

    def accepts(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


HYPERPARAMETERS: dict[str, Hyperparameter] = {
    h.name: h
    for h in (
        Hyperparameter("alpha", "step size", low=0.0, low_open=True),
        Hyperparameter("lambda", "fixed weight decay", low=0.0),
        Hyperparameter("theta_alpha", "meta step size of the log step size beta", low=0.0),
        Hyperparameter("beta0", "initial log step size"),
        Hyperparameter("theta_lambda", "meta step size of the log decay rate gamma", low=0.0),
        Hyperparameter("gamma0", "initial log decay rate (decay exp(gamma0))", high=0.0),
        Hyperparameter("theta", "tied meta step size (theta_alpha = theta_lambda)", low=0.0),
        Hyperparameter("kappa", "weight-clipping radius (times 1/sqrt(fan_in))", low=0.0, low_open=True),
    )
}
