"""A neural learner with a base step of one's own against the built-in one it copies, on the same pack, once
compiled: SGD's step written as one's own (benchmarks/own_parts.py: sgd_copy) under FADE on the head against
the built-in `fade_sgd`, and the RMSprop example against the built-in `fade_adam` (the step of the same
shape), their compiled "cpu" kernels timed alternately in one process (CPU time, one thread, best of
--repeats), on the nonlinear task's network.

    python benchmarks/bench_own_neural.py                 # float32, 20 runs of 2 seeds, 400 steps
    python benchmarks/bench_own_neural.py --runs 40 --steps 1000 --dtype float64

An own step runs in weight rows of its own (`cpu_layers.own_rank_one`, and `fade_sgd_rank_one`'s
copy with OWN_STEP: the built-in SGD's rows with the step in place of SGD's; before them, in the
general `any_rank_one`, it took 4.7-10x the built-in's time). The built-in `fade_sgd` fuses its
first layer's update with the next step's forward product, which an own step does not.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import own_parts  # noqa: E402
from fade_core.neural import NEURAL_LEARNERS, StepSums, make_runs, own_learner  # noqa: E402
from tasks.nonlinear_tracking import STUDENT  # noqa: E402

FADE = {"theta_lambda": 1.0, "gamma0": -4.6}


def _timer(learner, runs: int, seeds: int, steps: int, dtype: torch.dtype, hp: dict):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps, seeds, STUDENT.sizes[0], generator=g, dtype=dtype)
    y = torch.randn(steps, seeds, STUDENT.sizes[-1], generator=g, dtype=dtype)
    slots = torch.arange(runs) % seeds
    columns = {name: [hp[name]] * runs for name in learner.hyperparameters}

    def once() -> float:
        net = make_runs(learner, STUDENT, list(range(runs)), columns, "squared_error", dtype=dtype, engine="cpu")
        sums = StepSums.zeros(runs, STUDENT, "squared_error", "cpu")
        started = time.process_time()
        net.advance(x, y, slots, sums)
        return time.process_time() - started

    once()  # compiles (or loads from numba's cache): not timed
    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    args = parser.parse_args()
    numba.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    pairs = (("fade_sgd", own_learner("sgd_copy_fade", own_parts.sgd_copy, fade="head"), {"alpha": 0.01}),
             ("fade_adam", own_learner("rmsprop_fade", own_parts.rmsprop, fade="head"),
              {"alpha": 0.001, "rho": 0.99, "eps": 1e-8}))
    for name, own, hp in pairs:
        built_in = _timer(NEURAL_LEARNERS[name], args.runs, args.seeds, args.steps, dtype, {**hp, **FADE})
        theirs = _timer(own, args.runs, args.seeds, args.steps, dtype, {**hp, **FADE})
        a, b = [], []
        for _ in range(args.repeats):  # alternated: a shared machine's load falls on both
            a.append(built_in())
            b.append(theirs())
        rate = args.runs * args.steps
        print(f"{args.dtype}: {name} {rate / min(a) / 1e3:.1f}k run-steps/s, {own.name} (own) "
              f"{rate / min(b) / 1e3:.1f}k run-steps/s: own/built-in time {min(b) / min(a):.3f}x")


if __name__ == "__main__":
    main()
