"""Helpers that several test modules share."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from sweeps.packs import PackOutcome
from sweeps.results.store import write_pack
from sweeps.spec import Pack, make_config, parse_sweep


def write_known_store(results_dir: Path, document: dict, scores: dict) -> Path:
    """A store of a linear sweep whose per-seed scores are given: scores[(optimizer, values)] is
    one score per seed; configs not in `scores` are never written (missing). Two bins."""
    sweep = parse_sweep(document, "test")
    seeds = len(sweep.seeds)
    for experiment in sweep.experiments:
        for values in experiment.configs():
            key = (experiment.optimizer, tuple(values.values()))
            if key not in scores:
                continue
            pack = Pack(experiment, (make_config(experiment, values),), sweep.seeds)
            score = np.array(scores[key])
            decays = experiment.optimizer == "fade"
            curves = {"mse": np.stack([score, score]).T, "decay_relevant": np.full((seeds, 2), 0.1) if decays else None,
                      "decay_irrelevant": np.full((seeds, 2), 0.2) if decays else None,
                      "step_size_relevant": None, "step_size_irrelevant": None}
            write_pack(results_dir, pack, PackOutcome(score, ~np.isfinite(score), np.array([2, 4]), curves, 1.0))
    (results_dir / "sweep.yaml").write_text(yaml.safe_dump(document))
    return results_dir


def read_status_json(results_dir: Path) -> dict:
    """status.json as written so far (an empty one before the driver's first write)."""
    try:
        return json.loads((results_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"trials": []}
