"""`fade-sweep`: run sweeps on Ray Tune (locally or on a cluster), follow them, print tables and reports.

Exit codes (interface.md): 0 ok, 2 bad input (one line on stderr, nothing written),
1 failure, 130 interrupted (Ctrl-C or SIGTERM; finished packs are kept, `--resume` continues),
141 when the reader of stdout went away (`fade-sweep presets | head -1`: quiet, as `cat` would be).
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
import os
import shlex
import sys
from pathlib import Path

from cluster.errors import ClusterError
from sweeps.analysis import TABLES
from sweeps.analysis.stats import STATS
from sweeps.spec import PackResources, SweepError, check_task_data, cpu_only_tasks, preset_names, resolve_sweep
from sweeps.spec.plan import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK_STEPS

BAD_INPUT, FAILURE, INTERRUPTED = 2, 1, 130


class UserError(Exception):
    """Bad input from the command line; printed as one line, exit code 2."""


def _int_at_least(low: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    return parse


def _float_above(low: float, inclusive: bool, what: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not (math.isfinite(value) and (value >= low if inclusive else value > low)):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")


def _seed_list(text: str) -> int | tuple[int, ...]:
    """`--seeds`: N (fresh seeds) or a comma-separated list of distinct seeds >= 0."""
    if "," not in text:
        return _positive_int(text)
    seeds = tuple(_int_at_least(0, "seeds >= 0")(part.strip()) for part in text.split(",") if part.strip())
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"repeated seed in {text!r}")
    return seeds
_nonnegative_int = _int_at_least(0, "an integer >= 0")
_positive_float = _float_above(0.0, False, "a positive number")
_nonnegative_float = _float_above(0.0, True, "a number >= 0")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fade-sweep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    execution = argparse.ArgumentParser(add_help=False)  # how packs run: shared by run and confirm
    execution.add_argument("--address", help="attach to a running Ray cluster (HOST:PORT, ray://..., auto); default: embedded local Ray")
    execution.add_argument("--num-cpus", type=_positive_int, help="CPUs of the embedded local Ray (default: all)")
    execution.add_argument("--cpus-per-pack", type=_positive_float, help="CPUs per trial (default: the sweep file's, else 1)")
    execution.add_argument("--gpus-per-pack", type=_nonnegative_float, help="GPUs per trial; a fraction packs several trials per GPU")
    execution.add_argument("--chunk-steps", type=_positive_int, default=DEFAULT_CHUNK_STEPS, help="steps per compiled chunk")
    execution.add_argument("--checkpoint-every", type=_nonnegative_int, default=DEFAULT_CHECKPOINT_EVERY,
                           help="chunks between checkpoints (0: never)")
    execution.add_argument("--max-failures", type=_nonnegative_int, default=3, help="retries of a failed pack, each from its last checkpoint")
    execution.add_argument("--runs-per-pack", type=_positive_int, help="override the automatic pack size")
    execution.add_argument("--tf32", action="store_true",
                           help="let float32 matrix products on GPUs use TF32 (faster; about 1e-3 relative error); off by default")

    run = commands.add_parser("run", parents=[execution], help="run a sweep file or preset to completion on Ray Tune")
    run.add_argument("sweep", help="a sweep YAML file or a preset name (see `fade-sweep presets`)")
    run.add_argument("--storage", default="results",
                     help="results go under STORAGE/<sweep name>: a local path (default: ./results) or s3://BUCKET/PREFIX, gs://...")
    run.add_argument("--resume", action="store_true", help="finish an interrupted sweep; finished runs are kept")
    run.add_argument("--dry-run", action="store_true", help="print the plan and an estimated wall time, run nothing")
    run.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    run.add_argument("--table-format", choices=("md", "latex", "csv"), default="md", help="format of the closing table")
    run.add_argument("--no-report", action="store_true", help="skip writing RESULTS_DIR/report.html at the end")

    submit = commands.add_parser("submit", help="submit a sweep to a running Ray cluster as a Ray Job")
    submit.add_argument("sweep", help="a sweep YAML file or a preset name")
    submit.add_argument("--address", required=True, help="the cluster's dashboard / job server, http://HEAD:8265")
    submit.add_argument("--storage", required=True,
                        help="s3://BUCKET/PREFIX (or gs://...) every node can reach, or a directory on a filesystem every node shares")
    submit.add_argument("--pip", action="append", help="a pip requirement the cluster's image lacks (repeatable)")
    submit.epilog = "More `fade-sweep run` options for the job go after --, e.g. -- --resume --runs-per-pack 200"

    status = commands.add_parser("status", help="status of a results directory, or of a submitted job")
    status.add_argument("target", nargs="?", help="RESULTS_DIR, or a job id (with --address); none: list jobs")
    status.add_argument("--address", help="the cluster's job server, http://HEAD:8265 (default: $RAY_ADDRESS)")

    logs = commands.add_parser("logs", help="print a submitted job's logs")
    logs.add_argument("job_id")
    logs.add_argument("--address", help="the cluster's job server, http://HEAD:8265 (default: $RAY_ADDRESS)")
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")

    commands.add_parser("presets", help="list the shipped sweeps with their size")

    table = commands.add_parser("table", help="print a table from a results directory")
    table.add_argument("results_dir", help="STORAGE/<sweep name>")
    table.add_argument("--kind", choices=(*TABLES, "confirm", "robustness"), default="best",
                       help="best configuration per method, sensitivity grids, paired comparison of methods, "
                            "hyperparameter importance, confirmation on fresh seeds, sensitivity across settings (default: best)")
    table.add_argument("--stat", choices=STATS, default="mean",
                       help="statistic over seeds shown and used to select the best configuration (default: mean)")
    table.add_argument("--reference", metavar="METHOD",
                       help="--kind compare: the method the others are compared with (default: the best method)")
    table.add_argument("--format", choices=("md", "latex", "csv"), default="md")

    confirm = commands.add_parser("confirm", parents=[execution],
                                  help="re-run each method's selected configuration on fresh seeds (the confirmation stage)")
    confirm.add_argument("results_dir", help="STORAGE/<sweep name> of a finished sweep")
    confirm.add_argument("--seeds", type=_seed_list,
                         help="N fresh seeds (after the largest tuning seed), or a comma-separated list of seeds that are "
                              "not tuning seeds (default: the sweep file's confirm: block, else as many as the tuning seeds)")
    confirm.add_argument("--stat", choices=("mean", "median", "iqm"), default="mean",
                         help="statistic over the tuning seeds that selects the configuration to confirm (default: mean)")

    report = commands.add_parser("report", help="write the figures and tables as one offline HTML file")
    report.add_argument("results_dir", help="STORAGE/<sweep name>")
    report.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    report.add_argument("--images", help="also write a PNG per figure into this folder (needs kaleido)")

    verify = commands.add_parser("verify", help="check a results store: schema, duplicates, orphans, corrupt files, missing runs")
    verify.add_argument("results_dir", help="STORAGE/<sweep name>")
    return parser


def _cmd_presets(args) -> None:
    print(f"{'preset':<22} {'runs':>7} {'run-steps':>12}  description")
    for name in preset_names():
        sweep = resolve_sweep(name)
        description = Path(sweep.source).read_text().splitlines()[0].lstrip("# ")
        print(f"{name:<22} {sweep.runs:>7,} {sweep.run_steps:>12.3e}  {description}")


def _open_results(results_dir: str):
    """The store the user named, opened once; UserError (exit 2) if it holds no results."""
    from sweeps.store import Store

    store = Store.open(results_dir)  # a URI the store cannot serve: exit 2
    store.location.check()  # an unreachable object store or a missing bucket: exit 2
    if not store.location.is_dir("scores"):
        raise UserError(f"{store.location}: no results there (expected {store.location.url('scores')}/); "
                        "give STORAGE/<sweep name>")
    return store


def _cmd_report(args) -> None:
    from pathlib import Path

    from sweeps.analysis.report import write_report
    from sweeps.store import StoreLocation

    store = _open_results(args.results_dir)
    out = StoreLocation.parse(args.out)
    figures = write_report(store, out, Path(args.images) if args.images else None)
    print(f"Report: {out.local_path.resolve() if out.local else out} ({len(figures)} figures; opens offline in any browser)")


def _stage_text(store, kind: str, fmt: str, stat: str) -> str:
    """`table --kind confirm | robustness`: the tuning frame (and the confirmation frame) to the tables."""
    from sweeps.analysis.confirm import confirmation_table, confirmation_text
    from sweeps.analysis.robustness import robustness_table, robustness_text
    from sweeps.spec import CONFIRMATION

    tuning = store.scan("scores")
    if kind == "robustness":
        table = robustness_table(tuning)
        return robustness_text(table, fmt) if table.height else "No method runs in two or more settings of this sweep.\n"
    record = store.confirmation
    if record is None or not store.selection(stage=CONFIRMATION).runs:
        raise UserError(f"{store.location}: no confirmation runs; run `fade-sweep confirm {store.location} --seeds N` first")
    table = confirmation_table(tuning, store.scan("scores", stage=CONFIRMATION), stat)
    return confirmation_text(table, fmt, stat, f"; seeds {_seed_span(record.seeds)}, selected by the {record.stat}")


def _seed_span(seeds: tuple[int, ...]) -> str:
    contiguous = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))) if seeds else False
    return f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 2 else ", ".join(map(str, seeds))


def _cmd_table(args) -> None:
    from sweeps.analysis.queries import Analysis
    from sweeps.analysis.tables import table_text

    store = _open_results(args.results_dir)
    try:
        if args.kind in ("confirm", "robustness"):
            text = _stage_text(store, args.kind, args.format, args.stat)
        else:
            text = table_text(Analysis.of(store, args.stat), args.kind, args.format, reference=args.reference)
    except ValueError as err:  # e.g. an unknown --reference
        raise UserError(str(err)) from None
    print(text.rstrip("\n"))


def _cmd_verify(args) -> int:
    """One line per problem, then a summary; exit 0 clean, 1 problems, 2 not a store."""
    from sweeps.store import Store
    from sweeps.store.verify import NotAStore, format_verification

    try:
        verification = Store.open(args.results_dir).verify()
    except NotAStore as err:
        raise UserError(str(err)) from None
    print(format_verification(verification))
    return 0 if verification.clean else FAILURE


def _resources(args, sweep) -> PackResources:
    return PackResources(
        args.cpus_per_pack if args.cpus_per_pack is not None else sweep.resources.cpus,
        args.gpus_per_pack if args.gpus_per_pack is not None else sweep.resources.gpus,
    )


def _cmd_run(args) -> None:
    if not args.address and os.environ.get("RAY_ADDRESS"):
        from cluster.connect import announce_environment_address

        announce_environment_address()  # the first line: this run attaches to a cluster, not an embedded Ray
    sweep = resolve_sweep(args.sweep)
    check_task_data(sweep)
    resources = _resources(args, sweep)
    if resources.gpus < 0:
        raise UserError(f"--gpus-per-pack must be >= 0, got {resources.gpus:g}")
    cpu_only = cpu_only_tasks(sweep.experiments)
    if resources.gpus > 0 and len(cpu_only) == len({e.task for e in sweep.experiments}):
        raise UserError(f"--gpus-per-pack: {', '.join(cpu_only)} runs on CPUs only; drop it")
    print(f"Sweep {sweep.name}: {sweep.runs:,} runs, {sweep.run_steps:.3e} run-steps ({sweep.source})")
    if args.dry_run:
        _dry_run(args, sweep, resources)
        if sweep.confirm_seeds:  # one selected configuration per experiment, on the fresh seeds
            steps = sum(e.settings.steps for e in sweep.experiments) * len(sweep.confirm_seeds)
            print(f"Then confirmation: {len(sweep.experiments)} selected configurations x {len(sweep.confirm_seeds)} fresh "
                  f"seeds = {len(sweep.experiments) * len(sweep.confirm_seeds):,} runs, {steps:.3e} run-steps")
        return
    from sweeps.analysis.queries import Analysis
    from sweeps.analysis.tables import table_text
    from sweeps.store import Store
    from sweeps.tune.driver import confirm_sweep, run_sweep

    options = _execution_options(args, resources, args.dtype)
    outcome = run_sweep(sweep, args.storage, resume=args.resume, options=options)
    _summary(outcome, "every (config, seed) already has a score")
    print(f"Results: {outcome.results_dir}\n")
    print(table_text(Analysis.of(Store.open(outcome.results_dir)), "best", args.table_format).rstrip("\n"))
    if sweep.confirm_seeds:  # the sweep file's confirm: block, after the grid
        print(f"\nConfirmation: each method's selected configuration on {len(sweep.confirm_seeds)} fresh seeds")
        _summary(confirm_sweep(outcome.results_dir, sweep.confirm_seeds, options=options),
                 "every confirmation run already has a score")
        print(_stage_text(Store.open(outcome.results_dir), "confirm", args.table_format, "mean").rstrip("\n"))
    if not args.no_report:
        from sweeps.analysis.report import write_report

        report = outcome.results_dir / "report.html"
        store = Store.open(outcome.results_dir)  # after the confirmation stage: the report reads both
        figures = write_report(store, store.location / "report.html")
        print(f"\nReport: {report} ({len(figures)} figures, opens offline in any browser)")


def _execution_options(args, resources: PackResources | None, dtype: str):
    from sweeps.tune.driver import ExecutionOptions

    return ExecutionOptions(
        address=args.address,
        num_cpus=args.num_cpus,
        chunk_steps=args.chunk_steps,
        dtype=dtype,
        runs_per_pack=args.runs_per_pack,
        resources=resources,
        checkpoint_every=args.checkpoint_every,
        max_failures=args.max_failures,
        tf32=args.tf32,
        notify=print,
    )


def _summary(outcome, nothing: str) -> None:
    """What a run or confirm did: resumed runs and packs, then the Done line (or that nothing ran)."""
    from sweeps.store import Store
    from sweeps.tune.progress import done_line

    if outcome.skipped_runs:
        print(f"Resumed: {outcome.skipped_runs:,} runs were already in the store and were not re-run.")
    if outcome.resumed_packs:
        n = outcome.resumed_packs
        print(f"Resumed: {n} interrupted packs continued from their checkpoints." if n > 1
              else "Resumed: 1 interrupted pack continued from its checkpoint.")
    if outcome.packs:
        print(done_line(outcome, Store.open(outcome.results_dir).status()))
    else:
        print(f"Nothing to run: {nothing}.")


def _cmd_confirm(args) -> None:
    """The confirmation stage of a finished sweep; run again after an interrupt, it resumes."""
    from sweeps.store import Store
    from sweeps.tune.driver import confirm_sweep

    sweep = _open_results(args.results_dir).sweep
    if sweep is None:
        raise UserError(f"{args.results_dir}: no recorded sweep (sweep.yaml); give STORAGE/<sweep name> of a sweep run by fade-sweep")
    seeds = args.seeds or sweep.confirm_seeds or len(sweep.seeds)
    options = _execution_options(args, _resources(args, sweep), "float32")  # the store's dtype is used
    outcome = confirm_sweep(args.results_dir, seeds, stat=args.stat, options=options)
    _summary(outcome, "every confirmation run already has a score")
    print(f"Results: {outcome.results_dir}\n")
    print(_stage_text(Store.open(outcome.results_dir), "confirm", "md", args.stat).rstrip("\n"))


def _dry_run(args, sweep, resources: PackResources) -> None:
    from cluster.connect import connect
    from cluster.placement import parallel_slots
    from sweeps.packs.dryrun import describe_plan

    cpu_only = resources.for_task(runs_on_gpu=False)
    if args.address:
        connect(args.address)
        slots = parallel_slots(cpu_only)
        gpu_slots = parallel_slots(resources) if resources.gpus > 0 else 0
    else:
        import torch

        cpus = args.num_cpus or os.cpu_count() or 1
        slots = int(cpus // resources.cpus)
        gpu_slots = min(slots, int(torch.cuda.device_count() // resources.gpus)) if resources.gpus > 0 else 0
        if slots == 0:
            raise UserError(f"--cpus-per-pack {resources.cpus:g} is more than the {cpus} CPUs of this machine")
    print(describe_plan(sweep, slots, resources, args.runs_per_pack, args.dtype, gpu_slots))


def _refuse_if_being_written(storage: str, name: str) -> None:
    """A second writer of the same results folder is refused before a job is submitted, where
    the storage is visible from here too (a shared mount or an object store); otherwise the
    job itself is refused on the cluster (exit 2 in its logs)."""
    from sweeps.store.location import StorageError, StoreLocation
    from sweeps.store.lock import refuse_if_locked

    location = StoreLocation.parse(storage) / name  # a URI the store cannot serve: exit 2 here
    try:
        if not location.local or location.local_path.is_dir():
            refuse_if_locked(location)
    except StorageError:
        return  # not reachable from here; the cluster checks it


def _cmd_submit(args) -> None:
    from cluster import jobs

    sweep = resolve_sweep(args.sweep)
    _refuse_if_being_written(args.storage, sweep.name)
    job_id = jobs.submit(sweep, args.address, args.storage, args.run_args, args.pip)
    print(job_id)
    print(f"Follow it: fade-sweep status {job_id} --address {args.address}; fade-sweep logs {job_id} --address {args.address} --follow",
          file=sys.stderr)


def _cmd_status(args) -> None:
    from sweeps.store.uris import is_uri

    if args.target and (is_uri(args.target) or Path(args.target).is_dir()):
        from sweeps.spec import TUNING
        from sweeps.store import Store
        from sweeps.store.status import format_status

        store = Store.open(args.target)  # a URI the store cannot serve: exit 2
        store.location.check()
        status = store.status()
        if status is None:
            raise UserError(f"{store.location}: no status.json there; give STORAGE/<sweep name> of a sweep run by fade-sweep")
        print(format_status(status, store.committed_packs()))
        stages = Counter(m.run_stage for m in store.manifests)
        if len(stages) > 1 or TUNING not in stages:
            print("committed packs: " + ", ".join(f"{n} {stage}" for stage, n in sorted(stages.items(), reverse=True)))
        return
    looks_like_path = args.target and ("/" in args.target or args.target.startswith((".", "~")))
    if args.target and (looks_like_path or not (args.address or os.environ.get("RAY_ADDRESS"))):
        raise UserError(f"{args.target}: no such results folder (give STORAGE/<sweep name>; a job id needs --address)")
    from cluster import jobs

    try:
        rows = jobs.status(args.address, args.target)
    except RuntimeError as err:  # the job server's 404 and friends
        raise UserError(f"{args.target}: neither a results directory nor a job of this cluster ({err})") from None
    for job_id, state, sweep in rows:
        print(f"{job_id}  {state:<10} {sweep}")
    if not rows:
        print("no fade-sweep jobs on this cluster")


def _cmd_logs(args) -> None:
    from cluster import jobs

    try:
        jobs.logs(args.address, args.job_id, args.follow, write=print)
    except RuntimeError as err:
        raise UserError(f"{args.job_id}: no such job on this cluster ({err})") from None


def _interrupted_message(args, err: KeyboardInterrupt) -> str:
    """`interrupted: N of M packs done; continue with `fade-sweep run ... --resume``, for a run."""
    what = str(err) if str(err).startswith("interrupted") else "interrupted"
    if args.command == "confirm":
        seeds = [] if args.seeds is None else ["--seeds", str(args.seeds) if isinstance(args.seeds, int) else ",".join(map(str, args.seeds))]
        return f"{what}; continue with `{shlex.join(['fade-sweep', 'confirm', args.results_dir, *seeds])}`"
    if args.command != "run":
        return what
    command = ["fade-sweep", "run", args.sweep, "--storage", args.storage]
    if args.address:
        command += ["--address", args.address]
    return f"{what}; continue with `{shlex.join([*command, '--resume'])}`"


COMMANDS = {
    "run": _cmd_run,
    "submit": _cmd_submit,
    "status": _cmd_status,
    "logs": _cmd_logs,
    "presets": _cmd_presets,
    "table": _cmd_table,
    "confirm": _cmd_confirm,
    "report": _cmd_report,
    "verify": _cmd_verify,
}


CLOSED_PIPE = 141  # 128 + SIGPIPE: what `cat`, `grep`, ... return when their reader goes away


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (`fade-sweep presets | head -1`)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no real stdout
        return True


def _run_command(args) -> int:
    """Run the command; a closed stdout ends it quietly with CLOSED_PIPE (the Python docs' recipe:
    stdout goes to devnull so the interpreter's last flush cannot fail again). A broken pipe that
    is not stdout's is a real failure and propagates."""
    try:
        code = COMMANDS[args.command](args)  # None: 0; a command may return its exit code
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        if args.command == "run":
            print("fade-sweep: stdout was closed, the sweep stopped; finished packs are kept, --resume continues", file=sys.stderr)
        return CLOSED_PIPE
    return code or 0


def _redact(text: str) -> str:
    """Messages never show credentials (nor URI query strings)."""
    from sweeps.store.uris import redact

    return redact(text)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `submit ... -- RUN OPTIONS`: what follows -- is passed to `fade-sweep run` on the cluster.
    passthrough = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = _parser().parse_args(argv)
    args.run_args = passthrough
    try:
        status = _run_command(args)
    except (SweepError, UserError, ClusterError) as err:
        print(f"fade-sweep: error: {_redact(str(err))}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt as err:  # Ctrl-C / SIGTERM; a stopped sweep raises SweepInterrupted (a KeyboardInterrupt)
        print(f"fade-sweep: {_interrupted_message(args, err)}", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:  # noqa: BLE001 - one line for the user; FADE_SWEEP_DEBUG=1 shows the traceback
        if os.environ.get("FADE_SWEEP_DEBUG"):
            raise
        print(f"fade-sweep: failed: {type(err).__name__}: {_redact(str(err))} (FADE_SWEEP_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return FAILURE
    return status


if __name__ == "__main__":
    sys.exit(main())
