"""Run a sweep to completion on Ray Tune: plan packs, launch one trial per pack, report.

Driver side only. The store is the source of truth for what is finished, so `resume`
plans only the (config, seed) pairs without a score, whatever packing ran before.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from ray import tune

from cluster.connect import connect
from sweeps.engine import DEFAULT_CHUNK_STEPS
from sweeps.plan import plan_packs
from sweeps.progress import SweepProgress
from sweeps.store import finished_runs, has_results
from sweeps.sweepfile import Sweep, SweepError
from sweeps.trainable import pack_trainable

SWEEP_RECORD = "sweep.yaml"  # the sweep as run, beside its results


@dataclass(frozen=True)
class SweepRun:
    """What one `run_sweep` did, for the closing summary and the benchmark."""

    results_dir: Path
    packs: int
    run_steps: int
    skipped_runs: int  # (config, seed) pairs already in the store (resume)
    wall_seconds: float  # from connecting to Ray to the last write
    ray_start_seconds: float  # of which: starting (or attaching to) Ray
    compute_seconds: float  # summed over packs: time inside the engine
    cpus: int
    dashboard_url: str | None

    @property
    def tune_overhead_fraction(self) -> float:
        """Share of the CPUs' time, from Ray up to the last write, not spent in the engine.

        It counts Tune's scheduling, trial start-up, result reporting and the idle tail
        while the last packs finish; starting Ray itself is reported apart.
        """
        tune_seconds = self.wall_seconds - self.ray_start_seconds
        if tune_seconds <= 0 or self.cpus <= 0:
            return 0.0
        return max(0.0, 1.0 - self.compute_seconds / (tune_seconds * min(self.cpus, max(self.packs, 1))))


def results_dir_for(sweep: Sweep, storage: str | Path) -> Path:
    return Path(storage).expanduser().absolute() / sweep.name


def run_sweep(
    sweep: Sweep,
    storage: str | Path = "results",
    *,
    address: str | None = None,
    resume: bool = False,
    chunk_steps: int = DEFAULT_CHUNK_STEPS,
    dtype: str = "float32",
    num_cpus: int | None = None,
    runs_per_pack: int | None = None,
    show_progress: bool = True,
) -> SweepRun:
    """Run every pending (config, seed) of `sweep`; results land under <storage>/<name>."""
    results_dir = results_dir_for(sweep, storage)
    if has_results(results_dir) and not resume:
        raise SweepError(
            f"{results_dir} already holds results of sweep {sweep.name}; pass --resume to finish it, "
            "or choose another --storage or sweep name"
        )
    started = time.perf_counter()
    cluster = connect(address, num_cpus)
    ray_start = time.perf_counter() - started
    if show_progress and cluster.dashboard_url:
        print(f"Ray dashboard: {cluster.dashboard_url}")
    done = finished_runs(results_dir) if resume else set()
    packs = plan_packs(sweep, cluster.cpus, done, runs_per_pack)
    skipped = sweep.runs - sum(p.runs for p in packs)
    if not packs:
        return SweepRun(results_dir, 0, 0, skipped, time.perf_counter() - started, ray_start, 0.0, cluster.cpus, cluster.dashboard_url)

    results_dir.mkdir(parents=True, exist_ok=True)
    record = results_dir / SWEEP_RECORD
    tmp = record.with_name(f".{record.name}.tmp")
    tmp.write_text(yaml.safe_dump(sweep.document, sort_keys=False))
    os.replace(tmp, record)

    run_steps = sum(p.run_steps for p in packs)
    progress = SweepProgress(len(packs), run_steps) if show_progress else None
    trainable = tune.with_resources(
        tune.with_parameters(
            pack_trainable,
            packs={p.pack_id: p for p in packs},
            results_dir=str(results_dir),
            chunk_steps=chunk_steps,
            dtype=dtype,
        ),
        {"cpu": 1},
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"pack_id": tune.grid_search([p.pack_id for p in packs])},
        tune_config=tune.TuneConfig(reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(results_dir),
            verbose=0,
            callbacks=[progress] if progress else None,
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    )
    grid = tuner.fit()
    compute = sum(r.metrics.get("compute_seconds", 0.0) for r in grid if r.metrics)
    if grid.errors:
        failed = [r.config.get("pack_id") for r in grid if r.error]
        raise RuntimeError(
            f"{len(failed)} of {len(packs)} packs failed ({', '.join(failed)}); the others are saved: "
            f"fix the cause and rerun with --resume. First error: {grid.errors[0]}"
        )
    return SweepRun(
        results_dir,
        len(packs),
        run_steps,
        skipped,
        time.perf_counter() - started,
        ray_start,
        compute,
        cluster.cpus,
        cluster.dashboard_url,
    )
