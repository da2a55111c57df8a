"""Where a real `fade-sweep run` spends its seconds, from timestamps the run leaves anyway (nothing extra in the
code): the command's wall clock (this script), the Done line (Ray's start), status.json (when Tune's experiment
started and ended) and Tune's experiment state (per trial: when the driver started it, when its last result came,
its trainable's own seconds, the runner's `compute_seconds`, the worker's pid). Beside each part, the dry run's
figure for it, so the cost model (sweeps/plan/costs.py `Overheads`, sweeps/packs/dryrun.py) can be checked part by
part, not only in total.

    python benchmarks/bench_seconds.py [--num-cpus 2] [--race] [linear-demo nonlinear-demo ...]

Parts (seconds): before Ray (imports, the store's checks) + Ray's start + Tune's start (experiment created to
its first trial started) + the packs (first trial start to last result) + Tune's end (its last result to the
experiment's end) + after (the Done line, the closing table, Ray's shutdown at exit).
Within the packs, per worker: its first trial's wait for the actor (imports of the trainable, torch, numba), and
per pack the trainable's seconds outside the runner's loop (store, runner build, kernels, write) and the gaps
between a worker's packs (Tune's scheduling). On a shared machine the load average is printed beside each run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"Done: .* in ([\d.]+) s wall \(Ray start ([\d.]+) s")


def _command(args: list[str], lines: dict[str, float] | None = None) -> tuple[str, float, float]:
    """Run `fade-sweep ARGS`: (its stdout, when it started, when it ended); `lines`: the time each line of stdout came,
    by its first word."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    began, cpu = time.time(), _children_cpu()
    process = subprocess.Popen([sys.executable, "-m", "sweeps.cli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    out = []
    for line in process.stdout:
        out.append(line)
        if lines is not None and line.split():
            lines.setdefault(line.split()[0], time.time())
    err = process.stderr.read()
    if process.wait() != 0:
        raise SystemExit(f"{args}: exit {process.returncode}\n{''.join(out)[-3000:]}{err[-3000:]}")
    if lines is not None:
        lines["<exit>"], lines["<cpu>"] = time.time(), _children_cpu() - cpu
    return "".join(out), began, time.time()


def _children_cpu() -> float:
    """CPU seconds of the processes this one started and waited for, and theirs (a command's Ray included, as far as
    its processes are reaped): a lower bound on a quiet run's wall time times its cores, which the load moves less."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _trials(results: Path) -> list[dict]:
    trials = []
    for state in glob.glob(str(results / "tune-*" / "experiment_state-*.json")):
        for _, runtime in json.load(open(state))["trial_data"]:
            runtime = json.loads(runtime) if isinstance(runtime, str) else runtime
            result = runtime["last_result"]
            trials.append({"start": runtime["start_time"], "end": runtime["last_result_time"],
                           "total": result.get("time_total_s", 0.0), "compute": result.get("compute_seconds", 0.0),
                           "pid": result.get("pid"), "run_steps": result.get("run_steps_done", 0)})
    return sorted(trials, key=lambda t: t["start"])


def _dry(sweep: str, cpus: list[str], extra: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as storage:
        out, began, ended = _command(["run", sweep, "--dry-run", "--storage", storage, *cpus, *extra])
    parts = {"estimate": float(re.search(r"Estimated wall time: (\d+) s", out).group(1)), "dry run wall": ended - began}
    best = re.search(r"best case ~?(\d+) s", out)
    if best:
        parts["race best"] = float(best.group(1))
    return parts


def where(sweep: str, cpus: list[str], extra: list[str]) -> None:
    dry = _dry(sweep, cpus, extra)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as storage:
        lines: dict[str, float] = {}
        out, began, ended = _command(["run", sweep, "--storage", storage, "--no-report", *cpus, *extra], lines)
        results = next(p for p in Path(storage).iterdir() if p.is_dir())
        status = json.loads((results / "status.json").read_text())
        trials = _trials(results)
    wall, ray = (float(x) for x in DONE.search(out).groups())
    first, last = trials[0]["start"], max(t["end"] for t in trials)
    workers: dict[int, list[dict]] = {}
    for t in trials:
        workers.setdefault(t["pid"], []).append(t)
    waits = [ts[0]["end"] - ts[0]["total"] - ts[0]["start"] for ts in workers.values()]  # trial started -> trainable ran
    outside = [t["total"] - t["compute"] for t in trials]  # the trainable's seconds beyond the runner's loop
    gaps = [b["start"] - a["end"] for ts in workers.values() for a, b in zip(ts, ts[1:])]
    busy = sum(t["compute"] for t in trials)
    print(f"\n{sweep} {' '.join(extra)}: {len(trials)} packs on {len(workers)} workers, wall {ended - began:.1f} s "
          f"(Done line {wall:.1f} s); load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"  before Ray (imports, store)  {status['started_at'] - began - ray:6.1f} s   (Ray's start {ray:.1f} s)")
    print(f"  Tune's start to first trial  {first - status['started_at']:6.1f} s")
    print(f"  packs: first start to last   {last - first:6.1f} s   (runner loops {busy:.1f} s summed)")
    print(f"    a worker's first trial waits for its actor: {', '.join(f'{w:.1f}' for w in waits)} s")
    print(f"    per pack outside the runner (store, build, kernels, write, reports): median {median(outside):.2f} s, "
          f"max {max(outside):.2f} s, sum {sum(outside):.1f} s")
    if gaps:
        print(f"    gaps between a worker's packs: median {median(gaps):.2f} s, sum {sum(gaps):.1f} s")
    print(f"  last result to Tune's end    {status['updated_at'] - last:6.1f} s   (the Done line's packs end there)")
    print(f"  Tune's end to the Done line  {lines['Done:'] - status['updated_at']:6.1f} s   (the store tidied, reopened)")
    print(f"  the closing table            {lines['Score:'] - lines['Results:']:6.1f} s")
    print(f"  the table to the exit        {ended - lines['Score:']:6.1f} s   (Ray shut down)")
    print(f"  CPU seconds of the command and what it started: {lines['<cpu>']:.1f} s")
    print(f"  dry run: {', '.join(f'{k} {v:.1f} s' for k, v in dry.items())}; real/estimate "
          f"{(ended - began) / dry['estimate']:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="*", default=["linear-demo", "nonlinear-demo"])
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--race", action="store_true")
    args = parser.parse_args()
    for sweep in args.sweeps:
        where(sweep, ["--num-cpus", str(args.num_cpus)], ["--race"] if args.race else [])


if __name__ == "__main__":
    main()
