"""`fade-sweep`: run sweeps on Ray Tune (locally or on a cluster), follow them, print tables and reports.

Exit codes (interface.md): 0 ok, 2 bad input (one line on stderr, nothing written),
1 failure, 130 interrupted (Ctrl-C or SIGTERM; finished packs are kept, `--resume` continues),
141 when the reader of stdout went away (`fade-sweep presets | head -1`: quiet, as `cat` would be).

`parser.py` holds the arguments, `reading.py` the commands that read a store (light: no Ray,
torch or numba), `running.py` those that run sweeps, `schema.py` the sweep file's JSON Schema, `text.py` how the
library's data and notices read; this module dispatches and turns errors into exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import threading

from cluster.errors import ClusterError
from sweeps.cli import reading, running, schema
from sweeps.cli.parser import BAD_INPUT, FAILURE, INTERRUPTED, UserError, build_parser
from sweeps.cli.text import show_notices
from sweeps.spec import SweepError

__all__ = ["BAD_INPUT", "CLOSED_PIPE", "FAILURE", "INTERRUPTED", "UserError", "main"]

COMMANDS = {
    "run": running.cmd_run,
    "submit": running.cmd_submit,
    "status": reading.cmd_status,
    "logs": running.cmd_logs,
    "presets": reading.cmd_presets,
    "table": reading.cmd_table,
    "confirm": running.cmd_confirm,
    "report": reading.cmd_report,
    "verify": reading.cmd_verify,
    "schema": schema.cmd_schema,
}
CLOSED_PIPE = 141  # 128 + SIGPIPE: what `cat`, `grep`, ... return when their reader goes away


def _interrupted_message(args: argparse.Namespace, err: KeyboardInterrupt) -> str:
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
    if args.dtype != "float32":  # without it the resumed run would be float32
        command += ["--dtype", args.dtype]
    if getattr(args, "race", False):  # without it the resumed run would give every cell every seed
        command += ["--race"]
    if args.engine:  # without it the resumed packs would run on the default engine
        command += ["--engine", args.engine]
    return f"{what}; continue with `{shlex.join([*command, '--resume'])}`"


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (`fade-sweep presets | head -1`)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no real stdout
        return True


def _run_command(args: argparse.Namespace) -> int:
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
        if args.command == "run" and not args.dry_run:  # a dry run ran no packs
            print("fade-sweep: stdout was closed, the sweep stopped; finished packs are kept, --resume continues", file=sys.stderr)
        return CLOSED_PIPE
    return code or 0


def _redact(text: str) -> str:
    """Messages never show credentials (nor URI query strings)."""
    from sweeps.store.uris import redact

    return redact(text)


@contextlib.contextmanager
def _sigterm_as_ctrl_c():
    """SIGTERM (a scheduler's, `kill`'s) stops a command as Ctrl-C does, exit 130 with the resume hint, from its
    first line: Python's default would end the process at once, mid-write. An interrupt that lands where Python
    cannot raise it (an at-fork hook while Ray starts its processes, a finalizer: "Exception ignored in ...";
    ours, or Ray's SIGTERM handler's exit) is delivered again rather than lost, so the command never runs on to
    a Done line. Both restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before, hook, pending = signal.signal(signal.SIGTERM, signal.default_int_handler), sys.unraisablehook, []

    def redeliver_lost_interrupt(unraisable) -> None:
        lost = unraisable.exc_value
        if isinstance(lost, KeyboardInterrupt) or (isinstance(lost, SystemExit) and lost.code == signal.SIGTERM):
            # a moment later, from another thread: raised in this hook it would be lost again (lost again
            # elsewhere, it comes back here). As SIGTERM, whose handler is always Python's here (a command
            # started in the background by a shell ignores SIGINT, and would ignore it)
            pending.append(threading.Timer(0.01, signal.pthread_kill, (threading.main_thread().ident, signal.SIGTERM)))
            pending[-1].start()
        else:
            hook(unraisable)

    sys.unraisablehook = redeliver_lost_interrupt
    try:
        yield
    finally:
        for timer in pending:  # none may fire once SIGTERM's own action is back
            timer.cancel()
        signal.signal(signal.SIGTERM, before)
        sys.unraisablehook = hook


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `submit ... -- RUN OPTIONS`: what follows -- is passed to `fade-sweep run` on the cluster.
    passthrough = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = build_parser().parse_args(argv)
    args.run_args = passthrough
    show_notices()  # the library's notices (a stale lock taken over, runs outside the sweep): one line each on stderr
    try:
        with _sigterm_as_ctrl_c():
            status = _run_command(args)
    except (SweepError, UserError, ClusterError) as err:
        print(f"fade-sweep: error: {_redact(str(err))}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt as err:  # Ctrl-C / SIGTERM; a stopped sweep raises SweepInterrupted (a KeyboardInterrupt)
        print(f"fade-sweep: {_interrupted_message(args, err)}", file=sys.stderr)
        return INTERRUPTED
    except SystemExit as err:
        if err.code != signal.SIGTERM:
            raise
        # Ray's SIGTERM handler (ray.init sets it, replacing ours) exits with the signal's number: outside the
        # packs (Ray's start, the closing tables and report) SIGTERM still means what Ctrl-C means
        print(f"fade-sweep: {_interrupted_message(args, KeyboardInterrupt())}", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:  # noqa: BLE001 - one line for the user; FADE_SWEEP_DEBUG=1 shows the traceback
        if os.environ.get("FADE_SWEEP_DEBUG"):
            raise
        print(f"fade-sweep: failed: {type(err).__name__}: {_redact(str(err))} (FADE_SWEEP_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return FAILURE
    return status
