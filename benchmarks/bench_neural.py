"""Throughput of the neural engine, a full pack vs the one-run-per-process PyTorch loop, in one run.

    python benchmarks/bench_neural.py                               # both tasks, fade_sgd, CPU
    python benchmarks/bench_neural.py --task emnist --optimizer fade_adam --runs 100
    python benchmarks/bench_neural.py --device cuda --runs 400      # a full EMNIST fade_sgd pack on a GPU

The pack is timed through the engine a sweep uses (streams, training, per-bin metrics),
after a short warm-up (compilation, data loading). The naive loop is the plain
single-run PyTorch reference of tests/test_neural_learners.py (nn.Sequential, autograd,
torch.optim, FADE written out) in float32 on one thread: what one process per run gets.
Figures are run-steps per second (one run advanced by one step = one run-step). With
`--clock cpu` both rates are per CPU-second (time.process_time, all of the pack's threads
together), for a machine shared with other work: the pack's figure is then what each core
it used delivered, and speed-up >= N means the pack beats N one-run processes per core. On a
GPU the rate is also given as a fraction of the HBM bandwidth: at batch size 1 per run,
every run-step must at least read and write the run's own state once (weights, Adam
moments, FADE's gamma and trace), so `state bytes x 2 x rate / peak` is the share of the
memory system's limit the pack reaches.

On a CPU (`--clock cpu`) it states a roofline for one core instead: the bytes and flops
one run-step needs with the kernel's passes over the weights (each state array read and
written once, the forward product of every layer after the first a second read), where
a run's state lives (L2 if it fits, else L3), and the two roofs measured here in the same
process (a read-modify-write stream over a buffer of the state's size; independent
float32 FMAs), so the fraction does not depend on an assumed clock or on the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fade_core import get_neural_learner  # noqa: E402
from sweeps.packs import make_runner  # noqa: E402
from sweeps.plan import Pack
from sweeps.spec import make_config, parse_sweep  # noqa: E402
from tests.test_neural_learners import reference  # noqa: E402  (the plain per-run loop)

SHARED_EMNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "emnist"
GRID = {  # the published grids' shapes: alpha x theta_lambda x gamma0 (fade), or alpha (x lambda)
    "fade": {"alpha": [0.01, 0.005, 0.001, 0.0005], "theta_lambda": [0, 0.1, 0.5, 1], "gamma0": [-2.3, -4.6, -6.9, -9.2, -11.5]},
    "sgd": {"alpha": [0.05, 0.01, 0.005, 0.001, 0.0005]},
    "adam": {"alpha": [0.005, 0.001, 0.0005, 0.0001, 0.00005]},
}
EXTRA = {"lambda": [1e-4, 1e-3, 1e-2, 1e-1], "kappa": [1.0, 2.0, 4.0]}  # sgd_wd/adamw, *_wclip


def experiment(task: str, optimizer: str, steps: int, data_dir: str):
    settings = ({"steps": steps, "score_window": steps // 4, "bin": steps // 4} if task == "nonlinear"
                else {"steps": steps, "bin": steps // 4, "data_dir": data_dir, "split": "bymerge", "train": False})
    grid = dict(GRID["fade" if optimizer.startswith("fade") else "adam" if "adam" in optimizer else "sgd"])
    grid.update({k: v for k, v in EXTRA.items() if k in get_neural_learner(optimizer).hyperparameters})
    name = {"nonlinear": "nonlinear_tracking", "emnist": "emnist_label_permuted"}[task]
    sweep = parse_sweep({"name": "bench", "task": name, "task_settings": settings, "seeds": 5,
                         "optimizers": {optimizer: grid}}, "bench")
    return sweep.experiments[0]


CLOCK = time.perf_counter  # time.process_time with --clock cpu


def pack_rate(task: str, optimizer: str, runs: int, steps: int, data_dir: str, device: str, threads: int,
              engine: str | None = None) -> tuple[float, int]:
    exp = experiment(task, optimizer, steps, data_dir)
    seeds = tuple(range(5))
    configs = exp.configs()
    configs = (configs * (runs // (len(configs) * len(seeds)) + 1))[: max(1, runs // len(seeds))]
    pack = Pack(exp, tuple(make_config(exp, c) for c in configs), seeds)
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    warm = make_runner(Pack(experiment(task, optimizer, 8, data_dir), pack.configs[:1], seeds[:2]), 8, device=device, engine=engine)
    for _ in warm.run():
        pass
    if device == "cuda":
        # Steady state: the first quarter (its own CUDA-graph capture, compilation) is not timed.
        runner = make_runner(pack, steps // 4, device=device, engine=engine)
        chunks = runner.run()
        next(chunks)
        torch.cuda.synchronize()
        start = CLOCK()
        for _ in chunks:
            pass
        torch.cuda.synchronize()
        return pack.runs * (steps - steps // 4) / (CLOCK() - start), pack.runs
    runner = make_runner(pack, steps, device=device, engine=engine)
    start = CLOCK()
    for _ in runner.run():
        pass
    return pack.run_steps / (CLOCK() - start), pack.runs


PEAK_GBS = {"H100": 3350, "H200": 4800}  # HBM bandwidth, GB/s, by device name


def state_bytes(task: str, optimizer: str, dtype_bytes: int = 4) -> int:
    """Bytes of one run's state: parameters, Adam's two moments, FADE's gamma and trace."""
    from tasks import get_task

    arch = get_task(experiment(task, optimizer, 8, "").task).architecture
    starts = arch.offsets()
    learner = get_neural_learner(optimizer)
    fade = {"none": 0, "head": starts[-1] - starts[-3], "all": starts[-1]}[learner.fade]
    return dtype_bytes * (starts[-1] * (1 + 2 * (learner.base == "adam")) + 2 * fade)


def peak_gbs(device: str) -> float | None:
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_GBS.items() if k in name), None)


L2_BYTES = 1 << 20  # per core (AMD EPYC of the issue)
# Flops per parameter and step beyond the forward and backward products, by base step; FADE's
# rule adds its own (clamped gamma, exp as 7 FMAs and a rescale, trace and decay: ~26).
UPDATE_FLOPS = {"sgd": 2, "adam": 12}
FADE_FLOPS = 26


def roofline_model(task: str, optimizer: str, dtype_bytes: int = 4) -> tuple[float, float, str]:
    """(bytes, flops) one run-step needs with the CPU kernel's passes over the weights, and
    where the run's state lives."""
    from tasks import get_task

    sizes = get_task(experiment(task, optimizer, 8, "").task).architecture.sizes
    per_layer = [fan_in * fan_out + fan_out for fan_in, fan_out in zip(sizes[:-1], sizes[1:])]
    total, later = sum(per_layer), sum(per_layer[1:])
    learner = get_neural_learner(optimizer)
    covered = {"none": 0, "head": per_layer[-1], "all": total}[learner.fade]
    state = state_bytes(task, optimizer, dtype_bytes)
    traffic = 2 * state + dtype_bytes * later  # read + write every state array once; the second forward read
    flops = 2 * total + 2 * later + UPDATE_FLOPS[learner.base] * total + FADE_FLOPS * covered
    return traffic, flops, "L2" if state <= L2_BYTES else "L3"


@numba.njit(fastmath=True, cache=True)
def _stream(buffer, repeats):
    """Read-modify-write `buffer` `repeats` times: an SGD pass over a state of that size."""
    scale, shift = np.float32(0.9999999), np.float32(1e-9)
    for _ in range(repeats):
        for i in range(buffer.shape[0]):
            buffer[i] = buffer[i] * scale + shift


def measured_roofs(state_bytes_: int) -> tuple[float, float]:
    """(bytes/s, flops/s) one core reaches here, per CLOCK second: a stream over a buffer of
    the run's state size, and float32 matrix products of cache-resident 128 x 128 blocks
    (BLAS: near the FMA units' peak)."""
    numba.set_num_threads(1)
    torch.set_num_threads(1)
    buffer = np.ones(max(1024, state_bytes_ // 4), dtype=np.float32)
    repeats = max(4, int(2e8 // buffer.nbytes))
    _stream(buffer, 1)  # compile
    start = CLOCK()
    _stream(buffer, repeats)
    bandwidth = 2 * buffer.nbytes * repeats / (CLOCK() - start)
    a, b, c = (torch.ones(128, 128) for _ in range(3))
    start = CLOCK()
    for _ in range(400):
        torch.mm(a, b, out=c)
    return bandwidth, 2 * 128**3 * 400 / (CLOCK() - start)


def roofline(task: str, optimizer: str, rate: float) -> str:
    """The roofline lines for one CPU row: per run-step needs, the bound, the fraction reached."""
    traffic, flops, level = roofline_model(task, optimizer)
    bandwidth, peak = measured_roofs(state_bytes(task, optimizer))
    by_memory, by_flops = bandwidth / traffic, peak / flops
    bound, limit = ("memory", by_memory) if by_memory < by_flops else ("FLOPs", by_flops)
    note = " (Adam: 2 IEEE divisions + 1 sqrt per parameter, not in the FMA roof)" if "adam" in optimizer else ""
    return (f"  roofline {task} {optimizer}: {traffic / 1e3:,.0f} kB and {flops / 1e3:,.0f} kflop per run-step; state in {level};"
            f" measured {bandwidth / 1e9:,.1f} GB/s ({level}-sized stream), {peak / 1e9:,.1f} GFLOP/s per core ->"
            f" {by_memory:,.0f} run-steps/s by memory, {by_flops:,.0f} by FLOPs; bound: {bound}, reached"
            f" {rate / limit:.0%}{note}")


def naive_rate(task: str, optimizer: str, steps: int, data_dir: str) -> float:
    exp = experiment(task, optimizer, steps, data_dir)
    from tasks import get_task

    spec = get_task(exp.task)
    stream = spec.make_stream(exp.settings, 0)
    source, target = stream.chunk(0, steps)
    x = stream.inputs(source, torch.device("cpu"), torch.float32)
    hp = exp.configs()[0]
    torch.set_num_threads(1)
    reference(optimizer, hp, spec.architecture, 0, x[:20], target[:20], dtype=torch.float32)  # warm-up: lazy inits
    start = CLOCK()
    reference(optimizer, hp, spec.architecture, 0, x, target, dtype=torch.float32)
    return steps / (CLOCK() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=["nonlinear", "emnist", "both"], default="both")
    parser.add_argument("--optimizer", default="fade_sgd")
    parser.add_argument("--runs", type=int, help="runs per pack (default: 240 nonlinear, 100 EMNIST on CPU)")
    parser.add_argument("--steps", type=int, help="steps timed (default: 2,000 nonlinear, 1,000 EMNIST)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engine", help="the engine (fade_core.engines; default: the task's default on the device)")
    parser.add_argument("--data-dir", default=os.environ.get("FADE_EMNIST_DIR", str(SHARED_EMNIST)))
    parser.add_argument("--peak-gbs", type=float, help="HBM bandwidth for the fraction column (default: by GPU name)")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive per-run loop")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="rates per wall-clock second, or per CPU-second (process_time: for a loaded machine)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    peak = args.peak_gbs or peak_gbs(args.device)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{args.threads} CPU threads"
    print(f"device {args.device} ({where}), torch {torch.__version__}, rates per {args.clock}-clock second")
    print(f"{'task':<10} {'optimizer':<13} {'pack runs':>9} {'pack run-steps/s':>17} {'naive steps/s':>14} {'speed-up':>9}"
          f" {'state MB/run':>12} {'HBM share':>9}")
    for task in (["nonlinear", "emnist"] if args.task == "both" else [args.task]):
        runs = args.runs or (240 if task == "nonlinear" else 100)
        steps = args.steps or (2000 if task == "nonlinear" else 1000)
        rate, packed = pack_rate(task, args.optimizer, runs, steps, args.data_dir, args.device, args.threads,
                                     args.engine)
        naive = float("nan") if args.no_naive else naive_rate(task, args.optimizer, 300, args.data_dir)
        mb = state_bytes(task, args.optimizer) / 1e6
        share = f"{2 * mb * 1e6 * rate / (peak * 1e9):.1%}" if peak else "-"
        print(f"{task:<10} {args.optimizer:<13} {packed:>9} {rate:>17,.0f} {naive:>14,.0f} {rate / naive:>8.1f}x"
              f" {mb:>12.2f} {share:>9}")
        if args.device == "cpu" and args.clock == "cpu":
            print(roofline(task, args.optimizer, rate))


if __name__ == "__main__":
    main()
