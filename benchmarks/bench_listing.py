"""Wall and CPU time of `fade-sweep status STORAGE` over a storage of many sweeps, in a fresh interpreter
(what a user waits for). The storage is made of copies of one results folder (its records, manifests
and data files; not its Tune folders), so every sweep is a real one.

    python benchmarks/bench_listing.py results/linear-demo                 # 100 copies, median of 5
    python benchmarks/bench_listing.py results/linear-demo --copies 300 --rounds 3

Target (issue 43): 100 sweeps in under 2 s on a local folder.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from bench_light_commands import ROOT, run_once


def make_storage(results_dir: Path, copies: int, into: Path) -> Path:
    """`copies` copies of `results_dir` under `into`, named <name>-000, ..."""
    keep = shutil.ignore_patterns("tune-*", "report.html", "history")
    for i in range(copies):
        shutil.copytree(results_dir, into / f"{results_dir.name}-{i:03d}", ignore=keep)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path, help="a results folder to copy (e.g. results/linear-demo)")
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        storage = make_storage(args.results_dir.resolve(), args.copies, Path(tmp))
        manifests = sum(1 for _ in storage.glob("*/manifests/*.json"))
        times = [run_once(ROOT, ["status", str(storage)]) for _ in range(args.rounds)]
    wall, cpu = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
    print(f"status STORAGE: {args.copies} sweeps ({manifests} manifests): median of {args.rounds} rounds "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU (best {min(t[0] for t in times):.2f} s wall)")


if __name__ == "__main__":
    main()
