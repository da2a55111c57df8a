"""The engines: what runs a learner's rule for R runs at once, each an explicit `Engine`.

An engine is a name, the family whose learners it runs, the devices a pack runs it on, what
networks it runs (neural: any, or one-hidden-layer regression networks), and the code that
advances the runs (`Engine.load`, its module imported on first use: numba only for a "cpu"
engine, Triton only for triton's). `get_engine` is the one place a name becomes an engine:
`linear.runs.advance` and `neural.runs.make_runs` both go through it. Each family has a
reference engine that the fast ones are tested against (docs/architecture.md, "Engines").

Which engine a pack of a task runs on a device by default, and its pack size, is the sweeps'
choice (`sweeps/spec/engines.py`); what a pack costs, `sweeps/plan/costs.py`. This module names
no task and imports neither torch nor numba (the light commands validate engine names with it).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from fade_core.architecture import Architecture
from fade_core.learner import OWN_BASE, Learner

DEVICES = ("cpu", "cuda")
# The neural parts whose arithmetic an engine written by hand for them implements (its `parts`);
# neural/rules.py's PARTS may offer more: such an engine refuses a learner with another part in one
# line instead of running something else. An engine that takes its arithmetic from `parts.update`
# (`parts=None`) runs any part.
BUILT_IN_PARTS: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("base", ("sgd", "adam")), ("weight_decay", ("none", "coupled", "decoupled")), ("clip", (False, True)),
    ("fade", ("none", "head", "all")))
# The built-in parts around a researcher's own base step (fade_core/neural/own.py): what the cpu engine
# runs (its kernel's own copy, cpu_own.py) and the triton engine (as the torch ops).
WITH_OWN_BASE = (("base", ("sgd", "adam", OWN_BASE)), *BUILT_IN_PARTS[1:])


class EngineError(ValueError):
    """An engine name that is unknown, or not available for a task on a device (one line)."""


@dataclass(frozen=True)
class Engine:
    """One engine: what it runs, where, and the code that advances a pack's runs."""

    name: str
    family: str  # "linear" | "neural": whose learners it runs
    devices: tuple[str, ...]  # where a pack runs it
    summary: str
    code: str = field(repr=False)  # "module:attribute": linear, an advance function; neural, what makes the engine of a NeuralRuns
    options: tuple[tuple[str, Any], ...] = ()  # keyword arguments bound to `code`
    reference: bool = False  # the family's reference: the fast engines are tested against it
    networks: tuple[tuple[int, str], ...] = ()  # neural: the (hidden layers, loss) of the networks it runs (empty: any)
    segments: bool = False  # a whole segment of steps per launch (nothing for a CUDA graph of steps to save)
    parts: tuple[tuple[str, tuple[object, ...]], ...] | None = None  # neural: the part choices it implements (None: any)

    def runs(self, family: str, architecture: Architecture | None = None, loss: str | None = None) -> bool:
        """Whether it runs learners of `family` on networks of `architecture` with `loss`."""
        network_ok = not self.networks or architecture is None or (architecture.layers - 1, loss) in self.networks
        return family == self.family and network_ok

    def learner_problem(self, learner: Learner) -> str | None:
        """Why it cannot run `learner` (a neural part its code does not implement), in one line; None if it can."""
        beyond = learner.parts_beyond(dict(self.parts)) if self.parts is not None and learner.family == "neural" else ()
        if beyond:
            return (f"engine {self.name!r} does not run {', '.join(beyond)} of {learner.name}: its code is written for "
                    "the built-in parts (fade_core.engines.BUILT_IN_PARTS); choose torch")
        return None

    def load(self) -> Callable:
        """The code that advances the runs (its module imported now)."""
        module, attribute = self.code.split(":")
        code = getattr(importlib.import_module(module), attribute)
        return functools.partial(code, **dict(self.options)) if self.options else code


REFERENCE, CPU, TORCH, TRITON, TRITON_STEP, PERSISTENT, CUDA = (
    "reference", "cpu", "torch", "triton", "triton_step", "persistent", "cuda")
_REGRESSION_ONE_HIDDEN = (1, "squared_error")  # the nonlinear task's networks
_CLASSIFICATION_TWO_HIDDEN = (2, "cross_entropy")  # EMNIST's
ENGINES: tuple[Engine, ...] = (
    Engine(REFERENCE, "linear", ("cpu",), "the rules of linear/rules.py in a plain compiled loop, one run and one step at a "
           "time, float64", "fade_core.linear.reference:advance_reference", reference=True),
    Engine(CPU, "linear", ("cpu",), "the vector-traced kernel, runs in SIMD lanes", "fade_core.linear.kernel:advance_compiled"),
    Engine(CPU, "neural", ("cpu",), "the compiled CPU kernel, a segment of steps per call",
           "fade_core.neural.cpu_engine:CpuKernel", segments=True, parts=WITH_OWN_BASE),
    Engine(TORCH, "neural", DEVICES, "batched torch ops, one step at a time: the neural reference, on any device",
           "fade_core.neural.torch_ops:TorchOps", (("fused", False), ("whole_step", False)), reference=True),
    Engine(TRITON, "neural", ("cuda",), "the torch ops with each parameter's update fused into one Triton kernel",
           "fade_core.neural.torch_ops:TorchOps", (("fused", True), ("whole_step", False)), parts=WITH_OWN_BASE),
    Engine(TRITON_STEP, "neural", ("cuda",), "each step's backward products and updates in the fewest passes over the "
           "weights; not the default until a GPU measurement puts it ahead of triton", "fade_core.neural.torch_ops:TorchOps",
           (("fused", True), ("whole_step", True)), parts=BUILT_IN_PARTS),
    Engine(PERSISTENT, "neural", ("cuda",), "one Triton launch per segment of steps, each run's network on chip",
           "fade_core.neural.persistent:PersistentKernel", segments=True, parts=BUILT_IN_PARTS,
           networks=(_REGRESSION_ONE_HIDDEN,)),
    Engine(CUDA, "neural", ("cuda",), "a CUDA C++ kernel compiled at run time by NVRTC, a segment per launch, one "
           "block per run (EMNIST's network: W1 and W2 on chip for the segment)", "fade_core.neural.emnist_engine:cuda_kernel",
           segments=True, parts=BUILT_IN_PARTS, networks=(_REGRESSION_ONE_HIDDEN, _CLASSIFICATION_TWO_HIDDEN)),
)
ENGINE_NAMES = tuple(dict.fromkeys(e.name for e in ENGINES))


def family_engines(family: str) -> tuple[Engine, ...]:
    """The engines that run `family`'s learners, in the table's order."""
    return tuple(e for e in ENGINES if e.family == family)


def get_engine(name: str, family: str, device: str | None = None, learner: Learner | None = None) -> Engine:
    """The engine `name` of `family`'s learners (the one place a name becomes an engine); EngineError
    (one line) for a name it does not have, or (with `device`, `learner`) one that does not run there or it.
    A CUDA engine given CPU tensors is its own code's to refuse (Triton's interpreter runs them: the tests)."""
    engine = next((e for e in family_engines(family) if e.name == name), None)
    if engine is None:
        names = ", ".join(e.name for e in family_engines(family))
        raise EngineError(f"engine {name!r} does not run {family} learners; choose one of {names}")
    if device is not None and device not in engine.devices and "cuda" not in engine.devices:
        others = ", ".join(e.name for e in family_engines(family) if device in e.devices)
        raise EngineError(f"engine {name!r} runs on CPUs only, not {device}; choose {others}")
    problem = engine.learner_problem(learner) if learner is not None else None
    if problem is not None:
        raise EngineError(problem)
    return engine


def own_base_engines() -> tuple[str, ...]:
    """The neural engines that run a researcher's own base step."""
    return tuple(e.name for e in family_engines("neural") if e.parts is None or OWN_BASE in dict(e.parts)["base"])


def reference_engine(family: str) -> Engine:
    """The engine `family`'s fast engines are tested against."""
    return next(e for e in family_engines(family) if e.reference)
