"""The compiled chunk drivers of the linear learners: runs in SIMD lanes (numba).

A driver advances R runs by T steps; `driver` compiles one per learner and dtype, the
learner's rule and layout fixed at compile time (`_block_driver`). Runs are grouped in
blocks of 8 or 16 (`lanes_for`); a block keeps its state component-major, (d, lanes) per
slot, and each rule runs on all lanes of a component at once as explicit vector code
(`simd` traces the plain-Python rule, exp included, into LLVM vector instructions; the d = 20 components of one run are too few
and too dependent to vectorise well). A block advances through a tile of steps in one
intrinsic (`intrinsics`), which reads the streams itself and keeps the error and loss sum
in registers; the rules that adapt a step size or decay run their loop over components
software-pipelined (`PIPELINE_STAGES`). Each tile of the streams is first copied
slot-major, so that a block reads its seed's steps contiguously (float32 runs also get a
float64 copy of x, which the prediction reads). Blocks go to threads in shares
(`in_threads`: the compiled driver releases the GIL).

Pack invariance: a lane computes exactly what its run computes alone. Lanes never mix
(no reduction across lanes), a block's tail is padded with copies of one of its runs
whose results are dropped, and the prediction and the loss sums are accumulated per run
in float64 in a fixed order (one or two partial sums over components 0..d-1, fixed by
the learner; steps in order), so neither the lane, the block, the pack, nor the chunking
changes a bit.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numba
import numpy as np

from fade_core.linear import intrinsics, pipeline, simd, vexp
from fade_core.linear.intrinsics import ROW_BETA, ROW_G, ROW_GAMMA, ROW_H, ROW_HP, ROW_W, advance, sum_row
from fade_core.learners import registered
from fade_core.linear.rules import LinearLearner

LANES = 8  # runs per block: one AVX2 register of float32 (16 for some learners: `lanes_for`)
TILE_BYTES = 1 << 17  # of the streams shared by all blocks, within a core's L2 cache
# Stages of the software-pipelined component loop of the rules that adapt a step size or decay
# (`pipeline.Pipeline`): float32 +10-25%, float64 +0-15% over one stage; 2 and 4 gained less.
PIPELINE_STAGES = 3

# Reassociation and fused multiply-add let LLVM vectorise and schedule the loops; we keep
# IEEE NaN/inf semantics (no 'nnan'/'ninf') so diverging runs stay visible as NaN/inf.
_FASTMATH = {"nsz", "arcp", "contract", "reassoc"}


def _block_driver(step: tuple[str, str, int, int, int], lanes: int, step_size: bool, decay: bool,
                  widen: bool, row_sum: int) -> Callable:
    """The chunk driver of one learner and dtype, in plain Python for numba to compile: its
    arguments are compile-time constants (numba freezes a closure's variables), so the block
    step it calls (`intrinsics.advance`, whose code `step` picks), its lanes and the rows it
    copies are fixed, and the branches on them compiled away. `step_size`, `decay`: the
    learner keeps beta, h / gamma, g; `widen`: float32 runs, whose prediction reads x in
    float64 too; `row_sum`: the lane buffer's row of the loss sums (`intrinsics.sum_row`)."""

    def run_blocks(p, lo, hi, run_slot, lane_run, lanes_used, share, shares, tile, x, y, w, beta, h, gamma, g, losses,
                   loss_sums):
        """Advance every block's runs by T steps in place; add each step's pre-update loss
        delta^2 to loss_sums (R,) float64 in step order, and write it to losses (R, T) unless
        losses has no columns (the pack engine reads only the sums).

        x: (T, S, d) and y: (T, S) hold one stream per slot; run r reads slot run_slot[r].
        lane_run: (blocks, lanes) the run of each lane, the first lanes_used[b] distinct, the
        rest padding (copies of a run of the block, never written back). A call advances share
        `share` of `shares` (one thread's blocks; `in_threads` runs the shares), stepping in
        tiles of `tile`, each tile through all its blocks (the state goes back to w, ... in
        between, exactly: a tile is a chunk). A tile is first copied slot-major: x_tile (S, tile,
        d), y_tile (S, tile) in float64, and x_wide, x in float64 (x_tile itself for float64
        runs).
        """
        d, n_hp, blocks = w.shape[1], p.shape[1], lane_run.shape[0]
        keep_losses = losses.shape[1] > 0
        # Every row of A64 that the rule reads is written before it is read.
        A64 = np.empty((d, row_sum + 1, lanes))
        A = A64.view(w.dtype)
        lane_slot = np.empty(lanes, np.int64)
        tile_losses = np.empty((tile, lanes), w.dtype)  # a block's, step-major
        first, last = share * blocks // shares, (share + 1) * blocks // shares
        # How many slots each block's lanes read (runs come sorted by slot). Blocks reading one or
        # two (broadcasts) read the tile's slot-major copy, whose row tile_row[slot] holds the
        # slot; blocks reading more load per lane from the streams in place.
        slots_read, tile_row = np.ones(blocks, np.int64), np.full(x.shape[1], -1, np.int64)
        tiled = 0
        for b in range(first, last):
            for l in range(1, lanes):
                slots_read[b] += run_slot[lane_run[b, l]] != run_slot[lane_run[b, l - 1]]
            if slots_read[b] <= 2:
                for l in range(lanes):
                    s = run_slot[lane_run[b, l]]
                    if tile_row[s] < 0:
                        tile_row[s] = tiled
                        tiled += 1
        x_tile, y_tile = np.empty((tiled, tile, d), x.dtype), np.empty((tiled, tile))
        if widen:  # float32: the prediction's x in float64 too
            x_wide = np.empty((tiled, tile, d))
        else:
            x_wide = x_tile
        for t0 in range(0, x.shape[0], tile):  # the tile stays in cache for all blocks of the share
            t1 = min(t0 + tile, x.shape[0])
            for t in range(t0, t1):  # slot-major: a block reads its slot's steps contiguously
                for s in range(x.shape[1]):
                    k = tile_row[s]
                    if k >= 0:
                        y_tile[k, t - t0] = y[t, s]
                        for i in range(d):
                            x_tile[k, t - t0, i] = x[t, s, i]
                            if widen:
                                x_wide[k, t - t0, i] = x[t, s, i]
            for b in range(first, last):
                runs, used = lane_run[b], lanes_used[b]
                for l in range(lanes):
                    r = runs[l]
                    lane_slot[l] = run_slot[r] if slots_read[b] > 2 else tile_row[run_slot[r]]  # where the lane reads
                    A64[0, row_sum, l] = loss_sums[r]
                    for j in range(n_hp):
                        A[0, ROW_HP + j, l] = p[r, j]
                    for i in range(d):  # only the rows the learner keeps
                        A[i, ROW_W, l] = w[r, i]
                        if step_size:
                            A[i, ROW_BETA, l], A[i, ROW_H, l] = beta[r, i], h[r, i]
                        if decay:
                            A[i, ROW_GAMMA, l], A[i, ROW_G, l] = gamma[r, i], g[r, i]
                advance(step, A64, A, x_tile, x_wide, y_tile, x, y, lane_slot, t0, 0, t1 - t0, slots_read[b], lo, hi,
                        tile_losses)  # (intrinsics.py)
                for l in range(used):
                    r = runs[l]
                    if keep_losses:
                        losses[r, t0:t1] = tile_losses[: t1 - t0, l]
                    loss_sums[r] = A64[0, row_sum, l]
                    for i in range(d):
                        w[r, i] = A[i, ROW_W, l]
                        if step_size:
                            beta[r, i], h[r, i] = A[i, ROW_BETA, l], A[i, ROW_H, l]
                        if decay:
                            gamma[r, i], g[r, i] = A[i, ROW_GAMMA, l], A[i, ROW_G, l]

    return run_blocks


@functools.cache
def driver(learner: LinearLearner, dtype: np.dtype, stages: int | None = None) -> Callable:
    """`_block_driver` compiled for one learner's rule and dtype (on first call), taking
    C-contiguous arrays only. `stages`: of the pipelined loop over components (default:
    PIPELINE_STAGES for the adaptive rules, 1 for the others; the tests compare them).

    Cached by numba across processes: the closure's variables are plain values (the step's key,
    not the intrinsic, which pickles with a per-process id), and numba's cache key hashes
    them. Each driver has a cache file of its own, named after the learner, the dtype, the
    stages and a digest of the source of the rule, vexp, simd, pipeline and intrinsics (numba only
    watches this file, not the ones its callees come from; and one file per driver, as a
    file's index written by two processes at once may keep one's entry with the other's code).
    """
    dtype = np.dtype(dtype)
    # The prediction's float64 partial sums: a rule that adapts nothing is a few operations, so
    # the prediction's chain is the longest of its step and two sums halve it (float64 sgd
    # 1.4x); the adaptive rules need those registers (fade 8% slower with two).
    partial_sums = 1 if learner.adaptive else 2
    lanes = lanes_for(learner, dtype)
    if stages is None:
        stages = PIPELINE_STAGES if learner.adaptive else 1
    if not registered(learner):
        raise ValueError(f"linear learner {learner.name!r} is not the one registered in LINEAR_LEARNERS under its name "
                         "(a researcher's rule: fade_core.linear.own_learner registers it)")
    step = (learner.key, dtype.name, lanes, partial_sums, stages)
    run_blocks = _block_driver(step, lanes, learner.adapts_step_size, learner.adapts_decay,
                               bool(dtype == np.float32), sum_row(len(learner.hyperparameters)))
    sources = (learner.rule, vexp, simd, pipeline, intrinsics)
    digest = hashlib.sha1("".join(map(inspect.getsource, sources)).encode()).hexdigest()[:12]
    run_blocks.__qualname__ = f"run_blocks_{learner.name}_{dtype.name}_{stages}_{digest}"  # its cache file's name
    # (parallel=True: 2.4x the compile time)
    compiled = numba.njit(fastmath=_FASTMATH, nogil=True, cache=True)(run_blocks)
    real, index, c = numba.from_dtype(dtype), numba.int64, functools.partial(numba.types.Array, layout="C")
    # p, lo, hi, run_slot, lane_run, lanes_used, share, shares, tile, x, y, w ... losses, loss_sums
    compiled.compile((c(real, 2), real, real, c(index, 1), c(index, 2), c(index, 1), index, index, index, c(real, 3),
                      *(c(real, 2) for _ in range(7)), c(numba.float64, 1)))
    compiled.disable_compile()
    return compiled


def lanes_for(learner: LinearLearner, dtype: np.dtype) -> int:
    """Runs per block for this learner and dtype. 16 (two vectors per operation) for the float32
    rules that adapt a step size or decay: their step is the rule's long dependency chain
    (meta-update, exp, decay), and two independent chains per component keep the core busier
    (+5-20%); float64 vectors of 16 spill (8 already take two registers), and sgd's short rule
    is bound elsewhere (both slower with 16)."""
    return 2 * LANES if learner.adaptive and np.dtype(dtype) == np.float32 else LANES


def lane_blocks(run_slot: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs sorted by slot, cut into blocks of `lanes`: (lane_run (blocks, lanes),
    lanes_used (blocks,)) as the driver reads them; the last block is padded by
    repeating its last run."""
    order = np.argsort(run_slot, kind="stable")
    blocks = -(-len(order) // lanes)
    lane_run = np.concatenate([order, np.repeat(order[-1:], blocks * lanes - len(order))]).reshape(blocks, lanes)
    lanes_used = np.full(blocks, lanes, dtype=np.int64)
    lanes_used[-1] = len(order) - (blocks - 1) * lanes
    return lane_run.astype(np.int64), lanes_used


def in_threads(work: Callable[[int], None], shares: int) -> None:
    """work(0), ..., work(shares - 1), one per thread of a pool kept for the process (the
    compiled drivers release the GIL); the first error is raised here."""
    if shares == 1:
        work(0)
        return
    list(_pool(shares).map(work, range(shares)))


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="fade-linear")


def schedule(run_slot: np.ndarray, x: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The driver's (lane_run, lanes_used, shares, tile) for these runs and streams, in blocks
    of `lanes`: one share of the blocks per thread numba may use now (`numba.set_num_threads`)."""
    lane_run, lanes_used = lane_blocks(run_slot, lanes)
    return lane_run, lanes_used, min(numba.get_num_threads(), len(lane_run)), tile_steps(x)


def tile_steps(x: np.ndarray) -> int:
    """Steps per tile: the streams' tile x[t0:t0 + tile] takes about TILE_BYTES."""
    return int(np.clip(TILE_BYTES // max(x[0].nbytes, 1), 16, 4096))
