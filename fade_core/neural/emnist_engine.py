"""The "cuda" engine on the EMNIST network: emnist_source.py's segment kernel, compiled by NVRTC and
launched through the CUDA driver on torch's current stream (the loading, the cache and the launch are
cuda_engine.py's), one block per run, a whole segment of steps per launch.

`runs.engine_class("cuda")` picks this kernel for two-hidden-layer classification networks and the
nonlinear kernel (cuda_engine.CudaKernel) otherwise.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import torch

from fade_core.architecture import Architecture
from fade_core.engines import CUDA, EngineError
from fade_core.neural.cuda_engine import CudaKernel, _driver, _ok, load_function, segment_arguments
from fade_core.neural.emnist_source import KERNEL_NAME, EmnistShape, kernel_source, unsupported
from fade_core.neural.rules import NeuralLearner

_SHARED_SET: set[int] = set()  # kernels whose dynamic shared memory limit is raised (by CUfunction id)


def kernel_arguments(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor],
                     hp: dict[str, torch.Tensor], x: torch.Tensor, labels: torch.Tensor, run_slot: torch.Tensor,
                     sums: Sequence[torch.Tensor]) -> tuple[list, list[torch.Tensor]] | None:
    """The kernel's arguments in its parameter order (ctypes values) and the tensors they point into (to keep
    alive until the kernel has run); None when there is nothing to run. ValueError for runs the kernel does
    not run, or tensors of another dtype, device or layout than it reads."""
    params = state["params"]
    reason = unsupported(learner, arch, "squared_error" if labels.dim() == 3 else "cross_entropy",
                         str(params.dtype).removeprefix("torch."))
    if reason:
        raise ValueError(reason)
    loss, _, correct, active = sums
    sums_args = [(loss, torch.float64, "loss"), (correct, torch.float64, "correct"),
                 (active.view(torch.uint8), torch.uint8, "active")]
    return segment_arguments(learner, state, hp, x, (labels, torch.int64), run_slot, arch.sizes[:3], sums_args)


def kernel_function(shape: EmnistShape, device: torch.device):
    """The kernel for `shape` loaded on `device`, its dynamic shared memory limit raised to what it takes."""
    function = load_function(kernel_source(shape), KERNEL_NAME, f"emnist_{shape.learner.name}.cu", device)
    if id(function) not in _SHARED_SET:
        driver = _driver()
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _ok(driver.cuFuncSetAttribute(function, attribute, shape.dynamic_shared), "cuFuncSetAttribute")
        _SHARED_SET.add(id(function))
    return function


def advance(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor], hp: dict[str, torch.Tensor],
            x: torch.Tensor, labels: torch.Tensor, run_slot: torch.Tensor, sums: Sequence[torch.Tensor]) -> None:
    """x.shape[0] steps of every run in one launch: run r reads slot run_slot[r] of x ([T, S, in]) and
    labels ([T, S]); `state` is NeuralRuns.state_dict() (updated in place, adam_steps included), `sums`
    StepSums.tensors() (accumulated). As cuda_engine.advance, the temporaries may be freed on return."""
    params = state["params"]
    if not params.is_cuda:
        raise ValueError(f"engine 'cuda': the runs' tensors must be on a CUDA GPU, not {params.device}")
    built = kernel_arguments(learner, arch, state, hp, x, labels, run_slot, sums)
    if built is None:
        return
    args, _ = built
    shape = EmnistShape(learner, arch.sizes, float(arch.negative_slope))
    function = kernel_function(shape, params.device)
    pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    stream = torch.cuda.current_stream(params.device).cuda_stream
    driver = _driver()
    _ok(driver.cuLaunchKernel(function, params.shape[0], 1, 1, shape.threads, 1, 1, shape.dynamic_shared,
                              driver.CUstream(stream), ctypes.addressof(pointers), 0), "cuLaunchKernel")
    if learner.base == "adam":
        state["adam_steps"] += x.shape[0]


class EmnistKernel:
    """The "cuda" engine (fade_core.engines) on the EMNIST network: `advance` runs a whole segment of steps in
    one launch, W1 and W2 on chip. EngineError (one line) for runs it does not run."""

    name = CUDA

    def __init__(self, runs):
        flat = runs.net.flat
        problem = unsupported(runs.learner, runs.net.arch, runs.loss, str(flat.dtype).removeprefix("torch."))
        if problem is None and flat.device.type != "cuda":
            problem = f"it runs on CUDA GPUs, not {flat.device}"
        if problem is not None:
            raise EngineError(f"engine 'cuda': {problem}; choose torch or triton")
        self.runs = runs

    @staticmethod
    def runs_network(arch: Architecture, loss: str) -> bool:
        """Whether a network is this kernel's kind (two hidden layers, classification) rather than the
        nonlinear kernel's: the engine's choice between the two."""
        return arch.layers == 3 and loss == "cross_entropy"

    def advance(self, x: torch.Tensor, labels: torch.Tensor, run_slot: torch.Tensor, sums) -> None:
        runs = self.runs
        advance(runs.learner, runs.net.arch, runs.state_dict(), runs.hp, x, labels, run_slot, sums.tensors())


def cuda_kernel(runs):
    """The "cuda" engine's code (fade_core.engines): this kernel for EMNIST's networks, the nonlinear
    task's kernel (cuda_engine.py) for the others."""
    return (EmnistKernel if EmnistKernel.runs_network(runs.net.arch, runs.loss) else CudaKernel)(runs)
