"""The sweep file of interface.md: load, validate, expand into experiments.

Everything is checked before anything runs, by the pydantic models of document.py; each problem is
one line naming the file, the key and what is allowed (`SweepError`). A loaded `Sweep` (sweep.py)
is immutable and typed: the rest of the service never reads the YAML again.

A sweep may ask for a confirmation stage, `confirm: {seeds: N}` (or a list of seeds): after
the grid, each method's selected configuration runs again on N fresh seeds, disjoint from
the tuning seeds (by default the N integers after the largest tuning seed).

A sweep may race its seeds, `race: {min_seeds: 3, max_seeds: 10, alpha: 0.05, seeds_per_round: 1}`
(sweeps.spec.race): configurations worse than their method's best with confidence stop getting seeds.

A sweep (or one of its variants) may name the engine its packs run on, `engine: NAME` (a
name of fade_core.engines that runs the task; default: the task's default on the device,
sweeps/spec/engines.py). The engine is not part of a configuration's identity: engines compute the
same rule, within the tolerances their tests state.

Beyond interface.md, a sweep may hold `variants`: a list of blocks that each override
`task`, `task_settings` and/or `optimizers` (e.g. both noise levels of a preset, each
with its own selected configurations).

Reading (YAML 1.2 floats, no duplicate keys, UTF-8 only) is `yamlfile.py`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from sweeps.spec.document import Block, SweepFile, document_model
from sweeps.spec.own import DeclaredLearner, LearnerError, load_declared
from sweeps.spec.sweep import Experiment, Sweep, short
from sweeps.spec.yamlfile import SweepError, read_yaml, yaml_data
from tasks import get_task

__all__ = ["Experiment", "Sweep", "SweepError", "check_task_data", "load_sweep", "parse_sweep", "parse_sweep_text"]


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; raises `SweepError` with a one-line message."""
    path = Path(path)
    if path.is_dir():
        raise SweepError(f"{path}: a directory, not a sweep file (give a YAML file or a preset name: `fade-sweep presets`)")
    if not path.is_file():
        raise SweepError(f"{path}: no such sweep file (give a YAML file or a preset name: `fade-sweep presets`)")
    document = read_yaml(path)
    try:
        own = load_declared(document, path.parent)  # the `learners:` block: imports the researcher's modules
    except LearnerError as err:
        raise SweepError(f"{path}: {err}") from None
    return parse_sweep(document, str(path), own)


def parse_sweep_text(text: str, source: str, own: tuple[DeclaredLearner, ...] = ()) -> Sweep:
    """A sweep from YAML text (a store's sweep.yaml), read by the same rules as a sweep file; `own`: the
    learners of its `learners:` block as the store records them (no code is imported)."""
    return parse_sweep(yaml_data(text, source), source, own)


def parse_sweep(document: Any, source: str, own: tuple[DeclaredLearner, ...] = ()) -> Sweep:
    """Validate an already-parsed sweep document (a mapping); `own`: its declared learners, loaded
    (`own.load_declared`) or as a store records them."""
    declared = set(document.get("learners") or {}) if isinstance(document, dict) and isinstance(
        document.get("learners") or {}, dict) else set()
    if declared - {d.name for d in own}:
        missing = ", ".join(sorted(declared - {d.name for d in own}))
        raise SweepError(f"{source}: learners: {missing} not recorded (store.json keeps what a store's readers know "
                         "of its learners); run the sweep file again with --resume to record them")
    model = document_model(tuple(own))
    try:
        return model.model_validate(document).to_sweep(source, document)
    except ValidationError as err:
        raise SweepError(f"{source}: {describe(err, model)}") from None


def _block_of(annotation: Any) -> type[Block] | None:
    """The block a field's type holds (through Optional, list, Annotated), if any."""
    if isinstance(annotation, type) and issubclass(annotation, Block):
        return annotation
    return next((b for b in map(_block_of, get_args(annotation)) if b is not None), None)


def _walk(loc: tuple, model: type[Block] = SweepFile) -> tuple[type[Block], str]:
    """The innermost block along `loc` and its path as the file names it (`variants[0].optimizers.fade`)."""
    block, path = model, ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        field = {f.alias or n: f for n, f in block.model_fields.items()}.get(part)
        inner = _block_of(field.annotation) if field is not None else None
        if inner is None:
            break
        block, path = inner, f"{path}.{part}" if path else part
    return block, path


def _path_of(loc: tuple) -> str:
    """`loc` as the file names it: ('variants', 0, 'task') -> variants[0].task."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def describe(error: ValidationError, model: type[Block] = SweepFile) -> str:
    """The first problem of a sweep file's validation as one line: "key.path: what is wrong; the fix"."""
    errors = error.errors()
    first = errors[0]
    if first["type"] == "missing":  # a misspelt key is a missing key and an unknown one: the unknown one names the typo
        first = next((e for e in errors if e["type"] == "extra_forbidden" and e["loc"][:-1] == first["loc"][:-1]),
                     first)
    loc, kind = first["loc"], first["type"]
    if kind == "sweep":
        at = first["ctx"]["at"] or _path_of(loc)
        return f"{at}: {first['msg']}" if at else first["msg"]
    if kind in ("extra_forbidden", "invalid_key", "missing"):  # invalid_key: a key that is no string (YAML `1: 2`)
        block, path = _walk(loc[:-1], model)
        key = str(loc[-1])
        if kind != "missing":
            return f"{_path_of((*loc[:-1], key))}: {block.phrase(block.UNKNOWN, key=key)}"
        missing = ", ".join(str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == loc[:-1])
        return f"{path or key}: {block.phrase(block.MISSING, missing=missing)}"
    block, path = _walk(loc, model)
    if kind in ("model_type", "dict_type", "list_type") and path == _path_of(loc):  # a block's value has the wrong shape
        phrase = block.phrase(block.NOT_A_LIST if kind == "list_type" else block.NOT_A_MAPPING)
        return f"{path}: {phrase}" if path else phrase
    message = first["msg"]
    return f"{_path_of(loc)}: {message[0].lower()}{message[1:]}, got {short(first.get('input'))}"


def check_task_data(sweep: Sweep) -> None:
    """Fail before anything starts if a task's dataset is missing or unreadable."""
    for experiment in sweep.experiments:
        check = get_task(experiment.task).check_data
        if check is not None:
            try:
                check(experiment.settings)
            except ValueError as err:
                raise SweepError(f"{sweep.source}: task_settings: {err}") from None
