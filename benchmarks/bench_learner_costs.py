"""Per-learner cost on one CPU thread: the run-steps/s the planner's table (`sweeps/plan/costs.py`,
`CPU_RATES`) is made of. Each (task, optimizer) is calibrated as `--dry-run` does it (a short
in-process pack of its preset's first configuration, the first chunk not timed), `--repeats`
times, timed by this process's CPU time (a loaded machine slows the wall clock several times
over; the CPU seconds of the pack hardly move: nonlinear fade_adam measured 8.6e4 run-steps per
CPU second alone and 8.3e4-8.7e4 beside a second pack or under load 2-14); the best (highest) rate is
kept. `--wall` times by the wall clock instead.

    python benchmarks/bench_learner_costs.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from sweeps.packs.dryrun import calibrate
from sweeps.spec import resolve_sweep

PRESETS = ("linear-noise0", "nonlinear", "emnist")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wall", action="store_true", help="time by the wall clock, not this process's CPU time")
    parser.add_argument("presets", nargs="*", default=list(PRESETS))
    args = parser.parse_args()
    os.environ.setdefault("FADE_EMNIST_DIR", "/work/shared/data/emnist")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for preset in args.presets:
        sweep = resolve_sweep(preset)
        for experiment in {(e.task, e.optimizer): e for e in sweep.experiments}.values():
            clock = time.perf_counter if args.wall else time.process_time
            rates = [calibrate(experiment, sweep.seeds[:5], torch.float32, clock=clock) for _ in range(args.repeats)]
            print(f"    ({experiment.task!r}, {experiment.optimizer!r}): {max(rates):.4g},  # best of {args.repeats}: "
                  + ", ".join(f"{r:.3g}" for r in rates), flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
