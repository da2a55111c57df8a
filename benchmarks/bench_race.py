"""A raced sweep against its full grid, whole commands, and (with --base) another checkout's: wall
time, where its seconds go, run-steps, and whether the race selects what the full grid selects.

    python benchmarks/bench_race.py [--steps 2000000] [--repeats 2] [--base /tmp/race-base] [--num-cpus 2]
                                    [--stream-cache-mb 4096] [--report]

The sweep is a held-out linear grid (not a preset: 4 methods, 80 configurations, 10 seeds, noise 1.0),
cut to `--steps` steps. Each variant is `fade-sweep run` in a fresh subprocess into a fresh store (no
report; with `--report`, the closing report as a user's run writes it), the variants alternated, `--repeats` times: "full" (this checkout, no race), "race" (this
checkout, --race) and, with `--base DIR`, "base full" and "base race" (the checkout at DIR, e.g. `git worktree add
/tmp/race-base main`; a base race's wall ratio is against the base full grid). For each: the command's wall time; from its Done line, Ray's start and
the packs' time (the rest of the wall is the command's own: imports, the store's checks, Tune's start
and end, the closing table); packs and run-steps; and per method the configuration the best table
selects, against the full grid's. With `--stream-cache-mb MB`, "full MB" and "race MB" too, with that stream
cache per worker (a race's wall ratio is then against "full MB"). Summary last: the ratios the targets name. On a
shared machine run it more than once: the load moves.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GRID = {  # 6 + 24 + 30 + 20 = 80 configurations
    "sgd": {"alpha": [0.5, 0.1, 0.05, 0.01, 0.005, 0.001]},
    "sgd_wd": {"alpha": [0.1, 0.05, 0.01, 0.005, 0.001, 0.0005], "lambda": [0.001, 0.01, 0.05, 0.1]},
    "idbd": {"theta_alpha": [0.5, 0.1, 0.05, 0.01, 0.005, 0.001], "beta0": [-0.7, -2.3, -3, -4.6, -5.3]},
    "fade": {"alpha": [0.05, 0.01, 0.005, 0.001], "theta_lambda": [0.01], "gamma0": [-1.2, -2.3, -4.6, -6.9, -9.2]},
}
DONE = re.compile(r"Done: (\d+) packs?, ([\d.e+]+) run-steps in ([\d.]+) s wall \(Ray start ([\d.]+) s(?:, packs ([\d.]+) s)?")


def sweep_file(steps: int, folder: Path) -> Path:
    document = {"name": "race-bench", "task": "linear_tracking", "task_settings": {"steps": steps, "noise": 1.0,
                "bin": max(1, steps // 10)}, "seeds": 10, "optimizers": GRID}
    path = folder / "race-bench.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run(tree: Path, args: list[str], storage: Path, cache_mb: str | None = None, report: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), **({"FADE_STREAM_CACHE_MB": cache_mb} if cache_mb else {})}
    env.pop("RAY_ADDRESS", None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", "run", *args, "--storage", str(storage),
                           *([] if report else ["--no-report"])],
                          env=env, cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree} {args}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    match = DONE.search(done.stdout)
    packs, steps, _, ray, packs_seconds = match.groups()
    return {"wall": wall, "ray": float(ray), "packs_seconds": float(packs_seconds or 0.0), "packs": int(packs),
            "run_steps": float(steps), "best": best(storage / "race-bench")}


def best(results_dir: Path) -> dict[str, str]:
    """method -> the configuration its best table selects (read by this checkout's analysis)."""
    from sweeps.analysis import summaries
    from sweeps.analysis.queries import Analysis
    from sweeps.store import Store

    table = summaries.best_table(Analysis.of(Store.open(results_dir), "mean"))
    ranked = table.sort("stat_value")
    return {**dict(table.select("optimizer", "config_id").iter_rows()), "<best method>": ranked["optimizer"][0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--base", type=Path, help="another checkout whose runs alternate with this one's")
    parser.add_argument("--stream-cache-mb", help="also full and race with this FADE_STREAM_CACHE_MB (a worker's stream "
                        "cache: where a sweep's streams do not fit, every pack draws its seeds' streams again)")
    parser.add_argument("--report", action="store_true", help="each command writes its closing report too")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-race-"))
    path = sweep_file(args.steps, scratch)
    common = [str(path), "--num-cpus", str(args.num_cpus)]
    variants = [("full", ROOT, common, None), ("race", ROOT, [*common, "--race"], None)]
    if args.base:
        variants += [("base full", args.base.resolve(), common, None), ("base race", args.base.resolve(), [*common, "--race"], None)]
    if args.stream_cache_mb:
        mb = args.stream_cache_mb
        variants += [(f"full {mb}MB", ROOT, common, mb), (f"race {mb}MB", ROOT, [*common, "--race"], mb)]
    results: dict[str, list[dict]] = {name: [] for name, *_ in variants}
    for repeat in range(args.repeats):
        for name, tree, argv, cache_mb in (variants if repeat % 2 == 0 else variants[::-1]):
            sample = run(tree, argv, scratch / f"{name.replace(' ', '-')}-{repeat}", cache_mb, args.report)
            results[name].append(sample)
            print(f"{name:>10} #{repeat}: wall {sample['wall']:6.1f} s (Ray start {sample['ray']:.1f} s, packs "
                  f"{sample['packs_seconds']:.1f} s, the rest {sample['wall'] - sample['ray'] - sample['packs_seconds']:.1f} s), "
                  f"{sample['packs']} packs, {sample['run_steps']:.3e} run-steps; load {os.getloadavg()[0]:.1f}", flush=True)
    full = results["full"]
    print(f"\nSummary ({args.steps:,} steps, 80 configurations x 10 seeds, {args.num_cpus} CPUs; best of {args.repeats}):")
    reference = full[0]["best"]
    configs = {k: v for k, v in reference.items() if k != "<best method>"}
    for name, samples in results.items():
        wall = min(s["wall"] for s in samples)
        same = all({k: s["best"][k] for k in configs} == configs for s in samples)
        best_same = all(s["best"]["<best method>"] == reference["<best method>"] for s in samples)
        alike = f"full {name.split()[-1]}" if name.endswith("MB") else "base full" if name.startswith("base") else "full"
        mine = results.get(alike, full)  # the full grid run alike
        print(f"  {name:>10}: wall ratio {wall / min(s['wall'] for s in mine):.2f} (best wall {wall:.1f} s), "
              f"run-step fraction {samples[0]['run_steps'] / full[0]['run_steps']:.2f}, "
              f"same configuration per method: {'yes' if same else 'NO'}, same best method: "
              f"{'yes' if best_same else 'NO'}")
    print(f"  (load average {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} over 1 / 5 minutes; targets at 2M steps: "
          "wall ratio <= 0.6, run-step fraction <= 0.40; at 50K: wall ratio <= 1)")


if __name__ == "__main__":
    main()
