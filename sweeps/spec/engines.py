"""Which engine each pack runs: the default per (task, device), and the one place a pack's engine is chosen.

The engines themselves (what each runs, where, its code) are fade_core's (`fade_core/engines.py`);
which of them run a task on a device follows from them: the engines of the task's family that run
on the device and run the task's network (`engines_for`). What this layer adds is the task's
default there and its pack size (`DEFAULTS`), and the choice: a pack's engine is `fade-sweep run
--engine NAME` if given, else its experiment's `engine:` (the sweep file's), else the default
(`choose_engine`, which `check_engines` runs for every experiment before anything starts and the
runners run for each pack). Its device follows from the resources: CUDA for a GPU-capable
(neural) task when packs ask for GPUs, else the CPU (the trainable picks the same device from
what Ray gives it). No environment variable changes which engine runs. Imports neither torch
nor numba; what a pack costs is `sweeps/plan/costs.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from fade_core.engines import DEVICES, ENGINE_NAMES, ENGINES, TORCH, EngineError, own_base_engines
from sweeps.spec.sweep import Experiment
from sweeps.spec.yamlfile import SweepError
from tasks import get_task


@dataclass(frozen=True)
class Default:
    """The engine a pack of a task on a device runs unless told otherwise, and its runs per pack."""

    engine: str
    pack_runs: int  # CPU: an upper bound (the planner sizes packs to keep slots busy)


_NEURAL = {"cpu": Default("cpu", 2000), "cuda": Default("triton", 2000)}
DEFAULTS: dict[tuple[str, str], Default] = {
    ("linear_tracking", "cpu"): Default("cpu", 2000),
    **{(task, device): default for task in ("nonlinear_tracking", "emnist_label_permuted", "emnist_partial_permuted")
       for device, default in _NEURAL.items()},
    # Measured on an H200 (benchmarks/CUDA_ENGINE.md, 2026-11-28): 6.2-11x the JAX peer, its sweep equal to the
    # CPU's; fastest at the largest pack measured (4,000 runs: 9.3e7 fade_sgd run-steps/s against 8.4e7 at 1,000).
    # EMNIST keeps triton: there the cuda engine's Adam runs at 0.64x the peer (benchmarks/EMNIST_KERNEL.md).
    ("nonlinear_tracking", "cuda"): Default("cuda", 4000),
}


def engines_for(task: str, device: str | None = None) -> tuple[str, ...]:
    """The engines that run `task` on `device` (None: on any device), the default first."""
    spec = get_task(task)
    devices = [device] if device is not None else [d for d in DEVICES if (task, d) in DEFAULTS]
    names = [e.name for d in devices if (task, d) in DEFAULTS
             for e in ENGINES if d in e.devices and e.runs(spec.family, spec.architecture, spec.loss)]
    defaults = [DEFAULTS[task, d].engine for d in devices if (task, d) in DEFAULTS]
    return tuple(dict.fromkeys([*defaults, *names]))


def default_engine(task: str, device: str) -> str:
    """The engine a pack of `task` on `device` ("cpu" or "cuda") runs unless told otherwise."""
    if device not in DEVICES:
        raise EngineError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    if (task, device) not in DEFAULTS:
        raise EngineError(f"{task} has no engine on {device}")
    return DEFAULTS[task, device].engine


def default_pack_runs(task: str, device: str) -> int:
    """Runs per pack of `task` on `device` with its default engine."""
    default_engine(task, device)
    return DEFAULTS[task, device].pack_runs


def engine_problem(engine: str, task: str, device: str | None = None) -> str | None:
    """Why `engine` cannot run `task` on `device` (None: on any device), in one line; None if it can."""
    if engine not in ENGINE_NAMES:
        return f"engine {engine!r} is unknown; engines are {', '.join(ENGINE_NAMES)}"
    available = engines_for(task, device)
    if engine in available:
        return None
    where = f" on {device}" if device else ""
    if not available:
        return f"{task} has no engine{where}"
    return f"engine {engine!r} does not run {task}{where}; choose one of {', '.join(available)}"


def pack_device(task: str, gpus: float) -> str:
    """The device a pack of `task` runs on when packs ask for `gpus` GPUs each."""
    return "cuda" if gpus > 0 and get_task(task).runs_on_gpu else "cpu"


def choose_engine(experiment: Experiment, device: str, engine: str | None = None) -> str:
    """The engine `experiment`'s packs run on `device` (`engine`: the command line's override, else the
    sweep file's, else the default: torch for a researcher's own base step where the default does not
    run it); EngineError (one line) if it does not run the task there, or not the learner's own step."""
    if engine is None:  # an empty --engine (e.g. "$UNSET_VAR") is a choice to check, not "the default"
        engine = experiment.engine or default_engine(experiment.task, device)
        if experiment.engine is None and _own_neural(experiment) and engine not in own_base_engines():
            engine = TORCH
    problem = engine_problem(engine, experiment.task, device)
    if problem is None and _own_neural(experiment) and engine not in own_base_engines():
        problem = (f"engine {engine} runs the built-in base steps only; {experiment.optimizer}'s own base step "
                   f"runs on {', '.join(own_base_engines())}")
    if problem is not None:
        raise EngineError(problem)
    return engine


def _own_neural(experiment: Experiment) -> bool:
    return experiment.learner is not None and experiment.learner.family == "neural"


def check_engines(experiments: Iterable[Experiment], gpus: float, engine: str | None = None) -> None:
    """SweepError (one line) if some experiment's engine cannot run its task on its device."""
    for experiment in experiments:
        try:
            choose_engine(experiment, pack_device(experiment.task, gpus), engine)
        except EngineError as err:
            where = "--engine" if engine is not None else f"engine of {experiment.task}/{experiment.optimizer}"
            raise SweepError(f"{where}: {err}") from None

