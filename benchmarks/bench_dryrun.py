"""How close `fade-sweep run --dry-run` comes to the real wall time, as a user sees both: for each
sweep (a preset or a file), the dry run's estimate, then the real `fade-sweep run` (embedded Ray,
`--num-cpus` CPUs, no report) into a scratch folder, each a command of its own, with the load
average before and after (on a shared machine the load moves both numbers).

    python benchmarks/bench_dryrun.py [--num-cpus 2] [linear-demo nonlinear-demo ...]

The target: real / estimate within 25% of 1 on a quiet machine; on a loaded one the dry run says so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

DEFAULT = ["linear-demo", "nonlinear-demo", "emnist-demo", "linear-best", "benchmarks/sweeps/linear-many-small-packs.yaml"]


def _fade_sweep(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", *args], capture_output=True, text=True, check=True)
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="*", default=DEFAULT)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    cpus = ["--num-cpus", str(args.num_cpus)]
    print(f"{'sweep':<28} {'packs':>5} {'estimate':>9} {'real':>7} {'real/est':>8} {'load before':>11} {'after':>6}  loaded?")
    for sweep in args.sweeps:
        dry = _fade_sweep("run", sweep, "--dry-run", *cpus)
        estimate = float(re.search(r"Estimated wall time: (\d+) s", dry).group(1))
        packs = re.search(r"Plan for sweep \S+: (\d+) packs", dry).group(1)
        before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as storage:
            started = time.perf_counter()
            _fade_sweep("run", sweep, "--storage", storage, "--no-report", *cpus)
            real = time.perf_counter() - started
        print(f"{os.path.basename(sweep):<28} {packs:>5} {estimate:>8.0f}s {real:>6.0f}s {real / estimate:>8.2f} "
              f"{before:>11.1f} {os.getloadavg()[0]:>6.1f}  {'says loaded' if 'is loaded' in dry else 'quiet'}", flush=True)


if __name__ == "__main__":
    main()
