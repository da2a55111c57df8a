"""A researcher's linear rule against the built-in `fade` on the same pack, once compiled: the user's copy
of FADE with a hyperparameter of its own (benchmarks/own_rules.py: fade_leaky, rho = 1) and `fade`, their
compiled "cpu" drivers timed alternately in one process (CPU time, one thread, best of --repeats).

    python benchmarks/bench_own_linear.py                # float32 and float64, 200 runs of 10 seeds
    python benchmarks/bench_own_linear.py --runs 400 --steps 20000

The target (issue 38): the researcher's rule at most 1.25x the built-in's time.
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

import own_rules  # noqa: E402
from fade_core.linear import LINEAR_LEARNERS, advance, hyperparameter_matrix, init_state, own_learner  # noqa: E402

HP = {"alpha": 0.01, "theta_lambda": 0.01, "gamma0": -2.3}


def _timer(learner, runs: int, seeds: int, steps: int, dtype: torch.dtype, hp: dict):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps, seeds, 20, generator=g, dtype=dtype)
    y = torch.randn(steps, seeds, generator=g, dtype=dtype)
    slots = torch.arange(runs) % seeds
    matrix = hyperparameter_matrix(learner, hp, runs, dtype)

    def once() -> float:
        state = init_state(learner, matrix, torch.zeros(runs, 20, dtype=dtype))
        started = time.process_time()
        advance(learner, matrix, state, x, y, slots)
        return time.process_time() - started

    once()  # compiles (or loads from numba's cache): not timed
    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    numba.set_num_threads(1)
    own = own_learner("fade_leaky", own_rules.fade_leaky)
    for dtype in (torch.float32, torch.float64):
        built_in = _timer(LINEAR_LEARNERS["fade"], args.runs, args.seeds, args.steps, dtype, HP)
        theirs = _timer(own, args.runs, args.seeds, args.steps, dtype, {**HP, "rho": 1.0})
        a, b = [], []
        for _ in range(args.repeats):  # alternated: a shared machine's load falls on both
            a.append(built_in())
            b.append(theirs())
        rate = args.runs * args.steps
        print(f"{str(dtype).split('.')[-1]}: fade {rate / min(a) / 1e6:.2f}M run-steps/s, fade_leaky (own) "
              f"{rate / min(b) / 1e6:.2f}M run-steps/s: own/built-in time {min(b) / min(a):.3f}x")


if __name__ == "__main__":
    main()
