"""Making R runs of a neural learner on an engine named by fade_core.engines.

    cpu     the compiled CPU kernel (cpu_engine: a whole segment of steps in one call)
    torch   batched torch ops, one step at a time (torch_ops: the reference, any device)
    triton  the torch ops with each parameter's update fused into one Triton kernel (CUDA;
            on CPU tensors only under TRITON_INTERPRET=1, as the tests run it)
    triton_step  each step's backward products and updates as the fewest passes over the
            weights (triton_fused_step: W^T delta read in the pass that updates W, layer 0's
            update fused with the next step's first-layer forward); CUDA, or the interpreter
    cuda    a CUDA C++ kernel compiled at run time by NVRTC, a segment per launch, one block per run
            (cuda_engine.py: one-hidden-layer regression networks, the nonlinear task; float32; CUDA)
    persistent  one Triton launch per segment, each run's network on chip (persistent.py:
            one-hidden-layer regression networks, the nonlinear task; CUDA, or the interpreter)
"""

from __future__ import annotations

import functools

import torch

from fade_core.engines import CPU, CUDA, PERSISTENT, TORCH, TRITON, TRITON_STEP, EngineError
from fade_core.mlp import Architecture, BatchedMLP
from fade_core.neural.rules import OWN_BASE_ENGINES, NeuralLearner, get_neural_learner
from fade_core.neural.state import Loss, NeuralRuns, StepSums

NEURAL_ENGINES = (CPU, TORCH, TRITON, TRITON_STEP, PERSISTENT, CUDA)


def engine_class(name: str, device: torch.device):
    """What makes the engine `name` for runs on `device` (EngineError, one line, for a name it cannot run).
    The engines' modules load here: numba only for the cpu engine, Triton only for triton."""
    if name == CPU:
        if device.type != "cpu":
            raise EngineError(f"engine 'cpu' runs on CPUs only, not {device}; choose torch or triton")
        from fade_core.neural.cpu_engine import CpuKernel

        return CpuKernel
    if name in (TORCH, TRITON, TRITON_STEP):
        from fade_core.neural.torch_ops import TorchOps

        return functools.partial(TorchOps, fused=name != TORCH, whole_step=name == TRITON_STEP)
    if name == PERSISTENT:
        from fade_core.neural.persistent import PersistentKernel

        return PersistentKernel
    if name == CUDA:
        from fade_core.neural.cuda_engine import CudaKernel

        return CudaKernel
    raise EngineError(f"engine {name!r} does not run neural learners; choose one of {', '.join(NEURAL_ENGINES)}")


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
    if spec.own_base and engine not in OWN_BASE_ENGINES:
        raise EngineError(f"engine {engine!r} runs the built-in base steps only; {spec.name}'s own base step "
                          f"{spec.own_base.name} runs on {', '.join(OWN_BASE_ENGINES)}")
    return NeuralRuns(spec, net, hyperparameter_tensors(spec, hp, dtype), loss, engine_class(engine, net.flat.device))


def compile_cpu(learner: NeuralLearner, dtype: str) -> None:
    """Compile the "cpu" engine's kernel for `learner` in `dtype` (or load it from numba's cache) before any
    pack needs it (a researcher's base step: its own copy of the kernel, cpu_own): one step of one run of a
    tiny network."""
    arch, torch_dtype = Architecture((1, 1, 1)), getattr(torch, dtype)
    runs = make_runs(learner, arch, [0], {name: [0.0] for name in learner.hyperparameters}, "squared_error",
                     dtype=torch_dtype, engine=CPU)
    x = torch.zeros((1, 1, 1), dtype=torch_dtype)
    runs.advance(x, x.clone(), torch.zeros(1, dtype=torch.int64), StepSums.zeros(1, arch, "squared_error", "cpu"))
