"""Wall and CPU time of the commands that need no cluster, each in a fresh interpreter (what a user
waits for): `--help`, `presets`, `table`, `status`, `verify` on a results store.

    python benchmarks/bench_light_commands.py results/linear-demo              # this checkout
    python benchmarks/bench_light_commands.py results/linear-demo --root OTHER # another checkout, same store

Commands run interleaved (one round of every command, then the next round), so a busy machine
slows them alike; the median of the rounds is printed, wall and CPU (user + system) seconds.
Targets (issue 18): `table` under 1 s, `--help` under 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(root: Path, argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `python -m sweeps.cli ARGV` run from `root`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", *argv], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # verify exits 1 on problems: still a full run
        raise RuntimeError(f"{argv}: exit {done.returncode}: {done.stderr[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="a results store (STORAGE/<sweep name>)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose sweeps.cli runs (default: this one)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    store = str(args.store.resolve())
    commands = {"--help": ["--help"], "presets": ["presets"], "table": ["table", store], "status": ["status", store],
                "verify": ["verify", store]}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeats):
        for name, argv in commands.items():
            times[name].append(run_once(args.root, argv))
    print(f"{args.root}: median of {args.repeats} interleaved runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:<8} wall {wall:6.2f} s   CPU {cpu:6.2f} s")


if __name__ == "__main__":
    main()
