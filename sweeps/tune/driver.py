"""Run a sweep to completion on Ray Tune: plan packs, launch one trial per pack, report.

Driver side only. What is finished lives in the store: a fresh run plans every
(config, seed) without a score. `resume` first restores the last interrupted Tune
experiment (Tuner.restore: finished trials stay finished, unfinished ones continue from
their last checkpoint), then plans whatever the store still misses.
"""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from ray import tune

from cluster.connect import connect
from cluster.placement import parallel_slots
from cluster.storage import check_storage
from sweeps.results.status import read_status
from sweeps.results.store import finished_runs, has_results, write_bytes_atomic
from sweeps.spec import Pack, PackResources, Sweep, SweepError, check_task_data, plan_packs
from sweeps.spec.plan import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK_STEPS, MAX_PACK_RUNS
from sweeps.tune.progress import SweepProgress
from sweeps.tune.trainable import pack_trainable

SWEEP_RECORD = "sweep.yaml"  # the sweep as run, beside its results
PACKS_RECORD = "packs.pkl"  # inside a Tune experiment: what its pack ids mean, for Tuner.restore
TUNE_PREFIX = "tune-"


@dataclass(frozen=True)
class ExecutionOptions:
    """How to run a sweep (not what): where, how big the chunks, how often to checkpoint."""

    address: str | None = None  # None: embedded local Ray
    num_cpus: int | None = None  # of the embedded Ray
    chunk_steps: int = DEFAULT_CHUNK_STEPS
    dtype: str = "float32"
    runs_per_pack: int | None = None  # None: from the sweep's size and the cluster
    resources: PackResources | None = None  # None: the sweep file's
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    max_failures: int = 3  # retries of a failed trial, each from its last checkpoint
    show_progress: bool = True


@dataclass(frozen=True)
class SweepRun:
    """What one `run_sweep` did, for the closing summary and the benchmark."""

    results_dir: Path
    packs: int
    run_steps: int
    skipped_runs: int  # (config, seed) pairs already in the store before this run
    wall_seconds: float  # from connecting to Ray to the last write
    ray_start_seconds: float  # of which: starting (or attaching to) Ray
    compute_seconds: float  # summed over packs: time inside the engine
    slots: int  # packs the cluster runs at once
    nodes: frozenset[str]  # Ray node ids that ran packs
    dashboard_url: str | None

    @property
    def tune_overhead_fraction(self) -> float:
        """Share of the slots' time, from Ray up to the last write, not spent in the engine.

        It counts Tune's scheduling, trial start-up, result reporting and the idle tail
        while the last packs finish; starting Ray itself is reported apart.
        """
        tune_seconds = self.wall_seconds - self.ray_start_seconds
        if tune_seconds <= 0 or self.slots <= 0:
            return 0.0
        return max(0.0, 1.0 - self.compute_seconds / (tune_seconds * min(self.slots, max(self.packs, 1))))


def results_dir_for(sweep: Sweep, storage: str | Path) -> Path:
    return Path(storage).expanduser().absolute() / sweep.name


def _trainable(packs: dict[str, Pack], results_dir: Path, options: ExecutionOptions, resources: PackResources):
    return tune.with_resources(
        tune.with_parameters(
            pack_trainable,
            packs=packs,
            results_dir=str(results_dir),
            chunk_steps=options.chunk_steps,
            dtype=options.dtype,
            checkpoint_every=options.checkpoint_every,
        ),
        resources.as_tune(),
    )


def _run_config(name: str, results_dir: Path, options: ExecutionOptions, progress: SweepProgress) -> tune.RunConfig:
    # We snapshot the experiment at each checkpoint on purpose (see below); Tune warns about it.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    return tune.RunConfig(
        name=name,
        storage_path=str(results_dir),
        verbose=0,
        callbacks=[progress],
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        # Keep only the newest checkpoint; Tune then also snapshots the experiment state at each
        # one, so a killed driver resumes from the latest checkpoints (hence checkpoints every
        # few chunks, not every chunk).
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
    )


def _restorable_experiment(results_dir: Path) -> Path | None:
    """The newest Tune experiment of this sweep that Tune can restore, if any."""
    for path in sorted(results_dir.glob(f"{TUNE_PREFIX}*"), reverse=True):
        if (path / PACKS_RECORD).is_file() and tune.Tuner.can_restore(str(path)):
            return path
    return None


def _fit(tuner: tune.Tuner, packs: dict[str, Pack]) -> float:
    """Run the trials; returns the engine seconds summed over them. Raises if any pack failed."""
    grid = tuner.fit()
    failed = [r.config.get("pack_id") for r in grid if r.error]
    if failed:
        raise RuntimeError(
            f"{len(failed)} of {len(packs)} packs failed ({', '.join(failed)}) after retries; the others are saved: "
            f"fix the cause and rerun with --resume. First error: {grid.errors[0]}"
        )
    return sum(r.metrics.get("compute_seconds", 0.0) for r in grid if r.metrics)


@dataclass(frozen=True)
class _Phase:
    """What one Tune experiment of a sweep did."""

    packs: int
    run_steps: int
    compute_seconds: float
    nodes: frozenset[str]


def _continue_interrupted(results_dir: Path, options: ExecutionOptions, resources: PackResources) -> _Phase | None:
    """Restore the newest interrupted Tune experiment and finish it (None if there is none)."""
    experiment = _restorable_experiment(results_dir)
    if experiment is None:
        return None
    packs = pickle.loads((experiment / PACKS_RECORD).read_bytes())
    finished_before = finished_runs(results_dir)
    try:
        # The restored RunConfig brings back its SweepProgress callback, which rewrites status.json.
        tuner = tune.Tuner.restore(str(experiment), trainable=_trainable(packs, results_dir, options, resources), resume_errored=True)
    except Exception as err:  # noqa: BLE001 - e.g. an experiment state cut short by the crash
        print(f"Cannot restore {experiment.name} ({type(err).__name__}: {err}); unfinished packs restart from the store.")
        return None
    compute = _fit(tuner, packs)
    unfinished = [p for p in packs.values() if any((c.config_id, s) not in finished_before for c in p.configs for s in p.seeds)]
    return _Phase(len(unfinished), sum(p.run_steps for p in unfinished), compute, frozenset(read_status(results_dir).nodes))


def _run_plan(sweep: Sweep, plan: list[Pack], results_dir: Path, options: ExecutionOptions, resources: PackResources) -> _Phase:
    """Run the planned packs as a new Tune experiment."""
    results_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(results_dir / SWEEP_RECORD, yaml.safe_dump(sweep.document, sort_keys=False).encode())
    name = f"{TUNE_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}"
    packs = {p.pack_id: p for p in plan}
    (results_dir / name).mkdir()
    write_bytes_atomic(results_dir / name / PACKS_RECORD, pickle.dumps(packs))
    progress = SweepProgress(sweep.name, plan, results_dir, options.show_progress)
    tuner = tune.Tuner(
        _trainable(packs, results_dir, options, resources),
        param_space={"pack_id": tune.grid_search(list(packs))},
        tune_config=tune.TuneConfig(reuse_actors=True),
        run_config=_run_config(name, results_dir, options, progress),
    )
    compute = _fit(tuner, packs)
    return _Phase(len(plan), sum(p.run_steps for p in plan), compute, frozenset(read_status(results_dir).nodes))


def run_sweep(sweep: Sweep, storage: str | Path = "results", *, resume: bool = False, options: ExecutionOptions = ExecutionOptions()) -> SweepRun:
    """Run every pending (config, seed) of `sweep`; results land under <storage>/<name>."""
    results_dir = results_dir_for(sweep, storage)
    if has_results(results_dir) and not resume:
        raise SweepError(
            f"{results_dir} already holds results of sweep {sweep.name}; pass --resume to finish it, "
            "or choose another --storage or sweep name"
        )
    resources = options.resources or sweep.resources
    check_task_data(sweep)
    started = time.perf_counter()
    dashboard_url = connect(options.address, options.num_cpus)
    ray_start = time.perf_counter() - started
    if options.show_progress and dashboard_url:
        print(f"Ray dashboard: {dashboard_url}")
    slots = parallel_slots(resources)
    check_storage(results_dir)
    skipped = len(finished_runs(results_dir)) if resume else 0

    phases = []
    if resume:
        phases.append(_continue_interrupted(results_dir, options, resources))
    # On GPUs a pack fills the device; on CPUs packs are sized to keep every slot busy.
    runs_per_pack = options.runs_per_pack or (MAX_PACK_RUNS if resources.gpus > 0 else None)
    plan = plan_packs(sweep, slots, finished_runs(results_dir) if resume else (), runs_per_pack)
    if plan:
        phases.append(_run_plan(sweep, plan, results_dir, options, resources))
    phases = [p for p in phases if p is not None]
    return SweepRun(
        results_dir=results_dir,
        packs=sum(p.packs for p in phases),
        run_steps=sum(p.run_steps for p in phases),
        skipped_runs=skipped,
        wall_seconds=time.perf_counter() - started,
        ray_start_seconds=ray_start,
        compute_seconds=sum(p.compute_seconds for p in phases),
        slots=slots,
        nodes=frozenset().union(*(p.nodes for p in phases)),
        dashboard_url=dashboard_url,
    )
