"""How close `fade-sweep run --dry-run` comes to the real wall time, as a user sees both: for each
sweep (a preset or a file), the dry run's estimate, then the real `fade-sweep run` (embedded Ray,
`--num-cpus` CPUs, no report) into a scratch folder, each a command of its own, with the load
average before and after (on a shared machine the load moves both numbers).

    python benchmarks/bench_dryrun.py [--num-cpus 2] [linear-demo nonlinear-demo ...]
    python benchmarks/bench_dryrun.py --against /tmp/race-base [linear-demo ...]   # no real runs

The target: real / estimate within 25% of 1 on a quiet machine; on a loaded one the dry run says so.
With `--against DIR` (another checkout, e.g. `git worktree add /tmp/race-base main`) no sweep runs: for
each, this checkout's dry run (the cost table), its `--dry-run --calibrate`, and DIR's dry run, one after
the other, each with its estimate and its own wall time.
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


def _fade_sweep(*args: str, tree: str | None = None) -> str:
    env = None if tree is None else {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", *args], capture_output=True, text=True, check=True,
                          env=env, cwd=tree)
    return done.stdout


def _estimates(sweeps: list[str], cpus: list[str], against: str) -> None:
    """Each sweep's dry-run estimate and the dry run's own wall time: here, here with --calibrate, and `against`."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"{'sweep':<28} {'estimate':>9} {'dry run':>8} | {'--calibrate':>11} {'dry run':>8} | {'against':>8} "
          f"{'dry run':>8} | est/against {'load':>5}")
    for sweep in sweeps:
        row = []
        for extra, tree in (([], here), (["--calibrate"], here), ([], os.path.abspath(against))):
            with tempfile.TemporaryDirectory() as storage:
                started = time.perf_counter()
                dry = _fade_sweep("run", sweep, "--dry-run", "--storage", storage, *cpus, *extra, tree=tree)
                row += [float(re.search(r"Estimated wall time: (\d+) s", dry).group(1)), time.perf_counter() - started]
        print(f"{os.path.basename(sweep):<28} {row[0]:>8.0f}s {row[1]:>7.1f}s | {row[2]:>10.0f}s {row[3]:>7.1f}s | "
              f"{row[4]:>7.0f}s {row[5]:>7.1f}s | {row[0] / row[4]:>11.2f} {os.getloadavg()[0]:>5.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="*", default=DEFAULT)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--against", help="another checkout: compare dry runs only (no sweep runs)")
    args = parser.parse_args()
    cpus = ["--num-cpus", str(args.num_cpus)]
    if args.against:
        _estimates(args.sweeps, cpus, args.against)
        return
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
