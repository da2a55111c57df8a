"""The `fade-sweep` command line: its commands and flags (interface.md), the types that check
them, and how a command refuses bad input (`UserError`: one line on stderr, exit 2)."""

from __future__ import annotations

import argparse
import math

from fade_core.engines import ENGINE_NAMES
from sweeps.analysis import STATS
from sweeps.analysis.kinds import KINDS
from sweeps.plan.packing import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK_STEPS

DESCRIPTION = "`fade-sweep`: run sweeps on Ray Tune (locally or on a cluster), follow them, print tables and reports."
BAD_INPUT, FAILURE, INTERRUPTED = 2, 1, 130
LIVE_REPORT_SECONDS = 10.0  # `run --report-every`'s default


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


def build_parser() -> argparse.ArgumentParser:
    """The `fade-sweep` command line: every command, flag, default and help text."""
    parser = argparse.ArgumentParser(prog="fade-sweep", description=DESCRIPTION)
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
    execution.add_argument("--engine", metavar="NAME",
                           help=f"the engine every pack runs on, one of {', '.join(ENGINE_NAMES)} (default: the sweep file's "
                                "engine:, else the default for each task and device; docs/engines.md)")
    execution.add_argument("--tf32", action="store_true",
                           help="let float32 matrix products on GPUs use TF32 (faster; about 1e-3 relative error); off by default")

    run = commands.add_parser("run", parents=[execution], help="run a sweep file or preset to completion on Ray Tune")
    run.add_argument("sweep", help="a sweep YAML file or a preset name (see `fade-sweep presets`)")
    run.add_argument("--storage", default="results",
                     help="results go under STORAGE/<sweep name>: a local path (default: ./results) or s3://BUCKET/PREFIX, gs://...")
    run.add_argument("--resume", action="store_true", help="finish an interrupted sweep; finished runs are kept")
    run.add_argument("--dry-run", action="store_true", help="print the plan and an estimated wall time, run nothing")
    run.add_argument("--calibrate", action="store_true",
                     help="with --dry-run: time each experiment's engine here first (seconds: loads torch and numba, "
                          "compiles or loads kernels) instead of the cost table's rates")
    run.add_argument("--race", action="store_true",
                     help="give seeds in rounds: a configuration worse than its method's best with confidence (paired "
                          "t-test, Holm) stops getting seeds (the sweep file's race: block, else min 3 seeds, all the "
                          "sweep's seeds at most, alpha 0.05)")
    run.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    run.add_argument("--table-format", choices=("md", "latex", "csv"), default="md", help="format of the closing table")
    run.add_argument("--no-report", action="store_true",
                     help="write no RESULTS_DIR/report.html: neither the live one while packs land nor the final one")
    run.add_argument("--report-every", type=_positive_float, default=LIVE_REPORT_SECONDS, metavar="SECONDS",
                     help=f"rewrite the live report at most every SECONDS as packs land (default: {LIVE_REPORT_SECONDS:g}; "
                          "longer where a rewrite takes more than 2%% of a core)")

    submit = commands.add_parser("submit", help="submit a sweep to a running Ray cluster as a Ray Job")
    submit.add_argument("sweep", help="a sweep YAML file or a preset name")
    submit.add_argument("--address", required=True, help="the cluster's dashboard / job server, http://HEAD:8265")
    submit.add_argument("--storage", required=True,
                        help="s3://BUCKET/PREFIX (or gs://...) every node can reach, or a directory on a filesystem every node shares")
    submit.add_argument("--pip", action="append", help="a pip requirement the cluster's image lacks (repeatable)")
    submit.epilog = "More `fade-sweep run` options for the job go after --, e.g. -- --resume --runs-per-pack 200"

    status = commands.add_parser("status", help="status of a results directory, or of a submitted job")
    status.add_argument("target", nargs="?",
                        help="RESULTS_DIR; STORAGE (lists its sweeps); a job id (with --address); none: list jobs")
    status.add_argument("--watch", action="store_true",
                        help="redraw the status until the sweep ends (lines when not on a terminal); Ctrl-C stops only the watching")
    status.add_argument("--every", type=_positive_float, default=2.0, metavar="SECONDS",
                        help="--watch: seconds between redraws (default: 2)")
    status.add_argument("--address", help="the cluster's job server, http://HEAD:8265 (default: $RAY_ADDRESS)")

    logs = commands.add_parser("logs", help="print a submitted job's logs")
    logs.add_argument("job_id")
    logs.add_argument("--address", help="the cluster's job server, http://HEAD:8265 (default: $RAY_ADDRESS)")
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")

    commands.add_parser("presets", help="list the shipped sweeps with their size")

    table = commands.add_parser("table", help="print a table from a results directory")
    table.add_argument("results_dir", nargs="+",
                       help="STORAGE/<sweep name>; several: sweeps of the same task settings compared (a method in "
                            "more than one is labelled by its sweep)")
    table.add_argument("--kind", choices=KINDS, default="best",
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
    confirm.add_argument("--no-report", action="store_true",
                         help="leave RESULTS_DIR/report.html as it was (by default it is rewritten with the confirmation)")

    report = commands.add_parser("report", help="write the figures and tables as one offline HTML file")
    report.add_argument("results_dir", nargs="+", help="STORAGE/<sweep name>; several: sweeps of the same task settings compared")
    report.add_argument("--out", help="HTML file to write, a path or URI (default: RESULTS_DIR/report.html; of several "
                                      "sweeps: STORAGE/report-A+B.html beside the first)")
    report.add_argument("--images", help="also write a PNG per figure into this folder (needs kaleido)")

    verify = commands.add_parser("verify", help="check a results store: schema, duplicates, orphans, corrupt files, missing runs")
    verify.add_argument("results_dir", help="STORAGE/<sweep name>")

    commands.add_parser("schema", help="print the sweep file's JSON Schema (for editors: "
                                       "# yaml-language-server: $schema=FILE; docs/sweep-files.md)")
    return parser
