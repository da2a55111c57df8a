"""`fade-sweep table` with every statistic on a large store (issue target: 10,000
configurations x 10 seeds in under 5 s per command).

    python benchmarks/bench_statistics.py                  # build the store in a temp dir, then time
    python benchmarks/bench_statistics.py --keep DIR       # build into DIR (reused when present)

The store (written with the service's own Parquet writer, 2 bins per run) holds fade
(alpha 10 x theta_lambda 20 x gamma0 25 = 5,000 configurations: 10 sensitivity tables of
25 x 20), sgd_wd (alpha 50 x lambda 50) and idbd (theta_alpha 50 x beta0 50): 10,000
configurations x 10 seeds, a few diverged seeds (0.2%).
Each command runs as its own process (what `fade-sweep table ...` does), so the times
include starting Python and the imports; printed: the process's wall time, its CPU time
(user + system; close to the wall time on an idle machine) and its own time for the table
after the imports. The load average is printed too: on a shared machine wall times are
only comparable at similar load.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeps.packs import PackOutcome
from sweeps.store import Store
from sweeps.plan import Pack
from sweeps.spec import parse_sweep

GRID = {
    "fade": {"alpha": np.round(np.geomspace(0.001, 0.1, 10), 5), "theta_lambda": np.round(np.linspace(0.0, 0.02, 20), 5),
             "gamma0": np.round(np.linspace(-9.0, -0.5, 25), 4)},
    "sgd_wd": {"alpha": np.round(np.geomspace(0.001, 0.1, 50), 6), "lambda": np.round(np.geomspace(1e-4, 0.1, 50), 7)},
    "idbd": {"theta_alpha": np.round(np.geomspace(1e-4, 0.05, 50), 7), "beta0": np.round(np.linspace(-8.0, -1.0, 50), 4)},
}


def build(results_dir: Path, seeds: int, pack_configs: int = 500) -> int:
    document = {"name": results_dir.name, "task": "linear_tracking", "task_settings": {"steps": 2000, "bin": 1000},
                "seeds": seeds, "optimizers": {m: {k: [float(v) for v in vs] for k, vs in g.items()} for m, g in GRID.items()}}
    sweep = parse_sweep(document, "bench")
    rng = np.random.default_rng(0)
    store = Store.open(results_dir)
    total = 0
    for experiment in sweep.experiments:
        cells = experiment.cells
        total += len(cells)
        for start in range(0, len(cells), pack_configs):
            pack = Pack(experiment, tuple(cells[start : start + pack_configs]), sweep.seeds)
            level = rng.gamma(4.0, 0.25, size=(len(pack.configs), 1))  # a per-config level, seeds scattered around it
            score = (level * rng.lognormal(0.0, 0.2, size=(len(pack.configs), seeds))).reshape(-1)
            score[rng.random(score.size) < 0.002] = np.inf  # a few diverged seeds
            mse = np.stack([score, score], axis=1)
            curves = {"mse": mse, "decay_relevant": None, "decay_irrelevant": None, "step_size_relevant": None,
                      "step_size_irrelevant": None}
            if experiment.optimizer == "fade":
                curves.update(decay_relevant=rng.random(mse.shape), decay_irrelevant=rng.random(mse.shape))
            store.write_pack(pack, PackOutcome(score, ~np.isfinite(score), np.array([1000, 2000]), curves, 1.0))
    (results_dir / "sweep.yaml").write_text(yaml.safe_dump(document))
    return total


def time_command(results_dir: Path, kind: str, stat: str) -> tuple[float, float, float, int]:
    """(wall seconds of the process, its CPU seconds (user + system: what the wall time would be
    on an idle machine, give or take threads), seconds inside it after imports, output characters)."""
    code = (
        "import sys, time; t0 = time.perf_counter(); from sweeps.cli import main; t1 = time.perf_counter(); "
        f"rc = main(['table', {str(results_dir)!r}, '--kind', {kind!r}, '--stat', {stat!r}, '--format', 'md']); "
        "print(f'@@ {time.perf_counter() - t1:.3f}', file=sys.stderr); sys.exit(rc)"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    inner = float(done.stderr.rsplit("@@ ", 1)[1].split()[0])
    return wall, cpu, inner, len(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="build the store here (and reuse it when it exists)")
    parser.add_argument("--kinds", default="best,sensitivity,compare,importance")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="fade-bench-stats-")) / "big"
    try:
        if not (root / "sweep.yaml").exists():
            start = time.perf_counter()
            configs = build(root, args.seeds)
            print(f"store: {configs:,} configs x {args.seeds} seeds, built in {time.perf_counter() - start:.1f} s")
        print(f"load average before: {' '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
        print(f"{'kind':<12} {'stat':<7} {'wall s':>7} {'CPU s':>6} {'table s':>8} {'chars':>9}")
        worst = 0.0
        for kind in args.kinds.split(","):
            for stat in ("mean", "median", "iqm"):
                wall, cpu, inner, chars = time_command(root, kind, stat)
                worst = max(worst, wall)
                print(f"{kind:<12} {stat:<7} {wall:>7.2f} {cpu:>6.2f} {inner:>8.2f} {chars:>9,}")
        print(f"slowest command: {worst:.2f} s wall (target: under 5 s); "
              f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    finally:
        if args.keep is None:
            shutil.rmtree(root.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
