"""Learners of the researcher's own: the sweep file's `learners:` block, and what a store records of them.

    learners:
      fade_leaky: my_rules:fade_leaky                  # linear: name -> module:function (a rule)
      rmsprop_fade: {base: my_rules:rmsprop, fade: head}   # neural: the built-in parts around a base step

The module is a `module.py` beside the sweep file, else an importable module; an installed
package may also offer learners under the entry-point group `fade_sweep.learners`, for any optimizer
name a sweep uses that it does not declare: entry name -> module:function of a linear rule, or of a
dict that declares a neural learner as the block does ({"base": "pkg.parts:rmsprop", "fade": "head"}). A declared
learner need not be used. Only `load_declared` and `load_rule` import user code: the run and
confirm commands, before Ray, and the trainables. A store keeps a `DeclaredLearner` as plain
data (name, family, hyperparameters and their ranges, the rule's source text and sha256) in
store.json, which is all its readers (`table`, `status`, `verify`, `report`) need.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from fade_core.linear import LINEAR_LEARNERS, LinearLearner
from fade_core.linear.own import RuleError, own_learner, rule_source, source_digest
from fade_core.neural.own import own_learner as own_neural_learner
from fade_core.neural import NEURAL_LEARNERS, NeuralLearner
from fade_core.neural.rules import FADE_MODES, WEIGHT_DECAY_MODES
from tasks import TASKS

ENTRY_POINTS = "fade_sweep.learners"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REFERENCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
# The columns of the store's files and the tables' frames that are not hyperparameters: a
# hyperparameter of a researcher's rule may not take one of these names (tests/test_own_learners.py
# checks that it covers the store's and the tables' columns).
RESERVED_COLUMNS = frozenset({
    "task", "optimizer", "config_id", "seed", "score", "diverged", "steps", "wall_seconds", "stage", "step", "mse",
    "race_status", "eliminated_round", "mean", "std", "sem", "median", "iqm", "min", "max", "ci_low", "ci_high",
    "stat", "stat_value", "seeds", "diverged_seeds", "any_diverged", "outliers", "outlier_seeds", "reference",
    "status", "settings", "hyperparameter", "interactions", "rank", "method",
    *(f.name for task in TASKS.values() for f in dataclasses.fields(task.settings_type)),
})


class LearnerError(ValueError):
    """A declared learner that cannot be used; one line naming it and the fix."""


@dataclass(frozen=True)
class DeclaredLearner:
    """A researcher's learner as data: what validation, the store and its readers need, no code."""

    name: str
    family: str  # "linear" or "neural"
    reference: str  # module:function (of a neural learner: its base step)
    module_file: str  # the module's file beside the sweep file (absolute), "" for an importable module
    hyperparameters: tuple[str, ...]  # in the rule's order: the columns of its (R, P) matrix
    own: tuple[Hyperparameter, ...]  # those not in HYPERPARAMETERS, with their ranges
    source: str  # the rule's source text, recorded (never executed from the store)
    sha256: str
    module_sha256: str = ""  # of module_file's bytes: a module file is imported again only if it is that file
    parts: tuple[tuple[str, Any], ...] = ()  # a neural learner's built-in parts (weight_decay, clip, fade)

    def range_of(self, name: str) -> Hyperparameter:
        return next((h for h in self.own if h.name == name), None) or HYPERPARAMETERS[name]

    def to_record(self) -> dict[str, Any]:
        """Plain JSON (an infinite bound as null)."""
        bound = lambda v: v if v not in (float("inf"), float("-inf")) else None  # noqa: E731
        own = [{**dataclasses.asdict(h), "low": bound(h.low), "high": bound(h.high)} for h in self.own]
        return {**dataclasses.asdict(self), "hyperparameters": list(self.hyperparameters), "own": own,
                "parts": dict(self.parts)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> DeclaredLearner:
        own = tuple(Hyperparameter(**{**h, "low": float("-inf") if h["low"] is None else h["low"],
                                      "high": float("inf") if h["high"] is None else h["high"]}) for h in record["own"])
        return cls(**{**record, "hyperparameters": tuple(record["hyperparameters"]), "own": own,
                      "parts": tuple(record.get("parts", {}).items())})


def _import(module: str, module_file: str, where: str, module_sha256: str = "") -> Any:
    """The module: from its file when there is one (the same name in sys.modules), else imported by name.
    `module_sha256`: the file's recorded hash; another file is refused before it runs."""
    if module_file and Path(module_file).is_file():
        if module_sha256 and hashlib.sha256(Path(module_file).read_bytes()).hexdigest() != module_sha256:
            raise LearnerError(f"{where}: {module_file} changed since the store recorded it (its sha256 differs); "
                               "restore it, or run it under another sweep name or --storage")
        loaded = sys.modules.get(module)
        if loaded is not None and getattr(loaded, "__file__", None) == module_file:
            return loaded
        spec = importlib.util.spec_from_file_location(module, module_file)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded
        try:
            spec.loader.exec_module(loaded)
        except Exception as err:
            sys.modules.pop(module, None)
            raise LearnerError(f"{where}: importing {module_file} failed: {type(err).__name__}: {err}") from None
        return loaded
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name != module.split(".")[0] and err.name != module:
            raise LearnerError(f"{where}: importing {module} failed: {err}") from None
        beside = f"no {module_file} and " if module_file else ""
        raise LearnerError(f"{where}: {beside}no module {module} (put {module.split('.')[-1]}.py beside the sweep "
                           "file, or install it)") from None
    except Exception as err:
        raise LearnerError(f"{where}: importing {module} failed: {type(err).__name__}: {err}") from None


def _function(reference: str, module_file: str, where: str, module_sha256: str = "") -> Callable:
    module_name, function = reference.split(":")
    module = _import(module_name, module_file, where, module_sha256)
    rule = getattr(module, function, None)
    if rule is None:
        raise LearnerError(f"{where}: module {module_name} has no function {function}")
    return rule


def _check_names(name: str, own: tuple[Hyperparameter, ...], where: str) -> None:
    builtin = {*LINEAR_LEARNERS, *NEURAL_LEARNERS}
    for h in own:
        if h.name in RESERVED_COLUMNS or h.name in builtin:
            what = "a column of the store" if h.name in RESERVED_COLUMNS else "a built-in learner's name"
            raise LearnerError(f"{where}: hyperparameter {h.name} of {name} clashes with {what}; rename it")


def _learner(name: str, family: str, rule: Callable, parts: dict[str, Any], where: str) -> LinearLearner | NeuralLearner:
    """The checked learner of a declared rule (a neural one: the parts around its base step)."""
    try:
        if family == "linear":
            learner = own_learner(name, rule)
            own = learner.own
        else:
            learner = own_neural_learner(name, rule, **parts)
            own = learner.own_base.own
    except RuleError as err:
        raise LearnerError(f"{where}: {err}") from None
    _check_names(name, own, where)
    return learner


def load_rule(declared: DeclaredLearner, where: str = "") -> LinearLearner | NeuralLearner:
    """The declared learner's rule, imported from where the run took it and registered for the kernels (a
    neural learner: its parts around it); LearnerError if it is gone or its source is not the one recorded
    (sha256)."""
    where = where or f"learner {declared.name} ({declared.reference})"
    rule = _function(declared.reference, declared.module_file, where, declared.module_sha256)
    learner = _learner(declared.name, declared.family, rule, dict(declared.parts), where)
    digest = source_digest(rule_source(rule))
    if digest != declared.sha256:
        raise LearnerError(f"{where}: the rule changed since the store recorded it (sha256 {digest[:12]}, recorded "
                           f"{declared.sha256[:12]}); restore it, or run it under another sweep name or --storage")
    return learner


def _neural_parts(value: dict, where: str) -> tuple[str, dict[str, Any]]:
    """A neural learner's mapping -> (its base step's module:function, its built-in parts); LearnerError naming
    the key otherwise."""
    allowed = {"base": None, "weight_decay": tuple(WEIGHT_DECAY_MODES), "clip": (False, True), "fade": FADE_MODES}
    for key, given in value.items():
        if key not in allowed:
            raise LearnerError(f"{where}.{key}: unknown key; a neural learner takes {', '.join(allowed)} "
                               "(docs/own-learners.md)")
        choices = allowed[key]
        if choices is not None and (given not in choices or isinstance(given, bool) != (key == "clip")):
            raise LearnerError(f"{where}.{key}: must be one of {', '.join(map(str, choices))}, got {given!r}")
    if "base" not in value:
        raise LearnerError(f"{where}: missing base, the module:function of the base step (docs/own-learners.md)")
    return value["base"], {key: value[key] for key in ("weight_decay", "clip", "fade") if key in value}


def declare(name: str, value: str | dict, folder: Path | None, where: str) -> DeclaredLearner:
    """Import, check and describe one learner of a `learners:` block (or an entry point): a linear rule as
    module:function, a neural learner as a mapping {base: module:function, weight_decay, clip, fade}."""
    if not NAME.match(name) or name in LINEAR_LEARNERS or name in NEURAL_LEARNERS:
        why = ("the name of a built-in learner" if NAME.match(name) else
               "not a name of ASCII letters, digits and _ (not starting with a digit)")
        raise LearnerError(f"{where}: {name!r} is {why}; give the learner another name")
    family, parts = "linear", {}
    reference = value
    if isinstance(value, dict):
        family = "neural"
        reference, parts = _neural_parts(value, where)
        where = f"{where}.base"
    if not isinstance(reference, str) or not REFERENCE.match(reference):
        raise LearnerError(f"{where}: must be module:function (e.g. my_rules:{name}), got {reference!r}")
    module = reference.split(":")[0]
    beside = folder / f"{module.replace('.', '/')}.py" if folder is not None else None
    module_file = str(beside.resolve()) if beside is not None and beside.is_file() else ""
    rule = _function(reference, module_file, where)
    learner = _learner(name, family, rule, parts, where)
    own = learner.own if family == "linear" else learner.own_base.own
    source = rule_source(rule)
    module_sha256 = hashlib.sha256(Path(module_file).read_bytes()).hexdigest() if module_file else ""
    return DeclaredLearner(name, family, reference, module_file, learner.hyperparameters, own, source,
                           source_digest(source), module_sha256, tuple(parts.items()))


def _used_optimizers(document: dict) -> set[str]:
    blocks = [document, *(v for v in document.get("variants") or [] if isinstance(v, dict))]
    return {name for b in blocks if isinstance(b.get("optimizers"), dict) for name in b["optimizers"]}


def load_declared(document: Any, folder: Path | None) -> tuple[DeclaredLearner, ...]:
    """The learners a sweep document declares (its `learners:` block, modules beside `folder`) and the
    entry points of the optimizers it uses that are neither built in nor declared; LearnerError at the
    first that cannot be used. Imports user code: for the run and confirm commands only."""
    if not isinstance(document, dict):
        return ()
    block = document.get("learners") or {}
    if not isinstance(block, dict):
        raise LearnerError(f"learners: must be a mapping of learner name -> module:function, got {block!r}")
    declared = [declare(str(name), reference, folder, f"learners.{name}") for name, reference in block.items()]
    wanted = _used_optimizers(document) - set(block) - set(LINEAR_LEARNERS) - set(NEURAL_LEARNERS)
    for entry in metadata.entry_points(group=ENTRY_POINTS):
        if entry.name in wanted:
            where = f"entry point {entry.name} ({ENTRY_POINTS})"
            declared.append(declare(entry.name, _entry_value(entry, where), None, where))
    return tuple(declared)


def _entry_value(entry: metadata.EntryPoint, where: str) -> str | dict:
    """What an entry point offers, as a `learners:` block would give it: a linear rule's module:function
    (the entry point names the rule), or a neural learner's mapping {base: module:function, weight_decay,
    clip, fade} (the entry point names such a dict in its package)."""
    if not REFERENCE.match(entry.value):
        return entry.value  # (declare says what is wrong with it)
    target = _function(entry.value, "", where)
    return dict(target) if isinstance(target, Mapping) else entry.value
