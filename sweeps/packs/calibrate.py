"""`fade-sweep run --dry-run --calibrate`: each experiment's engine timed in process (torch and numba load
here, and kernels compile or load from numba's cache): the measured rates replace the cost table's
(sweeps.plan.costs) in the dry run's estimate (dryrun.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numba
import torch

from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import Experiment, make_config
from tasks import BLOCK, get_task

CALIBRATION_STEPS = {"linear": 5_000, "neural": 200}
CALIBRATION_RUNS = {"linear": 200, "neural": 50}
STREAM_CALIBRATION_STEPS = 20_000  # steps of one stream drawn to time a task's streams
UNCACHED_SEED = 2**31 - 1  # a seed no sweep uses, (drawn afresh, never from a cache)


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

    A pack draws each of its seeds' streams once for all its configs, and the segment cache keeps
    them for the packs that follow (tasks/stream_cache.py), so each stream is drawn about once: a
    cost per stream, not per run (a 1-config pack of 10 linear seeds spends more on its streams than
    on its runs). Timed on the blocks of STREAM_CALIBRATION_STEPS steps of a seed no sweep uses."""
    steps = experiment.settings.steps
    blocks = -(-min(steps, STREAM_CALIBRATION_STEPS) // BLOCK)
    stream = get_task(experiment.task).make_stream(experiment.settings, UNCACHED_SEED)
    start = time.perf_counter()
    stream.draw_blocks(0, blocks)
    return seeds * steps * (time.perf_counter() - start) / (blocks * BLOCK)
