"""The sweep file of interface.md: load, validate, expand into experiments.

Everything is checked before anything runs; each problem is one line naming the file,
the key and what is allowed (`SweepError`). A loaded `Sweep` is immutable and typed:
the rest of the service never reads the YAML again.

A sweep may ask for a confirmation stage, `confirm: {seeds: N}` (or a list of seeds): after
the grid, each method's selected configuration runs again on N fresh seeds, disjoint from
the tuning seeds (by default the N integers after the largest tuning seed).

A sweep may race its seeds, `race: {min_seeds: 3, max_seeds: 10, alpha: 0.05, seeds_per_round: 1}`
(sweeps.spec.race): configurations worse than their method's best with confidence stop getting seeds.

A sweep (or one of its variants) may name the engine its packs run on, `engine: NAME` (a
name of fade_core.engines that runs the task; default: the engine table's default for the
task and device). The engine is not part of a configuration's identity: engines compute the
same rule, within the tolerances their tests state.

Beyond interface.md, a sweep may hold `variants`: a list of blocks that each override
`task`, `task_settings` and/or `optimizers` (e.g. both noise levels of a preset, each
with its own selected configurations).

Reading (YAML 1.2 floats, no duplicate keys, UTF-8 only) is `yamlfile.py`'s.

The sweep's size is checked against `MAX_RUNS`, `MAX_RUN_STEPS` and `MAX_CURVE_ROWS`
from the grid and seed counts alone, before any per-run structure (the seed tuple, the
grid's cells, packs) is built, so a typo such as `seeds: 1000000000` fails at once.
"""

from __future__ import annotations

import itertools
import math
import re
import reprlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from fade_core.engines import engine_problem
from sweeps.spec.config import Config, make_config
from sweeps.spec.learners import hyperparameter_spec, optimizer_hyperparameters, optimizers_for
from sweeps.spec.race import Race, parse_race
from sweeps.spec.resources import PackResources
from sweeps.spec.yamlfile import SweepError, read_yaml, yaml_data
from tasks import TASKS, get_task


TOP_LEVEL_KEYS = ("name", "description", "task", "task_settings", "seeds", "optimizers", "variants", "resources", "confirm",
                  "race", "engine")
CONFIRM_KEYS = ("seeds",)
RESOURCE_KEYS = ("cpus_per_pack", "gpus_per_pack")
VARIANT_KEYS = ("task", "task_settings", "optimizers", "engine")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# Limits on one sweep, checked before anything is allocated (generous: the study's largest
# preset is about 5,000 runs and 1e10 run-steps). Raise them here for a bigger cluster.
MAX_RUNS = 10_000_000  # (config, seed) pairs: rows of scores/, and per-run state in the planner
MAX_RUN_STEPS = 10**15  # runs x steps: about a year of a large cluster
MAX_CURVE_ROWS = 2_000_000_000  # runs x logged bins: rows of curves/
CURVE_ROW_BYTES = 100  # rough size of one curves/ row (keys, step, binned metrics), for messages


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist = 60, 60, 8


def _short(value: Any) -> str:
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


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; raises `SweepError` with a one-line message."""
    path = Path(path)
    if path.is_dir():
        raise SweepError(f"{path}: a directory, not a sweep file (give a YAML file or a preset name: `fade-sweep presets`)")
    if not path.is_file():
        raise SweepError(f"{path}: no such sweep file (give a YAML file or a preset name: `fade-sweep presets`)")
    return parse_sweep(read_yaml(path), str(path))


def parse_sweep_text(text: str, source: str) -> Sweep:
    """A sweep from YAML text (a store's sweep.yaml), read by the same rules as a sweep file."""
    return parse_sweep(yaml_data(text, source), source)


def parse_sweep(document: Any, source: str) -> Sweep:
    """Validate an already-parsed sweep document (a mapping)."""

    def fail(key: str, problem: str) -> SweepError:
        return SweepError(f"{source}: {key}: {problem}")

    if not isinstance(document, dict):
        raise SweepError(f"{source}: a sweep file must be a YAML mapping with keys {', '.join(TOP_LEVEL_KEYS)}")
    unknown = [k for k in document if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise fail(unknown[0], f"unknown key; allowed keys are {', '.join(TOP_LEVEL_KEYS)}")
    name = document.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail("name", f"must be a directory-safe name (letters, digits, . _ -), got {_short(name)}")
    seed_count = _count_seeds(document.get("seeds", 1), fail)

    blocks = document.get("variants")
    if blocks is None:
        blocks = [{}]
    elif not isinstance(blocks, list) or not blocks or not all(isinstance(b, dict) for b in blocks):
        raise fail("variants", "must be a non-empty list of mappings with keys " + ", ".join(VARIANT_KEYS))
    experiments: list[Experiment] = []
    for i, block in enumerate(blocks):
        prefix = f"variants[{i}]." if "variants" in document else ""
        extra = [k for k in block if k not in VARIANT_KEYS]
        if extra:
            raise fail(f"{prefix}{extra[0]}", f"unknown key; a variant may set {', '.join(VARIANT_KEYS)}")
        experiments.extend(_parse_block(document, block, prefix, fail))
    resources = _parse_resources(document.get("resources") or {}, fail)
    cpu_only = cpu_only_tasks(experiments)
    if resources.gpus > 0 and len(cpu_only) == len({e.task for e in experiments}):
        raise fail("resources.gpus_per_pack", f"{', '.join(cpu_only)} runs on CPUs only; remove gpus_per_pack")
    keys = [(e.task, e.settings, e.optimizer) for e in experiments]
    if len(set(keys)) != len(keys):
        raise fail("variants", "two variants run the same (task, task_settings, optimizer); merge their grids")
    _check_size(experiments, seed_count, fail)
    seeds = _make_seeds(document.get("seeds", 1))
    confirm = _parse_confirm(document.get("confirm"), seeds, fail)
    race = parse_race(document.get("race"), seed_count, fail)
    return Sweep(name=name, seeds=seeds, experiments=tuple(experiments), source=source, resources=resources,
                 confirm_seeds=confirm, race=race, document=document)


def _parse_confirm(value: Any, tuning: tuple[int, ...], fail) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or set(value) != set(CONFIRM_KEYS):
        raise fail("confirm", "must be a mapping {seeds: N} (N fresh seeds) or {seeds: [s, ...]}")
    _count_seeds(value["seeds"], lambda key, problem: fail(f"confirm.{key}", problem))
    try:
        return confirmation_seeds(tuning, value["seeds"])
    except ValueError as err:
        raise fail("confirm.seeds", str(err)) from None


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
            f"(disjoint from the tuning seeds {_short(list(tuning))})"
        )
    return tuple(wanted)


def cpu_only_tasks(experiments) -> list[str]:
    """Tasks of these experiments whose engine cannot use a GPU."""
    return sorted({e.task for e in experiments if not TASKS[e.task].runs_on_gpu})


def _parse_resources(value: Any, fail) -> PackResources:
    if not isinstance(value, dict) or any(k not in RESOURCE_KEYS for k in value):
        raise fail("resources", f"must be a mapping with keys {', '.join(RESOURCE_KEYS)}")
    cpus, gpus = value.get("cpus_per_pack", 1), value.get("gpus_per_pack", 0)
    for key, number, low in (("cpus_per_pack", cpus, 0.0), ("gpus_per_pack", gpus, -1e-12)):
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not number > low:
            raise fail(f"resources.{key}", f"must be a number {'> 0' if key == 'cpus_per_pack' else '>= 0'}, got {number!r}")
    return PackResources(float(cpus), float(gpus))


def _count_seeds(value: Any, fail) -> int:
    """How many seeds `seeds` names; checks its form without building the seeds."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
        and len(set(value)) == len(value)
    ):
        return len(value)
    raise fail("seeds", f"must be a positive int n (seeds 0..n-1) or a list of distinct ints >= 0, got {_short(value)}")


def _make_seeds(value: int | list[int]) -> tuple[int, ...]:
    """The seeds, once `_count_seeds` and `_check_size` have accepted them."""
    return tuple(range(value)) if isinstance(value, int) else tuple(value)


def _sci(number: float, digits: int = 1) -> str:
    """4.0e9 rather than 4.0e+09."""
    mantissa, exponent = f"{number:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _check_size(experiments: list[Experiment], seed_count: int, fail) -> None:
    """Refuse a sweep beyond MAX_RUNS / MAX_RUN_STEPS / MAX_CURVE_ROWS, from counts alone."""
    configs = sum(e.size for e in experiments)
    runs = configs * seed_count
    sizes = f"{seed_count:,} seed{'s' if seed_count != 1 else ''} x {configs:,} config{'s' if configs != 1 else ''}"
    if runs > MAX_RUNS:
        key = "seeds" if seed_count >= configs else "optimizers"
        raise fail(
            key,
            f"{sizes} = {_sci(runs)} runs, more than the limit of {MAX_RUNS:,} runs "
            "(sweeps.spec.sweepfile.MAX_RUNS); use fewer seeds or smaller grids",
        )
    run_steps = sum(e.size * e.settings.steps for e in experiments) * seed_count
    if run_steps > MAX_RUN_STEPS:
        raise fail(
            "task_settings.steps",
            f"{sizes} x steps = {_sci(run_steps)} run-steps, more than the limit of {_sci(MAX_RUN_STEPS, 0)} run-steps "
            "(sweeps.spec.sweepfile.MAX_RUN_STEPS); use fewer steps, seeds or configs",
        )
    rows = sum(e.size * math.ceil(e.settings.steps / e.settings.bin) for e in experiments) * seed_count
    if rows > MAX_CURVE_ROWS:
        raise fail(
            "task_settings.bin",
            f"{sizes} x bins = {_sci(rows)} curve rows (about {rows * CURVE_ROW_BYTES / 1e9:,.0f} GB in the store), "
            f"more than the limit of {MAX_CURVE_ROWS:,} rows (sweeps.spec.sweepfile.MAX_CURVE_ROWS); "
            "use a larger bin, or fewer steps, seeds or configs",
        )


def _parse_block(document: dict, block: dict, prefix: str, fail) -> Iterator[Experiment]:
    task_name = block.get("task", document.get("task"))
    if task_name not in TASKS:
        raise fail(f"{prefix}task" if "task" in block else "task", f"unknown task {task_name!r}; choose one of {', '.join(TASKS)}")
    task = TASKS[task_name]
    settings_values = dict(document.get("task_settings") or {})
    if not isinstance(document.get("task_settings") or {}, dict) or not isinstance(block.get("task_settings") or {}, dict):
        raise fail(f"{prefix}task_settings", "must be a mapping of setting -> value")
    settings_values.update(block.get("task_settings") or {})
    try:
        settings = task.settings(settings_values)
    except ValueError as err:
        raise fail(f"{prefix}task_settings", str(err)) from None

    optimizers = block.get("optimizers", document.get("optimizers"))
    opt_key = f"{prefix}optimizers" if "optimizers" in block else "optimizers"
    if not isinstance(optimizers, dict) or not optimizers:
        raise fail(opt_key, "must be a non-empty mapping of optimizer name -> {hyperparameter: value or list}")
    engine = block.get("engine", document.get("engine"))
    if engine is not None:
        problem = engine_problem(engine, task.name) if isinstance(engine, str) else f"must be an engine name, got {_short(engine)}"
        if problem is not None:
            raise fail(f"{prefix}engine" if "engine" in block else "engine", problem)
    allowed = optimizers_for(task)
    for optimizer, grid in optimizers.items():
        key = f"{opt_key}.{optimizer}"
        if optimizer not in allowed:
            raise fail(key, f"unknown optimizer for task {task.name}; choose one of {', '.join(allowed)}")
        yield Experiment(task.name, settings, optimizer, _parse_grid(task, optimizer, grid, key, fail), engine)


def _parse_grid(task, optimizer: str, grid: Any, key: str, fail) -> tuple[tuple[str, tuple[float, ...]], ...]:
    takes = optimizer_hyperparameters(task, optimizer)
    if not isinstance(grid, dict):
        raise fail(key, f"must be a mapping of hyperparameter -> value or list; {optimizer} takes {', '.join(takes)}")
    for name in grid:
        if name not in takes:
            raise fail(f"{key}.{name}", f"{optimizer} does not take {name}; it takes {', '.join(takes)}")
    missing = [n for n in takes if n not in grid]
    if missing:
        raise fail(key, f"missing hyperparameter(s) {', '.join(missing)}; {optimizer} takes {', '.join(takes)}")
    axes = []
    for name in takes:
        values = grid[name] if isinstance(grid[name], list) else [grid[name]]
        spec, why = hyperparameter_spec(task, optimizer, name)
        if not values:
            raise fail(f"{key}.{name}", "empty list; give at least one value")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise fail(f"{key}.{name}", f"{_short(value)} is not a number; {name} ({spec.meaning}) must be {spec.allowed()}")
            if not _accepts(spec, value):
                scope = f" for {task.family} {optimizer} ({why})" if why else ""
                raise fail(f"{key}.{name}", f"{_short(value)} is out of range; {name} ({spec.meaning}) must be {spec.allowed()}{scope}")
        if len(set(values)) != len(values):
            raise fail(f"{key}.{name}", "repeated value in the list")
        axes.append((name, tuple(float(v) for v in values)))
    return tuple(axes)


def _accepts(spec, value: int | float) -> bool:
    try:
        return spec.accepts(float(value))
    except OverflowError:  # an int beyond float range
        return False


def check_task_data(sweep: Sweep) -> None:
    """Fail before anything starts if a task's dataset is missing or unreadable."""
    for experiment in sweep.experiments:
        check = get_task(experiment.task).check_data
        if check is not None:
            try:
                check(experiment.settings)
            except ValueError as err:
                raise SweepError(f"{sweep.source}: task_settings: {err}") from None
