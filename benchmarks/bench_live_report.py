"""What the live report costs a run: `fade-sweep run PRESET` with the live report (the default) and with
`--no-report`, alternated in one process so a busy machine slows both alike; each run on a fresh
storage. Compared: the Done line's wall time (from Ray's start to the last pack written, the live
report's last rewrite included; the final report, written after the Done line, is not counted: it
is the same with or without a live report) and the packs' time.

    python benchmarks/bench_live_report.py                      # linear-demo, 3 rounds
    python benchmarks/bench_live_report.py --preset linear-demo --rounds 2 --num-cpus 2

Target (issue 43): the live report costs at most 2% of the run's wall time on linear-demo.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"^Done: .* in ([\d.]+) s wall \(Ray start ([\d.]+) s, packs ([\d.]+) s\)", re.M)


def one_run(preset: str, extra: list[str], storage: Path) -> tuple[float, float, float]:
    """(wall, packs seconds, wall less Ray's start) of one run, from its Done line."""
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", "run", preset, "--storage", str(storage), *extra],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    found = DONE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{preset} {extra}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    wall, ray_start, packs = map(float, found.groups())
    return wall, packs, wall - ray_start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="linear-demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    common = ["--num-cpus", str(args.num_cpus)]
    results: dict[str, list[tuple[float, float, float]]] = {"live report": [], "--no-report": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ["live report", "--no-report"] if i % 2 == 0 else ["--no-report", "live report"]
            for name in order:
                flags = common + (["--no-report"] if name == "--no-report" else [])
                results[name].append(one_run(args.preset, flags, Path(tmp) / f"{i}-{name.strip('-')}"))
                wall, packs, after_ray = results[name][-1]
                print(f"round {i + 1}: {name:<12} {wall:6.1f} s wall, {after_ray:6.1f} s after Ray's start, "
                      f"packs {packs:6.1f} s", flush=True)
    for column, what in ((0, "wall"), (2, "wall after Ray's start"), (1, "packs")):
        live, off = (statistics.median(r[column] for r in results[k]) for k in ("live report", "--no-report"))
        print(f"median {what}: live report {live:.1f} s, --no-report {off:.1f} s: {live / off - 1:+.1%}")


if __name__ == "__main__":
    main()
