"""A grid cell's identity: the ONE place a config id is computed (a hash of the canonical config)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

LOCATION_SETTINGS = ("data_dir",)  # where the data lives, not what is run: not part of a config's identity


def digest(payload: object) -> str:
    """12 hex digits of the SHA-1 of `payload` as canonical JSON: stable across runs and machines."""
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


class Experiment(Protocol):
    """What identifies a grid's configurations (`sweeps.spec.Experiment` has it)."""

    task: str
    settings: Any  # the task's settings dataclass
    optimizer: str


@dataclass(frozen=True)
class Config:
    """One grid cell of one experiment, identified by a hash of its canonical form."""

    config_id: str
    hyperparameters: tuple[tuple[str, float], ...]


def make_config(experiment: Experiment, hyperparameters: dict[str, float]) -> Config:
    """The cell `hyperparameters` of `experiment`; its id hashes task, settings (less where the data
    lives), optimizer and hyperparameters. `Experiment.cells` holds every cell of a grid, computed once."""
    settings = {k: v for k, v in dataclasses.asdict(experiment.settings).items() if k not in LOCATION_SETTINGS}
    canonical = {
        "task": experiment.task,
        "settings": settings,
        "optimizer": experiment.optimizer,
        "hyperparameters": hyperparameters,
    }
    return Config(digest(canonical), tuple(hyperparameters.items()))
