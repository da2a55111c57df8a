"""Making R runs of a neural learner on an engine of fade_core.engines (`make_runs`).

The engines (cpu, torch, triton, triton_step, persistent, cuda) are described where they are
listed, fade_core/engines.py; `engine_class` gets the chosen one's code from there.
"""

from __future__ import annotations

import torch

from fade_core.engines import CPU, TRITON, family_engines, get_engine
from fade_core.mlp import Architecture, BatchedMLP
from fade_core.neural.rules import NeuralLearner, get_neural_learner
from fade_core.neural.state import Loss, NeuralRuns, StepSums

NEURAL_ENGINES = tuple(e.name for e in family_engines("neural"))


def engine_class(name: str, device: torch.device, learner: NeuralLearner | None = None):
    """What makes the engine `name` for runs (of `learner`) on `device` (fade_core.engines.get_engine:
    EngineError, one line, for a name it cannot run there). The engine's module loads here: numba only
    for the cpu engine, Triton only for triton's."""
    return get_engine(name, "neural", device.type, learner).load()


def hyperparameter_tensors(learner: NeuralLearner, values: dict[str, list[float]], dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Per-run hyperparameter lists -> [R] tensors, checked against what the learner takes."""
    unknown = set(values) - set(learner.hyperparameters)
    if unknown:
        raise ValueError(f"{learner.name} does not take {', '.join(sorted(unknown))}; it takes {', '.join(learner.hyperparameters)}")
    return {k: torch.tensor(v, dtype=dtype) for k, v in values.items()}


def make_runs(learner: str | NeuralLearner, arch: Architecture, seeds: list[int], hp: dict[str, list[float]], loss: Loss,
              device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, engine: str | None = None) -> NeuralRuns:
    """Notebook entry point: R = len(seeds) runs, run r initialised from seeds[r] with hp[...][r].

    `learner`: a registered learner's name, or a `NeuralLearner` of any parts (not registered).
    `engine`: one of NEURAL_ENGINES (None: "cpu" on a CPU, "triton" on CUDA)."""
    spec = learner if isinstance(learner, NeuralLearner) else get_neural_learner(learner)
    net = BatchedMLP.from_seeds(arch, list(seeds), device, dtype)
    if engine is None:
        engine = CPU if net.flat.device.type == "cpu" else TRITON
    return NeuralRuns(spec, net, hyperparameter_tensors(spec, hp, dtype), loss, engine_class(engine, net.flat.device, spec))


def compile_cpu(learner: NeuralLearner, dtype: str) -> None:
    """Compile the "cpu" engine's kernel for `learner` in `dtype` (or load it from numba's cache) before any
    pack needs it (a researcher's base step: its own copy of the kernel, cpu_own): one step of one run of a
    tiny network."""
    arch, torch_dtype = Architecture((1, 1, 1)), getattr(torch, dtype)
    runs = make_runs(learner, arch, [0], {name: [0.0] for name in learner.hyperparameters}, "squared_error",
                     dtype=torch_dtype, engine=CPU)
    x = torch.zeros((1, 1, 1), dtype=torch_dtype)
    runs.advance(x, x.clone(), torch.zeros(1, dtype=torch.int64), StepSums.zeros(1, arch, "squared_error", "cpu"))
