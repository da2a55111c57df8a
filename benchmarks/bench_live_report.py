"""What the live report costs a run: `fade-sweep run PRESET` with the live report (the default) and with
`--no-report`, alternated in one process so a busy machine slows both alike; each run on a fresh
storage. Compared: the Done line's wall time (from Ray's start to the last pack written, the live
report's last rewrite included; the final report, written after the Done line, is not counted: it
is the same with or without a live report) and the packs' time. Beside it, the live report's own
work: the live pages written (the report's file watched while the run runs) times one page's CPU
seconds, measured afterwards on the finished store: what the helper process spent.

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
import threading
import time
from pathlib import Path

from sweeps.analysis.live import LIVE_MARK

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"^Done: .* in ([\d.]+) s wall \(Ray start ([\d.]+) s, packs ([\d.]+) s\)", re.M)


def one_run(preset: str, extra: list[str], storage: Path) -> tuple[float, float, float, int]:
    """(wall, packs seconds, wall less Ray's start, live pages seen) of one run, from its Done line and
    the report's file watched while it runs."""
    run = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", preset, "--storage", str(storage), *extra],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    pages = []
    watcher = threading.Thread(target=_watch_pages, args=(storage, run, pages), daemon=True)
    watcher.start()
    stdout, stderr = run.communicate()
    watcher.join()
    done = subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)
    found = DONE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{preset} {extra}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    wall, ray_start, packs = map(float, found.groups())
    return wall, packs, wall - ray_start, len(pages)


def _watch_pages(storage: Path, run: subprocess.Popen, pages: list) -> None:
    """Every live page written while `run` runs (a page is live while it reloads itself)."""
    seen = None
    while run.poll() is None:
        for page in storage.glob("*/report.html"):
            stamp = page.stat().st_mtime_ns
            if stamp != seen and LIVE_MARK in page.read_text(errors="replace"):
                seen = stamp
                pages.append(stamp)
        time.sleep(0.2)


def page_cpu(results_dir: Path) -> float:
    """CPU seconds of one live page of the finished store (made twice: the second, imports done)."""
    from sweeps.analysis.live_page import live_page

    live_page(str(results_dir), 10.0)
    return live_page(str(results_dir), 10.0)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="linear-demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    common = ["--num-cpus", str(args.num_cpus)]
    results: dict[str, list[tuple[float, float, float, int]]] = {"live report": [], "--no-report": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ["live report", "--no-report"] if i % 2 == 0 else ["--no-report", "live report"]
            for name in order:
                flags = common + (["--no-report"] if name == "--no-report" else [])
                results[name].append(one_run(args.preset, flags, Path(tmp) / f"{i}-{name.strip('-')}"))
                wall, packs, after_ray, pages = results[name][-1]
                print(f"round {i + 1}: {name:<12} {wall:6.1f} s wall, {after_ray:6.1f} s after Ray's start, "
                      f"packs {packs:6.1f} s, {pages} live pages", flush=True)
        cpu = page_cpu(next(Path(tmp).glob("0-live report/*")))
    for column, what in ((0, "wall"), (2, "wall after Ray's start"), (1, "packs")):
        live, off = (statistics.median(r[column] for r in results[k]) for k in ("live report", "--no-report"))
        print(f"median {what}: live report {live:.1f} s, --no-report {off:.1f} s: {live / off - 1:+.1%}")
    pages = statistics.median(r[3] for r in results["live report"])
    wall = statistics.median(r[0] for r in results["live report"])
    print(f"the live report's own work: {pages:g} pages x {cpu:.2f} s CPU each = {pages * cpu:.1f} s of one core, "
          f"{pages * cpu / wall:.1%} of the run's wall time (median run)")


if __name__ == "__main__":
    main()
