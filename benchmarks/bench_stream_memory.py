"""Peak memory of `run --dry-run` and of one pack's first chunk against the stream's length (issue 42).

Each measurement is a fresh process; its peak resident set (ru_maxrss of the child) is printed per task and
length, the lengths alternated round by round so a shared machine's drift falls on all of them alike. The
logged bins are held at 100 per run (`bin = steps / 100`): a run's curves are its output and grow with its
bins, which the sweep file chooses; what must not grow with `steps` is everything else.

    python benchmarks/bench_stream_memory.py                 # linear and nonlinear, 1e6 .. 1e12, 2 rounds
    python benchmarks/bench_stream_memory.py --what chunk --tasks linear_tracking --rounds 3 --lengths 1e6 1e8
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (10**6, 10**8, 10**10, 10**12)
OPTIMIZER = {"linear_tracking": {"sgd": {"alpha": [0.1, 0.05, 0.01, 0.02, 0.03]}},
             "nonlinear_tracking": {"sgd": {"alpha": [0.01, 0.02]}}}

FIRST_CHUNK = """
import sys, torch
from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import make_config
from sweeps.spec.sweepfile import load_sweep
(experiment,) = load_sweep(sys.argv[1]).experiments
pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), (0, 1))
next(make_runner(pack, 10_000, torch.float32).run())
"""


def sweep_file(folder: Path, task: str, steps: int) -> Path:
    """A sweep of `task` at `steps` steps, 100 bins per run (the nonlinear score window: the last 10)."""
    settings: dict = {"steps": steps, "bin": steps // 100}
    if task == "nonlinear_tracking":
        settings["score_window"] = steps // 10
    path = folder / f"{task}-{steps}.yaml"
    path.write_text(yaml.safe_dump({"name": f"mem-{task}-{steps}", "task": task, "task_settings": settings,
                                    "seeds": 2, "optimizers": OPTIMIZER[task]}))
    return path


MEASURE = """
import resource, subprocess, sys
result = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
if result.returncode:
    sys.exit(result.stderr[-2000:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""  # a process of its own per command, so its children's peak is that command's alone


def peak_mib(command: list[str]) -> float:
    """Peak resident MiB of `command` run to its end in a fresh process (a failure stops the benchmark)."""
    result = subprocess.run([sys.executable, "-c", MEASURE, *command], cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {result.stderr}")
    return float(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=["dry-run", "chunk", "both"], default="both")
    parser.add_argument("--tasks", nargs="+", default=list(OPTIMIZER))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lengths", type=float, nargs="+", default=LENGTHS, help="stream lengths (steps)")
    args = parser.parse_args()
    whats = ["dry-run", "chunk"] if args.what == "both" else [args.what]
    peaks: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for what in whats:
                for task in args.tasks:
                    for steps in map(int, args.lengths):
                        path = sweep_file(Path(folder), task, steps)
                        command = ([sys.executable, "-c", FIRST_CHUNK, str(path)] if what == "chunk" else
                                   [sys.executable, "-m", "sweeps.cli", "run", str(path), "--dry-run", "--num-cpus", "1",
                                    "--storage", str(Path(folder) / "results")])
                        peaks.setdefault((what, task, steps), []).append(peak_mib(command))
    for (what, task, steps), values in peaks.items():
        print(f"{what:8} {task:19} steps {steps:.0e}: peak RSS {min(values):7.1f} MiB (rounds: "
              + ", ".join(f"{v:.1f}" for v in values) + ")")


if __name__ == "__main__":
    main()
