"""Aggregation and report on a large synthetic results store (issue: 1,000 configs x 10 seeds x
2,000 bins = 20M curve rows in under a minute and a few GB).

    python benchmarks/bench_analysis.py                 # build the store in a temp dir, then measure
    python benchmarks/bench_analysis.py --configs 100   # smaller

The store is written with the service's own Parquet writer (one file per pack of 50
configs); the measurement runs in a fresh process so its peak memory is its own.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweeps.packs import PackOutcome  # noqa: E402
from sweeps.plan import Pack
from sweeps.spec import parse_sweep  # noqa: E402
from sweeps.store import Store  # noqa: E402


def build(results_dir: Path, configs: int, seeds: int, bins: int) -> None:
    side = round(configs ** (1 / 3))
    grid = {"alpha": list(np.round(np.linspace(0.01, 0.1, configs // (side * side)), 4)),
            "theta_lambda": list(np.round(np.linspace(0.0, 0.1, side), 4)), "gamma0": list(np.round(np.linspace(-9, -0.5, side), 3))}
    document = {"name": results_dir.name, "task": "linear_tracking", "task_settings": {"steps": bins * 1000, "bin": 1000},
                "seeds": seeds, "optimizers": {"fade": {k: [float(v) for v in vs] for k, vs in grid.items()}}}
    sweep = parse_sweep(document, "bench")
    (experiment,) = sweep.experiments
    cells = experiment.cells
    store = Store.open(results_dir)
    rng = np.random.default_rng(0)
    bin_end = np.arange(1, bins + 1) * 1000
    for start in range(0, len(cells), 50):
        pack = Pack(experiment, tuple(cells[start : start + 50]), sweep.seeds)
        mse = rng.gamma(2.0, 1.0, size=(pack.runs, bins))
        curves = {"mse": mse, "decay_relevant": rng.random((pack.runs, bins)), "decay_irrelevant": rng.random((pack.runs, bins)),
                  "step_size_relevant": None, "step_size_irrelevant": None}
        store.write_pack(pack, PackOutcome(mse.mean(1), np.zeros(pack.runs, bool), bin_end, curves, 1.0))
    (results_dir / "sweep.yaml").write_text(yaml.safe_dump(document))
    print(f"store: {len(cells)} configs x {seeds} seeds x {bins} bins = {len(cells) * seeds * bins:,} curve rows")


def measure(results_dir: Path) -> None:
    from sweeps.analysis.queries import Analysis
    from sweeps.analysis.report import write_report
    from sweeps.analysis.kinds import table_text

    start = time.perf_counter()
    store = Store.open(results_dir)
    analysis = Analysis.of(store)
    best = table_text(analysis, "best", "md")
    sensitivity = table_text(analysis, "sensitivity", "csv")
    tables_done = time.perf_counter()
    figures = write_report(Store.open(results_dir), store.location / "report.html")
    end = time.perf_counter()
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print(f"tables {tables_done - start:.1f} s ({len(best) + len(sensitivity):,} chars), report {end - tables_done:.1f} s "
          f"({len(figures)} figures, {(results_dir / 'report.html').stat().st_size / 1e6:.1f} MB); "
          f"total {end - start:.1f} s, peak memory {peak_gb:.2f} GB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--bins", type=int, default=2000)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    root = Path(tempfile.mkdtemp(prefix="fade-bench-analysis-"))
    try:
        results_dir = root / "big"
        start = time.perf_counter()
        build(results_dir, args.configs, args.seeds, args.bins)
        print(f"built in {time.perf_counter() - start:.1f} s")
        subprocess.run([sys.executable, __file__, "--measure", str(results_dir)], check=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
