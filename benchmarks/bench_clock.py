"""nonlinear-sensitivity on this machine, 9fdfec8's packing against today's, alternated: the wall time
of each, how idle each core was, how much CPU the sweep itself used, and each pack's modelled
seconds against its measured ones (from the store). Summary first.

    python benchmarks/bench_clock.py [--steps 300000] [--repeats 1] [--first old|new] [--num-cpus 2]

The preset is cut to `--steps` steps (score window a quarter of it; the default makes the ~15 s of
fixed start-up, the same for both, under 10% of the old run), written to a scratch sweep file and
run by `fade-sweep run` in a subprocess, into a scratch store, no report: old (`--runs-per-pack
80`: 9fdfec8's 2 packs, one per learner) and new (the default planner) in turn, `--repeats`
times. While a sweep runs, /proc/stat is read every second: a core's idle % is its idle and
iowait time over the run's, whoever else used it; the sweep's own CPU seconds are the user and
system time of its process tree (the CLI, Ray, the Tune workers). On a loaded machine the others'
jobs fill the cores the sweep leaves idle, and take from a sweep that keeps both busy: compare
the `sweep CPU %` columns there, and the wall times on a quiet machine.

The stream cache (FADE_STREAM_CACHE_MB) is scaled by steps / 2,000,000 unless set, so a short
sweep keeps as few of its streams as the preset's full length does (512 MiB holds about one of
its five 2M-step streams).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from sweeps.plan import CostModel
from sweeps.spec import resolve_sweep
from sweeps.plan.packing import pack_seconds, plan_packs
from sweeps.spec.presets import PRESETS_DIR
from sweeps.store.location import StoreLocation
from sweeps.store.manifests import read_manifests

PRESET = "nonlinear-sensitivity"
PRESET_STEPS = 2_000_000
OLD = ("old (9fdfec8: --runs-per-pack 80)", ["--runs-per-pack", "80"])
NEW = ("new (default planner)", [])
TICK = 1.0  # seconds between two reads of /proc


def core_times() -> list[tuple[int, int]]:
    """(idle + iowait, total) jiffies of each core, from /proc/stat."""
    cores = []
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(v) for v in values[:8]]
            cores.append((ticks[3] + ticks[4], sum(ticks)))
    return cores


def tree_cpu_seconds(root: int, seen: dict[int, float]) -> None:
    """Record the user + system seconds of `root` and every process below it (each one's latest reading)."""
    parents: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in times:
            seen[pid] = max(seen.get(pid, 0.0), times[pid])
        stack += parents.get(pid, [])


@dataclass
class Sample:
    """What one sweep run used: wall seconds, each core's idle share, the sweep's CPU seconds."""

    wall: float = 0.0
    idle: list[float] = field(default_factory=list)  # per core, % of the run
    sweep_cpu: float = 0.0  # seconds of CPU the sweep's processes used
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after


def run_sweep(args: list[str], env: dict[str, str]) -> Sample:
    """`fade-sweep run ARGS` in a subprocess, sampled every TICK seconds until it exits."""
    sample = Sample(load=(os.getloadavg()[0], 0.0))
    first, seen = core_times(), {}
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(child.stdout), daemon=True)
    reader.start()
    while child.poll() is None:
        tree_cpu_seconds(child.pid, seen)
        time.sleep(TICK)
    sample.wall = time.perf_counter() - started
    reader.join()
    if child.returncode != 0:
        sys.exit(f"bench_clock: fade-sweep run {' '.join(args)} exited {child.returncode}:\n{''.join(output[-20:])}")
    last = core_times()
    sample.idle = [100 * (i1 - i0) / max(t1 - t0, 1) for (i0, t0), (i1, t1) in zip(first, last)]
    sample.sweep_cpu = sum(seen.values())
    sample.load = (sample.load[0], os.getloadavg()[0])
    return sample


def pack_table(sweep_file: Path, store: Path, cpus: int, runs_per_pack: int | None) -> list[str]:
    """Each planned pack (longest first): its runs, modelled seconds (the planner's cost model) and
    measured seconds (its runner's wall time, from the store's scores)."""
    sweep = resolve_sweep(str(sweep_file))
    costs = CostModel()
    location = StoreLocation.parse(store / sweep.name)
    measured = {}
    for manifest in read_manifests(location).manifests:
        scores = pq.read_table(location.path(manifest.files["scores"].path), columns=["wall_seconds"])
        measured[manifest.pack_id] = scores.column("wall_seconds")[0].as_py()
    lines = []
    for pack in plan_packs(sweep, cpus, runs_per_pack=runs_per_pack, costs=costs):
        seconds = measured.get(pack.pack_id)
        lines.append(f"    {pack.experiment.optimizer:<10} {len(pack.configs):>2} configs x {len(pack.seeds)} seeds "
                     f"modelled {pack_seconds(pack, costs):>7.1f} s  measured "
                     + (f"{seconds:>7.1f} s" if seconds is not None else "    (not in the store)"))
    return lines


def short_sweep(steps: int, folder: Path) -> Path:
    """The preset at `steps` steps (score window steps / 4), as a sweep file in `folder`."""
    spec = yaml.safe_load((PRESETS_DIR / f"{PRESET}.yaml").read_text())
    spec["name"] = f"{PRESET}-{steps}"
    spec["task_settings"] = {**spec["task_settings"], "steps": steps, "score_window": steps // 4}
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300_000, help="steps per run (the preset has 2,000,000)")
    parser.add_argument("--repeats", type=int, default=1, help="old/new pairs, alternated (--first first, then the other)")
    parser.add_argument("--first", choices=("old", "new"), default="old", help="which packing runs first")
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("FADE_STREAM_CACHE_MB", str(max(1, 512 * args.steps // PRESET_STEPS)))
    rows: list[tuple[str, Sample]] = []
    details: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-clock-") as scratch:
        folder = Path(scratch)
        sweep_file = short_sweep(args.steps, folder)
        for repeat in range(args.repeats):
            for name, extra in (OLD, NEW) if (repeat % 2 == 0) == (args.first == "old") else (NEW, OLD):
                store = folder / f"store-{repeat}-{len(rows)}"
                print(f"running {name}, repeat {repeat + 1} ...", file=sys.stderr, flush=True)
                sample = run_sweep([str(sweep_file), "--storage", str(store), "--no-report",
                                    "--num-cpus", str(args.num_cpus), *extra], env)
                rows.append((name, sample))
                runs_per_pack = int(extra[1]) if extra else None
                details += [f"{name}, repeat {repeat + 1}: {sample.wall:.0f} s", *pack_table(sweep_file, store, args.num_cpus, runs_per_pack)]
    old = [s.wall for n, s in rows if n == OLD[0]]
    new = [s.wall for n, s in rows if n == NEW[0]]
    print(f"nonlinear-sensitivity at {args.steps:,} steps on {args.num_cpus} CPUs (machine: {os.cpu_count()} cores), "
          f"FADE_STREAM_CACHE_MB={env['FADE_STREAM_CACHE_MB']}: new/old wall = {min(new) / min(old):.2f} (best of each), "
          f"{sum(new) / sum(old):.2f} (totals)")
    print(f"{'packing':<36} {'wall':>7} {'idle per core':>16} {'sweep CPU':>10} {'sweep CPU %':>11} {'load before/after':>18}")
    for name, s in rows:
        idle = " ".join(f"{i:5.1f}%" for i in s.idle)
        share = 100 * s.sweep_cpu / (args.num_cpus * s.wall)
        print(f"{name:<36} {s.wall:>6.0f}s {idle:>16} {s.sweep_cpu:>9.0f}s {share:>10.0f}% {s.load[0]:>8.1f} / {s.load[1]:<6.1f}")
    print("\nPacks, longest first (modelled by sweeps/plan/costs.py; measured: the runner's wall time in the store):")
    print("\n".join(details))


if __name__ == "__main__":
    main()
