"""Helpers that several test modules share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

from sweeps.packs import PackOutcome, make_runner
from sweeps.store import Store
from sweeps.plan import Pack
from sweeps.spec import make_config, parse_sweep


def write_known_store(results_dir: Path, document: dict, scores: dict) -> Path:
    """A store of a linear sweep whose per-seed scores are given: scores[(optimizer, values)] is
    one score per seed (fewer scores than seeds: the first seeds only, as a raced cell); configs not in
    `scores` are never written (missing). Two bins."""
    sweep = parse_sweep(document, "test")
    store = Store.open(results_dir)
    for experiment in sweep.experiments:
        for values in experiment.configs():
            key = (experiment.optimizer, tuple(values.values()))
            if key not in scores:
                continue
            seeds = len(scores[key])
            pack = Pack(experiment, (make_config(experiment, values),), sweep.seeds[:seeds])
            score = np.array(scores[key])
            decays = experiment.optimizer == "fade"
            curves = {"mse": np.stack([score, score]).T, "decay_relevant": np.full((seeds, 2), 0.1) if decays else None,
                      "decay_irrelevant": np.full((seeds, 2), 0.2) if decays else None,
                      "step_size_relevant": None, "step_size_irrelevant": None}
            store.write_pack(pack, PackOutcome(score, ~np.isfinite(score), np.array([2, 4]), curves, 1.0))
    (results_dir / "sweep.yaml").write_text(yaml.safe_dump(document))
    return results_dir


def read_status_json(results_dir: Path) -> dict:
    """status.json as written so far (an empty one before the driver's first write)."""
    try:
        return json.loads((results_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"trials": []}


def scores_in_process(document: dict) -> dict[tuple[str, int], float]:
    """Every (config, seed) score of a one-experiment sweep computed in this process as one
    float64 pack, never interrupted: what a resumed sweep must reproduce bit for bit."""
    sweep = parse_sweep(document, "reference")
    (experiment,) = sweep.experiments
    pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), sweep.seeds)
    runner = make_runner(pack, 100_000, torch.float64)
    for _ in runner.run():
        pass
    keys = [(c.config_id, s) for c in pack.configs for s in pack.seeds]
    return dict(zip(keys, runner.outcome().score))


def compiled_then_loaded(probe: str, folder: Path) -> tuple[np.lib.npyio.NpzFile, np.lib.npyio.NpzFile]:
    """The arrays `probe` (Python source that np.savez-es its results to sys.argv[1]) saves in
    two fresh processes sharing a numba cache in `folder`: the first on an empty cache (it
    compiles), the second on the cache the first left (it loads)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(folder / "numba_cache"), "PYTHONPATH": str(root)}
    results = []
    for name in ("compiled", "loaded"):
        path = folder / f"{name}.npz"
        subprocess.run([sys.executable, "-c", probe, str(path)], env=env, cwd=root, check=True, timeout=900)
        results.append(np.load(path))
    return results[0], results[1]
