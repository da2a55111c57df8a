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

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from sweeps.spec.config import Config, digest
from sweeps.plan.costs import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK_STEPS, CostModel
from sweeps.spec.engines import default_pack_runs
from sweeps.spec.sweepfile import Experiment, Sweep
from tasks import get_task

PACKS_PER_SLOT = (1, 2, 3, 4, 6, 8, 12, 16)  # the pack sizes tried: about this many packs per slot
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


def plan_packs(
    sweep: Sweep, cpus: int, done: Iterable[tuple[str, int]] = (), runs_per_pack: int | None = None,
    gpu: bool = False, gpu_slots: int = 1, costs: CostModel | None = None,
) -> list[Pack]:
    """Tuning packs covering every (config, seed) of the sweep not in `done`, longest first.

    Configs are grouped by the seeds they still miss, so a resumed sweep never writes a
    second row for a finished (config, seed). Packs are sized by their cost (`costs`, see
    costs.py) so that the `cpus` CPU slots (and, with `gpu`, the `gpu_slots` GPU slots for
    the packs of GPU-capable tasks) finish together: see `balanced_packs`. `runs_per_pack`
    fixes the size instead.
    """
    work = [(e, list(e.cells)) for e in sweep.experiments]
    return _plan(work, sweep.seeds, TUNING, _Slots(cpus, gpu, gpu_slots), done, runs_per_pack, costs)


def plan_round(
    sweep: Sweep, configs: set[str], seeds: tuple[int, ...], cpus: int, done: Iterable[tuple[str, int]] = (),
    runs_per_pack: int | None = None, gpu: bool = False, gpu_slots: int = 1, costs: CostModel | None = None,
) -> list[Pack]:
    """Tuning packs of one round of a race (sweeps.spec.race): the `configs` still in it on the round's
    `seeds`, but the (config, seed) pairs in `done`. Packed like `plan_packs`, so a pack's runs never depend
    on the round."""
    work = [(e, [c for c in e.cells if c.config_id in configs]) for e in sweep.experiments]
    return _plan([(e, cells) for e, cells in work if cells], seeds, TUNING, _Slots(cpus, gpu, gpu_slots), done,
                 runs_per_pack, costs)


def plan_confirmation(
    selected: list[tuple[Experiment, Config]], seeds: tuple[int, ...], cpus: int, done: Iterable[tuple[str, int]] = (),
    runs_per_pack: int | None = None, gpu: bool = False, gpu_slots: int = 1, costs: CostModel | None = None,
) -> list[Pack]:
    """Confirmation packs: each selected configuration on the fresh `seeds`, but the (config, seed)
    pairs in `done` (confirmation runs already stored)."""
    by_experiment: dict[int, tuple[Experiment, list[Config]]] = {}
    for experiment, config in selected:
        by_experiment.setdefault(id(experiment), (experiment, []))[1].append(config)
    return _plan(list(by_experiment.values()), seeds, CONFIRMATION, _Slots(cpus, gpu, gpu_slots), done, runs_per_pack, costs)


@dataclass(frozen=True)
class _Slots:
    cpus: int  # CPU packs at once
    gpu: bool  # whether GPU-capable tasks run on the GPUs
    gpus: int  # GPU packs at once

    def device(self, experiment: Experiment) -> str:
        return "cuda" if self.gpu and get_task(experiment.task).runs_on_gpu else "cpu"


@dataclass(frozen=True)
class _Group:
    """Configs of one experiment that miss the same seeds: packs are cut from it."""

    experiment: Experiment
    seeds: tuple[int, ...]
    configs: tuple[Config, ...]
    device: str

    @property
    def runs(self) -> int:
        return len(self.configs) * len(self.seeds)


def _plan(work: list[tuple[Experiment, list[Config]]], seeds: tuple[int, ...], stage: str, slots: _Slots,
          done: Iterable[tuple[str, int]], runs_per_pack: int | None, costs: CostModel | None) -> list[Pack]:
    finished = set(done)
    groups: list[_Group] = []
    for experiment, configs in work:
        by_seeds: dict[tuple[int, ...], list[Config]] = defaultdict(list)
        for config in configs:
            missing = tuple(s for s in seeds if (config.config_id, s) not in finished)
            if missing:
                by_seeds[missing].append(config)
        device = slots.device(experiment)
        groups.extend(_Group(experiment, missing, tuple(group), device) for missing, group in by_seeds.items())
    costs = costs or CostModel()
    packs = []
    for device, count in (("cpu", slots.cpus), ("cuda", slots.gpus)):
        mine = [g for g in groups if g.device == device]
        if not mine:
            continue
        if runs_per_pack:
            packs += [p for g in mine for p in _fixed(g, runs_per_pack, stage)]
        else:
            packs += balanced_packs(mine, max(1, count), costs, stage)
    # Longest first: Tune starts trials in the order given, so the tail is made of short packs.
    return sorted(packs, key=lambda p: -pack_seconds(p, costs, slots.device(p.experiment)))


def pack_seconds(pack: Pack, costs: CostModel, device: str = "cpu") -> float:
    """A pack's modelled wall seconds on one slot."""
    return costs.pack_seconds(pack.experiment, pack.runs, device, len(pack.seeds))


def balanced_packs(groups: list[_Group], slots: int, costs: CostModel, stage: str = TUNING) -> list[Pack]:
    """The groups cut into packs so that `slots` slots, taking the packs longest first (as Tune
    does), end soonest: the modelled makespan (`makespan`) of each cut tried is compared.

    The cuts tried make about k packs per slot for k in PACKS_PER_SLOT (each group gets packs in
    proportion to its cost, seeds apart first, then configs), capped at the engine table's pack size for the task and device (sweeps/spec/engines.py),
    and never fewer packs than slots where the runs allow. More, smaller packs balance better
    but pay more start-ups; on a GPU a small pack also wastes the device (costs.GpuRate)."""
    device = groups[0].device
    work = {g: costs.pack_seconds(g.experiment, g.runs, device, len(g.seeds)) for g in groups}
    total = sum(work.values())
    runs = sum(g.runs for g in groups)
    best: tuple[float, int, list[Pack]] | None = None
    for per_slot in PACKS_PER_SLOT:
        target = total / (slots * per_slot)
        for spread in (False, True):  # spread: a group cheaper than the target over the slots, so it is no tail
            cut = [p for g in groups
                   for p in _split(g, _pieces(g, work[g], target, slots if spread and work[g] < target else 1), stage)]
            if len(cut) < min(slots, runs) and per_slot != PACKS_PER_SLOT[-1]:
                continue  # too few packs to give every slot one
            span = makespan([pack_seconds(p, costs, device) for p in cut], slots)
            if best is None or span < best[0] * 0.99:  # a cut with more packs must be clearly better
                best = (span, len(cut), cut)
    return best[2]


def _pieces(group: _Group, seconds: float, target: float, at_least: int = 1) -> int:
    """Packs to cut a group into: its cost over the target and at least `at_least`, within [1, its runs], no
    pack over the engine table's pack size for its task and device (`default_pack_runs`)."""
    largest = default_pack_runs(group.experiment.task, group.device)
    return min(group.runs, max(at_least, math.ceil(seconds / target - 1e-9), math.ceil(group.runs / largest)))


def _split(group: _Group, pieces: int, stage: str) -> list[Pack]:
    """About `pieces` packs of near-equal size, the cut whose largest pack is smallest: seeds apart
    first, or configs apart first when that is more even (5 seeds do not cut evenly in 4). A pack
    draws each of its seeds' streams once for all its configs: cutting seeds apart draws no stream
    twice, cutting configs apart draws their seeds' streams once per pack (a nonlinear stream costs
    about what a fade_adam run of the same steps does; a worker's segment cache keeps what fits)."""
    configs, seeds = group.configs, group.seeds
    by_seeds = min(len(seeds), pieces), None
    by_configs = None, min(len(configs), pieces)
    cuts = []
    for seed_parts, config_parts in (by_seeds, by_configs):
        seed_parts = seed_parts or min(len(seeds), math.ceil(pieces / config_parts))
        config_parts = config_parts or min(len(configs), math.ceil(pieces / seed_parts))
        cuts.append([Pack(group.experiment, c, s, stage) for c in _even(configs, config_parts) for s in _even(seeds, seed_parts)])
    return min(cuts, key=lambda cut: max(p.runs for p in cut))  # ties: seeds apart


def _fixed(group: _Group, runs_per_pack: int, stage: str) -> list[Pack]:
    """Packs of at most `runs_per_pack` runs (`--runs-per-pack`): whole configs with all their seeds
    where a config's seeds fit, else one config and as many seeds as fit."""
    seeds_per_pack = min(len(group.seeds), runs_per_pack)
    configs_per_pack = max(1, runs_per_pack // seeds_per_pack)
    return [Pack(group.experiment, group.configs[i : i + configs_per_pack], group.seeds[j : j + seeds_per_pack], stage)
            for i in range(0, len(group.configs), configs_per_pack) for j in range(0, len(group.seeds), seeds_per_pack)]


def _even(items: tuple, parts: int) -> list[tuple]:
    """`items` in `parts` consecutive runs whose sizes differ by at most one."""
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


def makespan(pack_seconds: list[float], slots: int) -> float:
    """When the last of `slots` slots ends, the packs handed out longest first to the first free slot
    (Tune starts trials in order as slots free up)."""
    loads = [0.0] * max(1, slots)
    for seconds in sorted(pack_seconds, reverse=True):
        heapq.heapreplace(loads, loads[0] + seconds)
    return max(loads)

