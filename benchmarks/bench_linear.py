"""Throughput of the linear learners, batched vs a plain per-run NumPy loop, in one run;
then the wall time of a whole sweep through Ray Tune on the embedded local Ray.

    python benchmarks/bench_linear.py                      # learners + linear-noise0 end to end
    python benchmarks/bench_linear.py --e2e none           # learners only
    python benchmarks/bench_linear.py --runs 400 --steps 20000 --e2e linear-demo

Figures are run-steps per second (one run advanced by one step = one run-step).
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
from tests.test_linear_learners import reference  # noqa: E402  (the plain per-run loop)

HP = {"alpha": 0.01, "lambda": 0.01, "theta_alpha": 0.01, "beta0": -4.6, "theta_lambda": 0.01, "gamma0": -2.3, "theta": 0.01}


def batched_rate(name: str, runs: int, steps: int, seeds: int, threads: int) -> float:
    spec = LINEAR_LEARNERS[name]
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((steps, seeds, 20)).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal((steps, seeds)).astype(np.float32))
    hp = hyperparameter_matrix(spec, {n: HP[n] for n in spec.hyperparameters}, runs, torch.float32)
    state = init_state(spec, hp, torch.zeros(runs, 20))
    slot = torch.arange(runs) % seeds
    losses = torch.empty(runs, steps)
    numba.set_num_threads(threads)
    advance(spec, hp, state, x[:10], y[:10], slot, losses[:, :10].contiguous())  # compile / load cache
    start = time.perf_counter()
    advance(spec, hp, state, x, y, slot, losses)
    return runs * steps / (time.perf_counter() - start)


def naive_rate(name: str, steps: int) -> float:
    spec = LINEAR_LEARNERS[name]
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((steps, 20)), rng.standard_normal(steps)
    start = time.perf_counter()
    reference(name, {n: HP[n] for n in spec.hyperparameters}, x, y, np.zeros(20))
    return steps / (time.perf_counter() - start)


def end_to_end(preset: str) -> None:
    from sweeps.spec import resolve_sweep
    from sweeps.tune.driver import run_sweep

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs in the batched pack (default 200)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--naive-steps", type=int, default=3_000)
    parser.add_argument("--e2e", default="linear-noise0", help="preset to run end to end, or 'none'")
    args = parser.parse_args()
    cores = numba.config.NUMBA_NUM_THREADS
    print(f"pack of {args.runs} runs ({args.seeds} seeds), {args.steps} steps, float32; {cores} cores")
    print(f"{'learner':<10} {'naive loop':>12} {'batched 1 thread':>18} {'batched ' + str(cores) + ' threads':>18} {'speed-up':>9}")
    for name in LINEAR_LEARNERS:
        naive = naive_rate(name, args.naive_steps)
        one = batched_rate(name, args.runs, args.steps, args.seeds, 1)
        full = batched_rate(name, args.runs, args.steps, args.seeds, cores)
        print(f"{name:<10} {naive / 1e3:>10.1f}K {one / 1e6:>16.2f}M {full / 1e6:>16.2f}M {full / naive:>8.0f}x")
    if args.e2e != "none":
        end_to_end(args.e2e)


if __name__ == "__main__":
    main()
