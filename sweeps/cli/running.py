"""The commands that run sweeps: `run` and `confirm` (on an embedded Ray or a cluster), `submit` and
`logs` (Ray Jobs), `run --dry-run`. Ray, torch and the driver load inside them, never before:
the reading commands stay light."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from typing import TYPE_CHECKING

from sweeps.cli.parser import UserError
from sweeps.cli.reading import open_results, table_text
from sweeps.plan import CostModel
from sweeps.spec import PackResources, resolve_sweep
from sweeps.tune.preflight import ask_lock, check, resolve

if TYPE_CHECKING:
    from sweeps.spec import Sweep
    from sweeps.store import Store
    from sweeps.tune.options import ExecutionOptions


def _resources(args: argparse.Namespace, sweep) -> PackResources:
    return PackResources(
        args.cpus_per_pack if args.cpus_per_pack is not None else sweep.resources.cpus,
        args.gpus_per_pack if args.gpus_per_pack is not None else sweep.resources.gpus,
    )


def _say_if_attaching(args: argparse.Namespace) -> None:
    """The first line of a run or confirm on $RAY_ADDRESS: it attaches to that cluster, not an embedded Ray."""
    address = None if args.address else os.environ.get("RAY_ADDRESS")
    if address:
        print(f"Attaching to the Ray cluster at {address} (RAY_ADDRESS is set)", flush=True)


def cmd_run(args: argparse.Namespace) -> None:
    """`run`: the stages of sweeps/tune/stages.py in order (resolve, check and the lock asked before Ray loads,
    then `run_sweep`'s, then the report); `--dry-run` stops after check, with the plan and its estimate."""
    if args.calibrate and not args.dry_run:
        raise UserError("--calibrate: only with --dry-run (it measures the rates the estimate uses); add --dry-run")
    _say_if_attaching(args)
    sweep, store = resolve(args.sweep, args.storage, args.race, args.resume, print)
    if args.resume and "race" not in sweep.document:
        args.race = sweep.race is not None  # kept racing as recorded: the interrupt's hint then says --race
    options = _execution_options(args, sweep)  # once: the dry run, the driver and every trial read it
    check(sweep, options.resources, options.engine)  # before Ray, before the plan is printed
    print(f"Sweep {sweep.name}: {sweep.runs:,} runs, {sweep.run_steps:.3e} run-steps ({sweep.source})")
    if sweep.race is not None:
        print(race_line(sweep))
    if args.dry_run:
        _dry_run_stages(args, sweep, store, options)
        return
    compiling = _before_ray(sweep, store, options, args.resume)
    from sweeps.cli.live import final_report, reporting
    from sweeps.tune.stages import confirm_sweep, run_sweep

    with reporting(args, store):  # the live report's path first; an interrupted live page is made static
        outcome = run_sweep(sweep, store, resume=args.resume, options=options)
        _summary(outcome, "every (config, seed) already has a score", compiling)
        print(f"Results: {outcome.results_dir}\n")
        print(table_text(outcome.store, "best", args.table_format).rstrip("\n"))
        if sweep.confirm_seeds:  # the sweep file's confirm: block, after the grid
            print(f"\nConfirmation: each method's selected configuration on {len(sweep.confirm_seeds)} fresh seeds")
            outcome = confirm_sweep(outcome.store, sweep.confirm_seeds, options=options)
            _summary(outcome, "every confirmation run already has a score")
            print(table_text(outcome.store, "confirm", args.table_format).rstrip("\n"))
        if not args.no_report:  # after the confirmation stage: the report reads both (an interrupt: made static)
            print(f"\n{final_report(outcome.store)}")


def _dry_run_stages(args: argparse.Namespace, sweep: Sweep, store: Store, options: ExecutionOptions) -> None:
    """`run --dry-run`: what the plan stage would run (of a race: round 1) and its estimate, then the
    confirmation stage's size."""
    if sweep.race is not None:  # what runs first; the later rounds depend on its scores
        print(race_plan_line(sweep))
    done = store.finished_runs() if args.resume else set()  # a resume runs only what the store lacks
    _dry_run(_first_round(sweep), options, done, args.calibrate, sweep if sweep.race is not None else None)
    if sweep.confirm_seeds:  # one selected configuration per experiment, on the fresh seeds
        steps = sum(e.settings.steps for e in sweep.experiments) * len(sweep.confirm_seeds)
        print(f"Then confirmation: {len(sweep.experiments)} selected configurations x {len(sweep.confirm_seeds)} fresh "
              f"seeds = {len(sweep.experiments) * len(sweep.confirm_seeds):,} runs, {steps:.3e} run-steps")


def _before_ray(sweep: Sweep, store: Store, options: ExecutionOptions, resume: bool) -> float:
    """What comes before Ray loads: the lock stage asked once (taken and released: a refusal in well under a
    second; the driver takes it again for the whole run), the stream cache's setting, the sweep's own rules
    compiled (their seconds)."""
    if options.num_cpus and not options.address:  # the embedded Ray runs that many packs on this machine's cores
        from sweeps.cli.text import oversubscribed_note

        if note := oversubscribed_note(options.num_cpus):
            print(note)
    ask_lock(store, sweep, options.dtype, resume)
    _check_stream_cache()  # before Ray starts
    return _compile_own(sweep, options)


def race_line(sweep) -> str:
    """What a raced sweep runs, before it runs: its rounds and the bounds of its cost."""
    race = sweep.race
    schedule = race.schedule(sweep.seeds)
    least = sum((e.size * schedule[0] + schedule[-1] - schedule[0]) * e.settings.steps for e in sweep.experiments)
    return (f"Race: rounds of {', '.join(map(str, schedule))} seeds; after each, a configuration worse than its "
            f"method's best (one-sided paired t-test on log errors, Holm, alpha={race.alpha:g}) stops getting seeds: "
            "between "
            f"{least:.3e} and {sweep.run_steps * len(race.seeds(sweep.seeds)) // len(sweep.seeds):.3e} run-steps")


def race_plan_line(sweep) -> str:
    """A raced sweep's dry run: the plan below is round 1's."""
    schedule = sweep.race.schedule(sweep.seeds)
    first, most = _first_round(sweep), sweep.run_steps * schedule[-1] // len(sweep.seeds)
    return (f"Dry run of a race: the plan and estimate below are round 1's of at most {len(schedule)} (every "
            f"configuration on {schedule[0]} seeds: {first.runs:,} runs, {first.run_steps:.3e} run-steps); later "
            f"rounds depend on its scores, at most {most:.3e} run-steps in all "
            "if nothing is eliminated")


def _first_round(sweep):
    """A raced sweep as its first round: every configuration on the first `min_seeds` seeds (else the sweep)."""
    if sweep.race is None:
        return sweep
    first = sweep.race.seeds(sweep.seeds)[: sweep.race.schedule(sweep.seeds)[0]]
    return dataclasses.replace(sweep, seeds=first, race=None)


def _check_stream_cache() -> None:
    """A bad FADE_STREAM_CACHE_MB is one line now, not an error in every trial."""
    from tasks.stream_cache import stream_cache_budget

    try:
        stream_cache_budget()
    except ValueError as err:
        raise UserError(str(err)) from None


def _execution_options(args: argparse.Namespace, sweep) -> ExecutionOptions:
    """The run's options, built once from the parsed flags: each flag fills the field of its name (a flag
    a command lacks, such as `confirm`'s --dtype, keeps the field's default); the pack resources are the
    flags' over the sweep file's. Progress and notices go to stdout as they happen (a log file too)."""
    from sweeps.cli.progress import progress_display
    from sweeps.tune.options import ExecutionOptions

    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(ExecutionOptions) if hasattr(args, f.name)}
    if getattr(args, "no_report", False):  # no live report either
        flags["report_every"] = None
    return ExecutionOptions(**flags, resources=_resources(args, sweep), notify=functools.partial(print, flush=True),
                            display=progress_display)


def _compile_own(sweep, options: ExecutionOptions) -> float:
    """The sweep's own linear rules, loaded from where the run took them (refused in one line if gone or
    changed since the store recorded them) and compiled before Ray and the packs start; their seconds."""
    from fade_core.linear import RuleError
    from sweeps.packs.own import compile_own
    from sweeps.spec.own import LearnerError

    try:
        seconds = compile_own(sweep.experiments, options.dtype, options.engine)
    except (LearnerError, RuleError) as err:
        raise UserError(f"{sweep.source}: {err}") from None
    for name, took in seconds.items():
        print(f"Compiled learner {name} ({options.dtype}) in {took:.1f} s (numba caches it by the rule's source)")
    return sum(seconds.values())


def _summary(outcome, nothing: str, compiling: float = 0.0) -> None:
    """What a run or confirm did: resumed runs and packs, then the Done line (or that nothing ran)."""
    from sweeps.cli.text import done_line

    if outcome.skipped_runs:
        print(f"Resumed: {outcome.skipped_runs:,} runs were already in the store and were not re-run.")
    if outcome.resumed_packs:
        n = outcome.resumed_packs
        print(f"Resumed: {n} interrupted packs continued from their checkpoints." if n > 1
              else "Resumed: 1 interrupted pack continued from its checkpoint.")
    if outcome.packs:
        print(done_line(outcome, outcome.status, compiling))
    else:
        print(f"Nothing to run: {nothing}.")


def cmd_confirm(args: argparse.Namespace) -> None:
    """The confirmation stage of a finished sweep, then its report rewritten; run again after an interrupt, it
    resumes."""
    _say_if_attaching(args)
    store = open_results(args.results_dir)
    ask_lock(store)  # a sweep still being written: refused before Ray loads
    from sweeps.tune.stages import confirm_sweep

    sweep = store.sweep
    if sweep is None:
        raise UserError(f"{args.results_dir}: no recorded sweep (sweep.yaml); give STORAGE/<sweep name> of a sweep run by fade-sweep")
    seeds = args.seeds or sweep.confirm_seeds or len(sweep.seeds)
    options = _execution_options(args, sweep)  # its dtype is the store's (confirm has no --dtype)
    _check_stream_cache()  # before Ray starts
    dtype = store.record.dtype if store.record is not None else options.dtype
    compiling = _compile_own(sweep, dataclasses.replace(options, dtype=dtype))
    outcome = confirm_sweep(store, seeds, stat=args.stat, options=options)
    _summary(outcome, "every confirmation run already has a score", compiling)
    print(f"Results: {outcome.results_dir}\n")
    print(table_text(outcome.store, "confirm", "md", args.stat).rstrip("\n"))
    if not args.no_report:  # the report's "How sure are we?" now has the confirmation table
        from sweeps.cli.live import final_report

        print(f"\n{final_report(outcome.store, args.stat)}")


def _dry_run(sweep, options: ExecutionOptions, done: set[tuple[str, int]] = frozenset(), calibrate: bool = False,
             raced=None) -> None:
    """The plan and its estimate (`calibrate`: rates measured here); `raced`: the race whose first round `sweep`
    is, whose best and worst case follow."""
    from sweeps.cli.text import load_note, oversubscribed_note, plan_text, race_bounds_text
    from sweeps.packs.dryrun import estimate, race_bounds

    resources = options.resources
    cpu_only = resources.for_task(runs_on_gpu=False)
    if options.address:  # the cluster's nodes give the slots; without one no Ray loads
        from cluster.connect import connect
        from sweeps.tune.slots import parallel_slots

        connect(options.address)
        slots = parallel_slots(cpu_only)
        gpu_slots = parallel_slots(resources) if resources.gpus > 0 else 0
    else:
        cpus = options.num_cpus or os.cpu_count() or 1
        slots = int(cpus // resources.cpus)
        gpu_slots = min(slots, int(_gpu_count() // resources.gpus)) if resources.gpus > 0 else 0
        if slots == 0:
            raise UserError(f"--cpus-per-pack {resources.cpus:g} is more than the {cpus} CPUs of this machine")
    costs = CostModel(chunk_steps=options.chunk_steps, checkpoint_every=options.checkpoint_every,
                      threads=max(1.0, resources.cpus), dtype=options.dtype)
    if set(sweep.pairs) <= set(done):
        print("Nothing to run: every (config, seed) already has a score.")
        return
    plan = estimate(sweep, slots, resources, options.runs_per_pack, options.dtype, gpu_slots, not options.address,
                    costs, options.engine, done, calibrate)
    notes = ([oversubscribed_note(slots * resources.cpus), load_note(None, calibrate, plan.wall_seconds, slots)]
             if not options.address else [])
    print(plan_text(sweep, resources, plan, len(done & set(sweep.pairs)), notes))
    if raced is not None and not done:
        print(race_bounds_text(race_bounds(raced, slots, costs, plan.fixed_seconds), raced.run_steps))


def _gpu_count() -> int:
    """GPUs this machine shows to a process (the NVIDIA driver's list, CUDA_VISIBLE_DEVICES applied), without
    loading torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        present = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0
    return present if visible is None else min(present, len([d for d in visible.split(",") if d.strip()]))


def _refuse_if_being_written(storage: str, name: str) -> None:
    """A second writer of the same results folder is refused before a job is submitted, where
    the storage is visible from here too (a shared mount or an object store); otherwise the
    job itself is refused on the cluster (exit 2 in its logs)."""
    from sweeps.store import Store, StoreLocation
    from sweeps.store.location import StorageError

    location = StoreLocation.parse(storage) / name  # a URI the store cannot serve: exit 2 here
    try:
        ask_lock(Store(location))  # nothing there (no lock): nothing to refuse
    except StorageError:
        return  # not reachable from here; the cluster checks it


def cmd_submit(args: argparse.Namespace) -> None:
    from sweeps.cli import jobs

    sweep = resolve_sweep(args.sweep)
    _refuse_if_being_written(args.storage, sweep.name)
    job_id = jobs.submit(sweep, args.address, args.storage, args.run_args, args.pip)
    print(job_id)
    print(f"Follow it: fade-sweep status {job_id} --address {args.address}; fade-sweep logs {job_id} --address {args.address} --follow",
          file=sys.stderr)


def cmd_logs(args: argparse.Namespace) -> None:
    from cluster.errors import ClusterError
    from sweeps.cli import jobs

    try:
        jobs.logs(args.address, args.job_id, args.follow, write=print)
    except ClusterError as err:  # unreachable: nothing is known of the job
        raise UserError(str(err)) from None
    except RuntimeError as err:
        if jobs.is_missing_job(err):
            raise UserError(f"{args.job_id}: no such job on this cluster ({err})") from None
        raise UserError(f"{args.job_id}: the cluster's job server did not answer the request ({err})") from None
