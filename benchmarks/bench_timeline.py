"""Where one `fade-sweep run` command's wall seconds go: a timeline from the process's start to its exit.

    python benchmarks/bench_timeline.py SWEEP [RUN OPTIONS ...] [--tree DIR]
    e.g. python benchmarks/bench_timeline.py /tmp/race-bench.yaml --num-cpus 2 --race --no-report

The command runs in a fresh subprocess (a fresh store under a temporary folder unless --storage is given), in
this checkout or `--tree DIR` (another checkout: before and after, alternated by hand), with a thin tracer
around public entry points only: `ray.init`, `ray.shutdown` (when called by the command, not Ray's at-exit
hook), `Tuner.fit`, the sweep's own progress callback (each trial's start and end, with its pack's
`compute_seconds`), `SweepWriter.finish` and the closing table. Each event is printed at its second since the
process was launched, then the phases: before Ray, Ray's start, Tune until the first trial starts, the
packs (first trial start to the last trial's end), the closing work, and the exit (the command's return to the
process's end: Ray's shutdown, the interpreter's). `benchmarks/bench_race.py` makes a race-like sweep file
(`sweep_file`). On a shared machine the phases move with the load: compare trees in one sitting.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TRACER = r'''
import importlib.abc, importlib.util, os, sys, time
out = open(os.environ["TIMELINE_FILE"], "a", buffering=1)
def event(name): out.write(f"{time.time():.3f} {name}\n")
event("python started")
def traced(owner, name, label):
    inner = getattr(owner, name)
    def call(*args, **kwargs):
        event(f"{label} begins")
        try:
            return inner(*args, **kwargs)
        finally:
            event(f"{label} ends")
    setattr(owner, name, call)
def trials(module):
    progress = module.SweepProgress
    started, complete = progress.on_trial_start, progress.on_trial_complete
    def on_start(self, iteration, trials, trial, **info):
        event(f"trial starts {trial.config.get('pack_id')}")
        return started(self, iteration, trials, trial, **info)
    def on_complete(self, iteration, trials, trial, **info):
        seconds = (trial.last_result or {}).get("compute_seconds", float("nan"))
        event(f"trial ends {trial.config.get('pack_id')} (pack compute {seconds:.1f} s)")
        return complete(self, iteration, trials, trial, **info)
    progress.on_trial_start, progress.on_trial_complete = on_start, on_complete
# Each module is traced when the command imports it (importing it here would move its import's seconds)
AFTER_IMPORT = {
    "ray": lambda ray: (traced(ray, "init", "ray.init"), traced(ray, "shutdown", "ray.shutdown")),
    "ray.tune": lambda tune: traced(tune.Tuner, "fit", "Tuner.fit"),
    "sweeps.tune.progress": trials,
    "sweeps.store.writer": lambda writer: traced(writer.SweepWriter, "finish", "SweepWriter.finish"),
    "sweeps.cli.running": lambda running: traced(running, "table_text", "closing table"),
}
class Tracing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in AFTER_IMPORT:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        execute = spec.loader.exec_module
        def exec_module(module):
            execute(module)
            AFTER_IMPORT.pop(name)(module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Tracing())
import sweeps.cli as cli
event("sweeps.cli imported")
code = cli.main(sys.argv[1:])
event("command returned")
sys.exit(code)
'''


def timeline(tree: Path, run_args: list[str]) -> list[tuple[float, str]]:
    """(seconds since launch, event), sorted; the command's output lines are not kept (its exit code is)."""
    with tempfile.TemporaryDirectory(prefix="timeline-") as scratch:
        events = Path(scratch) / "events"
        events.touch()
        if "--storage" not in run_args:
            run_args = [*run_args, "--storage", str(Path(scratch) / "store")]
        env = {**os.environ, "PYTHONPATH": str(tree), "TIMELINE_FILE": str(events)}
        env.pop("RAY_ADDRESS", None)
        launched = time.time()
        done = subprocess.run([sys.executable, "-c", TRACER, "run", *run_args], cwd=tree, env=env,
                              capture_output=True, text=True)
        ended = time.time()
        if done.returncode != 0:
            raise SystemExit(f"exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        lines = [line.split(" ", 1) for line in events.read_text().splitlines()]
    return sorted([(float(t) - launched, name) for t, name in lines] + [(ended - launched, "process ended")])


def phases(events: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """The command's wall cut into what it waited for, from the events."""
    first = {name: t for t, name in reversed(events)}
    last = {name: t for t, name in events}
    starts = [t for t, name in events if name.startswith("trial starts")]
    ends = [t for t, name in events if name.startswith("trial ends")]
    marks = [("before Ray (interpreter, imports, sweep, lock)", 0.0, first["ray.init begins"]),
             ("Ray's start (ray.init)", first["ray.init begins"], last["ray.init ends"]),
             ("until the first trial starts (plan, Tune, trial actors)", last["ray.init ends"], min(starts)),
             ("packs (first trial start to last trial end)", min(starts), max(ends)),
             ("closing work (Tune's end, store, tables, report)", max(ends), last["command returned"]),
             ("exit (Ray's shutdown, the interpreter's)", last["command returned"], last["process ended"])]
    return [(name, end - begin) for name, begin, end in marks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose command runs (default: this one)")
    args, run_args = parser.parse_known_args()
    events = timeline(args.tree.resolve(), run_args)
    for t, name in events:
        print(f"{t:7.2f}  {name}")
    total = events[-1][0]
    print(f"\n{args.tree.resolve()}: {total:.1f} s wall (load average {os.getloadavg()[0]:.1f})")
    for name, seconds in phases(events):
        print(f"  {seconds:6.2f} s  {name}")


if __name__ == "__main__":
    main()
