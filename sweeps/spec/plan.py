"""Expansion of a sweep into packs: the unit of work of one Tune trial.

A pack is one (task, settings, optimizer), several grid configurations and a set of
seeds, run as one batched program of R = configs x seeds runs. Pack size adapts to the
sweep and the cluster; results never depend on it (pack invariance), so packing is
free to change between a run and its resume.

Planning is stage-aware: the tuning stage covers the sweep's grid on its seeds
(`plan_packs`); the confirmation stage re-runs a few selected configurations on fresh
seeds (`plan_confirmation`). A pack carries its stage, and a confirmation pack's id
includes it, so the two stages never share a pack id.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from fade_core.engines import default_pack_runs
from sweeps.spec.config import Config, digest
from sweeps.spec.sweepfile import Experiment, Sweep
from tasks import get_task

MIN_PACK_RUNS = 100  # below this the batched kernel no longer hides per-chunk overhead
MAX_PACK_RUNS = 2000  # above this a pack's stream and loss buffers outgrow the caches
PACKS_PER_CPU = 6  # enough packs that the CPUs finish together (a short idle tail)
DEFAULT_CHUNK_STEPS = 10_000  # steps a pack advances between two reports to Tune
DEFAULT_CHECKPOINT_EVERY = 10  # chunks between two checkpoints of a pack
TUNING, CONFIRMATION = "tuning", "confirmation"
STAGES = (TUNING, CONFIRMATION)  # the grid on the sweep's seeds; selected configurations on fresh seeds


@dataclass(frozen=True)
class Pack:
    """Configs x seeds of one experiment, run together in one trial."""

    experiment: Experiment
    configs: tuple[Config, ...]
    seeds: tuple[int, ...]
    stage: str = TUNING

    @property
    def pack_id(self) -> str:
        runs = [[c.config_id for c in self.configs], list(self.seeds)]
        return digest(runs if self.stage == TUNING else [*runs, self.stage])  # tuning ids as before stages existed

    def pairs(self) -> list[tuple[str, int]]:
        """(config_id, seed) of every run, configs outer, seeds inner (the row order of its files)."""
        return [(c.config_id, s) for c in self.configs for s in self.seeds]

    @property
    def runs(self) -> int:
        return len(self.configs) * len(self.seeds)

    @property
    def run_steps(self) -> int:
        return self.runs * self.experiment.settings.steps


def pack_runs_target(total_runs: int, cpus: int) -> int:
    """Runs per pack: about PACKS_PER_CPU packs per CPU, within [MIN, MAX]_PACK_RUNS."""
    return max(MIN_PACK_RUNS, min(MAX_PACK_RUNS, math.ceil(total_runs / (PACKS_PER_CPU * max(cpus, 1)))))


def plan_packs(
    sweep: Sweep, cpus: int, done: Iterable[tuple[str, int]] = (), runs_per_pack: int | None = None,
    gpu: bool = False,
) -> list[Pack]:
    """Tuning packs covering every (config, seed) of the sweep not in `done`, largest first.

    Configs are grouped by the seeds they still miss, so a resumed sweep never writes a
    second row for a finished (config, seed). With `gpu`, packs of GPU-capable tasks
    fill the device (the default pack size of fade_core.engines' table); CPU packs are sized to keep `cpus` slots busy.
    """
    work = [(e, list(e.cells)) for e in sweep.experiments]
    return _plan(work, sweep.seeds, TUNING, cpus, done, runs_per_pack, gpu)


def plan_round(
    sweep: Sweep, configs: set[str], seeds: tuple[int, ...], cpus: int, done: Iterable[tuple[str, int]] = (),
    runs_per_pack: int | None = None, gpu: bool = False,
) -> list[Pack]:
    """Tuning packs of one round of a race (sweeps.spec.race): the `configs` still in it on the round's
    `seeds`, but the (config, seed) pairs in `done`. Packed like `plan_packs`, so a pack's runs never depend
    on the round."""
    work = [(e, [c for c in e.cells if c.config_id in configs]) for e in sweep.experiments]
    return _plan([(e, cells) for e, cells in work if cells], seeds, TUNING, cpus, done, runs_per_pack, gpu)


def plan_confirmation(
    selected: list[tuple[Experiment, Config]], seeds: tuple[int, ...], cpus: int, done: Iterable[tuple[str, int]] = (),
    runs_per_pack: int | None = None, gpu: bool = False,
) -> list[Pack]:
    """Confirmation packs: each selected configuration on the fresh `seeds`, but the (config, seed)
    pairs in `done` (confirmation runs already stored)."""
    by_experiment: dict[int, tuple[Experiment, list[Config]]] = {}
    for experiment, config in selected:
        by_experiment.setdefault(id(experiment), (experiment, []))[1].append(config)
    return _plan(list(by_experiment.values()), seeds, CONFIRMATION, cpus, done, runs_per_pack, gpu)


def _plan(
    work: list[tuple[Experiment, list[Config]]], seeds: tuple[int, ...], stage: str, cpus: int,
    done: Iterable[tuple[str, int]], runs_per_pack: int | None, gpu: bool,
) -> list[Pack]:
    finished = set(done)
    pending: list[tuple[Experiment, tuple[int, ...], list[Config]]] = []
    total = 0  # runs of CPU packs
    on_gpu = {e.task for e, _ in work if gpu and get_task(e.task).runs_on_gpu}
    for experiment, configs in work:
        by_seeds: dict[tuple[int, ...], list[Config]] = defaultdict(list)
        for config in configs:
            missing = tuple(s for s in seeds if (config.config_id, s) not in finished)
            if missing:
                by_seeds[missing].append(config)
                total += len(missing) * (experiment.task not in on_gpu)
        pending.extend((experiment, missing, group) for missing, group in by_seeds.items())
    cpu_target = runs_per_pack or pack_runs_target(total, cpus)
    packs = []
    for experiment, missing, configs in pending:
        target = (runs_per_pack or default_pack_runs(experiment.task, "cuda")) if experiment.task in on_gpu else cpu_target
        n_packs = math.ceil(len(configs) * len(missing) / target)
        size = math.ceil(len(configs) / n_packs)
        packs.extend(Pack(experiment, tuple(configs[i : i + size]), missing, stage) for i in range(0, len(configs), size))
    # Longest first: Tune starts trials in order, so the tail is made of short packs.
    return sorted(packs, key=lambda p: -p.run_steps)


def format_rate(run_steps_per_second: float) -> str:
    """12.3K or 4.56M run-steps/s: linear sweeps run millions per second, neural ones thousands."""
    if run_steps_per_second >= 1e6:
        return f"{run_steps_per_second / 1e6:.2f}M run-steps/s"
    return f"{run_steps_per_second / 1e3:.1f}K run-steps/s"
