"""Throughput of the linear learners' compiled kernels (float32 and float64, 1 thread and
all threads) against a plain per-run NumPy loop and this CPU's compute bound; then the wall
time of a whole sweep through Ray Tune on the embedded local Ray.

    python benchmarks/bench_linear.py                      # learners + linear-noise0 end to end
    python benchmarks/bench_linear.py --e2e none           # learners only
    python benchmarks/bench_linear.py --runs 400 --steps 20000 --e2e linear-demo

Figures are run-steps per second (one run advanced by one step = one run-step). The
1-thread figures use the process's CPU time (robust on a shared machine), the others wall
time. The roofline: flops per run-step counted from the rules (exp as its polynomial), all
taken as FMA-able, against 2 FMA units x one AVX2 register per cycle at the clock of
/proc/cpuinfo; the state of a block lives in L1 (its lane buffer), the streams' tile in L2,
so the bound is compute, not memory.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fade_core.linear import LINEAR_LEARNERS, advance, hyperparameter_matrix, init_state  # noqa: E402
from fade_core.linear.intrinsics import sum_row  # noqa: E402
from fade_core.linear.kernel import LANES  # noqa: E402  (8; 16 for the adaptive float32 rules)
from tests.test_linear_learners import reference  # noqa: E402  (the plain per-run loop)

LANE_ROWS = sum_row(3) + 1  # a built-in rule's lane buffer rows

HP = {"alpha": 0.01, "lambda": 0.01, "theta_alpha": 0.01, "beta0": -4.6, "theta_lambda": 0.01, "gamma0": -2.3, "theta": 0.01}
D = 20  # inputs of the linear tracking task

# Flops per component of each rule besides its exps (counted from fade_core/linear/rules.py,
# shared products once), and the number of exps; an exp costs EXP_FLOPS (vexp: reduction,
# Horner polynomial of degree 7 / 13, scaling). Per run-step add the float64 prediction and error.
RULE_FLOPS = {"sgd": (3, 0), "sgd_wd": (5, 0), "idbd": (13, 1), "idbd_wd": (15, 1), "fade": (19, 1),
              "fade_idbd": (25, 2), "coupled": (27, 2)}
EXP_FLOPS = {torch.float32: 10 + 2 * 7, torch.float64: 10 + 2 * 13}


def flops_per_run_step(name: str, dtype: torch.dtype) -> int:
    plain, exps = RULE_FLOPS[name]
    return D * (plain + exps * EXP_FLOPS[dtype]) + 2 * D + 3


def peak_flops_per_core(dtype: torch.dtype) -> float:
    """2 FMA units x one 256-bit register x 2 flops per cycle, at the clock /proc/cpuinfo reports."""
    with open("/proc/cpuinfo") as f:
        mhz = max(float(line.split(":")[1]) for line in f if line.startswith("cpu MHz"))
    return mhz * 1e6 * 2 * (256 // (8 * torch.finfo(dtype).bits // 8)) * 2


def batched_rate(name: str, runs: int, steps: int, seeds: int, threads: int, dtype: torch.dtype) -> float:
    """Run-steps/s of one pack (1 thread: per CPU-second, robust to a shared machine; else wall)."""
    spec = LINEAR_LEARNERS[name]
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((steps, seeds, D))).to(dtype)
    y = torch.from_numpy(rng.standard_normal((steps, seeds))).to(dtype)
    hp = hyperparameter_matrix(spec, {n: HP[n] for n in spec.hyperparameters}, runs, dtype)
    state = init_state(spec, hp, torch.zeros(runs, D))
    slot = torch.arange(runs) % seeds
    losses = torch.empty(runs, steps, dtype=dtype)
    numba.set_num_threads(threads)
    advance(spec, hp, state, x[:10], y[:10], slot, losses[:, :10].contiguous())  # compile / load cache
    clock = time.process_time if threads == 1 else time.perf_counter
    start = clock()
    advance(spec, hp, state, x, y, slot, losses)
    return runs * steps / (clock() - start)


def naive_rate(name: str, steps: int) -> float:
    spec = LINEAR_LEARNERS[name]
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((steps, 20)), rng.standard_normal(steps)
    start = time.perf_counter()
    reference(name, {n: HP[n] for n in spec.hyperparameters}, x, y, np.zeros(20))
    return steps / (time.perf_counter() - start)


def end_to_end(preset: str) -> None:
    from sweeps.spec import resolve_sweep
    from sweeps.tune.stages import run_sweep

    sweep = resolve_sweep(preset)
    storage = Path(tempfile.mkdtemp(prefix="fade-bench-"))
    try:
        run = run_sweep(sweep, storage)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    print(
        f"\nend to end, {preset}: {run.run_steps:.3e} run-steps in {run.packs} packs, {run.wall_seconds:.1f} s wall "
        f"(Ray start {run.ray_start_seconds:.1f} s included), {run.run_steps / run.wall_seconds / 1e6:.2f}M run-steps/s "
        f"with {run.slots} packs at once; engine {run.compute_seconds:.1f} CPU-s; Tune overhead (slot time after Ray start "
        f"not in the engine) {100 * run.tune_overhead_fraction:.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--runs", type=int, default=200, help="runs in the batched pack (default 200)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds the runs share (default 10)")
    parser.add_argument("--steps", type=int, default=20_000, help="steps of the batched pack (default 20,000)")
    parser.add_argument("--naive-steps", type=int, default=3_000, help="steps of the per-run loop (default 3,000)")
    parser.add_argument("--e2e", default="linear-noise0", help="preset to run end to end, or 'none'")
    args = parser.parse_args()
    cores = numba.config.NUMBA_NUM_THREADS
    print(f"pack of {args.runs} runs ({args.seeds} seeds) in blocks of {LANES} lanes ({2 * LANES} for the adaptive "
          f"float32 rules), {args.steps} steps; {cores} cores")
    for dtype in (torch.float32, torch.float64):
        peak = peak_flops_per_core(dtype)
        print(f"\n{str(dtype)[6:]}: compute bound {peak / 1e9:.1f} GFLOP/s per core")
        print(f"{'learner':<10} {'naive loop':>11} {'1 thread':>9} {str(cores) + ' threads':>10} {'speed-up':>9} "
              f"{'flops/step':>10} {'bound/core':>10} {'reached':>8}")
        for name in LINEAR_LEARNERS:
            naive = naive_rate(name, args.naive_steps)
            one = batched_rate(name, args.runs, args.steps, args.seeds, 1, dtype)
            full = batched_rate(name, args.runs, args.steps, args.seeds, cores, dtype)
            flops = flops_per_run_step(name, dtype)
            print(f"{name:<10} {naive / 1e3:>10.1f}K {one / 1e6:>8.2f}M {full / 1e6:>9.2f}M {full / naive:>8.0f}x "
                  f"{flops:>10} {peak / flops / 1e6:>9.1f}M {100 * one * flops / peak:>7.0f}%")
    print(f"\nstate per block: a ({D}, {LANE_ROWS}, {LANES} or {2 * LANES}) float64 lane buffer, "
          f"{D * LANE_ROWS * LANES * 8 // 1024} or {D * LANE_ROWS * LANES * 16 // 1024} KiB: L1; "
          "streams: a tile of ~128 KiB shared by the blocks of a thread: L2")
    if args.e2e != "none":
        end_to_end(args.e2e)


if __name__ == "__main__":
    main()
