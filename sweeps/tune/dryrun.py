"""`fade-sweep run --dry-run`: the plan (packs, run-steps, resources) and an estimated wall
time from a short in-process calibration of each experiment's engine."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace

import numba
import torch

from sweeps.packs import make_runner
from sweeps.results.status import format_rate
from sweeps.spec import Experiment, Pack, PackResources, Sweep, make_config, plan_packs
from tasks import get_task

CALIBRATION_STEPS = {"linear": 5_000, "neural": 200}
CALIBRATION_RUNS = {"linear": 200, "neural": 50}
STARTUP_SECONDS = 10.0  # Ray start and the first trials' imports, roughly


def calibrate(experiment: Experiment, seeds: tuple[int, ...], dtype: torch.dtype) -> float:
    """Run-steps per second of one CPU thread on a small pack of this experiment."""
    family = get_task(experiment.task).family
    configs = experiment.configs()
    n_configs = max(1, min(len(configs), CALIBRATION_RUNS[family] // len(seeds)))
    steps = CALIBRATION_STEPS[family]
    short = Experiment(experiment.task, replace(experiment.settings, steps=steps, bin=steps), experiment.optimizer, experiment.grid)
    pack = Pack(short, tuple(make_config(short, c) for c in configs[:n_configs]), seeds)
    numba.set_num_threads(1)
    torch.set_num_threads(1)
    for _ in make_runner(Pack(short, pack.configs[:1], seeds[:1]), 100, dtype).run():  # load the compiled kernel
        break
    runner = make_runner(pack, steps, dtype)
    start = time.perf_counter()
    for _ in runner.run():
        pass
    return pack.run_steps / (time.perf_counter() - start)


def describe_plan(sweep: Sweep, slots: int, resources: PackResources, runs_per_pack: int | None, dtype: str) -> str:
    packs = plan_packs(sweep, slots, (), runs_per_pack)
    by_experiment: dict[Experiment, list[Pack]] = defaultdict(list)
    for pack in packs:
        by_experiment[pack.experiment].append(pack)
    lines = [
        f"Plan for sweep {sweep.name}: {len(packs)} packs, {sweep.runs:,} runs, {sweep.run_steps:.3e} run-steps; "
        f"each pack asks for {resources.cpus:g} CPU, {resources.gpus:g} GPU; {slots} packs at once",
        f"{'task':<16} {'settings':<24} {'optimizer':<10} {'packs':>5} {'runs/pack':>10} {'run-steps':>10} {'calibrated':>22} {'CPU time':>9}",
    ]
    cpu_seconds = 0.0
    seeds = sweep.seeds[: min(len(sweep.seeds), 5)]
    for experiment, group in by_experiment.items():
        rate = calibrate(experiment, seeds, getattr(torch, dtype)) * max(resources.cpus, 1)
        steps = sum(p.run_steps for p in group)
        cpu_seconds += steps / rate
        defaults = type(experiment.settings)()
        settings = ",".join(f"{k}={v}" for k, v in vars(experiment.settings).items() if v != getattr(defaults, k)) or "defaults"
        lines.append(
            f"{experiment.task:<16} {settings:<24} {experiment.optimizer:<10} {len(group):>5} "
            f"{max(p.runs for p in group):>10} {steps:>10.2e} {format_rate(rate):>22} {steps / rate:>8.0f}s"
        )
    wall = STARTUP_SECONDS + cpu_seconds / max(1, min(slots, len(packs)))
    lines.append(f"Estimated wall time: {wall:.0f} s ({wall / 60:.1f} min) on {slots} slots, from a short CPU calibration of each experiment.")
    return "\n".join(lines)
