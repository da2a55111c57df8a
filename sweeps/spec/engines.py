"""Which engine each experiment of a sweep runs on, checked before anything starts.

A pack's engine is `fade-sweep run --engine NAME` if given, else its experiment's `engine:`
(the sweep file's), else fade_core.engines' default for its task and device. Its device
follows from the resources: CUDA for a GPU-capable (neural) task when packs ask for GPUs,
else the CPU (the trainable picks the same device from what Ray gives it).
"""

from __future__ import annotations

from typing import Iterable

from fade_core.engines import TORCH, default_engine, engine_problem
from fade_core.neural.rules import OWN_BASE_ENGINES
from sweeps.spec.sweepfile import Experiment, SweepError
from tasks import get_task


def pack_device(task: str, gpus: float) -> str:
    """The device a pack of `task` runs on when packs ask for `gpus` GPUs each."""
    return "cuda" if gpus > 0 and get_task(task).runs_on_gpu else "cpu"


def experiment_engine(experiment: Experiment, device: str, engine: str | None = None) -> str:
    """The engine `experiment`'s packs run on `device` (`engine`: the command line's override)."""
    if engine is not None:  # an empty --engine (e.g. "$UNSET_VAR") is a choice to check, not "the default"
        return engine
    chosen = experiment.engine or default_engine(experiment.task, device)
    if experiment.engine is None and _own_neural(experiment) and chosen not in OWN_BASE_ENGINES:
        return TORCH  # a GPU default (persistent, cuda) runs the built-in base steps only
    return chosen


def _own_neural(experiment: Experiment) -> bool:
    return experiment.learner is not None and experiment.learner.family == "neural"


def check_engines(experiments: Iterable[Experiment], gpus: float, engine: str | None = None) -> None:
    """SweepError (one line) if some experiment's engine cannot run its task on its device."""
    for experiment in experiments:
        device = pack_device(experiment.task, gpus)
        chosen = experiment_engine(experiment, device, engine)
        problem = engine_problem(chosen, experiment.task, device)
        if problem is None and _own_neural(experiment) and chosen not in OWN_BASE_ENGINES:
            problem = (f"engine {chosen} runs the built-in base steps only; {experiment.optimizer}'s own base step "
                       f"runs on {', '.join(OWN_BASE_ENGINES)}")
        if problem is not None:
            where = "--engine" if engine is not None else f"engine of {experiment.task}/{experiment.optimizer}"
            raise SweepError(f"{where}: {problem}")
