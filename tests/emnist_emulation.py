"""The EMNIST kernel (fade_core/neural/emnist_source.py) run on the CPU, as tests/cuda_emulation.py runs the
nonlinear one: the very source NVRTC compiles, behind cuda_emulation's definitions of CUDA's built-ins
plus the few this kernel uses more (an int shuffle, `__shfl_sync`, dynamic shared memory), and with
every global access (`LD`/`ST`) counted, so the bytes a run-step moves are read from the code that
moves them (`bytes_per_run_step`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from fade_core.architecture import Architecture
from fade_core.neural.emnist_engine import kernel_arguments
from fade_core.neural.emnist_source import KERNEL_NAME, EmnistShape, kernel_source
from fade_core.neural.rules import NeuralLearner
from tests.cuda_emulation import build, harness

EXTRA = r"""
#include <atomic>
#include <cstdint>
#include <cmath>
static std::atomic<long long> bytes_read{0}, bytes_written{0};
template <typename T> inline T count_load(const T *address) { bytes_read += sizeof(T); return *address; }
template <typename T, typename V> inline void count_store(T *address, V value) { bytes_written += sizeof(T); *address = (T)value; }
#define LD(address) count_load(address)
#define ST(address, value) count_store(address, value)
static float *dynamic_shared;
#define SHARED_DYNAMIC(type, name) type *name = (type *)dynamic_shared
static int exchange_int[32][32];
inline int __shfl_xor_sync(unsigned, int value, int offset)
{
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    exchange_int[warp][lane] = value;
    warp_barriers[warp]->arrive_and_wait();
    const int got = exchange_int[warp][lane ^ offset];
    warp_barriers[warp]->arrive_and_wait();
    return got;
}
inline float __shfl_sync(unsigned, float value, int source)
{
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    exchange[warp][lane] = value;
    warp_barriers[warp]->arrive_and_wait();
    const float got = exchange[warp][source];
    warp_barriers[warp]->arrive_and_wait();
    return got;
}
"""


def compiled(shape: EmnistShape, folder: Path) -> ctypes.CDLL:
    """The emulation of `shape`'s kernel as a shared library (built once per source in `folder`); its `emulate`
    writes the bytes read and written to `moved`."""
    setup = (f"std::vector<float> shared({shape.dynamic_shared // 4}); dynamic_shared = shared.data(); "
             "bytes_read = 0; bytes_written = 0;")
    text = harness(kernel_source(shape), KERNEL_NAME, EXTRA, setup, "moved[0] = bytes_read; moved[1] = bytes_written;")
    return build(text, folder, "emnist")


def advance(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor], hp: dict[str, torch.Tensor],
            x: torch.Tensor, labels: torch.Tensor, run_slot: torch.Tensor, sums, folder: Path,
            threads: int = 64) -> tuple[int, int]:
    """emnist_engine.advance on CPU tensors, the kernel emulated with `threads` threads a block; -> (bytes
    read, bytes written) by the whole launch."""
    built = kernel_arguments(learner, arch, state, hp, x, labels, run_slot, sums)
    if built is None:
        return 0, 0
    args, _alive = built
    shape = EmnistShape(learner, arch.sizes, float(arch.negative_slope), threads)
    library = compiled(shape, folder)
    pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    moved = (ctypes.c_longlong * 2)()
    library.emulate(state["params"].shape[0], threads, pointers, moved)
    if learner.base == "adam":
        state["adam_steps"] += x.shape[0]
    return moved[0], moved[1]


def bytes_per_run_step(learner: NeuralLearner, arch: Architecture, folder: Path) -> tuple[int, int]:
    """(bytes read, bytes written) from and to global memory by one run-step in the middle of a segment, counted
    by the emulated kernel at `arch`'s size with the block's real thread count: a 3-step segment less a
    2-step one (the segment's loads and stores of what stays on chip cancel out)."""
    from fade_core.neural.runs import make_runs
    from fade_core.neural.state import StepSums

    hp = {"alpha": [0.01], "lambda": [0.01], "kappa": [2.0], "theta_lambda": [0.1], "gamma0": [-4.6]}
    counts = []
    for steps in (2, 3):
        nets = make_runs(learner, arch, [0], {k: hp[k] for k in learner.hyperparameters}, "cross_entropy", "cpu",
                         engine="torch")
        sums = StepSums.zeros(1, arch, "cross_entropy", "cpu")
        x = torch.rand(steps, 1, arch.sizes[0], generator=torch.Generator().manual_seed(0))
        y = torch.zeros(steps, 1, dtype=torch.int64)
        shape = EmnistShape(learner, arch.sizes, arch.negative_slope)
        counts.append(advance(learner, arch, nets.state_dict(), nets.hp, x, y, torch.zeros(1, dtype=torch.int64), sums.tensors(),
                              folder, shape.threads))
    return counts[1][0] - counts[0][0], counts[1][1] - counts[0][1]
