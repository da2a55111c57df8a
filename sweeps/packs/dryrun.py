"""`fade-sweep run --dry-run`: the plan (packs, run-steps, resources) and an estimated wall
time from a short in-process calibration of each experiment's engine.

The estimate is Ray's start, plus the busiest slot's load when the packs are handed out
largest first to the least-loaded slot (as Tune starts them), a pack costing its run-steps
at the calibrated rate plus a fixed start-up (trial start, first kernel load, the write of
its results). `python benchmarks/bench_dryrun.py` compares the estimate with a real run and
prints the measured start-ups. On a 2-core machine shared with other jobs (load 15 to 40)
they were 36 to 52 s for Ray and 10 to 17 s per pack; the constants below are for an idle
machine (a linear-demo run of about 60 s: 10 packs on 2 slots, seconds of engine time).
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from dataclasses import dataclass, replace

import numba
import torch

from fade_core.engines import default_engine
from sweeps.packs import make_runner
from sweeps.spec import Experiment, Pack, PackResources, Sweep, make_config, plan_packs
from sweeps.spec.plan import format_rate
from tasks import get_task

CALIBRATION_STEPS = {"linear": 5_000, "neural": 200}
CALIBRATION_RUNS = {"linear": 200, "neural": 50}
RAY_START_SECONDS = 15.0  # starting the embedded Ray and its dashboard
PACK_START_SECONDS = 8.0  # per pack: trial start, kernel load, results written


def calibrate(experiment: Experiment, seeds: tuple[int, ...], dtype: torch.dtype, device: str = "cpu",
              runs: int | None = None, engine: str | None = None) -> float:
    """Run-steps per second of a short pack of this experiment: on one CPU thread, or on the
    GPU with `runs` runs (a GPU's rate depends on how full the pack is; the first chunk,
    with its CUDA-graph capture, is not timed), by the engine the sweep would run it on."""
    family = get_task(experiment.task).family
    configs = experiment.configs()
    wanted = runs or CALIBRATION_RUNS[family]
    n_configs = max(1, -(-wanted // len(seeds)))
    configs = (configs * (n_configs // len(configs) + 1))[:n_configs]
    steps = CALIBRATION_STEPS[family]
    short = replace(experiment, settings=replace(experiment.settings, steps=steps, bin=steps))
    pack = Pack(short, tuple(make_config(short, c) for c in configs), seeds)
    numba.set_num_threads(1)
    torch.set_num_threads(1)
    runner = make_runner(pack, steps // 4, dtype, device, engine)
    chunks = runner.run()
    next(chunks)  # compiles the kernel / captures the graph
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in chunks:
        pass
    if device == "cuda":
        torch.cuda.synchronize()
    return pack.runs * (steps - steps // 4) / (time.perf_counter() - start)


@dataclass(frozen=True)
class PlanEstimate:
    lines: list[str]  # the plan, one line per experiment, and the estimate
    wall_seconds: float


def busiest_slot(pack_seconds: list[float], slots: int) -> float:
    """Load of the busiest of `slots` when packs go, largest first, to the least-loaded slot."""
    loads = [0.0] * max(1, slots)
    for seconds in sorted(pack_seconds, reverse=True):
        heapq.heapreplace(loads, loads[0] + seconds)
    return max(loads)


def estimate(sweep: Sweep, slots: int, resources: PackResources, runs_per_pack: int | None, dtype: str,
             gpu_slots: int = 0, engine: str | None = None) -> PlanEstimate:
    """The plan and its estimated wall time: CPU packs from a CPU calibration over `slots`,
    GPU packs from a GPU calibration (when this machine has a GPU) over `gpu_slots`."""
    gpu = resources.gpus > 0
    packs = plan_packs(sweep, slots, (), runs_per_pack, gpu=gpu)
    by_experiment: dict[Experiment, list[Pack]] = defaultdict(list)
    for pack in packs:
        by_experiment[pack.experiment].append(pack)
    lines = [
        f"Plan for sweep {sweep.name}: {len(packs)} packs, {sweep.runs:,} runs, {sweep.run_steps:.3e} run-steps; "
        f"each pack asks for {resources.cpus:g} CPU" + (f", neural packs also {resources.gpus:g} GPU" if gpu else "")
        + f"; {slots} CPU packs at once" + (f", {gpu_slots} GPU packs at once" if gpu else ""),
        f"{'task':<16} {'settings':<24} {'optimizer':<10} {'packs':>5} {'runs/pack':>10} {'run-steps':>10} {'calibrated':>22} {'time':>9}",
    ]
    seconds: dict[str, list[float]] = {"CPU": [], "GPU": []}  # per pack, start-up included
    seeds = sweep.seeds[: min(len(sweep.seeds), 5)]
    uncalibrated = False
    for experiment, group in by_experiment.items():
        on_gpu = gpu and get_task(experiment.task).runs_on_gpu
        if on_gpu and torch.cuda.is_available():
            rate, kind = calibrate(experiment, seeds, getattr(torch, dtype), "cuda", max(p.runs for p in group), engine), "GPU"
        else:
            uncalibrated |= on_gpu
            # a GPU pack calibrated on this GPU-less machine: by the CPU's default engine
            cpu_engine = default_engine(experiment.task, "cpu") if on_gpu else engine
            rate, kind = calibrate(experiment, seeds, getattr(torch, dtype), engine=cpu_engine) * max(resources.cpus, 1), "CPU"
        steps = sum(p.run_steps for p in group)
        seconds["GPU" if on_gpu else "CPU"] += [PACK_START_SECONDS + p.run_steps / rate for p in group]
        defaults = type(experiment.settings)()
        settings = ",".join(f"{k}={v}" for k, v in vars(experiment.settings).items() if v != getattr(defaults, k)) or "defaults"
        lines.append(
            f"{experiment.task:<16} {settings:<24} {experiment.optimizer:<10} {len(group):>5} "
            f"{max(p.runs for p in group):>10} {steps:>10.2e} {format_rate(rate) + ' ' + kind:>22} {steps / rate:>8.0f}s"
        )
    wall = RAY_START_SECONDS + max(busiest_slot(seconds["CPU"], slots), busiest_slot(seconds["GPU"], gpu_slots or 1))
    note = " GPU packs were calibrated on the CPU (no GPU on this machine): run the dry run where the GPUs are for their GPU time." if uncalibrated else ""
    lines.append(f"Estimated wall time: {wall:.0f} s ({wall / 60:.1f} min): Ray's start (~{RAY_START_SECONDS:.0f} s), "
                 f"~{PACK_START_SECONDS:.0f} s of start-up per pack, and the packs' time at the calibrated rates "
                 f"over the slots.{note}")
    return PlanEstimate(lines, wall)


def describe_plan(sweep: Sweep, slots: int, resources: PackResources, runs_per_pack: int | None, dtype: str,
                  gpu_slots: int = 0, engine: str | None = None) -> str:
    """The plan and its estimated wall time, as `fade-sweep run --dry-run` prints it."""
    return "\n".join(estimate(sweep, slots, resources, runs_per_pack, dtype, gpu_slots, engine).lines)
