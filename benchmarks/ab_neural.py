"""Two versions of the neural CPU engine on the same packs, alternating: is a change to fade_core/neural slower?

    python benchmarks/ab_neural.py /tmp/main-checkout                      # every learner, both tasks and dtypes
    python benchmarks/ab_neural.py HEAD~3 --learners fade_sgd,adam --tasks nonlinear --dtypes float32

Rates of two builds taken in different commands move by 10-20% on a shared machine; here one
worker process per version (this checkout's, and the other's: a checkout's folder, or a git
revision exported with `git archive`) keeps its compiled kernels, and the driver asks them in
turn, other, this, other, ...: the load falls on both alike. Each request is the pack a sweep
runs (sweeps.packs.make_runner, the "cpu" engine, one numba thread), timed in the worker's CPU
time (time.process_time) after a warm-up call that compiles or loads the kernel; the best of
--repeats of each is kept. `bits` compares a digest of each side's per-bin loss curve and final
state (weights, optimizer state, FADE's gamma and trace): "same" when the two versions give the
same bits on that pack.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEARNERS = ("sgd", "sgd_wd", "adam", "adamw", "sgd_wclip", "adam_wclip", "fade_sgd", "fade_adam", "fade_sgd_all")
TASKS = {"nonlinear": "nonlinear_tracking", "emnist": "emnist_label_permuted"}
SIZES = {"nonlinear": (60, 1000), "emnist": (10, 200)}  # runs, steps: a few CPU-seconds per call
HP = {"alpha": [0.01, 0.001], "lambda": [1e-3], "kappa": [2.0], "theta_lambda": [0.5], "gamma0": [-4.6]}
DATA = ROOT.parent / "shared" / "data" / "emnist"  # the shared folder beside the checkout


def fail(message: str) -> None:
    """Bad input: one line, exit 2."""
    print(f"ab_neural: {message}", file=sys.stderr)
    sys.exit(2)


# -- the worker: one version's fade_core and sweeps, first on its path --------------------
def worker(tree: str) -> None:
    """Answer requests (a JSON line: task, learner, dtype, runs, steps) with a JSON line: rate, digest."""
    sys.path.insert(0, tree)
    import numba
    import torch

    import fade_core

    if Path(fade_core.__file__).resolve().parents[1] != Path(tree).resolve():
        fail(f"fade_core came from {fade_core.__file__}, not {tree}")
    from sweeps.packs import make_runner
    from sweeps.spec import make_config, parse_sweep

    try:
        from sweeps.plan import Pack
    except ImportError:  # a tree from before sweeps.plan (Pack was in sweeps.spec)
        from sweeps.spec import Pack

    numba.set_num_threads(1)
    torch.set_num_threads(1)

    def runner(task: str, learner: str, dtype: str, runs: int, steps: int):
        settings = ({"steps": steps, "score_window": steps // 4, "bin": steps // 4} if task == "nonlinear" else
                    {"steps": steps, "bin": steps // 4, "data_dir": str(DATA), "split": "bymerge", "train": False})
        sweep = parse_sweep({"name": "ab", "task": TASKS[task], "task_settings": settings, "seeds": 2,
                             "optimizers": {learner: {k: v for k, v in HP.items() if k in hyperparameters(learner)}}}, "ab")
        exp = sweep.experiments[0]
        configs = [make_config(exp, c) for c in exp.configs()]
        configs = (configs * runs)[: runs // 2]
        return make_runner(Pack(exp, tuple(configs), (0, 1)), steps, dtype=getattr(torch, dtype), engine="cpu")

    def hyperparameters(learner: str) -> tuple[str, ...]:
        from fade_core.neural import NEURAL_LEARNERS

        return NEURAL_LEARNERS[learner].hyperparameters

    for line in sys.stdin:
        request = json.loads(line)
        for _ in runner(**{**request, "runs": 2, "steps": 8}).run():  # compiles, or loads numba's cache
            pass
        pack = runner(**request)
        start = time.process_time()
        for _ in pack.run():
            pass
        seconds = time.process_time() - start
        digest = hashlib.sha256(pack.loss_curve().tobytes())
        for name, tensor in sorted(pack.state_tensors().items()):
            digest.update(name.encode() + tensor.contiguous().numpy().tobytes())
        print(json.dumps({"rate": request["runs"] // 2 * 2 * request["steps"] / seconds, "digest": digest.hexdigest()}),
              flush=True)


# -- the driver ------------------------------------------------------------------------------
def export(other: str, folder: Path) -> str:
    """A checkout's folder as it is, or a git revision of this repository exported to `folder`."""
    if Path(other).is_dir():
        if not (Path(other) / "fade_core" / "neural").is_dir():
            fail(f"{other} is not a checkout of this project (no fade_core/neural in it)")
        return str(Path(other).resolve())
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", other], capture_output=True, check=False)
    if archive.returncode != 0:
        fail(f"{other!r} is neither a checkout nor a git revision here: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", nargs="?", help="a git revision of this repository, or another checkout's folder")
    parser.add_argument("--learners", default=",".join(LEARNERS), help="comma-separated (default: the nine built in)")
    parser.add_argument("--tasks", default="nonlinear,emnist", help="comma-separated (default: both)")
    parser.add_argument("--dtypes", default="float32,float64", help="comma-separated (default: both)")
    parser.add_argument("--repeats", type=int, default=3, help="calls per side; the best is kept (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="times the default steps per call")
    parser.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    if not args.other:
        fail("give the other version: a git revision or a checkout's folder")
    learners, tasks, dtypes = (getattr(args, k).split(",") for k in ("learners", "tasks", "dtypes"))
    for given, known, what in ((learners, LEARNERS, "learner"), (tasks, TASKS, "task"), (dtypes, ("float32", "float64"), "dtype")):
        unknown = sorted(set(given) - set(known))
        if unknown:
            fail(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    if args.repeats <= 0 or args.scale <= 0:
        fail(f"--repeats and --scale must be positive, got {args.repeats} and {args.scale}")
    with tempfile.TemporaryDirectory() as folder:
        trees = {"other": export(args.other, Path(folder)), "this": str(ROOT)}
        workers = {side: subprocess.Popen([sys.executable, __file__, "--worker", tree], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True) for side, tree in trees.items()}

        def ask(side: str, request: dict) -> dict:
            process = workers[side]
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            answer = process.stdout.readline()
            if not answer:
                fail(f"the {side} worker ({trees[side]}) stopped; its error is above")
            return json.loads(answer)

        print(f"{'task':<10} {'learner':<13} {'dtype':<8} {'other':>10} {'this':>10} {'this/other':>10} {'bits':>5}"
              "   (run-steps per CPU-second, one thread, best of each)", flush=True)
        try:
            for task in tasks:
                runs, steps = SIZES[task]
                for dtype in dtypes:
                    for learner in learners:
                        request = {"task": task, "learner": learner, "dtype": dtype, "runs": runs,
                                   "steps": max(8, int(steps * args.scale))}
                        best, digests = {"other": 0.0, "this": 0.0}, {}
                        for _ in range(args.repeats):
                            for side in ("other", "this"):
                                answer = ask(side, request)
                                best[side] = max(best[side], answer["rate"])
                                digests[side] = answer["digest"]
                        same = "same" if digests["other"] == digests["this"] else "DIFF"
                        print(f"{task:<10} {learner:<13} {dtype:<8} {best['other']:>10,.0f} {best['this']:>10,.0f}"
                              f" {best['this'] / best['other']:>9.3f}x {same:>5}", flush=True)
        finally:
            for process in workers.values():
                process.stdin.close()
                process.wait()


if __name__ == "__main__":
    main()
