"""Learners of the researcher's own compiled before any pack starts (`fade-sweep run` and `confirm`).

Each is imported where the run took it and checked against its recorded source (LearnerError),
then compiled into its engine's kernel, or loaded from numba's cache (keyed by the rule's
source), so the packs load it and the `Done:` line can give the compile time apart.
"""

from __future__ import annotations

import time
from typing import Iterable

import numpy as np

from fade_core.engines import CPU
from sweeps.spec import Experiment
from sweeps.spec.engines import choose_engine
from sweeps.spec.own import load_rule


def compile_own(experiments: Iterable[Experiment], dtype: str, engine: str | None = None) -> dict[str, float]:
    """Each researcher's learner of these experiments compiled for the "cpu" engine where it runs there
    (a linear rule into its driver, a neural base step into the CPU kernel): {name: seconds}."""
    seconds = {}
    for experiment in experiments:
        declared = experiment.learner
        if declared is None or declared.name in seconds:
            continue
        learner = load_rule(declared)
        started = time.perf_counter()
        if choose_engine(experiment, "cpu", engine) == CPU:
            if declared.family == "linear":
                from fade_core.linear.kernel import driver

                driver(learner, np.dtype(dtype))
            else:
                from fade_core.neural.runs import compile_cpu

                compile_cpu(learner, dtype)
        seconds[declared.name] = time.perf_counter() - started
    return seconds
