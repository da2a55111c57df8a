"""The Ray Tune trainable: one trial runs one pack. The only Tune call made on workers.

Tune sees a short summary per chunk (for its dashboard and our progress display);
the full per-seed curves and scores go to the Parquet store, not through Tune.
"""

from __future__ import annotations

import numba
import ray
import torch
from ray import tune

from sweeps.engine import ChunkProgress, make_runner
from sweeps.plan import Pack
from sweeps.store import write_pack


def _summary(progress: ChunkProgress) -> dict:
    return {
        "steps_done": progress.steps_done,
        "fraction_done": progress.steps_done / progress.total_steps,
        "run_steps_done": progress.steps_done * progress.runs,
        "mean_loss": progress.mean_loss,
        "diverged_runs": progress.diverged,
    }


def pack_trainable(config: dict, *, packs: dict[str, Pack], results_dir: str, chunk_steps: int, dtype: str) -> None:
    """Run the pack named by config["pack_id"] and write its results."""
    pack = packs[config["pack_id"]]
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    # One compiled thread per CPU Tune gave this trial: packs in parallel, never oversubscribed.
    numba.set_num_threads(max(1, min(numba.config.NUMBA_NUM_THREADS, int(cpus))))
    runner = make_runner(pack, chunk_steps, getattr(torch, dtype))
    last = None
    for last in runner.run():
        if last.steps_done < last.total_steps:
            tune.report(_summary(last))
    outcome = runner.outcome()
    write_pack(results_dir, pack, outcome)
    # The final report comes after the write, so a finished trial means written results.
    tune.report({**_summary(last), "compute_seconds": outcome.wall_seconds, "written": True})
