"""Driver-side progress of a sweep: a rich progress bar and the status.json file that
`fade-sweep status` reads, plus `quiet_tune`, which keeps Ray's and Tune's banners out of a run.

The bar shows the share of the sweep's run-steps done, packs done, the throughput, the
elapsed time and the ETA. The throughput is ONE number everywhere (bar, the closing "Done"
line, `fade-sweep status`): `SweepStatus.rate`, the run-steps this run has done divided by
the wall seconds since its packs started (Ray's start is reported apart).

Where no bar can be drawn (stdout is not a terminal: a log file, nohup, a Ray Job, CI), the
callback writes progress lines instead (`notify`): one when a pack is written and at least
every LINE_EVERY_SECONDS, with the numbers `fade-sweep status` shows (`status.progress_line`),
and a last one at the end, whose rate is the "Done" line's; never one per step or chunk.

The same numbers go to Ray's metrics (`metrics.SweepGauges`), for the dashboard.

The callback is created by the driver for the folder it runs (never restored from a Tune
experiment: a copied results folder reports into the copy). Tune calls `on_step_begin`
about ten times a second, which keeps status.json's heartbeat (`updated_at`) fresh.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Callable, Protocol

from ray.tune import Callback
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sweeps.store.status import HEARTBEAT_SECONDS, SweepStatus, TrialStatus, format_rate, progress_line
from sweeps.spec import Pack
from sweeps.tune.metrics import GaugeStart, SweepGauges, from_report

WRITE_EVERY_SECONDS = HEARTBEAT_SECONDS
LINE_EVERY_SECONDS = 60.0  # a progress line at least this often where no bar is drawn
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
TUNE_LOGGER = "ray.tune.tune"  # tune.run's module logger: its SIGINT handler warns there


class _DropTokenNotice(logging.Filter):
    """Ray's notice that token authentication is on (it stays on; the notice says nothing to act on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Token authentication is enabled" not in record.getMessage()


class _DropSkipHint(logging.Filter):
    """Tune's warning on SIGINT, "... Press CTRL+C (or send SIGINT/SIGKILL/SIGTERM) to skip": a second
    Ctrl-C would skip the saving of finished packs that a sweep's interrupt exists for; the CLI
    prints its own line (what is kept, the --resume command)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "to skip" not in record.getMessage()


def quiet_tune() -> None:
    """Keep out of a run's output what does not apply to it; call before Ray starts.

    Tune's new output engine prints a configuration box, "View detailed results here" and a
    TensorBoard hint even at verbose=0: RAY_AIR_NEW_OUTPUT=0 selects the legacy engine, which
    at verbose=0 prints nothing. TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1: Tune's own CSV / JSON /
    TensorBoard result files are not written (the results are the store). Ray's notice that
    token authentication is enabled is dropped (the authentication itself is untouched), and so is
    Tune's "Press CTRL+C ... to skip" on an interrupt (logging filters). A value the user set in
    the environment is kept."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    for name, drop in ((TOKEN_AUTH_LOGGER, _DropTokenNotice), (TUNE_LOGGER, _DropSkipHint)):
        logger = logging.getLogger(name)
        if not any(isinstance(f, drop) for f in logger.filters):
            logger.addFilter(drop())


class RunSummary(Protocol):
    """What `done_line` reads of the driver's SweepRun (not imported: the driver imports this module)."""

    packs: int
    run_steps: int
    wall_seconds: float
    ray_start_seconds: float
    slots: int
    nodes: frozenset[str]


def done_line(run: RunSummary, status: SweepStatus | None) -> str:
    """The closing line of a run (`run`: the driver's SweepRun): what ran, the wall time split
    into Ray's start and the packs' time, and the throughput as the bar and `status` show it."""
    packs_seconds = (run.wall_seconds - run.ray_start_seconds) if status is None else status.updated_at - status.started_at
    rate = run.run_steps / packs_seconds if packs_seconds else 0.0
    split = f"Ray start {run.ray_start_seconds:.1f} s" + (f", packs {packs_seconds:.1f} s" if packs_seconds else "")
    packs = f"{run.packs} pack{'' if run.packs == 1 else 's'}"
    return (f"Done: {packs}, {run.run_steps:.3e} run-steps in {run.wall_seconds:.1f} s wall ({split}); "
            f"{format_rate(rate)} while packs ran, {run.slots} packs at once on {len(run.nodes)} node(s)")


class SweepProgress(Callback):
    """A Tune callback following every trial (= pack) of a sweep."""

    def __init__(self, sweep_name: str, packs: list[Pack], results_dir: Path, show: bool = True, finished: list[Pack] = (),
                 lines: Callable[[str], None] | None = None, gauges: GaugeStart | None = None):
        """`packs`: this run's trials; `finished`: packs that earlier runs of the sweep finished (shown as done);
        `lines`: where progress lines go instead of the bar (stdout is not a terminal); `gauges`: what the
        dashboard's gauges start from (the store's runs of a resumed sweep)."""
        self.results_dir = results_dir
        self.show = show and lines is None
        self._lines = lines
        self._line_at = 0.0  # when the last progress line was written
        trials = {p.pack_id: TrialStatus(p.pack_id, "done", p.run_steps, p.run_steps) for p in finished}
        trials.update({p.pack_id: TrialStatus(p.pack_id, "pending", 0, p.run_steps) for p in packs})
        self.status = SweepStatus(
            sweep=sweep_name,
            state="running",
            started_at=time.time(),
            updated_at=time.time(),
            run_steps_total=sum(p.run_steps for p in [*finished, *packs]),
            trials=trials,
            run_steps_at_start=sum(p.run_steps for p in finished),
        )
        self._packs = [*finished, *packs]
        self._gauge_start = gauges
        self._gauges: SweepGauges | None = None  # made in `setup`, in the driver (Ray is up there)
        self._written_at = 0.0
        self._ended_at: float | None = None  # when Tune's experiment ended: the packs' clock stops there
        self._progress: Progress | None = None

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; the live display and the line writer stay behind.
        return {**self.__dict__, "_progress": None, "_lines": None, "_gauges": None, "_gauge_start": None}

    def setup(self, **info) -> None:
        self._gauges = SweepGauges(self.status.sweep, self._packs, self._gauge_start)
        self.status.started_at = time.time()
        self.status.driver_pid, self.status.host = os.getpid(), socket.gethostname()
        if self.show:
            self._progress = Progress(
                TextColumn("[bold]sweep"),
                BarColumn(),
                TaskProgressColumn(),  # of the sweep's run-steps
                TextColumn("packs {task.fields[packs]}"),
                TextColumn("{task.fields[rate]}"),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._task = self._progress.add_task("sweep", total=self.status.run_steps_total, completed=self.status.run_steps_done,
                                                 packs="", rate="")
            self._progress.start()
        self._refresh(force=True)

    def _trial(self, trial) -> TrialStatus:
        return self.status.trials[trial.config["pack_id"]]

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        self._trial(trial).state = "running"
        self._refresh()

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        entry = self._trial(trial)
        entry.run_steps_done = result.get("run_steps_done", entry.run_steps_done)
        entry.node_id = result.get("node_id", entry.node_id)
        entry.pid = result.get("pid", entry.pid)
        entry.restored_from_step = max(entry.restored_from_step, result.get("restored_from_step", 0))
        if result.get("written"):
            entry.state, entry.run_steps_done = "done", entry.run_steps_total
            if self._gauges is not None:
                self._gauges.runs_written(from_report(result.get("config_totals", [])))
            self._refresh(force=True, line=True)  # a pack done: a progress line
            return
        self._refresh()

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        # Tune also "completes" the trials it stops on an interrupt: only a written pack is done.
        entry = self._trial(trial)
        if entry.state != "done":
            entry.state = "pending"
        self._refresh(force=True)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self._trial(trial).state = "failed"
        self._refresh(force=True)

    def on_trial_recover(self, iteration, trials, trial, **info) -> None:
        self._trial(trial).state = "running"
        self._refresh(force=True)

    def on_step_begin(self, iteration, trials, **info) -> None:
        self._refresh()  # the heartbeat: Tune steps ~10 times a second, status.json is written once a second

    def finish(self, state: str, written: set[str]) -> None:
        """The final word of the driver: `state`, and every pack found in the store marked done.

        After an interrupt Tune may not have seen the last report of a pack that was written."""
        for pack_id, entry in self.status.trials.items():
            if pack_id in written:
                entry.state, entry.run_steps_done = "done", entry.run_steps_total
            elif entry.state in ("running", "done"):
                entry.state = "pending"  # stopped; it continues from its checkpoint on --resume
        self.status.state = state
        self._refresh(force=True, line=True)  # the last line: its rate is the Done line's
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def on_experiment_end(self, trials, **info) -> None:
        # Provisional: the driver's `finish` has the last word, from the store.
        self._ended_at = time.time()
        failed = self.status.count("failed") > 0
        unfinished = self.status.count("done") < len(self.status.trials)
        self.status.state = "failed" if failed else "interrupted" if unfinished else "finished"
        self._refresh(force=True)
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _refresh(self, force: bool = False, line: bool = False) -> None:
        now = time.time()
        # After the experiment's end the rate's clock stays there, so the bar, the Done line
        # and `fade-sweep status` show one throughput.
        self.status.updated_at = self._ended_at or now
        if self._progress is not None:
            self._progress.update(
                self._task,
                completed=self.status.run_steps_done,
                packs=f"{self.status.count('done')}/{len(self.status.trials)}",
                rate=format_rate(self.status.rate),
            )
        if force or now - self._written_at >= WRITE_EVERY_SECONDS:
            self.status.write(self.results_dir)
            self._written_at = now
            if self._gauges is not None:
                self._gauges.update(self.status)
        if self._lines is not None and (line or now - self._line_at >= LINE_EVERY_SECONDS):
            self._line_at = now
            self._lines(progress_line(self.status))
