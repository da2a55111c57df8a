"""`fade-sweep`: run sweeps on Ray Tune, list presets, print tables.

Exit codes (interface.md): 0 ok, 2 bad input (one line on stderr, nothing written),
1 failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sweeps.engine import DEFAULT_CHUNK_STEPS
from sweeps.presets import preset_names, resolve_sweep
from sweeps.sweepfile import SweepError

BAD_INPUT, FAILURE = 2, 1


class UserError(Exception):
    """Bad input from the command line; printed as one line, exit code 2."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fade-sweep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a sweep file or preset to completion on Ray Tune")
    run.add_argument("sweep", help="a sweep YAML file or a preset name (see `fade-sweep presets`)")
    run.add_argument("--storage", default="results", help="results go under STORAGE/<sweep name> (default: ./results)")
    run.add_argument("--address", help="Ray cluster address (HOST:PORT or ray://...); default: an embedded local Ray")
    run.add_argument("--resume", action="store_true", help="finish an interrupted sweep; finished runs are kept")
    run.add_argument("--num-cpus", type=_positive_int, help="CPUs of the embedded local Ray (default: all)")
    run.add_argument("--chunk-steps", type=_positive_int, default=DEFAULT_CHUNK_STEPS, help="steps per compiled chunk")
    run.add_argument("--runs-per-pack", type=_positive_int, help="override the automatic pack size")
    run.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    run.add_argument("--table-format", choices=("md", "latex", "csv"), default="md", help="format of the closing table")
    run.add_argument("--no-report", action="store_true", help="skip writing RESULTS_DIR/report.html at the end")

    commands.add_parser("presets", help="list the shipped sweeps with their size")

    table = commands.add_parser("table", help="print a table from a results directory")
    table.add_argument("results_dir", help="STORAGE/<sweep name>")
    table.add_argument("--kind", choices=("best", "sensitivity"), default="best")
    table.add_argument("--format", choices=("md", "latex", "csv"), default="md")

    report = commands.add_parser("report", help="write the figures and tables as one offline HTML file")
    report.add_argument("results_dir", help="STORAGE/<sweep name>")
    report.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    report.add_argument("--images", help="also write a PNG per figure into this folder (needs kaleido)")
    return parser


def _cmd_presets(args) -> None:
    print(f"{'preset':<16} {'runs':>7} {'run-steps':>12}  description")
    for name in preset_names():
        sweep = resolve_sweep(name)
        description = Path(sweep.source).read_text().splitlines()[0].lstrip("# ")
        print(f"{name:<16} {sweep.runs:>7,} {sweep.run_steps:>12.3e}  {description}")


def _require_results(results_dir: str) -> None:
    if not (Path(results_dir) / "scores").is_dir():
        raise UserError(f"{results_dir}: no results there (expected {results_dir}/scores/); give STORAGE/<sweep name>")


def _cmd_report(args) -> None:
    from sweeps.report import write_report

    _require_results(args.results_dir)
    figures = write_report(args.results_dir, args.out, args.images)
    print(f"Report: {Path(args.out).resolve()} ({len(figures)} figures; opens offline in any browser)")


def _cmd_table(args) -> None:
    from sweeps.tables import table_text

    _require_results(args.results_dir)
    print(table_text(args.results_dir, args.kind, args.format).rstrip("\n"))


def _cmd_run(args) -> None:
    from cluster.connect import ClusterError
    from sweeps.runner import run_sweep
    from sweeps.tables import table_text

    sweep = resolve_sweep(args.sweep)
    print(f"Sweep {sweep.name}: {sweep.runs:,} runs, {sweep.run_steps:.3e} run-steps ({sweep.source})")
    try:
        outcome = run_sweep(
            sweep,
            args.storage,
            address=args.address,
            resume=args.resume,
            chunk_steps=args.chunk_steps,
            dtype=args.dtype,
            num_cpus=args.num_cpus,
            runs_per_pack=args.runs_per_pack,
        )
    except ClusterError as err:
        raise UserError(str(err)) from None
    if outcome.skipped_runs:
        print(f"Resumed: {outcome.skipped_runs:,} runs were already in the store and were not re-run.")
    if outcome.packs:
        print(
            f"Done: {outcome.packs} packs, {outcome.run_steps:.3e} run-steps in {outcome.wall_seconds:.1f} s wall "
            f"({outcome.run_steps / outcome.wall_seconds / 1e6:.1f}M run-steps/s on {outcome.cpus} CPUs; "
            f"Ray start {outcome.ray_start_seconds:.1f} s; Tune overhead {100 * outcome.tune_overhead_fraction:.1f}%)"
        )
    else:
        print("Nothing to run: every (config, seed) already has a score.")
    print(f"Results: {outcome.results_dir}\n")
    print(table_text(outcome.results_dir, "best", args.table_format).rstrip("\n"))
    if not args.no_report:
        from sweeps.report import write_report

        report = outcome.results_dir / "report.html"
        figures = write_report(outcome.results_dir, report)
        print(f"\nReport: {report} ({len(figures)} figures, opens offline in any browser)")


COMMANDS = {"run": _cmd_run, "presets": _cmd_presets, "table": _cmd_table, "report": _cmd_report}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (SweepError, UserError) as err:
        print(f"fade-sweep: error: {err}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fade-sweep: interrupted; finished packs are saved, continue with --resume", file=sys.stderr)
        return FAILURE
    except Exception as err:  # noqa: BLE001 - one line for the user, the traceback is not theirs
        print(f"fade-sweep: failed: {type(err).__name__}: {err}", file=sys.stderr)
        return FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
