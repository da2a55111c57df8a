"""The planner's modelled makespan against 9fdfec8's rule (packs of at least 100 runs, about 6 per CPU),
per preset and slot count, with each plan's idle share of the slots (1 - work / (slots x makespan)).

    python benchmarks/bench_packing.py [--slots 2 16 64] [preset ...]

Both plans are costed by the same model (sweeps/plan/costs.py), so the ratio is the planner's
alone; it is the target's "0.8x of today's wall time" for a sweep too long to run twice here.
"""

from __future__ import annotations

import argparse
import math

from sweeps.plan import CostModel, Pack, plan_packs
from sweeps.spec import resolve_sweep
from sweeps.plan.packing import makespan, pack_seconds

OLD_MIN, OLD_MAX, OLD_PER_CPU = 100, 2000, 6  # 9fdfec8's MIN_PACK_RUNS, MAX_PACK_RUNS, PACKS_PER_CPU


def old_plan(sweep, slots: int) -> list[Pack]:
    """9fdfec8's CPU packs: a target of max(100, min(2000, runs / (6 x slots))) runs, each experiment's
    configs cut into ceil(runs / target) packs with all seeds."""
    target = max(OLD_MIN, min(OLD_MAX, math.ceil(sweep.runs / (OLD_PER_CPU * max(slots, 1)))))
    packs = []
    for e in sweep.experiments:
        n = math.ceil(len(e.cells) * len(sweep.seeds) / target)
        size = math.ceil(len(e.cells) / n)
        packs += [Pack(e, e.cells[i : i + size], sweep.seeds) for i in range(0, len(e.cells), size)]
    return packs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("presets", nargs="*", default=["nonlinear-sensitivity", "nonlinear", "emnist-sensitivity", "linear-noise0"])
    parser.add_argument("--slots", type=int, nargs="*", default=[2, 16, 64])
    args = parser.parse_args()
    costs = CostModel()
    print(f"{'preset':<22} {'slots':>5} {'old packs':>9} {'old makespan':>12} {'old idle':>8} "
          f"{'new packs':>9} {'new makespan':>12} {'new idle':>8} {'new/old':>7}")
    for name in args.presets:
        sweep = resolve_sweep(name)
        for slots in args.slots:
            old = old_plan(sweep, slots)
            new = plan_packs(sweep, slots, costs=costs)
            row = []
            for packs in (old, new):
                seconds = [pack_seconds(p, costs) for p in packs]
                span = makespan(seconds, slots)
                row.append((len(packs), span, max(0.0, 1 - sum(seconds) / (slots * span))))
            (n0, s0, i0), (n1, s1, i1) = row
            print(f"{name:<22} {slots:>5} {n0:>9} {s0:>11.0f}s {100 * i0:>7.1f}% {n1:>9} {s1:>11.0f}s {100 * i1:>7.1f}% {s1 / s0:>7.2f}")


if __name__ == "__main__":
    main()
