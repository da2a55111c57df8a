"""The sweep file (interface.md) as pydantic models: its keys, their types and bounds, and the checks
across keys, one place that both validates a file and gives its JSON Schema (`fade-sweep schema`).

Every block forbids unknown keys and is strict (a number is an int or a float, never a string or
a boolean). A problem inside one field becomes one line of our own (`problem`: what the field must
be, and the value given); a key a block does not have, lacks, or a value that is no mapping is
phrased by the block (`Block.UNKNOWN`, `MISSING`, `NOT_A_MAPPING`, `NOT_A_LIST`); sweepfile.py turns
pydantic's `ValidationError` into that line, with the path of the key (`variants[1].optimizers.fade.alpha`).

What depends on the task is checked once the task is known (`SweepFile._expand`): its settings (by
the task), its optimizers, a hyperparameter's range for the learner family (linear weight decay is
narrower), the engine, then the size limits, the confirmation seeds and the race. The JSON Schema
states the ranges that hold for every family.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Annotated, Any, ClassVar, Iterator, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, TypeAdapter,
                      ValidationError, WithJsonSchema, WrapValidator, create_model, model_validator)
from pydantic_core import PydanticCustomError

from fade_core.engines import ENGINE_NAMES
from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from sweeps.spec.engines import engine_problem
from sweeps.spec.learners import every_optimizer, hyperparameter_spec, optimizer_hyperparameters, optimizers_for
from sweeps.spec.own import DeclaredLearner
from sweeps.spec.race import DEFAULT_ALPHA, DEFAULT_MIN_SEEDS, DEFAULT_SEEDS_PER_ROUND, Race
from sweeps.spec.resources import PackResources
from sweeps.spec.sweep import Experiment, Sweep, confirmation_seeds, gpus_unusable, short, size_problem
from tasks import TASKS, TaskSpec

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def _fail(problem: str, at: str | None = None) -> PydanticCustomError:
    """Our one-line problem as a pydantic error; `at`: the key it names, when a check across keys finds it."""
    return PydanticCustomError("sweep", "{problem}", {"problem": problem, "at": at})


def problem(template: str) -> WrapValidator:
    """Whatever pydantic finds wrong with a field's value (its type, a bound, every branch of a union) is
    this one line; `{value}` is the value given."""

    def check(value: Any, handler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise _fail(template.replace("{value}", short(value))) from None

    return WrapValidator(check)


class Block(BaseModel):
    """A mapping of the sweep file; the templates say what is wrong with its keys ({keys}: the keys it takes)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    UNKNOWN: ClassVar[str] = "unknown key; allowed keys are {keys}"
    MISSING: ClassVar[str] = "missing {missing} (its keys are {keys})"
    NOT_A_MAPPING: ClassVar[str] = "must be a mapping with keys {keys}"
    NOT_A_LIST: ClassVar[str] = "must be a non-empty list of mappings with keys {keys}"

    @classmethod
    def phrase(cls, template: str, **values: str) -> str:
        return template.format(keys=", ".join(f.alias or n for n, f in cls.model_fields.items()),
                               name=cls.__name__, **values)


def _distinct(values: list) -> list:
    if len(set(values)) != len(values):
        raise ValueError("repeated value")
    return values


MAX_SEED = 2**63 - 1  # a seed is a signed 64-bit integer where it seeds a generator (torch's, a stream's)
Seeds = Annotated[
    Annotated[int, Field(gt=0)] | Annotated[list[Annotated[int, Field(ge=0, le=MAX_SEED)]], AfterValidator(_distinct),
                                            Field(min_length=1, json_schema_extra={"uniqueItems": True})],
    problem("must be a positive int n (seeds 0..n-1) or a list of distinct ints in 0..2**63-1, got {value}"),
    Field(description="an int n (seeds 0..n-1) or a list of distinct seeds"),
]
Task = Annotated[Literal[tuple(TASKS)], problem(f"unknown task {{value}}; choose one of {', '.join(TASKS)}"),
                 Field(description="a task of tasks.md")]
Engine = Annotated[str, problem("must be an engine name, got {value}"),
                   Field(description="the engine its packs run on (default: the engine table's for the task and device)",
                         json_schema_extra={"enum": list(ENGINE_NAMES)})]


def _settings_schema() -> dict:
    """Every task's settings with their types (which apply is the task's to say): for editors."""
    types: dict[str, str] = {}
    tasks: dict[str, list[str]] = {}
    for task in TASKS.values():
        for name, prop in TypeAdapter(task.settings_type).json_schema()["properties"].items():
            types.setdefault(name, prop["type"])
            tasks.setdefault(name, []).append(task.name)
    properties = {name: {"type": kind, "description": f"a setting of {', '.join(tasks[name])}"} for name, kind in types.items()}
    return {"properties": properties, "additionalProperties": False}


TaskSettings = Annotated[dict[str, Any], problem("must be a mapping of setting -> value, got {value}"),
                         Field(description="optional; defaults are the paper's", json_schema_extra=_settings_schema())]


def _number_schema(spec: Hyperparameter) -> dict:
    schema: dict[str, Any] = {"type": "number"}
    for bound, value, is_open in (("minimum", spec.low, spec.low_open), ("maximum", spec.high, spec.high_open)):
        if value not in (float("inf"), float("-inf")):
            schema[f"exclusive{bound.title()}" if is_open else bound] = value
    return schema


def _axis(spec: Hyperparameter) -> Any:
    """A grid axis of one hyperparameter: a number or a non-empty list of distinct numbers, kept as given
    (its range depends on the learner family: checked with the task, `SweepFile._expand`)."""

    def check(value: Any) -> tuple:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise _fail("empty list; give at least one value")
        for item in values:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise _fail(f"{short(item)} is not a number; {spec.name} ({spec.meaning}) must be {spec.allowed()}")
        if len(set(values)) != len(values):
            raise _fail("repeated value in the list")
        return tuple(values)

    number = _number_schema(spec)
    return Annotated[tuple[int | float, ...], BeforeValidator(check), WithJsonSchema({
        "anyOf": [number, {"type": "array", "items": number, "minItems": 1, "uniqueItems": True}],
        "description": f"{spec.meaning}: a value, or a list of values (a grid axis)"})]


class Grid(Block):
    """The grid of one optimizer: each hyperparameter it takes, a value or a list (a grid axis)."""

    UNKNOWN = "{name} does not take {key}; it takes {keys}"
    MISSING = "missing hyperparameter(s) {missing}; {name} takes {keys}"
    NOT_A_MAPPING = "must be a mapping of hyperparameter -> value or list; {name} takes {keys}"


class OptimizerGrids(Block):
    """Optimizer name -> its grid; which optimizers a task takes is checked with the task."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})
    UNKNOWN = "unknown optimizer; " + "; ".join(  # which task it is for is not known yet: name each family's
        f"{family} tasks take {', '.join(names)}" for family, names in
        {task.family: optimizers_for(task) for task in TASKS.values()}.items())
    NOT_A_MAPPING = "must be a non-empty mapping of optimizer name -> {{hyperparameter: value or list}}"
    _given: tuple[str, ...] = PrivateAttr(())

    @model_validator(mode="wrap")
    @classmethod
    def _in_given_order(cls, data: Any, handler) -> OptimizerGrids:
        grids = handler(data)
        if not grids.model_fields_set:
            raise _fail(cls.phrase(cls.NOT_A_MAPPING))
        grids._given = tuple(data)  # a mapping: the handler accepted it
        return grids

    def given(self) -> Iterator[tuple[str, Grid]]:
        """(optimizer, grid) in the file's order: the order of the experiments, their packs and tables."""
        return ((name, getattr(self, name)) for name in self._given)


def _grids(takes: dict[str, tuple[Hyperparameter, ...]]) -> dict[str, Any]:
    """The grid block of each optimizer, by name: its hyperparameters' axes."""
    return {name: (create_model(name, __base__=Grid, __doc__=f"The grid of {name}.",
                                **{h.name: (_axis(h), ...) for h in hyperparameters}),
                   Field(None, json_schema_extra=lambda schema: schema.pop("default")))  # absent, never null
            for name, hyperparameters in takes.items()}


Optimizers = create_model(
    "Optimizers", __base__=OptimizerGrids,
    **_grids({name: tuple(HYPERPARAMETERS[h] for h in takes) for name, takes in every_optimizer().items()}),
)


class Variant(Block):
    """A block that overrides the sweep's task, task settings (merged), optimizers and/or engine."""

    task: Task | None = None
    task_settings: TaskSettings | None = None
    optimizers: Optimizers | None = None
    engine: Engine | None = None


class Resources(Block):
    """What each pack (one Tune trial) asks Ray for."""

    cpus_per_pack: Annotated[float, Field(gt=0), problem("must be a number > 0, got {value}")] = 1.0
    gpus_per_pack: Annotated[float, Field(ge=0), problem("must be a number >= 0, got {value}")] = 0.0


class Confirm(Block):
    """The confirmation stage: each method's selected configuration again on fresh seeds."""

    MISSING = NOT_A_MAPPING = "must be a mapping {{seeds: N}} (N fresh seeds) or {{seeds: [s, ...]}}"
    seeds: Seeds


def _int_at_least(low: int, why: str = "") -> Any:
    return Annotated[int, Field(ge=low), problem(f"must be an integer >= {low}{why}, got {{value}}")] | None


class RaceBlock(Block):
    """Seeds given in rounds (sweeps.spec.race); every key optional."""

    NOT_A_MAPPING = "must be a mapping with keys {keys} (all optional), or true for the defaults"
    min_seeds: _int_at_least(2, " (a paired test needs two seeds)") = None
    max_seeds: _int_at_least(2, " (a paired test needs two seeds)") = None
    alpha: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False),
                     problem("must be a number between 0 and 1 (the test's level, e.g. 0.05), got {value}")] = DEFAULT_ALPHA
    seeds_per_round: _int_at_least(1) = None


def _non_empty(variants: list[Variant]) -> list[Variant]:
    if not variants:
        raise _fail(Variant.phrase(Variant.NOT_A_LIST))
    return variants


def _race_or_boolean(schema: dict) -> None:
    schema["anyOf"].append({"type": "boolean", "description": "true: race with the defaults"})


Reference = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")]  # module:function


class NeuralParts(Block):
    """A neural learner of one's own: the built-in parts around its base step (module:function)."""

    base: Reference
    weight_decay: Literal["none", "coupled", "decoupled"] = "none"
    clip: bool = False
    fade: Literal["none", "head", "all"] = "none"


_LEARNER = "name -> module:function (linear) or {base: module:function, weight_decay, clip, fade} (neural)"
Learners = Annotated[dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], Reference | NeuralParts],
                     problem(f"must be a mapping of learner {_LEARNER}, got {{value}}"),
                     Field(description=f"learners of your own: {_LEARNER}; docs/own-learners.md")]


class SweepFile(Block):
    """A FADE sweep file (interface.md): what to run; `fade-sweep run FILE` runs it."""

    model_config = ConfigDict(title="FADE sweep file")
    OWN: ClassVar[dict[str, DeclaredLearner]] = {}  # the learners of its `learners:` block (`document_model`)
    MISSING = "missing; a sweep file needs it (its keys are {keys})"
    NOT_A_MAPPING = "a sweep file must be a YAML mapping with keys {keys}"
    name: Annotated[str, Field(pattern=NAME_PATTERN, description="results go under <storage>/<name>/"),
                    problem("must be a directory-safe name (letters, digits, . _ -), got {value}")]
    description: Annotated[str, problem("must be text, got {value}")] | None = None
    task: Task | None = None
    task_settings: TaskSettings | None = None
    seeds: Seeds = 1
    optimizers: Optimizers | None = None
    variants: Annotated[list[Variant], AfterValidator(_non_empty),
                        Field(json_schema_extra={"minItems": 1})] | None = None
    resources: Resources | None = None
    confirm: Confirm | None = None
    race: Annotated[RaceBlock | None, BeforeValidator(lambda v: {} if v is True else None if v is False else v),
                    Field(json_schema_extra=_race_or_boolean)] = None
    engine: Engine | None = None
    learners: Learners | None = None
    _sweep: Sweep = PrivateAttr()

    def to_sweep(self, source: str, document: dict) -> Sweep:
        """The validated `Sweep`; `source` names it in messages, `document` is the YAML as read (for the store)."""
        return dataclasses.replace(self._sweep, source=source, document=document)

    @model_validator(mode="after")
    def _expand(self) -> SweepFile:
        """The checks across keys, in the order a reader meets them; the `Sweep` they yield is built here,
        once (`to_sweep` names its source)."""
        blocks = [(f"variants[{i}].", block) for i, block in enumerate(self.variants)] if self.variants else [("", Variant())]
        experiments = [e for prefix, block in blocks for e in self._experiments(prefix, block)]
        if self.resources and (problem := gpus_unusable(experiments, self.resources.gpus_per_pack)):
            raise _fail(f"{problem}; remove gpus_per_pack", "resources.gpus_per_pack")
        keys = [(e.task, e.settings, e.optimizer) for e in experiments]
        if len(set(keys)) != len(keys):
            raise _fail("two variants run the same (task, task_settings, optimizer); merge their grids", "variants")
        count = self.seeds if isinstance(self.seeds, int) else len(self.seeds)
        too_big = size_problem(experiments, count)
        if too_big:
            raise _fail(too_big[1], too_big[0])
        seeds = tuple(range(self.seeds)) if isinstance(self.seeds, int) else tuple(self.seeds)
        try:
            confirm = confirmation_seeds(seeds, self.confirm.seeds) if self.confirm else ()
        except ValueError as err:
            raise _fail(str(err), "confirm.seeds") from None
        resources = self.resources or Resources()
        self._sweep = Sweep(name=self.name, seeds=seeds, experiments=tuple(experiments), source="",
                            resources=PackResources(resources.cpus_per_pack, resources.gpus_per_pack),
                            confirm_seeds=confirm, race=self._race(count), learners=tuple(self.OWN.values()))
        return self

    def _experiments(self, prefix: str, block: Variant) -> Iterator[Experiment]:
        """The experiments of one block (a variant, or the sweep without variants): its keys, else the sweep's."""

        def pick(key: str) -> tuple[Any, str]:  # the value, and the key to name in a message
            return (getattr(block, key), prefix + key) if key in block.model_fields_set else (getattr(self, key), key)

        task_name, at = pick("task")
        if task_name is None:
            raise _fail(f"missing; choose one of {', '.join(TASKS)} (for the sweep, or in every variant)", at)
        task = TASKS[task_name]
        try:
            settings = task.settings({**(self.task_settings or {}), **(block.task_settings or {})})
        except ValueError as err:
            raise _fail(str(err), f"{prefix}task_settings") from None
        grids, grids_at = pick("optimizers")
        if grids is None:
            raise _fail("missing; give optimizer name -> {hyperparameter: value or list} (for the sweep, or in every "
                        "variant)", grids_at)
        engine, at = pick("engine")
        wrong_engine = engine_problem(engine, task.name) if engine is not None else None
        if wrong_engine:
            raise _fail(wrong_engine, at)
        own = {name: d for name, d in self.OWN.items() if d.family == task.family}
        for optimizer, grid in grids.given():
            if optimizer not in optimizers_for(task) and optimizer not in own:
                choices = ", ".join((*optimizers_for(task), *own))
                raise _fail(f"unknown optimizer for task {task.name}; choose one of {choices}",
                            f"{grids_at}.{optimizer}")
            learner = own.get(optimizer)
            takes = learner.hyperparameters if learner else optimizer_hyperparameters(task, optimizer)
            axes = tuple((name, _in_range(task, optimizer, name, getattr(grid, name), f"{grids_at}.{optimizer}.{name}",
                                          learner))
                         for name in takes)
            yield Experiment(task.name, settings, optimizer, axes, engine, learner)

    def _race(self, seed_count: int) -> Race | None:
        """The race of a `race:` block, checked against the sweep's seeds."""
        if self.race is None:
            return None
        if seed_count < 2:
            raise _fail("a race needs at least 2 seeds (`seeds`); a paired test cannot compare one", "race")
        top = self.race.max_seeds or seed_count
        if top > seed_count:
            raise _fail(f"{top} is more than the sweep's {seed_count} seeds; raise `seeds` or lower max_seeds",
                        "race.max_seeds")
        first = self.race.min_seeds or min(DEFAULT_MIN_SEEDS, seed_count)
        if first > top:
            raise _fail(f"{first} is more than max_seeds ({top}); the first round cannot have more seeds than the last",
                        "race.min_seeds")
        return Race(first, self.race.max_seeds, self.race.alpha, self.race.seeds_per_round or DEFAULT_SEEDS_PER_ROUND)


def _in_range(task: TaskSpec, optimizer: str, name: str, values: tuple, at: str,
              learner: DeclaredLearner | None = None) -> tuple[float, ...]:
    """The axis as floats, each value in the hyperparameter's range for the task's learner family (a
    researcher's learner: the range its rule states, any finite value where it states none)."""
    spec, why = (learner.range_of(name), "") if learner else hyperparameter_spec(task, optimizer, name)
    for value in values:
        try:
            accepted = spec.accepts(float(value))
        except OverflowError:  # an int beyond float range
            accepted = False
        if not accepted:
            scope = f" for {task.family} {optimizer} ({why})" if why else ""
            raise _fail(f"{short(value)} is out of range; {name} ({spec.meaning}) must be {spec.allowed()}{scope}", at)
    return tuple(float(v) for v in values)


@functools.cache
def document_model(own: tuple[DeclaredLearner, ...] = ()) -> type[SweepFile]:
    """The sweep file's model with the grids of these learners of the researcher's own beside the built-in
    ones (`SweepFile` itself when there are none)."""
    if not own:
        return SweepFile
    grids = _grids({d.name: tuple(map(d.range_of, d.hyperparameters)) for d in own})
    optimizers = create_model("Optimizers", __base__=Optimizers, **grids)
    variant = create_model("Variant", __base__=Variant, optimizers=(optimizers | None, None))
    variants = Annotated[list[variant], AfterValidator(_non_empty)]
    model = create_model("SweepFile", __base__=SweepFile, optimizers=(optimizers | None, None),
                         variants=(variants | None, None))
    model.OWN = {d.name: d for d in own}
    return model


def sweep_schema() -> dict:
    """The JSON Schema of a sweep file, for editors (`# yaml-language-server: $schema=...`) and validators."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **SweepFile.model_json_schema()}
