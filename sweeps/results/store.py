"""The Parquet results store of interface.md.

Layout under RESULTS_DIR (= <storage>/<sweep name>):
  scores/task=<task>/optimizer=<opt>/pack-<id>.parquet   one row per (config, seed)
  curves/task=<task>/optimizer=<opt>/pack-<id>.parquet   one row per (config, seed, bin)
Every file carries every hyperparameter column (null where the optimizer does not take
it) and the task's settings, so files of different optimizers concatenate.

A pack's files are written to a hidden temporary name and renamed into place (atomic
on POSIX); curves first, scores last, so a scores file marks a finished pack. A retried
pack writes the same names, replacing rather than duplicating its rows.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from fade_core.hyperparameters import HYPERPARAMETERS
from sweeps.packs.outcome import PackOutcome
from sweeps.spec import Pack

SCORES, CURVES = "scores", "curves"


def _settings_columns(pack: Pack) -> dict[str, object]:
    """Task settings as columns (`steps` is its own column already)."""
    return {k: v for k, v in dataclasses.asdict(pack.experiment.settings).items() if k != "steps"}


def run_keys(pack: Pack, repeat: int = 1) -> dict[str, pa.Array]:
    """task, optimizer, config_id, settings, hyperparameters and seed of every run, each row repeated."""
    n_seeds = len(pack.seeds)
    runs = pack.runs
    experiment = pack.experiment
    columns: dict[str, pa.Array] = {
        "task": pa.array([experiment.task] * runs * repeat, pa.string()),
        "optimizer": pa.array([experiment.optimizer] * runs * repeat, pa.string()),
        "config_id": pa.array(np.repeat([c.config_id for c in pack.configs], n_seeds * repeat), pa.string()),
    }
    for key, value in _settings_columns(pack).items():
        columns[key] = pa.array([value] * runs * repeat)
    for name in HYPERPARAMETERS:
        values = [dict(c.hyperparameters).get(name) for c in pack.configs]
        columns[name] = pa.array(np.repeat(np.array(values, dtype=object), n_seeds * repeat), pa.float64())
    columns["seed"] = pa.array(np.repeat(np.tile(pack.seeds, len(pack.configs)), repeat), pa.int64())
    return columns


def scores_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    columns = run_keys(pack)
    columns["score"] = pa.array(outcome.score, pa.float64())
    columns["diverged"] = pa.array(outcome.diverged, pa.bool_())
    columns["steps"] = pa.array(np.full(pack.runs, pack.experiment.settings.steps), pa.int64())
    columns["wall_seconds"] = pa.array(np.full(pack.runs, outcome.wall_seconds), pa.float64())
    return pa.table(columns)


def curves_table(pack: Pack, outcome: PackOutcome) -> pa.Table:
    bins = len(outcome.bin_end)
    columns = run_keys(pack, bins)
    columns["step"] = pa.array(np.tile(outcome.bin_end, pack.runs), pa.int64())
    for name, values in outcome.curves.items():
        if values is None:
            columns[name] = pa.nulls(pack.runs * bins, pa.float64())
        elif values.ndim == 3:  # one value per output: a fixed-size list column
            flat = pa.array(values.reshape(-1), pa.float64())
            columns[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[2])
        else:
            columns[name] = pa.array(values.reshape(-1), pa.float64())
    return pa.table(columns)


def _pack_path(results_dir: Path, kind: str, pack: Pack) -> Path:
    e = pack.experiment
    return results_dir / kind / f"task={e.task}" / f"optimizer={e.optimizer}" / f"pack-{pack.pack_id}.parquet"


def _temporary_beside(path: Path) -> Path:
    """A hidden name in the same directory: os.replace from it is atomic on POSIX."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_atomic(table: pa.Table, path: Path) -> None:
    tmp = _temporary_beside(path)
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a small file so that readers see the old or the new content, never a part."""
    tmp = _temporary_beside(path)
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_pack(results_dir: str | Path, pack: Pack, outcome: PackOutcome) -> None:
    """Write a finished pack's curves, then its scores (the completion mark)."""
    results_dir = Path(results_dir)
    _write_atomic(curves_table(pack, outcome), _pack_path(results_dir, CURVES, pack))
    _write_atomic(scores_table(pack, outcome), _pack_path(results_dir, SCORES, pack))


def pack_written(results_dir: str | Path, pack: Pack) -> bool:
    """Whether a pack's results are already in the store (its scores file marks completion)."""
    return _pack_path(Path(results_dir), SCORES, pack).is_file()


def scores_glob(results_dir: str | Path) -> str:
    return str(Path(results_dir) / SCORES / "**" / "*.parquet")


def curves_glob(results_dir: str | Path) -> str:
    return str(Path(results_dir) / CURVES / "**" / "*.parquet")


def has_results(results_dir: str | Path) -> bool:
    return any((Path(results_dir) / SCORES).glob("**/*.parquet"))


def finished_runs(results_dir: str | Path) -> set[tuple[str, int]]:
    """(config_id, seed) of every run with a score in the store."""
    if not has_results(results_dir):
        return set()
    frame = pl.scan_parquet(scores_glob(results_dir)).select("config_id", "seed").collect()
    return set(frame.iter_rows())
