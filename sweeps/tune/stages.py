"""A run as one sequence of named stages: `run_sweep` (the tuning stage) and `confirm_sweep` (the confirmation
stage), for the command line and library callers alike.

    resolve   the sweep and its store                  `preflight.resolve` (the command line), or the caller
    check     what the sweep asks for can run here     `preflight.check`: task data, GPUs, engines (confirm: also
                                                       `confirmation_record`, what it confirms)
    lock      the store is free and allows the run     `SweepWriter` entered (`Store.writing`): reachable, no other
                                                       writer, the writer lock, what is stored allows the run
    plan      where it runs and which packs            `driver.connect_cluster`, `driver.start` (resume, plan)
    record    what the store keeps of the run          `SweepWriter.record_sweep` / `record_confirmation`: recorded,
                                                       damaged packs set aside, the runs already stored
    execute   the packs on Ray Tune                    `driver.execute` (wiring.py), then `SweepWriter.finish`, the
                                                       record stage again; a race: `driver.race`, its rounds inside
    report    what the command prints                  the command line, from the `SweepRun`

The command line asks resolve, check and the lock stage before Ray loads (sweeps/tune/preflight.py: a refusal
takes well under a second), then calls these. The lock is held from the lock stage to the end; the store is
asked once per stage, through the `SweepWriter`, for everything that stage needs. A raced sweep runs its
rounds inside `execute`, on the store the earlier stages checked and locked.
"""

from __future__ import annotations

import dataclasses
import os

from sweeps.analysis.confirm import selected_configs, unconfirmable
from sweeps.analysis.queries import Analysis
from sweeps.plan import CONFIRMATION, TUNING, Pack, plan_confirmation, plan_packs
from sweeps.spec import PackResources, Sweep, SweepError, confirmation_seeds
from sweeps.store.location import StoreLocation
from sweeps.store.records import ConfirmationRecord
from sweeps.store.store import Store
from sweeps.store.sweep_record import check_streams
from sweeps.store.writer import SweepWriter
from sweeps.tune.driver import connect_cluster, execute, race, start
from sweeps.tune.options import ExecutionOptions, SweepInterrupted, SweepRun
from sweeps.tune.preflight import check
from sweeps.tune.resume import config_index

__all__ = ["ExecutionOptions", "SweepInterrupted", "SweepRun", "confirm_sweep", "confirmation_record", "run_sweep"]


def run_sweep(sweep: Sweep, storage: str | os.PathLike | StoreLocation | Store = "results", *, resume: bool = False,
              options: ExecutionOptions = ExecutionOptions()) -> SweepRun:
    """Run every pending (config, seed) of `sweep` (the tuning stage); results land under <storage>/<name>
    (`Store.of_sweep`), or in `storage` itself when it is the sweep's Store (the command line's, opened once).
    The lock is held for the whole run and taken before Ray starts: every refusal that needs no cluster
    comes first.

    Raises SweepInterrupted (a KeyboardInterrupt) when stopped by SIGINT / SIGTERM before the end,
    and StoreLocked (a SweepError) at once when another process is writing the same results folder."""
    store = storage if isinstance(storage, Store) else Store.of_sweep(sweep, storage)  # resolve
    resources = _check(sweep, options)  # check
    with SweepWriter(store, sweep, options.dtype, resume) as writer:  # lock
        cluster = connect_cluster(store, options, resources, sweep)  # plan: where it runs
        recorded = writer.record_sweep()  # record: checked again, under the lock
        for line in recorded.notices:
            options.notice(line)
        if sweep.race is not None:  # seeds in rounds, each method's handed out as its previous one is in
            return race(sweep, writer, len(recorded.finished), resume, options, resources, cluster)

        def plan(done: set) -> list[Pack]:  # on GPUs a pack fills the device; on CPUs packs keep every slot busy
            return plan_packs(sweep, done=done, **cluster.plan_options(options, resources))

        begun = start(sweep, store, TUNING, sweep.seeds, resume, recorded.finished, plan, options)  # plan: which packs
        return execute(sweep, writer, begun, len(recorded.finished), options, resources, cluster)


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


def confirm_sweep(results_dir: str | os.PathLike | StoreLocation | Store, seeds: int | tuple[int, ...], *,
                  stat: str = "mean", options: ExecutionOptions = ExecutionOptions()) -> SweepRun:
    """Run the confirmation stage of the store's finished grid (see `confirmation_record`): fresh-seed
    runs of each method's selected configuration, into the same store, stage `confirmation`; the stages
    of run_sweep, the lock taken first (the tuning runs are read under it).

    Runs already stored are kept, interrupted packs continue from their checkpoints: calling it
    again after an interrupt resumes. The store's dtype is used (options.dtype is ignored)."""
    store = Store.open(results_dir)
    with SweepWriter(store) as writer:  # lock
        confirmation = confirmation_record(store, seeds, stat)  # check: what it confirms
        for line in unconfirmable(Analysis.of(store, stat).scores, stat):  # a method the best table lists, said here too
            options.notice(line)
        sweep = store.sweep
        options = dataclasses.replace(options, dtype=store.record.dtype if store.record is not None else options.dtype)
        resources = _check(sweep, options)  # check: what the packs ask for
        cluster = connect_cluster(store, options, resources, sweep)  # plan: where it runs
        recorded = writer.record_confirmation(confirmation)  # record
        for line in recorded.notices:
            options.notice(line)
        index = config_index(sweep)
        selected = [index[row.config_id] for row in confirmation.selected]

        def plan(done: set) -> list[Pack]:
            return plan_confirmation(selected, confirmation.seeds, done=done, **cluster.plan_options(options, resources))

        begun = start(sweep, store, CONFIRMATION, confirmation.seeds, True, recorded.finished, plan, options)
        return execute(sweep, writer, begun, len(recorded.finished), options, resources, cluster)


def _check(sweep: Sweep, options: ExecutionOptions) -> PackResources:
    """The check stage of both: what the packs ask for (the options' resources, else the sweep file's), and
    every refusal about the sweep itself (preflight.check)."""
    resources = options.resources or sweep.resources
    check(sweep, resources, options.engine)
    return resources
