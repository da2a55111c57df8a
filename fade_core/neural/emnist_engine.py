"""The "cuda" engine on the EMNIST network: emnist_source.py's segment kernel, compiled by NVRTC and
launched through the CUDA driver on torch's current stream (the loading, the cache and the launch are
cuda_engine.py's), one block per run, a whole segment of steps per launch.

`runs.engine_class("cuda")` picks this kernel for two-hidden-layer classification networks and the
nonlinear kernel (cuda_engine.CudaKernel) otherwise.
"""

from __future__ import annotations

import ctypes
import math
from typing import Sequence

import torch

from fade_core.architecture import Architecture
from fade_core.engines import CUDA, EngineError
from fade_core.neural.cuda_engine import _driver, _ok, _pointer, load_function
from fade_core.neural.emnist_source import KERNEL_NAME, EmnistShape, kernel_source, unsupported
from fade_core.neural.rules import NeuralLearner
from fade_core.neural.state import adam_table

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
    runs, steps = params.shape[0], x.shape[0]
    if steps == 0 or runs == 0:
        return None
    if steps >= 2**31:
        raise ValueError(f"engine 'cuda': a segment of {steps} steps is longer than the kernel's int32 step count")
    loss, _, correct, active = sums
    f32 = torch.float32
    zeros = params.new_zeros(runs)
    fans = arch.sizes[:3]
    bounds = [(hp["kappa"] / math.sqrt(fan_in)).contiguous() if "kappa" in hp else zeros for fan_in in fans]
    adam = learner.base == "adam"
    fade = state["gamma"].shape[1] > 0
    table = adam_table(state["adam_steps"], steps, params.dtype) if adam else (zeros.double(), zeros, zeros)
    x, labels = x.contiguous(), labels.to(torch.int64).contiguous()
    slot = run_slot.to(device=params.device, dtype=torch.int64).contiguous()
    tensors = [
        (params, f32, "params"), (state["adam_m"] if adam else params, f32, "adam_m"),
        (state["adam_v"] if adam else params, f32, "adam_v"), (state["gamma"] if fade else params, f32, "gamma"),
        (state["trace"] if fade else params, f32, "trace"), (x, f32, "x"), (labels, torch.int64, "labels"),
        (slot, torch.int64, "run_slot"), (hp["alpha"].contiguous(), f32, "alpha"),
        (hp.get("lambda", zeros).contiguous(), f32, "lambda"), (hp.get("theta_lambda", zeros).contiguous(), f32, "theta"),
        (bounds[0], f32, "bound0"), (bounds[1], f32, "bound1"), (bounds[2], f32, "bound2"),
        (table[0], torch.float64, "bc1"), (table[1], f32, "sqrt_bc2"), (table[2], f32, "inv_bc2"),
        (loss, torch.float64, "loss"), (correct, torch.float64, "correct"), (active.view(torch.uint8), torch.uint8, "active"),
    ]
    for tensor, _, name in tensors:
        if tensor.dim() == 2 and tensor.stride(1) != 1 or name in ("loss", "correct", "active") and not tensor.is_contiguous():
            raise ValueError(f"engine 'cuda': {name} must have contiguous rows")
    args = [_pointer(t, dtype, name, params.is_cuda) for t, dtype, name in tensors]
    args += [ctypes.c_int(steps), *(ctypes.c_longlong(s) for s in (x.stride(0), x.stride(1), labels.stride(0),
                                                                   labels.stride(1), params.stride(0),
                                                                   state["adam_m"].stride(0) if adam else 0,
                                                                   state["gamma"].shape[1]))]
    return args, [t for t, _, _ in tensors]


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
