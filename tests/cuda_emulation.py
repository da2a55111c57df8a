"""The cuda engine's kernel run on the CPU, for the tests of a machine without a GPU: the very source NVRTC
compiles (fade_core/neural/cuda_source.py, the rule printed from parts.py included), compiled by the
machine's C++ compiler behind a few definitions of CUDA's built-ins, each block's threads as OS threads.

    __syncthreads()         a std::barrier of the block's threads
    __shfl_xor_sync(v, o)   each lane writes v to its warp's exchange row, the warp meets at a barrier,
                            reads lane ^ o's, and meets again
    __shared__              a static (one block runs at a time)
    __fmul_rn(a, b) ...     a * b ... with contraction off (-ffp-contract=off), as the intrinsics round
So the kernel's layout, indexing, double buffering, warp reduction, barriers and the rule run as
written; what differs from a GPU is only the libraries' exp and sqrt (ulps) and how threads interleave
(a missing barrier shows as a wrong or varying result here too, though not always).
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import subprocess
from pathlib import Path

import torch

from fade_core.architecture import Architecture
from fade_core.neural.cuda_engine import kernel_arguments
from fade_core.neural.cuda_source import KERNEL_NAME, KernelShape, kernel_source
from fade_core.neural.rules import NeuralLearner

SHIM = r"""
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>
struct dim3 { unsigned x = 0; };
thread_local dim3 threadIdx, blockIdx;
static std::barrier<> *block_barrier;
static std::barrier<> *warp_barriers[32];
static float exchange[32][32];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads, blocks)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float value, int offset)
{
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    exchange[warp][lane] = value;
    warp_barriers[warp]->arrive_and_wait();
    const float got = exchange[warp][lane ^ offset];
    warp_barriers[warp]->arrive_and_wait();
    return got;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
"""


def harness(source: str, kernel_name: str = KERNEL_NAME, extra: str = "", setup: str = "", results: str = "") -> str:
    """`source` behind the shim (and `extra` definitions), and `emulate(blocks, threads, args)`: the kernel's call
    per thread, its arguments read from `args` as cuLaunchKernel reads kernelParams (a pointer to each value);
    `setup` runs first, and with `results` (C that writes them) emulate takes a `long long *moved` as well."""
    signature = re.search(rf"{kernel_name}\((.*?)\)\s*\{{", source, re.S).group(1)
    types = [re.sub(r"\s*\b\w+$", "", p.strip()).replace("__restrict__", "").strip() for p in signature.split(",")]
    call = ", ".join(f"*({t} *)args[{i}]" for i, t in enumerate(types))
    return f"""{SHIM}
{extra}
{source}
extern "C" void emulate(int blocks, int threads, void **args{', long long *moved' if results else ''})
{{
    {setup}
    std::barrier<> block(threads);
    block_barrier = &block;
    for (int w = 0; w < threads / 32; ++w) warp_barriers[w] = new std::barrier<>(32);
    for (int b = 0; b < blocks; ++b) {{
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([=] {{ threadIdx.x = t; blockIdx.x = b; {kernel_name}({call}); }});
        for (auto &thread : pool) thread.join();
    }}
    for (int w = 0; w < threads / 32; ++w) delete warp_barriers[w];
    {results}
}}
"""


def build(text: str, folder: Path, stem: str = "emulated") -> ctypes.CDLL:
    """The harness `text` compiled as a shared library (once per text in `folder`)."""
    library = folder / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.so"
    if not library.exists():
        source = library.with_suffix(".cpp")
        source.write_text(text)
        subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", "-w",
                        str(source), "-o", str(library)], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(library))


def compiled(shape: KernelShape, folder: Path) -> ctypes.CDLL:
    """The emulation of `shape`'s kernel as a shared library (built once per source in `folder`)."""
    return build(harness(kernel_source(shape)), folder)


def advance(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor], hp: dict[str, torch.Tensor],
            x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums, folder: Path) -> None:
    """cuda_engine.advance on CPU tensors, the kernel emulated."""
    built = kernel_arguments(learner, arch, state, hp, x, target, run_slot, sums)
    if built is None:
        return
    args, _alive = built
    library = compiled(KernelShape(learner, arch.sizes, float(arch.negative_slope)), folder)
    pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    library.emulate(state["params"].shape[0], arch.sizes[1], pointers)
    if learner.base == "adam":
        state["adam_steps"] += x.shape[0]
