"""The commands that read: `presets`, `table`, `report`, `verify` and `status` (of a results folder or
a submitted job). None of them needs Ray, torch or numba: each opens the user's store once and
hands the `Store` (or its frames) on."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from sweeps.cli.parser import FAILURE, UserError
from sweeps.spec import preset_description, preset_names, resolve_sweep


def cmd_presets(args: argparse.Namespace) -> None:
    """Each preset's size and the first sentence of its description, whole, wrapped to the terminal."""
    import shutil
    import textwrap

    indent = " " * 45  # the description column
    width = max(shutil.get_terminal_size((120, 24)).columns, len(indent) + 40)
    print(f"{'preset':<22} {'runs':>7} {'run-steps':>12}  description")
    for name in preset_names():
        sweep = resolve_sweep(name)
        head = f"{name:<22} {sweep.runs:>7,} {sweep.run_steps:>12.3e}  "
        print(textwrap.fill(preset_description(name), width, initial_indent=head, subsequent_indent=indent,
                            break_on_hyphens=False, break_long_words=False))


def open_results(results_dir: str):
    """The store the user named, opened once; UserError (exit 2) if it holds no results."""
    from sweeps.store import Store

    store = Store.open(results_dir)  # a URI the store cannot serve: exit 2
    store.location.check()  # an unreachable object store or a missing bucket: exit 2
    if not store.location.is_dir("scores") and store.location.is_file("sweep.yaml"):  # a sweep no pack has finished
        raise UserError(f"{store.location}: no results yet (no pack of this sweep has finished); "
                        f"`fade-sweep status {store.location}` says where it stands")
    if not store.location.is_dir("scores"):
        raise UserError(f"{store.location}: no results there (expected {store.location.url('scores')}/); "
                        "give STORAGE/<sweep name>")
    store.sweep  # the grid the tables count: a damaged sweep.yaml is one line (SweepError, exit 2), with the repair
    _say_damage(store)
    return store


def _say_damage(store) -> None:
    """Readers answer from the committed rest; one line on stderr says what they skipped and the repair."""
    notice = store.damage_notice()
    if notice:
        print(f"fade-sweep: {notice}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int | None:
    from sweeps.analysis.report import NoImages, write_report
    from sweeps.store import StoreLocation

    stores = [open_results(d) for d in args.results_dir]
    out = StoreLocation.parse(args.out) if args.out else report_location(stores)
    shown = out.absolute()
    try:
        figures = write_report(stores, out, Path(args.images) if args.images else None)
    except NoImages as err:  # the HTML is written; the images asked for are not
        print(f"Report: {shown} (opens offline in any browser)")
        print(f"fade-sweep: {err}", file=sys.stderr)
        return FAILURE
    print(f"Report: {shown} ({len(figures)} figures; opens offline in any browser)")
    return None


def report_location(stores: list) -> StoreLocation:
    """Where `report` writes by default: RESULTS_DIR/report.html; of sweeps compared, beside the first
    (STORAGE/report-A+B.html)."""
    if len(stores) == 1:
        return stores[0].location / "report.html"
    return stores[0].location.parent / f"report-{'+'.join(s.location.name for s in stores)}.html"


def table_text(stores, kind: str, fmt: str, stat: str = "mean", reference: str | None = None) -> str:
    """A table kind (sweeps.analysis.kinds) of one store or of several sweeps compared, as `table`, `run` and
    `confirm` print it; a table the stores cannot give (no confirmation runs) is one line (exit 2)."""
    from sweeps.analysis.kinds import TableError, TableSource, kind_text

    try:
        return kind_text(TableSource(stores if isinstance(stores, list) else [stores], stat, reference), kind, fmt)
    except TableError as err:
        raise UserError(str(err)) from None


def cmd_table(args: argparse.Namespace) -> None:
    stores = [open_results(d) for d in args.results_dir]  # several: sweeps of the same task settings compared
    try:
        text = table_text(stores, args.kind, args.format, args.stat, args.reference)
    except ValueError as err:  # e.g. an unknown --reference
        raise UserError(str(err)) from None
    print(text.rstrip("\n"))


def cmd_verify(args: argparse.Namespace) -> int:
    """One line per problem, then a summary; exit 0 clean, 1 problems, 2 not a store."""
    from sweeps.cli.text import format_verification
    from sweeps.store import Store
    from sweeps.store.verify import NotAStore

    try:
        verification = Store.open(args.results_dir).verify()
    except NotAStore as err:
        raise UserError(str(err)) from None
    print(format_verification(verification))
    return 0 if verification.clean else FAILURE


def cmd_status(args: argparse.Namespace) -> None:
    from sweeps.store.uris import is_uri

    if args.target and (is_uri(args.target) or Path(args.target).is_dir()):
        from sweeps.cli.listing import status_view, watch

        view = status_view(args.target, _results_status)  # a storage: its sweeps listed; a results folder: its status
        if args.watch:
            watch(view, args.every)
        else:
            view()
        return
    if args.watch:
        raise UserError("--watch follows a results folder or a storage (STORAGE or STORAGE/<sweep name>); "
                        "follow a job with `fade-sweep logs JOB --follow`")
    looks_like_path = args.target and ("/" in args.target or args.target.startswith((".", "~")))
    on_a_cluster = args.address or os.environ.get("RAY_ADDRESS")
    if args.target and (looks_like_path or not on_a_cluster):
        raise UserError(f"{args.target}: no such results folder (give STORAGE/<sweep name>; a job id needs --address)")
    if not args.target and not on_a_cluster:
        raise UserError("status of what? give a results folder (fade-sweep status STORAGE/<sweep name>), or --address "
                        "HTTP://HOST:PORT to list the sweeps submitted to a cluster")
    from cluster.errors import ClusterError
    from sweeps.cli import jobs

    try:
        rows = jobs.status(args.address, args.target)
    except ClusterError as err:  # unreachable: its own line, with what to do
        raise UserError(str(err)) from None
    except RuntimeError as err:  # the job server's 404 and friends
        raise UserError(f"{args.target}: neither a results directory nor a job of this cluster ({err})") from None
    for job_id, state, sweep in rows:
        print(f"{job_id}  {state:<10} {sweep}")
    if not rows:
        print("no fade-sweep jobs on this cluster")


def _results_status(target: str) -> None:
    """status.json of a results folder, and the committed packs per stage where there is more than tuning."""
    from sweeps.cli.text import format_status
    from sweeps.plan import TUNING
    from sweeps.spec import SweepError
    from sweeps.store import RecordError, Store
    from sweeps.store.race import missing_count

    store = Store.open(target)  # a URI the store cannot serve: exit 2
    store.location.check()
    _say_damage(store)
    try:
        status = store.status()
    except RecordError:  # named by _say_damage, with the command that writes it anew
        status = None
    if status is None and store.has_results():  # no live status: what the store holds (records only, no polars)
        try:
            sweep = store.sweep
            finished = store.finished_runs() - store.left_out_runs()  # a damaged scores file's runs are missing
            lacking = missing_count(store.location, sweep, finished) if sweep else 0  # race-aware
            missing = f", {lacking} runs of its sweep missing" if sweep else ""
        except SweepError:  # named by _say_damage
            missing = ""
        print(f"{store.location}: {store.committed_packs()} pack files in the store{missing}")
        _damaged_files(store)
        return
    if status is None:
        _starting_or_not_a_store(store)
        return
    print(format_status(status, store.committed_packs(), store.resume_command()))
    _damaged_files(store)
    _race_status(store)
    engines = Counter(m.engine or "not recorded" for m in store.manifests)
    if engines:
        print("engines: " + ", ".join(f"{engine} ({n} pack{'s' if n > 1 else ''})" for engine, n in sorted(engines.items())))
    stages = Counter(m.run_stage for m in store.manifests)
    if len(stages) > 1 or (stages and TUNING not in stages):
        print("committed packs: " + ", ".join(f"{n} {stage}" for stage, n in sorted(stages.items(), reverse=True)))


def _damaged_files(store) -> None:
    """Every data file whose size is not its manifest's, one line each, then the repair (stdout: the status)."""
    for bad in store.damaged_files:
        print(f"damaged: {store.location.absolute().url(bad.path)}: {bad.why}")
    if store.damaged_files:
        print(f"repair: `{store.resume_command()}` sets the damaged files' packs aside and runs them again")


def _race_status(store) -> None:
    """A raced sweep's round: status.json counts the packs of the round under way only."""
    from sweeps.spec import SweepError
    from sweeps.store import RecordError
    from sweeps.spec.race import method_names
    from sweeps.store.race import finished_methods, method_rounds, race_round
    from sweeps.store.status import driver_gone

    try:
        sweep, record = store.sweep, store.race
    except (SweepError, RecordError):  # named by _say_damage
        return
    if sweep is not None and sweep.race is not None:
        number, most, finished = race_round(sweep, record)
        out = len(record.eliminated()) if record is not None else 0
        status = store.status()
        running = status is not None and status.state == "running" and not driver_gone(status)
        names = method_names([e.label for e in sweep.experiments])
        over = finished_methods(record)
        rounds = ", ".join(f"{names[label]} {'done after ' + str(n) if label in over or finished else n + 1}"
                           for label, n in method_rounds(sweep, record).items())
        state = f"finished after {number} rounds" if finished else \
            f"rounds under way (of at most {most}): {rounds}" if running else \
            f"rounds next, with `--resume` (of at most {most}): {rounds}"
        print(f"race: {state}; {out} of {sum(e.size for e in sweep.experiments)} configurations out")


def _starting_or_not_a_store(store) -> None:
    """No status.json and no results: a sweep still starting holds the writer lock, and one whose driver died
    while it started left its name there; each says so. Anything else is not a sweep's folder (exit 2)."""
    from sweeps.store import RecordError
    from sweeps.store.holder import LOCK_FILE, describe, stale
    from sweeps.store.records import LockHolder, read_record

    holder, held = None, False
    if store.location.exists(LOCK_FILE):
        holder = store.location.writer_lock().holder()  # None: nobody holds it (a local lock dies with its process)
        held = holder is not None and not stale(holder)
        if holder is None:
            try:
                holder = read_record(store.location, LOCK_FILE, LockHolder)  # who held it last
            except RecordError:
                holder = None
    if holder is None or holder.pid is None:
        raise UserError(f"{store.location}: no status.json there; give STORAGE/<sweep name> of a sweep run by fade-sweep")
    if held:
        print(f"{store.location}: starting ({describe(holder)}); no pack has reported yet")
    else:
        print(f"{store.location}: its driver ({describe(holder)}) stopped before its first pack; "
              f"continue with `{store.resume_command()}`")
