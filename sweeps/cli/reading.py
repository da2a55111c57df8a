"""The commands that read: `presets`, `table`, `report`, `verify` and `status` (of a results folder or
a submitted job). None of them needs Ray, torch or numba: each opens the user's store once and
hands the `Store` (or its frames) on."""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path

from sweeps.cli.parser import FAILURE, UserError
from sweeps.spec import preset_names, resolve_sweep


def cmd_presets(args: argparse.Namespace) -> None:
    print(f"{'preset':<22} {'runs':>7} {'run-steps':>12}  description")
    for name in preset_names():
        sweep = resolve_sweep(name)
        description = Path(sweep.source).read_text().splitlines()[0].lstrip("# ")
        print(f"{name:<22} {sweep.runs:>7,} {sweep.run_steps:>12.3e}  {description}")


def open_results(results_dir: str):
    """The store the user named, opened once; UserError (exit 2) if it holds no results."""
    from sweeps.store import Store

    store = Store.open(results_dir)  # a URI the store cannot serve: exit 2
    store.location.check()  # an unreachable object store or a missing bucket: exit 2
    if not store.location.is_dir("scores"):
        raise UserError(f"{store.location}: no results there (expected {store.location.url('scores')}/); "
                        "give STORAGE/<sweep name>")
    return store


def cmd_report(args: argparse.Namespace) -> None:
    from sweeps.analysis.report import write_report
    from sweeps.store import StoreLocation

    store = open_results(args.results_dir)
    out = StoreLocation.parse(args.out)
    figures = write_report(store, out, Path(args.images) if args.images else None)
    print(f"Report: {out.local_path.resolve() if out.local else out} ({len(figures)} figures; opens offline in any browser)")


def stage_text(store, kind: str, fmt: str, stat: str) -> str:
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


def best_text(store, fmt: str) -> str:
    """The best-configuration table (the closing table of `run`)."""
    from sweeps.analysis.queries import Analysis
    from sweeps.analysis.tables import table_text

    return table_text(Analysis.of(store), "best", fmt)


def cmd_table(args: argparse.Namespace) -> None:
    from sweeps.analysis.queries import Analysis
    from sweeps.analysis.tables import table_text

    store = open_results(args.results_dir)
    try:
        if args.kind in ("confirm", "robustness"):
            text = stage_text(store, args.kind, args.format, args.stat)
        else:
            text = table_text(Analysis.of(store, args.stat), args.kind, args.format, reference=args.reference)
    except ValueError as err:  # e.g. an unknown --reference
        raise UserError(str(err)) from None
    print(text.rstrip("\n"))


def cmd_verify(args: argparse.Namespace) -> int:
    """One line per problem, then a summary; exit 0 clean, 1 problems, 2 not a store."""
    from sweeps.store import Store
    from sweeps.store.verify import NotAStore, format_verification

    try:
        verification = Store.open(args.results_dir).verify()
    except NotAStore as err:
        raise UserError(str(err)) from None
    print(format_verification(verification))
    return 0 if verification.clean else FAILURE


def cmd_status(args: argparse.Namespace) -> None:
    from sweeps.store.uris import is_uri

    if args.target and (is_uri(args.target) or Path(args.target).is_dir()):
        _results_status(args.target)
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


def _results_status(target: str) -> None:
    """status.json of a results folder, and the committed packs per stage where there is more than tuning."""
    from sweeps.spec import TUNING
    from sweeps.store import Store
    from sweeps.store.status import format_status

    store = Store.open(target)  # a URI the store cannot serve: exit 2
    store.location.check()
    status = store.status()
    if status is None:
        raise UserError(f"{store.location}: no status.json there; give STORAGE/<sweep name> of a sweep run by fade-sweep")
    print(format_status(status, store.committed_packs()))
    engines = Counter(m.engine or "not recorded" for m in store.manifests)
    if engines:
        print("engines: " + ", ".join(f"{engine} ({n} pack{'s' if n > 1 else ''})" for engine, n in sorted(engines.items())))
    stages = Counter(m.run_stage for m in store.manifests)
    if len(stages) > 1 or TUNING not in stages:
        print("committed packs: " + ", ".join(f"{n} {stage}" for stage, n in sorted(stages.items(), reverse=True)))
