"""A validated sweep as the rest of the service sees it: `Sweep` and its `Experiment`s, immutable and
typed (sweepfile.py builds them from a sweep file; nothing reads the YAML again), and the limits on
one sweep's size, checked from counts alone.

The size limits are checked from the grid and seed counts, before any per-run structure (the seed
tuple, the grid's cells, packs) is built, so a typo such as `seeds: 1000000000` fails at once.
"""

from __future__ import annotations

import itertools
import math
import reprlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sweeps.spec.config import Config, make_config
from sweeps.spec.own import DeclaredLearner
from sweeps.spec.race import Race
from sweeps.spec.resources import PackResources
from tasks import TASKS

# Limits on one sweep, checked before anything is allocated (generous: the study's largest
# preset is about 5,000 runs and 1e10 run-steps). Raise them here for a bigger cluster.
MAX_RUNS = 10_000_000  # (config, seed) pairs: rows of scores/, and per-run state in the planner
MAX_RUN_STEPS = 10**15  # runs x steps: about a year of a large cluster
MAX_CURVE_ROWS = 2_000_000_000  # runs x logged bins: rows of curves/
MAX_RUN_BINS = 10_000_000  # logged bins of one run: a pack holds its runs' binned metrics in memory until it ends
CURVE_ROW_BYTES = 100  # rough size of one curves/ row (keys, step, binned metrics), for messages

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist = 60, 60, 8


def short(value: Any) -> str:
    """A bounded repr for messages (values may be huge or recursive through YAML aliases)."""
    return _REPR.repr(value)


@dataclass(frozen=True)
class Experiment:
    """One (task, task settings, optimizer) with its hyperparameter grid."""

    task: str
    settings: Any  # the task's settings dataclass
    optimizer: str
    grid: tuple[tuple[str, tuple[float, ...]], ...]  # (hyperparameter, values), in the learner's order
    engine: str | None = None  # the sweep file's `engine:` (None: the default for the task and device)
    learner: DeclaredLearner | None = None  # the optimizer is a researcher's learner (`learners:`, sweeps.spec.own)

    @property
    def size(self) -> int:
        """Number of grid cells (configurations), without building them."""
        return math.prod(len(values) for _, values in self.grid)

    @cached_property
    def cells(self) -> tuple[Config, ...]:
        """The grid's configurations with their ids, in `configs()` order; hashed once per experiment."""
        return tuple(make_config(self, values) for values in self.configs())

    @property
    def changed_settings(self) -> str:
        """The task settings that differ from the task's defaults, "k=v,k=v" ("defaults" if none)."""
        defaults = type(self.settings)()
        return ",".join(f"{k}={v}" for k, v in vars(self.settings).items() if v != getattr(defaults, k)) or "defaults"

    @property
    def label(self) -> str:
        """A short name that tells the experiments of one sweep apart: "task[settings] optimizer"."""
        return f"{self.task}[{self.changed_settings}] {self.optimizer}"

    def configs(self) -> list[dict[str, float]]:
        """The grid's cells, in a stable order (Cartesian product of the axes)."""
        names = [n for n, _ in self.grid]
        return [dict(zip(names, values)) for values in itertools.product(*(v for _, v in self.grid))]


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: what to run, nothing about where or how fast."""

    name: str
    seeds: tuple[int, ...]
    experiments: tuple[Experiment, ...]
    source: str  # the file or preset it came from, for messages
    resources: PackResources = PackResources()  # what each trial asks Ray for
    confirm_seeds: tuple[int, ...] = ()  # `confirm: {seeds: ...}`: the fresh seeds of the confirmation stage
    race: Race | None = None  # `race:`: seeds given in rounds (sweeps.spec.race); None: every cell gets every seed
    document: dict = field(compare=False, repr=False, default_factory=dict)  # the YAML as read, for the store
    learners: tuple[DeclaredLearner, ...] = ()  # the researcher's own learners it declares (sweeps.spec.own)

    @property
    def runs(self) -> int:
        return sum(e.size for e in self.experiments) * len(self.seeds)

    @property
    def run_steps(self) -> int:
        return sum(e.size * e.settings.steps for e in self.experiments) * len(self.seeds)

    @cached_property
    def pairs(self) -> frozenset[tuple[str, int]]:
        """(config_id, seed) of every run the sweep asks for: what readers of its store count."""
        return frozenset((c.config_id, s) for e in self.experiments for c in e.cells for s in self.seeds)


def confirmation_seeds(tuning: tuple[int, ...], wanted: int | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """The seeds of a confirmation stage: N fresh ones after the largest tuning seed (so they never
    share a stream with a tuning run), or the list given. ValueError if the list reuses a tuning seed:
    a configuration confirmed on the seeds that selected it would carry the selection bias."""
    if isinstance(wanted, int):
        if wanted > MAX_RUNS:
            raise ValueError(f"{wanted:,} seeds is more than the limit of {MAX_RUNS:,} runs")
        start = max(tuning) + 1
        return tuple(range(start, start + wanted))
    overlap = sorted(set(wanted) & set(tuning))
    if overlap:
        raise ValueError(
            f"seed(s) {', '.join(map(str, overlap[:5]))} are tuning seeds; confirmation seeds must be fresh "
            f"(disjoint from the tuning seeds {short(list(tuning))})"
        )
    return tuple(wanted)


def gpus_unusable(experiments, gpus: float) -> str | None:
    """"T runs on CPUs only" when GPUs are asked for and no task of these experiments can use one (None:
    nothing to refuse); the sweep file's `resources:` and `--gpus-per-pack` each say it with their key."""
    cpu_only = sorted({e.task for e in experiments if not TASKS[e.task].runs_on_gpu})
    if gpus > 0 and len(cpu_only) == len({e.task for e in experiments}):
        return f"{', '.join(cpu_only)} runs on CPUs only"
    return None


def _sci(number: float, digits: int = 1) -> str:
    """4.0e9 rather than 4.0e+09."""
    mantissa, exponent = f"{number:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def size_problem(experiments: list[Experiment], seed_count: int) -> tuple[str, str] | None:
    """(key, problem) if the sweep is beyond MAX_RUNS / MAX_RUN_STEPS / MAX_CURVE_ROWS / MAX_RUN_BINS, from counts
    alone."""
    configs = sum(e.size for e in experiments)
    runs = configs * seed_count
    sizes = f"{seed_count:,} seed{'s' if seed_count != 1 else ''} x {configs:,} config{'s' if configs != 1 else ''}"
    if runs > MAX_RUNS:
        return ("seeds" if seed_count >= configs else "optimizers",
                f"{sizes} = {_sci(runs)} runs, more than the limit of {MAX_RUNS:,} runs "
                "(sweeps.spec.sweep.MAX_RUNS); use fewer seeds or smaller grids")
    run_steps = sum(e.size * e.settings.steps for e in experiments) * seed_count
    if run_steps > MAX_RUN_STEPS:
        return ("task_settings.steps",
                f"{sizes} x steps = {_sci(run_steps)} run-steps, more than the limit of {_sci(MAX_RUN_STEPS, 0)} "
                "run-steps (sweeps.spec.sweep.MAX_RUN_STEPS); use fewer steps, seeds or configs")
    # the bins a run logs are steps / bin: a refusal names both, as either may be the one changed
    per_run = {math.ceil(e.settings.steps / e.settings.bin) for e in experiments}
    bins = max(per_run)
    bins_text = f"steps / bin = {'' if len(per_run) == 1 else 'up to '}{_sci(bins)} bins per run"
    rows = sum(e.size * math.ceil(e.settings.steps / e.settings.bin) for e in experiments) * seed_count
    if rows > MAX_CURVE_ROWS:
        return ("task_settings",
                f"{bins_text} x {sizes} = {_sci(rows)} curve rows (about {rows * CURVE_ROW_BYTES / 1e9:,.0f} GB in the "
                f"store), more than the limit of {MAX_CURVE_ROWS:,} rows (sweeps.spec.sweep.MAX_CURVE_ROWS); "
                "raise bin or lower steps, or use fewer seeds or configs")
    if bins > MAX_RUN_BINS:
        return ("task_settings",
                f"{bins_text}, more than the limit of {MAX_RUN_BINS:,} (sweeps.spec.sweep.MAX_RUN_BINS: a pack keeps its "
                "runs' binned metrics in memory until it ends); raise bin or lower steps")
    return None
