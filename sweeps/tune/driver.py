"""Run a sweep to completion on Ray Tune: the orchestration of its two stages.

`run_sweep` runs the grid (the tuning stage): every (config, seed) of the sweep without a
score. `confirm_sweep` runs the confirmation stage: each method's configuration selected on
the tuning seeds, again on fresh seeds (records.ConfirmationRecord). Both go through the same
steps, all through the one `Store` of the results folder: check the store, take the writer lock
(a second writer, an unwritable storage and a resume that would change what stored runs mean
are refused before Ray starts), connect, set aside damaged packs and
remove orphans, continue interrupted packs from their checkpoints (resume.py), plan the rest
(sweeps.spec.plan) and run every pack as one new Tune experiment (wiring.py). Notices go to
`ExecutionOptions.notify`; nothing here prints. A raced sweep (`race:`) runs its tuning stage
in rounds (racing.py), every method's rounds in that one experiment.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Callable

from cluster.connect import connect
from sweeps.analysis.confirm import selected_configs, unconfirmable
from sweeps.analysis.queries import Analysis
from sweeps.spec import (
    CONFIRMATION,
    TUNING,
    CostModel,
    Pack,
    PackResources,
    Sweep,
    SweepError,
    confirmation_seeds,
    plan_confirmation,
    plan_packs,
)
from sweeps.store.location import StoreLocation
from sweeps.store.sweep_record import check_streams
from sweeps.store.records import ConfirmationRecord, RecordError
from sweeps.store.store import Store
from sweeps.tune.grafana import dashboard_hint
from sweeps.tune.options import ExecutionOptions, SweepInterrupted, SweepRun
from sweeps.tune.progress import quiet_tune
from sweeps.tune.racing import RaceRounds, RoundInterrupted, race_progress
from sweeps.tune.reachable import check_storage
from sweeps.tune.resume import StageStart, config_index, covered, finished_recorded, recorded_packs, resumable
from sweeps.tune.slots import parallel_slots
from sweeps.tune.stages import check, finish, record
from sweeps.tune.wiring import Planned, Signals, run_packs

__all__ = ["ExecutionOptions", "SweepInterrupted", "SweepRun", "confirm_sweep", "run_sweep"]


@dataclass(frozen=True)
class _Cluster:
    """Ray as this run found it."""

    started: float  # perf_counter when connecting began
    ray_start: float
    dashboard_url: str | None
    slots: int  # CPU packs at once
    gpu_slots: int  # GPU packs at once (0 without GPU packs)

    def plan_options(self, options: ExecutionOptions, resources: PackResources) -> dict:
        """What `plan_packs` / `plan_confirmation` need beside the runs: the slots and the cost model."""
        costs = CostModel(chunk_steps=options.chunk_steps, checkpoint_every=options.checkpoint_every,
                          threads=max(1.0, resources.cpus), dtype=options.dtype)
        return {"cpus": self.slots, "runs_per_pack": options.runs_per_pack, "gpu": resources.gpus > 0,
                "gpu_slots": max(1, self.gpu_slots), "costs": costs}

    def planned(self, options: ExecutionOptions, resources: PackResources) -> Planned:
        """The slots and cost model as the searcher orders packs by them."""
        plan = self.plan_options(options, resources)
        return Planned(self.slots + self.gpu_slots, plan["costs"], plan["gpu"])


def _connect(store: Store, options: ExecutionOptions, resources: PackResources, sweep: Sweep) -> _Cluster:
    """Where it runs, checked before anything is written (a bad address, resources or storage: exit 2, no folder).
    The sweep's own learners' module files travel to the workers (Ray's runtime environment)."""
    quiet_tune()  # before Ray starts: its banners and hints do not apply to a sweep's output
    started = time.perf_counter()
    modules = tuple(sorted({d.module_file for d in sweep.learners if d.module_file}))
    dashboard_url = connect(options.address, options.num_cpus, modules)
    ray_start = time.perf_counter() - started
    if options.display is not None and dashboard_url:  # a run a person follows: how to open its dashboard
        for line in dashboard_notice(dashboard_url):
            options.notice(line)
    # some node must take a GPU pack (ClusterError otherwise); GPU packs at once size the GPU packs
    gpu_slots = parallel_slots(resources) if resources.gpus > 0 else 0
    slots = parallel_slots(resources.for_task(runs_on_gpu=False))  # CPU packs at once: sizes the CPU packs
    check_storage(store.location)
    return _Cluster(started, ray_start, dashboard_url, slots, gpu_slots)


def dashboard_notice(url: str) -> list[str]:
    """How to get into Ray's dashboard (token authentication is on) and what to look at there."""
    return [
        f"Ray dashboard: {url} (it asks for a token: paste what `ray get-auth-token` prints)",
        "  there: Jobs > this driver > its Tune trials, one per pack (run_steps_done, fraction_done, mean_loss); "
        "Metrics: the fade_sweep_* gauges (run-steps, rate, best score per experiment) once Prometheus and "
        "Grafana run (docs/clusters.md, 'The dashboard')",
        dashboard_hint(),
    ]


Planner = Callable[[set[tuple[str, int]]], list[Pack]]  # runs covered -> packs for the rest


def _start(sweep: Sweep, store: Store, stage: str, seeds: tuple[int, ...], resume: bool, finished: set,
           plan: Planner, options: ExecutionOptions) -> StageStart:
    """A stage's packs: its interrupted packs continued (`resume`), and what else it lacks planned."""
    recorded = recorded_packs(store, sweep, stage, seeds, options.notify) if resume else {}
    resumed, resume_from = resumable(store, recorded, finished, options.dtype)
    return StageStart(resumed + plan(covered(finished, resumed)), resume_from, finished_recorded(recorded, finished))


def _execute(sweep: Sweep, store: Store, start: StageStart, skipped: int, options: ExecutionOptions,
             resources: PackResources, cluster: _Cluster, rounds: RaceRounds | None = None) -> SweepRun:
    """Run the stage's packs as one Tune experiment (and, for a race, every round that follows them)."""
    planned = cluster.planned(options, resources)
    phase = None
    with Signals():
        if start.packs:
            progress = None if rounds is None else race_progress(sweep, start, store, options, rounds)
            phase = run_packs(sweep, start.packs, start.resume_from, store, options, resources, start.earlier, planned,
                              rounds.after if rounds is not None else None, progress)
    reader = finish(store, options.notice)  # the record stage again, at the end of the packs
    started_over = len(start.resume_from) - len(phase.restored) if phase else 0
    if started_over > 0:  # the worker's reason is in its log (Ray keeps workers' output out of the driver's)
        options.notice(f"{started_over} interrupted pack{'s' if started_over > 1 else ''} could not continue from "
                       "a checkpoint (unreadable, or another pack's) and started over; results are the same")
    return SweepRun(
        results_dir=store.location,
        packs=phase.packs if phase else 0,
        run_steps=phase.run_steps if phase else 0,
        skipped_runs=skipped,
        wall_seconds=time.perf_counter() - cluster.started,
        ray_start_seconds=cluster.ray_start,
        compute_seconds=phase.compute_seconds if phase else 0.0,
        slots=cluster.slots,
        nodes=phase.nodes if phase else frozenset(),
        dashboard_url=cluster.dashboard_url,
        resumed_packs=len(phase.restored) if phase else 0,
        store=reader,
    )


def _race(sweep: Sweep, store: Store, resume: bool, options: ExecutionOptions, resources: PackResources,
          cluster: _Cluster) -> SweepRun:
    """A raced tuning stage: every method's rounds in one Tune experiment (racing.py)."""
    skipped = len(store.finished_runs() & sweep.pairs) if resume else 0
    rounds = RaceRounds(sweep, store, cluster.plan_options(options, resources))
    start = rounds.start(resume, options.dtype, options.notify)
    try:
        return _execute(sweep, store, start, skipped, options, resources, cluster, rounds)
    except SweepInterrupted as err:
        raise RoundInterrupted(err, rounds) from None


def _check(sweep: Sweep, options: ExecutionOptions) -> PackResources:
    """The check stage of run_sweep and confirm_sweep: what the packs ask for (the options' resources, else the
    sweep file's), and every refusal about the sweep itself (stages.check)."""
    resources = options.resources or sweep.resources
    check(sweep, resources, options.engine)
    return resources


def run_sweep(sweep: Sweep, storage: str | os.PathLike | StoreLocation | Store = "results", *, resume: bool = False,
              options: ExecutionOptions = ExecutionOptions()) -> SweepRun:
    """Run every pending (config, seed) of `sweep` (the tuning stage); results land under <storage>/<name>
    (`Store.of_sweep`), or in `storage` itself when it is the sweep's Store (the command line's, opened once).
    The stages of stages.py in order: check, lock (held for the whole run, taken before Ray starts: every
    refusal that needs no cluster comes first), plan, record, execute.

    Raises SweepInterrupted (a KeyboardInterrupt) when stopped by SIGINT / SIGTERM before the end,
    and StoreLocked (a SweepError) at once when another process is writing the same results folder."""
    store = storage if isinstance(storage, Store) else Store.of_sweep(sweep, storage)
    resources = _check(sweep, options)
    with store.writing(sweep, options.dtype, resume):  # the lock stage
        cluster = _connect(store, options, resources, sweep)
        record(store, options.notice, store.record_sweep(sweep, options.dtype))  # checked again, under the lock
        if sweep.race is not None:  # seeds in rounds, each method's handed out as its previous one is in
            return _race(sweep, store, resume, options, resources, cluster)
        finished = store.finished_runs() & sweep.pairs if resume else set()  # runs outside the sweep: ignored

        def plan(done: set) -> list[Pack]:  # on GPUs a pack fills the device; on CPUs packs keep every slot busy
            return plan_packs(sweep, done=done, **cluster.plan_options(options, resources))

        start = _start(sweep, store, TUNING, sweep.seeds, resume, finished, plan, options)
        return _execute(sweep, store, start, len(finished), options, resources, cluster)


def confirmation_record(store: Store, seeds: int | tuple[int, ...], stat: str = "mean") -> ConfirmationRecord:
    """What the confirmation stage of a finished grid runs: the configuration `stat` selects per
    (setting, method) on the tuning seeds, on `seeds` fresh seeds (or the seeds listed).

    SweepError (exit 2): no recorded sweep, stored runs of another version of a stream than this code draws
    (sweep_record.check_streams), tuning runs missing, or listed seeds that are tuning seeds."""
    sweep = store.sweep
    if sweep is None:
        raise SweepError(f"{store.location}: no recorded sweep (sweep.yaml); run the sweep first")
    check_streams(store.location, store.record, (sweep,), {m.task for m in store.manifests})
    lacking = store.missing_runs().height
    if lacking:
        raise SweepError(f"{store.location}: {lacking} tuning runs have no result; "
                         f"finish the grid first (`{store.resume_command()}`)")
    try:
        fresh = confirmation_seeds(sweep.seeds, list(seeds) if isinstance(seeds, tuple) else seeds)
    except ValueError as err:
        raise SweepError(f"--seeds: {err}") from None
    chosen = selected_configs(Analysis.of(store, stat).scores, stat)  # of a raced sweep: among the race's survivors
    return ConfirmationRecord(stat=stat, seeds=fresh, tuning_seeds=sweep.seeds, selected=chosen.to_dicts())


def confirm_sweep(results_dir: str | os.PathLike | StoreLocation | Store, seeds: int | tuple[int, ...], *, stat: str = "mean",
                  options: ExecutionOptions = ExecutionOptions()) -> SweepRun:
    """Run the confirmation stage of the store's finished grid (see `confirmation_record`): fresh-seed
    runs of each method's selected configuration, into the same store, stage `confirmation`; the stages
    of run_sweep, the lock taken first (the tuning runs are read under it).

    Runs already stored are kept, interrupted packs continue from their checkpoints: calling it
    again after an interrupt resumes. The store's dtype is used (options.dtype is ignored)."""
    store = Store.open(results_dir)
    with store.writing():  # the lock stage
        confirmation = confirmation_record(store, seeds, stat)
        for line in unconfirmable(Analysis.of(store, stat).scores, stat):  # a method the best table lists, said here too
            options.notice(line)
        sweep = store.sweep
        options = dataclasses.replace(options, dtype=store.record.dtype if store.record is not None else options.dtype)
        resources = _check(sweep, options)
        cluster = _connect(store, options, resources, sweep)
        record(store, options.notice, _record_confirmation(store, confirmation))
        finished = store.finished_runs(CONFIRMATION) & confirmation.pairs()
        index = config_index(sweep)
        selected = [index[row.config_id] for row in confirmation.selected]

        def plan(done: set) -> list[Pack]:
            return plan_confirmation(selected, confirmation.seeds, done=done, **cluster.plan_options(options, resources))

        start = _start(sweep, store, CONFIRMATION, confirmation.seeds, True, finished, plan, options)
        return _execute(sweep, store, start, len(finished), options, resources, cluster)


def _record_confirmation(store: Store, confirmation: ConfirmationRecord) -> list[str]:
    """Record the confirmation stage (under the lock); what changed since an earlier one, said."""
    try:
        earlier = store.confirmation
    except RecordError as err:  # damaged: recorded anew (the runs it named stay in the store)
        earlier, notices = None, [f"{err}: recorded anew"]
    else:
        notices = []
    if earlier is not None and (earlier.stat, earlier.seeds) != (confirmation.stat, confirmation.seeds):
        notices.append(f"The confirmation stage changed (was {earlier.stat} on seeds {list(earlier.seeds)}); "
                       "stored runs outside the new one are ignored")
    store.record_confirmation(confirmation)
    return notices
