"""Two versions of the linear kernel in one process: is a change to fade_core/linear faster?

    python benchmarks/ab_linear.py HEAD~3                       # this checkout against a revision
    python benchmarks/ab_linear.py /path/to/other/checkout --learners sgd,fade --dtypes float32

Rates of two kernels taken in different runs move by 10-20% on a shared machine (other
work, the clock); taken in one process, alternating, the noise hits both alike. The other
version's fade_core is exported (`git archive` of the revision, or copied from the
checkout) to a temporary folder as the package `fade_other`, imported beside this
checkout's fade_core, and both drivers advance the same pack: 200 runs of 10 seeds (`--seeds`),
d = 20, float32 normal data, per-step losses kept. Repeats alternate other, this,
other, ...; the best CPU-time rate of each is kept (one numba thread). The last column
is the largest relative difference of the runs' loss sums (runs that diverge in both count
as equal; nan: one diverged and the other did not): 0 when the change keeps the numbers
to the bit.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fade_core.linear import LINEAR_LEARNERS, kernel  # noqa: E402

RUNS, SEEDS, D = 200, 10, 20
HP = {"alpha": 0.01, "lambda": 0.01, "theta_alpha": 0.01, "beta0": -4.6, "theta_lambda": 0.01, "gamma0": -2.3,
      "theta": 0.01}


def fail(message: str) -> None:
    """Bad input: one line, exit 2."""
    print(f"ab_linear: {message}", file=sys.stderr)
    sys.exit(2)


def export(other: str, folder: Path) -> None:
    """The other version's fade_core as the package fade_other in `folder`."""
    target = folder / "fade_other"
    if Path(other).is_dir():
        if not (Path(other) / "fade_core" / "linear").is_dir():
            fail(f"{other} is not a checkout of this project (no fade_core/linear in it)")
        shutil.copytree(Path(other) / "fade_core", target, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        command = ["git", "-C", str(ROOT), "archive", other, "fade_core"]
        archive = subprocess.run(command, capture_output=True, check=False)
        if archive.returncode != 0:
            fail(f"{other!r} is neither a checkout nor a git revision here: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        (folder / "fade_core").rename(target)
    for source in target.rglob("*.py"):
        source.write_text(source.read_text().replace("fade_core", "fade_other"))


def schedule(module, learner, slots: np.ndarray, x: np.ndarray, dtype: np.dtype) -> tuple:
    """module.schedule's blocks, with the lane width of versions that choose one per learner."""
    if hasattr(module, "lanes_for"):
        return module.schedule(slots, x, module.lanes_for(learner, dtype))
    return module.schedule(slots, x)


def rate(module, name: str, dtype: np.dtype, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(run-steps per CPU second, loss sums) of one call of `module`'s driver for learner `name`
    (the learner of `module`'s own registry: a version may compile only its own)."""
    learner = importlib.import_module(module.__name__.rpartition(".")[0] + ".rules").LINEAR_LEARNERS[name]
    slots = np.arange(RUNS) % x.shape[1]
    p = np.array([[HP[n] for n in learner.hyperparameters]] * RUNS, dtype)
    lane_run, lanes_used, _, tile = schedule(module, learner, slots, x, dtype)
    state = [np.zeros((RUNS, D), dtype) for _ in range(5)]  # w, beta, h, gamma, g
    for row, name in ((1, "beta0"), (3, "gamma0")):  # as init_state: beta = beta0, gamma = gamma0
        if name in learner.hyperparameters:
            state[row][:] = p[:, learner.hyperparameters.index(name), None]
    losses, sums = np.zeros((RUNS, x.shape[0]), dtype), np.zeros(RUNS)
    run = module.driver(learner, dtype)
    start = time.process_time()
    run(p, dtype.type(-np.inf), dtype.type(np.inf), slots, lane_run, lanes_used, 0, 1, tile, x, y, *state, losses, sums)
    return RUNS * x.shape[0] / (time.process_time() - start), sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", help="a git revision of this repository, or another checkout's folder")
    parser.add_argument("--learners", default=",".join(LINEAR_LEARNERS), help="comma-separated (default: all seven)")
    parser.add_argument("--dtypes", default="float32,float64", help="comma-separated (default: both)")
    parser.add_argument("--steps", type=int, default=2_000, help="steps per call (default 2,000)")
    parser.add_argument("--seeds", type=int, default=SEEDS,
                        help=f"streams the runs read (default {SEEDS}; {RUNS}: one per run)")
    parser.add_argument("--repeats", type=int, default=12, help="calls per side; the best is kept (default 12)")
    args = parser.parse_args()
    unknown = sorted(set(args.learners.split(",")) - set(LINEAR_LEARNERS))
    if unknown:
        fail(f"unknown learner {', '.join(unknown)}; choose from {', '.join(LINEAR_LEARNERS)}")
    if min(args.steps, args.repeats, args.seeds) <= 0:
        fail(f"--steps, --repeats and --seeds must be positive, got {args.steps}, {args.repeats} and {args.seeds}")
    if not set(args.dtypes.split(",")) <= {"float32", "float64"}:
        fail(f"--dtypes {args.dtypes!r}: the linear kernels run float32 and float64")
    numba.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        export(args.other, Path(folder))
        sys.path.insert(0, folder)
        other = importlib.import_module("fade_other.linear.kernel")
        print(f"{'learner':<10} {'dtype':<8} {'other':>8} {'this':>8} {'this/other':>10} {'max rel diff':>13}")
        for dtype in map(np.dtype, args.dtypes.split(",")):
            rng = np.random.default_rng(0)
            x = rng.standard_normal((args.steps, args.seeds, D)).astype(dtype)
            y = rng.standard_normal((args.steps, args.seeds)).astype(dtype)
            for name in args.learners.split(","):
                best = {}
                for _ in range(args.repeats):
                    for side, module in (("other", other), ("this", kernel)):
                        got, sums = rate(module, name, dtype, x, y)
                        best[side] = max(best.get(side, (0.0,))[0], got), sums
                (a, sums_a), (b, sums_b) = best["other"], best["this"]
                with np.errstate(invalid="ignore"):  # runs that diverge in both: NaN alike, no difference
                    relative = np.abs(sums_b - sums_a) / np.abs(sums_a)
                    diff = np.max(np.where(np.isnan(sums_a) & np.isnan(sums_b), 0.0, relative))
                print(f"{name:<10} {dtype.name:<8} {a / 1e6:>7.1f}M {b / 1e6:>7.1f}M {b / a:>9.2f}x {diff:>13.1e}",
                      flush=True)


if __name__ == "__main__":
    main()
