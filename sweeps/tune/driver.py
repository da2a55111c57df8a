"""Run a sweep to completion on Ray Tune: plan packs, launch one trial per pack, report.

Driver side only. What is finished lives in the store: a fresh run plans every
(config, seed) without a score. `resume` trusts only the store and the pack checkpoints
(tensors, read with weights_only=True), never Tune's own experiment state (pickles): each
Tune experiment of the sweep records its packs as JSON (`tune-*/packs.json`); an
unfinished pack with a checkpoint continues from its newest one, and whatever else the
store misses is planned afresh. Everything runs as one new Tune experiment, reporting to
the folder being run (a copied results folder resumes into the copy).

Interrupts are honest: SIGINT (Ctrl-C) or SIGTERM stops Tune's trials, finished packs stay
in the store, status.json says `interrupted`, and `run_sweep` raises `SweepInterrupted`
(the command exits 130) instead of returning as if the sweep were done.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ray import tune

from cluster.connect import connect
from cluster.placement import parallel_slots
from cluster.storage import check_storage
from sweeps.store.location import StoreLocation
from sweeps.store.lock import refuse_if_locked, store_lock
from sweeps.store.record import check_and_record, print_notices, sweep_pairs
from sweeps.store.dataset import finished_runs, has_results, remove_orphans, set_aside_damaged
from sweeps.spec import Config, Experiment, Pack, PackResources, Sweep, SweepError, check_task_data, make_config, plan_packs
from sweeps.spec.plan import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK_STEPS
from sweeps.tune.progress import SweepProgress
from sweeps.tune.trainable import CHECKPOINT_FILE, CHECKPOINT_META, pack_trainable
from tasks import get_task

SWEEP_RECORD = "sweep.yaml"  # the sweep as run, beside its results
PACKS_RECORD = "packs.json"  # inside a Tune experiment: what its pack ids mean (JSON, never a pickle)
PACKS_RECORD_FORMAT = 1
TUNE_PREFIX = "tune-"


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was stopped (SIGINT / SIGTERM) before every pack finished; finished packs are saved.

    Counts are the sweep's packs: this run's and those earlier runs finished."""

    def __init__(self, packs_done: int, packs_total: int, results_dir: Path | StoreLocation):
        super().__init__(f"interrupted: {packs_done} of {packs_total} packs done")
        self.packs_done, self.packs_total, self.results_dir = packs_done, packs_total, results_dir


@dataclass(frozen=True)
class ExecutionOptions:
    """How to run a sweep (not what): where, how big the chunks, how often to checkpoint."""

    address: str | None = None  # None: embedded local Ray (or $RAY_ADDRESS when set)
    num_cpus: int | None = None  # of the embedded Ray
    chunk_steps: int = DEFAULT_CHUNK_STEPS
    dtype: str = "float32"
    runs_per_pack: int | None = None  # None: from the sweep's size and the cluster
    resources: PackResources | None = None  # None: the sweep file's
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    max_failures: int = 3  # retries of a failed trial, each from its last checkpoint
    show_progress: bool = True
    tf32: bool = False  # let float32 matrix products on GPUs use TF32 (faster, ~1e-3 relative error)


@dataclass(frozen=True)
class SweepRun:
    """What one `run_sweep` did, for the closing summary and the benchmark."""

    results_dir: Path | StoreLocation  # a local folder, or a location on an object store
    packs: int
    run_steps: int
    skipped_runs: int  # (config, seed) pairs already in the store before this run
    wall_seconds: float  # from connecting to Ray to the last write
    ray_start_seconds: float  # of which: starting (or attaching to) Ray
    compute_seconds: float  # summed over packs: time inside the engine
    slots: int  # packs the cluster runs at once
    nodes: frozenset[str]  # Ray node ids that ran packs
    dashboard_url: str | None
    resumed_packs: int = 0  # packs that continued from a checkpoint of an interrupted run

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


def results_dir_for(sweep: Sweep, storage: str | Path | StoreLocation) -> StoreLocation:
    """<storage>/<sweep name>: a local folder (made absolute), or a prefix of an object store (s3://, gs://).
    A URI is never taken for a local path: one the store cannot serve is a StorageError (exit 2)."""
    location = StoreLocation.parse(storage)
    if location.local:
        location = StoreLocation.parse(Path(location.base).expanduser().absolute())
    return location / sweep.name


def _shown(location: StoreLocation) -> Path | StoreLocation:
    """What callers get back: a Path for a local store (as before), the location otherwise."""
    return location.local_path if location.local else location


def _trainable(packs: dict[str, Pack], results_dir: StoreLocation, options: ExecutionOptions, resources: PackResources,
               resume_from: dict[str, str]):
    return tune.with_resources(
        tune.with_parameters(
            pack_trainable,
            packs=packs,
            results_dir=results_dir.uri,  # workers rebuild the location (credentials from their own chain)
            chunk_steps=options.chunk_steps,
            dtype=options.dtype,
            checkpoint_every=options.checkpoint_every,
            resume_from=resume_from,
            tf32=options.tf32,
        ),
        _pack_placement(packs, resources),
    )


def _pack_placement(packs: dict[str, Pack], resources: PackResources):
    """Each trial's request: the GPU share for packs of GPU-capable (neural) tasks, CPUs alone
    for CPU-only (linear) ones, so one sweep fills both kinds of slot."""

    def request(config: dict) -> tune.PlacementGroupFactory:
        task = get_task(packs[config["pack_id"]].experiment.task)
        return tune.PlacementGroupFactory([resources.for_task(task.runs_on_gpu).as_tune()])

    return request


def _run_config(name: str, results_dir: StoreLocation, options: ExecutionOptions, progress: SweepProgress) -> tune.RunConfig:
    # We snapshot the experiment at each checkpoint on purpose (see below); Tune warns about it.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Tune writes its experiment and the checkpoints beside the results: a local path, or the
    # bucket path with the store's pyarrow filesystem (custom endpoint included, no credentials in it).
    storage_path, storage_filesystem = results_dir.tune_storage()
    return tune.RunConfig(
        name=name,
        storage_path=storage_path,
        storage_filesystem=storage_filesystem,
        verbose=0,
        callbacks=[progress],
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        # Keep only the newest checkpoint of each trial: what a retry, or a resumed sweep, continues from.
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
    )


# ---------------------------------------------------------------- the packs record (JSON)


def _pack_record(pack: Pack) -> dict:
    e = pack.experiment
    return {
        "experiment": {
            "task": e.task,
            "settings": dataclasses.asdict(e.settings),
            "optimizer": e.optimizer,
            "grid": {name: list(values) for name, values in e.grid},
        },
        "configs": [{"config_id": c.config_id, "hyperparameters": dict(c.hyperparameters)} for c in pack.configs],
        "seeds": list(pack.seeds),
    }


def packs_document(sweep: Sweep, packs: list[Pack]) -> bytes:
    document = {"format": PACKS_RECORD_FORMAT, "sweep": sweep.name, "packs": {p.pack_id: _pack_record(p) for p in packs}}
    return json.dumps(document, indent=1, default=str).encode()


def _experiments(location: StoreLocation) -> list[str]:
    """The Tune experiment folders of the store (tune-*), by name."""
    return [name for name in location.children() if name.startswith(TUNE_PREFIX)]


def recorded_packs(results_dir: str | Path | StoreLocation, sweep: Sweep) -> dict[str, Pack]:
    """Packs recorded by earlier Tune experiments of this sweep, rebuilt from the sweep itself.

    A record only selects: each pack is rebuilt from the current sweep's own experiments and
    configs (sweeps.spec), kept only if every config id is one of the sweep's, its seeds are
    the sweep's, and the rebuilt pack has the recorded id. Nothing in the record is executed.
    """
    index: dict[str, tuple[Experiment, Config]] = {}
    for experiment in sweep.experiments:
        for values in experiment.configs():
            config = make_config(experiment, values)
            index[config.config_id] = (experiment, config)
    location = StoreLocation.parse(results_dir)
    packs: dict[str, Pack] = {}
    for experiment_name in _experiments(location):
        rel = f"{experiment_name}/{PACKS_RECORD}"
        try:
            document = json.loads(location.read_bytes(rel))
            entries = document["packs"].items()
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            print(f"{location.url(rel)}: unreadable pack record; its packs are planned afresh")
            continue
        for pack_id, entry in entries:
            try:
                ids = [c["config_id"] for c in entry["configs"]]
                seeds = tuple(int(s) for s in entry["seeds"])
            except (KeyError, TypeError, ValueError):
                continue
            if not ids or any(i not in index for i in ids) or not set(seeds) <= set(sweep.seeds):
                continue
            experiments = {id(index[i][0]) for i in ids}
            if len(experiments) != 1:
                continue
            pack = Pack(index[ids[0]][0], tuple(index[i][1] for i in ids), seeds)
            if pack.pack_id == pack_id:
                packs[pack_id] = pack
    return packs


def newest_checkpoints(results_dir: str | Path | StoreLocation, dtype: str) -> dict[str, tuple[int, str]]:
    """pack id -> (steps done, checkpoint directory relative to the store): the most advanced
    checkpoint of each pack.

    Found from the files alone (each checkpoint's pack.json), whatever state Tune's
    experiment files are in."""
    location = StoreLocation.parse(results_dir)
    newest: dict[str, tuple[int, str]] = {}
    for experiment_name in _experiments(location):
        files = {e.rel for e in location.list(experiment_name, recursive=True)}
        for meta in sorted(files):
            parts = meta.split("/")
            if len(parts) != 4 or parts[3] != CHECKPOINT_META or not parts[2].startswith("checkpoint_"):
                continue
            directory = meta.rsplit("/", 1)[0]
            try:
                record = json.loads(location.read_bytes(meta))
                pack_id, steps, kind = str(record["pack_id"]), int(record["steps_done"]), record["dtype"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if kind != dtype or f"{directory}/{CHECKPOINT_FILE}" not in files:
                continue
            if pack_id not in newest or steps > newest[pack_id][0]:
                newest[pack_id] = (steps, directory)
    return newest


def _finished_recorded(recorded: dict[str, Pack], finished: set) -> list[Pack]:
    """Recorded packs whose runs are all in the store (disjoint): what earlier runs finished, for the status."""
    taken: set[tuple[str, int]] = set()
    packs = []
    for pack in recorded.values():
        runs = {(c.config_id, s) for c in pack.configs for s in pack.seeds}
        if runs <= finished and not runs & taken:
            taken |= runs
            packs.append(pack)
    return packs


def _resumable(results_dir: StoreLocation, recorded: dict[str, Pack], finished: set, dtype: str) -> tuple[list[Pack], dict[str, str]]:
    """Unfinished recorded packs with a checkpoint (disjoint, most advanced first), and their checkpoints."""
    checkpoints = newest_checkpoints(results_dir, dtype)
    candidates = sorted(
        ((checkpoints[pid][0], recorded[pid]) for pid in checkpoints if pid in recorded),
        key=lambda item: (-item[0], item[1].pack_id),
    )
    taken: set[tuple[str, int]] = set(finished)
    packs = []
    for _, pack in candidates:
        runs = {(c.config_id, s) for c in pack.configs for s in pack.seeds}
        if runs & taken:
            continue
        taken |= runs
        packs.append(pack)
    return packs, {p.pack_id: str(checkpoints[p.pack_id][1]) for p in packs}


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class _Phase:
    """What the Tune experiment of this run did."""

    packs: int
    run_steps: int
    compute_seconds: float
    nodes: frozenset[str]


def _new_experiment(results_dir: StoreLocation, document: bytes) -> str:
    """A new tune-<time> experiment holding its packs record (the writer lock is held: no race)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        name = f"{TUNE_PREFIX}{stamp}" + (f"-{n}" if n else "")
        if results_dir.local:
            try:
                (results_dir.local_path / name).mkdir()
            except FileExistsError:
                continue
        elif results_dir.exists(name):
            continue
        results_dir.write_bytes(f"{name}/{PACKS_RECORD}", document)
        return name
    raise RuntimeError(f"cannot create a new Tune experiment folder in {results_dir}")


class _QuietTune(logging.Filter):
    """Drops Tune's advice that does not apply here (Tuner.restore: resuming is `--resume`) and its
    complaints about trials it stopped before their first result."""

    HIDDEN = ("Tuner.restore", "Failed to fetch metrics")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(h in record.getMessage() for h in self.HIDDEN)


for _name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
    logging.getLogger(_name).addFilter(_QuietTune())


class _Signals:
    """While packs run, SIGTERM stops the sweep as SIGINT does (during fit: Tune's handler, which
    stops the trials and returns); afterwards both handlers are restored (Tune leaves its own)."""

    def __enter__(self):
        self._active = threading.current_thread() is threading.main_thread()
        if self._active:
            self._sigint, self._sigterm = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    @staticmethod
    def _on_sigterm(signum, frame) -> None:
        handler = signal.getsignal(signal.SIGINT)  # Tune's while it runs: stop the trials, return from fit
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self._active:
            signal.signal(signal.SIGINT, self._sigint)  # Tune leaves its handler installed
            signal.signal(signal.SIGTERM, self._sigterm)


def _run_packs(sweep: Sweep, packs: list[Pack], resume_from: dict[str, str], results_dir: StoreLocation,
               options: ExecutionOptions, resources: PackResources, earlier: list[Pack]) -> _Phase:
    """Run the packs as one new Tune experiment; raises SweepInterrupted or RuntimeError unless all finish."""
    results_dir.makedirs()
    name = _new_experiment(results_dir, packs_document(sweep, packs))
    by_id = {p.pack_id: p for p in packs}
    progress = SweepProgress(sweep.name, packs, results_dir, options.show_progress, finished=earlier)
    grid = None
    try:
        tuner = tune.Tuner(
            _trainable(by_id, results_dir, options, resources, resume_from),
            param_space={"pack_id": tune.grid_search(list(by_id))},
            tune_config=tune.TuneConfig(reuse_actors=True),
            run_config=_run_config(name, results_dir, options, progress),
        )
        grid = tuner.fit()
    except KeyboardInterrupt:  # a second Ctrl-C: Tune's own handler gave up waiting
        pass
    done = finished_runs(results_dir)
    written = {p.pack_id for p in [*earlier, *packs] if all((c.config_id, s) in done for c in p.configs for s in p.seeds)}
    failed = [] if grid is None else [r.config.get("pack_id") for r in grid if r.error and r.config.get("pack_id") not in written]
    unfinished = [pid for pid in by_id if pid not in written and pid not in failed]
    if grid is None or unfinished:
        progress.finish("interrupted", written)
        raise SweepInterrupted(len(written), len(earlier) + len(packs), _shown(results_dir))
    if failed:
        progress.finish("failed", written)
        raise RuntimeError(
            f"{len(failed)} of {len(packs)} packs failed ({', '.join(failed)}) after retries; the others are saved: "
            f"fix the cause and rerun with --resume. First error: {grid.errors[0]}"
        )
    progress.finish("finished", written)
    compute = sum(r.metrics.get("compute_seconds", 0.0) for r in grid if r.metrics)
    return _Phase(len(packs), sum(p.run_steps for p in packs), compute, frozenset(progress.status.nodes))


def run_sweep(sweep: Sweep, storage: str | Path | StoreLocation = "results", *, resume: bool = False, options: ExecutionOptions = ExecutionOptions()) -> SweepRun:
    """Run every pending (config, seed) of `sweep`; results land under <storage>/<name>.

    Raises SweepInterrupted (a KeyboardInterrupt) when stopped by SIGINT / SIGTERM before the end,
    and StoreLocked (a SweepError) at once when another process is writing the same results folder."""
    results_dir = results_dir_for(sweep, storage)
    results_dir.check()  # an unreachable object store or a missing bucket: one line, exit 2, before Ray
    refuse_if_locked(results_dir)  # a second writer of the folder: refused at once, before Ray (exit 2)
    _refuse_overwrite(sweep, results_dir, resume)
    resources = options.resources or sweep.resources
    check_task_data(sweep)
    # Where it runs, checked before anything is written (a bad address, resources or storage: exit 2, no folder).
    started = time.perf_counter()
    dashboard_url = connect(options.address, options.num_cpus)
    ray_start = time.perf_counter() - started
    if options.show_progress and dashboard_url:
        print(f"Ray dashboard: {dashboard_url}")
    if resources.gpus > 0:
        parallel_slots(resources)  # some node must take a GPU pack (ClusterError otherwise)
    slots = parallel_slots(resources.for_task(runs_on_gpu=False))  # CPU packs at once: sizes the CPU packs
    check_storage(results_dir)
    with store_lock(results_dir):  # one writer per results folder, for the whole run
        _refuse_overwrite(sweep, results_dir, resume)
        return _run_sweep_locked(sweep, results_dir, resume, options, resources, slots, (started, ray_start, dashboard_url))


def _refuse_overwrite(sweep: Sweep, results_dir: StoreLocation, resume: bool) -> None:
    if has_results(results_dir) and not resume:
        raise SweepError(
            f"{results_dir} already holds results of sweep {sweep.name}; pass --resume to finish it, "
            "or choose another --storage or sweep name"
        )


def _run_sweep_locked(sweep: Sweep, results_dir: StoreLocation, resume: bool, options: ExecutionOptions, resources: PackResources,
                      slots: int, ray: tuple[float, float, str | None]) -> SweepRun:
    started, ray_start, dashboard_url = ray
    # The store records the sweep it holds (refusing a dtype or settings change under stored runs).
    print_notices(check_and_record(results_dir, sweep, options.dtype))
    damaged = set_aside_damaged(results_dir)  # packs whose files were truncated or lost: run again
    if damaged:
        print(f"Set aside {len(damaged)} damaged files of committed packs ({', '.join(map(str, damaged[:3]))}"
              f"{', ...' if len(damaged) > 3 else ''}); their packs run again (manifests kept in history/)")
    removed = remove_orphans(results_dir)  # files of interrupted writes: no manifest names them
    if removed:
        print(f"Removed {len(removed)} orphan files of interrupted writes from {results_dir}")
    finished = finished_runs(results_dir) & sweep_pairs(sweep) if resume else set()  # runs outside the sweep: ignored

    recorded = recorded_packs(results_dir, sweep) if resume else {}
    resumed, resume_from = _resumable(results_dir, recorded, finished, options.dtype)
    earlier = _finished_recorded(recorded, finished)
    covered = set(finished).union(*({(c.config_id, s) for c in p.configs for s in p.seeds} for p in resumed))
    # On GPUs a pack fills the device; on CPUs packs are sized to keep every slot busy.
    plan = plan_packs(sweep, slots, covered, options.runs_per_pack, gpu=resources.gpus > 0)
    packs = resumed + plan
    with _Signals():
        phase = _run_packs(sweep, packs, resume_from, results_dir, options, resources, earlier) if packs else None
    return SweepRun(
        results_dir=_shown(results_dir),
        packs=phase.packs if phase else 0,
        run_steps=phase.run_steps if phase else 0,
        skipped_runs=len(finished),
        wall_seconds=time.perf_counter() - started,
        ray_start_seconds=ray_start,
        compute_seconds=phase.compute_seconds if phase else 0.0,
        slots=slots,
        nodes=phase.nodes if phase else frozenset(),
        dashboard_url=dashboard_url,
        resumed_packs=len(resumed),
    )
