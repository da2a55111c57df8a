"""What the command line says, as text: the library returns data and notices, this module words
them and the commands print them.

`format_status` (`fade-sweep status`), `progress_line` (a run's progress where no bar is drawn:
the same numbers), `done_line` (a run's closing line), `plan_text` (`run --dry-run`),
`format_verification` (`fade-sweep verify`), `format_rate` (one throughput wording for all of
them), and `show_notices`, which puts the library's notices (the `sweeps` logger: a stale writer
lock taken over, a lease lost, stored runs outside the current sweep) on stderr as one line each.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sweeps.spec.race import method_names
from sweeps.store.records import SweepStatus
from sweeps.store.status import driver_gone

if TYPE_CHECKING:  # verify loads pyarrow, the dry run torch: `status` reads records only
    from sweeps.packs.dryrun import PlanEstimate, RaceBounds
    from sweeps.spec import PackResources, Sweep
    from sweeps.store.verify import Verification
    from sweeps.tune.options import SweepRun

NOTICES = "sweeps"  # the logger the library's notices go to (its modules' loggers are below it)


class _Stderr(logging.Handler):
    """One line per notice, on the stderr of the moment (a test's capture, a redirected stream)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"fade-sweep: {self.format(record)}", file=sys.stderr, flush=True)


def show_notices() -> None:
    """Print the library's notices on stderr from now on (once per process, however often called)."""
    logger = logging.getLogger(NOTICES)
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr(logging.INFO))


def format_rate(run_steps_per_second: float) -> str:
    """12.3K or 4.56M run-steps/s: linear sweeps run millions per second, neural ones thousands."""
    if run_steps_per_second >= 1e6:
        return f"{run_steps_per_second / 1e6:.2f}M run-steps/s"
    return f"{run_steps_per_second / 1e3:.1f}K run-steps/s"


def packs_text(status: SweepStatus) -> str:
    return (f"{status.count('done')} done, {status.count('running')} running, {status.count('failed')} failed, "
            f"{status.count('pending')} pending")


def run_steps_text(status: SweepStatus, live: bool) -> str:
    """Run-steps done of the total, %, the rate and (while running) the ETA: one text for `status` and the
    progress lines. Of a race the total is the most it can need (it ends below), and the ETA an upper bound."""
    remaining = status.run_steps_total - status.run_steps_done
    eta = remaining / status.rate if live and status.rate > 0 and status.state == "running" else None
    return (f"{status.run_steps_done:.3e} of {'at most ' if status.rounds else ''}{status.run_steps_total:.3e} "
            f"({100 * status.run_steps_done / max(status.run_steps_total, 1):.1f}%), {format_rate(status.rate)}"
            + (f", ETA {'at most ' if status.rounds else ''}{eta:.0f} s" if eta is not None else ""))


def progress_line(status: SweepStatus) -> str:
    """One line of a run's progress where no progress bar is drawn (a log file, a job's output):
    the numbers `fade-sweep status` shows, from the same status."""
    elapsed = status.updated_at - status.started_at
    if status.rounds:  # a race: its packs come and go with its rounds, their count says nothing of its progress
        return f"[{elapsed:.0f} s] {status.state}: run-steps {run_steps_text(status, True)}; {rounds_text(status)}"
    return f"[{elapsed:.0f} s] {status.state}: packs {packs_text(status)}; run-steps {run_steps_text(status, True)}"


def rounds_text(status: SweepStatus) -> str:
    """A race's rounds, one per method: "rounds (of at most 8): sgd 3, fade 5 done"."""
    names = method_names(list(status.rounds))
    done = set(status.rounds_finished)
    return f"rounds (of at most {status.rounds_most}): " + ", ".join(
        f"{names[label]} {n}{' done' if label in done else ''}" for label, n in status.rounds.items())


def done_line(run: SweepRun, status: SweepStatus | None, compiling: float = 0.0) -> str:
    """The closing line of a run: what ran, the wall time split into Ray's start and the packs' time,
    and the throughput as the progress display and `status` show it (from `status` when there is one);
    `compiling`: seconds spent compiling the sweep's own rules before Ray started, in neither."""
    packs_seconds = (run.wall_seconds - run.ray_start_seconds) if status is None else status.updated_at - status.started_at
    steps = run.run_steps if status is None else status.run_steps_this_run  # not what a checkpoint restored
    rate = steps / packs_seconds if packs_seconds else 0.0
    split = f"Ray start {run.ray_start_seconds:.1f} s" + (f", packs {packs_seconds:.1f} s" if packs_seconds else "")
    if compiling:
        split += f"; compiling own learners {compiling:.1f} s before, apart"
    packs = f"{run.packs} pack{'' if run.packs == 1 else 's'}"
    return (f"Done: {packs}, {steps:.3e} run-steps in {run.wall_seconds:.1f} s wall ({split}); "
            f"{format_rate(rate)} while packs ran, {run.slots} packs at once on {len(run.nodes)} node(s)")


def plan_text(sweep: Sweep, resources: PackResources, plan: PlanEstimate, stored: int = 0,
              notes: Sequence[str | None] = ()) -> str:
    """What `run --dry-run` prints: the plan, one line per experiment, then the estimate and its warnings;
    `stored`: runs a resumed store already holds (not planned)."""
    gpu = resources.gpus > 0
    runs = sum(r.runs for r in plan.rows)
    steps = sum(r.run_steps for r in plan.rows)
    lines = [
        f"Plan for sweep {sweep.name}: {plan.packs} packs, {runs:,} runs, {steps:.3e} run-steps"
        + (f" ({stored:,} runs already in the store)" if stored else "") + "; "
        f"each pack asks for {resources.cpus:g} CPU" + (f", neural packs also {resources.gpus:g} GPU" if gpu else "")
        + f"; {plan.slots} CPU packs at once" + (f", {plan.gpu_slots} GPU packs at once" if gpu else ""),
    ]
    header = ("task", "settings", "optimizer", "packs", "runs/pack", "run-steps",
              "calibrated" if plan.calibrated else "rate (cost table)", "time")
    cells = [(r.task, r.settings, r.optimizer, str(r.packs), str(r.runs_per_pack), f"{r.run_steps:.2e}",
              f"{format_rate(r.rate)} {r.device}", format_seconds(r.seconds)) for r in plan.rows]
    lines += aligned([header, *cells], left=3)
    wall = plan.wall_seconds
    note = (" GPU packs were calibrated on the CPU (no GPU on this machine): run the dry run where the GPUs are for "
            "their GPU time." if plan.gpu_on_cpu else "")
    reports = (f"; {plan.report_seconds:.0f} s of the packs' time is their per-chunk reports and checkpoints "
               "(--chunk-steps, --checkpoint-every)" if plan.report_seconds >= 0.1 * sum(r.seconds for r in plan.rows) else "")
    compiling = (f", the linear kernels of {', '.join(plan.cold)} compiled by their first packs (~"
                 f"{plan.compile_seconds:.0f} s: not in numba's cache yet; later runs load them)" if plan.cold else "")
    lines.append(f"Estimated wall time: {wall:.0f} s ({wall / 60:.1f} min): the command (~{plan.command_seconds:.0f} s)"
                 + (f", Ray's start (~{plan.ray_seconds:.0f} s)" if plan.ray_seconds else "")
                 + f", Tune's trial actors' start (~{plan.tune_start_seconds:.0f} s)"
                 + f", a worker's start per slot (~{plan.slot_start_seconds:.0f} s){compiling} and its streams "
                 + (f"(~{plan.stream_seconds:.0f} s)" if not plan.streams_per_pack else
                    "(~0 s: they do not fit a worker's stream cache, FADE_STREAM_CACHE_MB, so each pack draws its own, "
                    "in its time)")
                 + ", and the packs' time over the slots, longest first "
                 f"(~{plan.packs_seconds:.0f} s: the time column at the {'calibrated rates' if plan.calibrated else 'cost table rates'}, "
                 f"~{plan.pack_start_seconds:.1f} s of start-up per pack included{reports}).{note}"
                 + ("" if plan.calibrated else " (--calibrate measures them here first.)"))
    return "\n".join([*lines, *(note for note in notes if note)])


def format_seconds(seconds: float) -> str:
    """A duration for a table cell: whole seconds, one decimal under 10 s, "<0.1s" below that."""
    if seconds < 0.05:
        return "<0.1s"
    return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


def race_bounds_text(bounds: RaceBounds, full_run_steps: int) -> str:
    """A race's dry run, beyond its first round: the whole race's wall time and run-steps at both ends."""
    return (f"The whole race: {bounds.best_seconds:.0f} s and {bounds.best_run_steps:.3e} run-steps "
            f"({100 * bounds.best_run_steps / full_run_steps:.0f}% of the full grid's) if each method's best is alone "
            f"after round 1, up to {bounds.worst_seconds:.0f} s and {bounds.worst_run_steps:.3e} run-steps if nothing "
            "is eliminated; each method's rounds follow one another, the methods side by side on the slots.")


def aligned(rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """Rows of cells as lines of columns as wide as their widest cell: the first `left` columns (text) to the
    left, the rest (numbers) to the right."""
    widths = [max(map(len, column)) for column in zip(*rows)]
    return [" ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


LOADED = 1.0  # load average per CPU above which the machine counts as loaded


def load_note(cpus: int | None = None, calibrated: bool = True, quiet_seconds: float | None = None,
              packs_at_once: int = 1) -> str | None:
    """A warning when this machine is loaded (its 1-minute load average above LOADED per CPU):
    other jobs slow the calibration and the run alike, so the estimate is only as good as the
    load is steady. None when quiet. With the cost table's (quiet) estimate `quiet_seconds`, also that
    estimate at this load: the run's `packs_at_once` processes and the load's share the CPUs evenly, so
    every part takes (load + packs_at_once) / cpus times as long (linear-demo at load 7.4-10.2 on 2 CPUs:
    `python benchmarks/bench_dryrun.py linear-demo`, 2026-11-27, load 6.4-10.2: real 42-89 s, so scaled 51-73 s, 12 s quiet)."""
    cpus = cpus or os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load <= LOADED * cpus:
        return None
    if not calibrated:  # the cost table's rates are a quiet machine's
        slower = (load + packs_at_once) / cpus
        at_load = (f": at this load, about {quiet_seconds * slower:.0f} s (x{slower:.1f}: the load and the run's "
                   f"{packs_at_once} packs at once sharing {cpus} CPUs)" if quiet_seconds else "")
        return (f"This machine is loaded (load average {load:.1f} on {cpus} CPUs): the run will run slower than on a "
                f"quiet machine, whose rates the estimate uses{at_load}, and by as much as the load changes.")
    return (f"This machine is loaded (load average {load:.1f} on {cpus} CPUs): the calibration ran and the run will "
            "run slower than on a quiet machine, and by as much as the load changes; the estimate assumes it stays.")


def oversubscribed_note(declared_cpus: float, cpus: int | None = None) -> str | None:
    """A warning when the embedded Ray is declared more CPUs (`--num-cpus`) than this machine has: Ray
    starts that many packs at once, which share the real cores, so an estimate (one pack per real
    core) is that much too short, and the run slower than on that many cores. None when they fit."""
    cpus = cpus or os.cpu_count() or 1
    if declared_cpus <= cpus:
        return None
    return (f"--num-cpus declares {declared_cpus:g} CPUs but this machine has {cpus}: a dry run's estimate assumes "
            f"{declared_cpus:g} real cores; here the packs share {cpus} and the run takes longer.")


def format_status(status: SweepStatus, finished_packs: int, resume: str = "fade-sweep run ... --resume") -> str:
    """The lines `fade-sweep status RESULTS_DIR` prints; `resume` is the command that continues the sweep."""
    age = time.time() - status.updated_at
    gone = driver_gone(status)
    state = "interrupted (driver not running)" if gone else status.state
    lines = [
        f"sweep {status.sweep}: {state} (updated {age:.0f} s ago)",
        f"packs: {packs_text(status)} ({finished_packs} pack files in the store)",
        f"run-steps: {run_steps_text(status, not gone)}",
    ]
    if gone:
        where = "" if status.host == socket.gethostname() else f" on {status.host}, no heartbeat for {age:.0f} s"
        lines.append(f"driver (pid {status.driver_pid}{where}) is not running: the sweep was interrupted; "
                     f"continue with `{resume}`")
    elif status.state == "interrupted":
        lines.append(f"the sweep was interrupted; continue with `{resume}`")
    elif status.state == "running" and age > 60:
        lines.append(f"no update for over a minute: the driver may have stopped; continue with `{resume}`")
    return "\n".join(lines)


# How a problem kind of `verify` reads when counted: a "missing runs" problem is one method with runs missing.
_PLURALS = {
    "missing runs": ("method missing runs", "methods missing runs"),
    "schema": ("schema problem", "schema problems"),
    "content": ("content problem", "content problems"),
    "record": ("damaged or missing record", "damaged or missing records"),
    "hash mismatch": ("hash mismatch", "hash mismatches"),
    "size mismatch": ("size mismatch", "size mismatches"),
    "misplaced": ("misplaced file", "misplaced files"),
    "corrupt": ("corrupt file", "corrupt files"),
}


def _counted(kind: str, n: int) -> str:
    one, many = _PLURALS.get(kind, (kind, f"{kind}s"))
    return f"{n} {one if n == 1 else many}"


def verification_summary(v: Verification) -> str:
    """`clean` or `N problems (what they are)`, then the store's counts; every count names what it counts."""
    what = (f"{_counted('pack', v.packs)}, {_counted('run', v.runs)} stored, "
            f"{_counted('data file', v.files)} checked, {_counted('run', v.missing)} missing")
    if v.clean:
        return f"{v.location}: clean ({what})"
    kinds = Counter(kind for kind, _ in v.problems)
    listed = ", ".join(_counted(kind, n) for kind, n in sorted(kinds.items()))
    return f"{v.location}: {len(v.problems)} problem{'s' if len(v.problems) > 1 else ''} ({listed}); {what}"


def format_verification(v: Verification) -> str:
    """What `fade-sweep verify` prints: one line per problem, the notes, then the summary."""
    return "\n".join([*(line for _, line in v.problems), *(f"note: {n}" for n in v.notes), verification_summary(v)])
