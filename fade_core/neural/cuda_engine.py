"""The "cuda" engine: cuda_source.py's kernel, compiled by NVRTC for the GPU in hand (cuda_compile.py)
and launched through the CUDA driver (`cuda.bindings.driver`) on torch's current stream, over the
runs' torch tensors: a whole segment of steps per launch, each run's network on chip.

The kernel is compiled once per (source, compute capability) on a machine (the disk cache) and
loaded once per (source, device) in a process. A launch needs no host synchronisation: the
segment's Adam scalars are formed on the device (state.adam_table) and the launch is queued on
the stream torch's ops use, so the runner's ops before and after it are ordered with it.
"""

from __future__ import annotations

import ctypes
import math
from typing import Sequence

import torch

from fade_core.architecture import Architecture
from fade_core.engines import CUDA, EngineError
from fade_core.neural import cuda_compile
from fade_core.neural.cuda_source import KERNEL_NAME, KernelShape, kernel_source, unsupported
from fade_core.neural.rules import NeuralLearner
from fade_core.neural.state import adam_table

_LOADED: dict[tuple[str, int], object] = {}  # (cache key, device index) -> CUfunction


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as err:
        raise EngineError(f"engine 'cuda' needs NVIDIA's cuda-bindings ({err}); install them with "
                          "`pip install -e \".[cuda]\"`, or choose persistent or torch") from None
    return driver


def _ok(result: tuple | object, what: str):
    """The values a driver call returned after its status; EngineError naming the call otherwise."""
    driver = _driver()
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorString(status)
        raise EngineError(f"CUDA driver: {what} failed: {name.decode() if name else status}")
    return values[0] if len(values) == 1 else values


def kernel_function(shape: KernelShape, device: torch.device):
    """The kernel for `shape` loaded on `device` (compiled for its compute capability, or read from the
    disk cache), once per process."""
    return load_function(kernel_source(shape), KERNEL_NAME, f"{shape.learner.name}.cu", device)


def load_function(source: str, kernel_name: str, file_name: str, device: torch.device):
    """The entry point `kernel_name` of `source` loaded on `device` (NVRTC for its compute capability, or
    the disk cache), once per process and device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    arch = 10 * major + minor
    key = (cuda_compile.cache_key(source, arch), index)
    if key not in _LOADED:
        code = cuda_compile.cubin(source, arch, file_name)
        driver = _driver()
        _ok(driver.cuInit(0), "cuInit")
        with torch.cuda.device(index):
            torch.cuda.current_stream()  # torch's primary context made current in this thread
            if not int(_ok(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")):
                context = _ok(driver.cuDevicePrimaryCtxRetain(_ok(driver.cuDeviceGet(index), "cuDeviceGet")),
                              "cuDevicePrimaryCtxRetain")
                _ok(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            module = _ok(driver.cuModuleLoadData(code), "cuModuleLoadData")
            _LOADED[key] = _ok(driver.cuModuleGetFunction(module, kernel_name.encode()), "cuModuleGetFunction")
    return _LOADED[key]


def kernel_resources(learner: NeuralLearner, arch: Architecture, device: torch.device) -> tuple[int, int]:
    """(registers per thread, local memory bytes per thread: spills) of the loaded kernel, as the driver reports them."""
    driver = _driver()
    function = kernel_function(KernelShape(learner, arch.sizes, float(arch.negative_slope)), device)
    attribute = driver.CUfunction_attribute
    return (_ok(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function), "cuFuncGetAttribute"),
            _ok(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function), "cuFuncGetAttribute"))


def _pointer(tensor: torch.Tensor, dtype: torch.dtype, name: str, cuda: bool) -> ctypes.c_void_p:
    if tensor.dtype != dtype or tensor.is_cuda != cuda:
        raise ValueError(f"engine 'cuda': {name} must be a {'CUDA ' if cuda else ''}{dtype} tensor, not {tensor.dtype} "
                         f"on {tensor.device}")
    return ctypes.c_void_p(tensor.data_ptr())


def kernel_arguments(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor],
                     hp: dict[str, torch.Tensor], x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor,
                     sums: Sequence[torch.Tensor]) -> tuple[list, list[torch.Tensor]] | None:
    """The kernel's arguments in its parameter order (ctypes values) and the tensors they point into (to keep
    alive until the kernel has run); None when there is nothing to run. ValueError for runs the kernel does
    not run, or tensors of another dtype, device or layout than it reads."""
    params = state["params"]
    reason = unsupported(learner, arch, "squared_error" if target.dim() == 3 else "cross_entropy",
                         str(params.dtype).removeprefix("torch."))
    if reason:
        raise ValueError(reason)
    loss, sq_error, _, active = sums
    sums_args = [(loss, torch.float64, "loss"), (sq_error, torch.float64, "sq_error"),
                 (active.view(torch.uint8), torch.uint8, "active")]
    return segment_arguments(learner, state, hp, x, (target, torch.float32), run_slot, arch.sizes[:2], sums_args)


def segment_arguments(learner: NeuralLearner, state: dict[str, torch.Tensor], hp: dict[str, torch.Tensor],
                      x: torch.Tensor, target: tuple[torch.Tensor, torch.dtype], run_slot: torch.Tensor,
                      fans: Sequence[int], sums: list[tuple[torch.Tensor, torch.dtype, str]]) -> tuple[list, list[torch.Tensor]] | None:
    """The arguments the segment kernels (this one, emnist_engine's) take, in their order: the state, x and the
    target (in its dtype), the run slots, the per-run hyperparameters, a clip bound per layer of fan-in `fans`,
    Adam's per-step table, the sums as given, then the step count and the strides; and the tensors they point
    into. None when there is nothing to run; ValueError for another dtype, device or layout than a kernel reads."""
    params = state["params"]
    runs, steps = params.shape[0], x.shape[0]
    if steps == 0 or runs == 0:
        return None
    if steps >= 2**31:
        raise ValueError(f"engine 'cuda': a segment of {steps} steps is longer than the kernel's int32 step count")
    f32 = torch.float32
    zeros = params.new_zeros(runs)
    bounds = [(hp["kappa"] / math.sqrt(fan_in)).contiguous() if "kappa" in hp else zeros for fan_in in fans]
    adam = learner.base == "adam"
    fade = state["gamma"].shape[1] > 0
    table = adam_table(state["adam_steps"], steps, params.dtype) if adam else (zeros.double(), zeros, zeros)
    x, (target, target_dtype) = x.contiguous(), (target[0].contiguous(), target[1])
    slot = run_slot.to(device=params.device, dtype=torch.int64).contiguous()
    tensors = [
        (params, f32, "params"), (state["adam_m"] if adam else params, f32, "adam_m"),
        (state["adam_v"] if adam else params, f32, "adam_v"), (state["gamma"] if fade else params, f32, "gamma"),
        (state["trace"] if fade else params, f32, "trace"), (x, f32, "x"), (target, target_dtype, "target"),
        (slot, torch.int64, "run_slot"), (hp["alpha"].contiguous(), f32, "alpha"),
        (hp.get("lambda", zeros).contiguous(), f32, "lambda"), (hp.get("theta_lambda", zeros).contiguous(), f32, "theta"),
        *((bound, f32, f"bound{i}") for i, bound in enumerate(bounds)), (table[0], torch.float64, "bc1"),
        (table[1], f32, "sqrt_bc2"), (table[2], f32, "inv_bc2"), *sums,
    ]
    sum_names = {name for _, _, name in sums}
    for tensor, _, name in tensors:
        if tensor.dim() == 2 and tensor.stride(1) != 1 or name in sum_names and not tensor.is_contiguous():
            raise ValueError(f"engine 'cuda': {name} must have contiguous rows")
    args = [_pointer(t, dtype, name, params.is_cuda) for t, dtype, name in tensors]
    args += [ctypes.c_int(steps), *(ctypes.c_longlong(s) for s in (x.stride(0), x.stride(1), target.stride(0),
                                                                   target.stride(1), params.stride(0),
                                                                   state["adam_m"].stride(0) if adam else 0,
                                                                   state["gamma"].shape[1]))]
    return args, [t for t, _, _ in tensors]


def advance(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor], hp: dict[str, torch.Tensor],
            x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: Sequence[torch.Tensor],
            min_blocks: int = 1) -> None:
    """x.shape[0] steps of every run in one launch, as persistent.advance takes them: run r reads slot
    run_slot[r] of x ([T, S, in]) and target ([T, S, out]); `state` is NeuralRuns.state_dict() (updated
    in place, adam_steps included), `sums` StepSums.tensors() (accumulated). The temporaries the
    arguments point into may be freed once this returns: torch's allocator hands their memory only to
    later work on the same stream, which the kernel precedes."""
    params = state["params"]
    if not params.is_cuda:
        raise ValueError(f"engine 'cuda': the runs' tensors must be on a CUDA GPU, not {params.device}")
    built = kernel_arguments(learner, arch, state, hp, x, target, run_slot, sums)
    if built is None:
        return
    args, _ = built
    shape = KernelShape(learner, arch.sizes, float(arch.negative_slope), min_blocks)
    function = kernel_function(shape, params.device)
    pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    stream = torch.cuda.current_stream(params.device).cuda_stream
    driver = _driver()
    _ok(driver.cuLaunchKernel(function, params.shape[0], 1, 1, arch.sizes[1], 1, 1, 0, driver.CUstream(stream),
                              ctypes.addressof(pointers), 0), "cuLaunchKernel")
    if learner.base == "adam":
        state["adam_steps"] += x.shape[0]


class CudaKernel:
    """The "cuda" engine (fade_core.engines): `advance` runs a whole segment of steps in one launch,
    each run's network on chip. EngineError (one line) for runs it does not run."""

    name = CUDA

    def __init__(self, runs, min_blocks: int = 1):
        flat = runs.net.flat
        problem = unsupported(runs.learner, runs.net.arch, runs.loss, str(flat.dtype).removeprefix("torch."))
        if problem is None and flat.device.type != "cuda":
            problem = f"it runs on CUDA GPUs, not {flat.device}"
        if problem is not None:
            raise EngineError(f"engine 'cuda': {problem}; choose torch or triton")
        self.runs = runs
        self.min_blocks = min_blocks

    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums) -> None:
        runs = self.runs
        advance(runs.learner, runs.net.arch, runs.state_dict(), runs.hp, x, target, run_slot, sums.tensors(),
                self.min_blocks)
