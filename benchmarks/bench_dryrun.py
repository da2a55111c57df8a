"""How close `fade-sweep run --dry-run` comes to the real wall time: for each preset, the
dry run's estimate, then the real run (embedded Ray, `--num-cpus` CPUs) into a scratch folder,
and what the real time was made of (Ray's start, the engine's time, the rest per pack).

    python benchmarks/bench_dryrun.py [--num-cpus 2] [linear-demo nonlinear-demo ...]

The last column is the ratio the dry run should keep within 30% of 1. The measured start-ups
are what dryrun.RAY_START_SECONDS and dryrun.PACK_START_SECONDS should be.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time

from sweeps.spec import PackResources, resolve_sweep
from sweeps.tune.driver import ExecutionOptions, run_sweep
from sweeps.packs.dryrun import estimate
from sweeps.tune.progress import quiet_tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("presets", nargs="*", default=["linear-demo", "nonlinear-demo"])
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    quiet_tune()
    print(f"{'preset':<16} {'packs':>5} {'estimate':>9} {'real':>7} {'Ray start':>9} {'engine':>8} "
          f"{'start-up/pack':>13} {'real/estimate':>13}")
    for preset in args.presets:
        sweep = resolve_sweep(preset)
        resources = sweep.resources or PackResources()
        slots = int(args.num_cpus // resources.cpus)
        guess = estimate(sweep, slots, resources, None, "float32").wall_seconds
        with tempfile.TemporaryDirectory() as storage:
            started = time.perf_counter()
            run = run_sweep(sweep, storage, options=ExecutionOptions(num_cpus=args.num_cpus, show_progress=False))
            real = time.perf_counter() - started
        waves = math.ceil(run.packs / max(1, slots))
        per_pack = ((real - run.ray_start_seconds) * min(slots, run.packs) - run.compute_seconds) / max(1, run.packs)
        print(f"{preset:<16} {run.packs:>5} {guess:>8.0f}s {real:>6.0f}s {run.ray_start_seconds:>8.1f}s "
              f"{run.compute_seconds:>7.0f}s {per_pack:>12.1f}s {real / guess:>13.2f}  ({waves} waves on {slots} slots)")


if __name__ == "__main__":
    main()
