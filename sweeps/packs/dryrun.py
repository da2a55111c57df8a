"""`fade-sweep run --dry-run`: the plan (packs, run-steps, resources) and an estimated wall
time from a short in-process calibration of each experiment's engine.

The plan is the one the run makes (`plan_packs` with the cost table of sweeps/spec/costs.py).
The estimate is the command's own start (imports, the store, the closing table), Ray's start,
then the makespan of the packs on the slots (`plan.makespan`: handed out longest first to the
first free slot, as Tune starts them), a pack costing its run-steps at the calibrated rate
plus the overheads of `costs.Overheads` (start-up, per-chunk reports, checkpoints), and on
each slot a worker's start (its imports, kernels loaded from numba's cache) and its draw of the
sweep's streams (each once: `stream_seconds`).
The constants were measured on the 2-core machine when quiet (load average below 1), the
minimum of repeats: `python benchmarks/bench_dryrun.py` prints estimate and real side by side.
On a loaded machine every part is slower: the command line then says so (sweeps.cli.text.load_note); so it
does when the embedded Ray is declared more CPUs than the machine has (`oversubscribed_note`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numba
import torch

from fade_core.engines import default_engine
from sweeps.packs import make_runner
from sweeps.spec import CostModel, Experiment, Pack, PackResources, Sweep, make_config, plan_packs
from sweeps.spec.plan import makespan
from tasks import get_task

CALIBRATION_STEPS = {"linear": 5_000, "neural": 200}
CALIBRATION_RUNS = {"linear": 200, "neural": 50}
COMMAND_SECONDS = 4.0  # the command's imports, the store's checks, Tune's experiment, the closing table
RAY_START_SECONDS = 3.5  # starting the embedded Ray and its dashboard (quiet: 3.4 s in the Done line)
SLOT_START_SECONDS = 2.0  # a slot's first pack: the worker imports torch and numba, loads its kernels
STREAM_CALIBRATION_STEPS = 20_000  # steps of one stream drawn to time a task's streams
UNCACHED_SEED = 2**31 - 1  # a seed no sweep uses, so the draw is not served from the BlockCache


def calibrate(experiment: Experiment, seeds: tuple[int, ...], dtype: torch.dtype, device: str = "cpu",
              runs: int | None = None, engine: str | None = None, clock: Callable[[], float] = time.perf_counter) -> float:
    """Run-steps per second of a short pack of this experiment: on one CPU thread, or on the
    GPU with `runs` runs (a GPU's rate depends on how full the pack is; the first chunk,
    with its CUDA-graph capture, is not timed), by the engine the sweep would run it on.
    `clock`: wall time (what a run will take here, now), or `time.process_time` for the CPU's own
    rate, which other jobs on a loaded machine barely move (benchmarks/bench_learner_costs.py)."""
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
    start = clock()
    for _ in chunks:
        pass
    if device == "cuda":
        torch.cuda.synchronize()
    return pack.runs * (steps - steps // 4) / (clock() - start)


def stream_seconds(experiment: Experiment, seeds: int) -> float:
    """Seconds to draw `seeds` streams of this experiment's task settings, whole length, on one thread.

    A pack draws each of its seeds' streams once for all its configs, and a worker's BlockCache
    keeps them for the packs that follow, so each slot draws each stream about once: a cost per
    slot, not per run (a 1-config pack of 10 linear seeds spends more on its streams than on its
    runs). Timed on STREAM_CALIBRATION_STEPS steps of a seed no sweep uses (nothing cached)."""
    steps = experiment.settings.steps
    n = min(steps, STREAM_CALIBRATION_STEPS)
    stream = get_task(experiment.task).make_stream(experiment.settings, UNCACHED_SEED)
    start = time.perf_counter()
    stream.chunk(0, n)
    return seeds * steps * (time.perf_counter() - start) / n


@dataclass(frozen=True)
class PlanRow:
    """One experiment of the plan: its packs and the rate it was calibrated at."""

    task: str
    settings: str  # the task settings the experiment changes
    optimizer: str
    packs: int
    runs: int
    runs_per_pack: int  # the largest pack's
    run_steps: int
    rate: float  # calibrated run-steps per second of one pack
    device: str  # "CPU" or "GPU": where it was calibrated


@dataclass(frozen=True)
class PlanEstimate:
    """The plan and what its wall time is made of (the command line words it: sweeps.cli.plan)."""

    packs: int
    slots: int  # CPU packs at once
    gpu_slots: int  # GPU packs at once
    rows: list[PlanRow]
    wall_seconds: float
    command_seconds: float
    ray_seconds: float  # Ray's start (0: attaching to a cluster)
    slot_start_seconds: float  # a worker's start per slot
    stream_seconds: float  # the streams a slot draws
    pack_start_seconds: float  # start-up per pack
    gpu_on_cpu: bool  # GPU packs calibrated on this GPU-less machine


def estimate(sweep: Sweep, slots: int, resources: PackResources, runs_per_pack: int | None, dtype: str,
             gpu_slots: int = 0, embedded: bool = True, costs: CostModel | None = None,
             engine: str | None = None, done: Iterable[tuple[str, int]] = ()) -> PlanEstimate:
    """The plan and its estimated wall time: CPU packs from a CPU calibration over `slots`,
    GPU packs from a GPU calibration (when this machine has a GPU) over `gpu_slots`.
    `embedded`: the run starts its own Ray (no --address); `costs`: the run's cost model (its
    chunk and checkpoint settings), which plans the packs as the run will; `done`: the (config, seed) runs a
    resumed store holds, which the run skips."""
    gpu = resources.gpus > 0
    table = costs or CostModel(threads=max(1.0, resources.cpus))
    packs = plan_packs(sweep, slots, done, runs_per_pack, gpu=gpu, gpu_slots=max(1, gpu_slots), costs=table)
    by_experiment: dict[Experiment, list[Pack]] = defaultdict(list)
    for pack in packs:
        by_experiment[pack.experiment].append(pack)
    rows = []
    seconds: dict[str, list[float]] = {"cpu": [], "cuda": []}  # per pack, overheads included
    streams: dict[str, dict[tuple[str, str], float]] = {"cpu": {}, "cuda": {}}  # per slot: each stream drawn once
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
        measured = table.calibrated({experiment: rate})  # a GPU pack calibrated on the CPU: at the CPU's rate (noted)
        pool = "cuda" if on_gpu else "cpu"
        seconds[pool] += [measured.pack_seconds(experiment, p.runs) for p in group]
        drawn = (experiment.task, repr(experiment.settings))
        if drawn not in streams[pool]:
            streams[pool][drawn] = stream_seconds(experiment, len(sweep.seeds))
        rows.append(PlanRow(experiment.task, experiment.changed_settings, experiment.optimizer, len(group),
                            sum(p.runs for p in group), max(p.runs for p in group), sum(p.run_steps for p in group), rate, kind))
    ray = RAY_START_SECONDS if embedded else 0.0
    spans = [makespan(seconds[d], n) + SLOT_START_SECONDS + sum(streams[d].values())
             for d, n in (("cpu", slots), ("cuda", gpu_slots or 1)) if seconds[d]]
    wall = COMMAND_SECONDS + ray + max(spans, default=0.0)
    return PlanEstimate(len(packs), slots, gpu_slots, rows, wall, COMMAND_SECONDS, ray, SLOT_START_SECONDS,
                        max((sum(v.values()) for v in streams.values()), default=0.0), table.overheads.pack_start,
                        uncalibrated)

