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
name of fade_core.engines that runs the task; default: the engine table's default for the
task and device). The engine is not part of a configuration's identity: engines compute the
same rule, within the tolerances their tests state.

Beyond interface.md, a sweep may hold `variants`: a list of blocks that each override
`task`, `task_settings` and/or `optimizers` (e.g. both noise levels of a preset, each
with its own selected configurations).

Reading (YAML 1.2 floats, no duplicate keys, UTF-8 only) is `yamlfile.py`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sweeps.spec.document import SweepFile, describe
from sweeps.spec.sweep import Experiment, Sweep
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
    return parse_sweep(read_yaml(path), str(path))


def parse_sweep_text(text: str, source: str) -> Sweep:
    """A sweep from YAML text (a store's sweep.yaml), read by the same rules as a sweep file."""
    return parse_sweep(yaml_data(text, source), source)


def parse_sweep(document: Any, source: str) -> Sweep:
    """Validate an already-parsed sweep document (a mapping)."""
    try:
        return SweepFile.model_validate(document).to_sweep(source, document)
    except ValidationError as err:
        raise SweepError(f"{source}: {describe(err)}") from None


def check_task_data(sweep: Sweep) -> None:
    """Fail before anything starts if a task's dataset is missing or unreadable."""
    for experiment in sweep.experiments:
        check = get_task(experiment.task).check_data
        if check is not None:
            try:
                check(experiment.settings)
            except ValueError as err:
                raise SweepError(f"{sweep.source}: task_settings: {err}") from None
