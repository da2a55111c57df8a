"""Driver-side progress of a sweep: the status.json file that `fade-sweep status` reads, the
dashboard's gauges, and what a person sees (the command line's `ProgressDisplay`: a bar on a
terminal, log lines elsewhere, sweeps.cli.progress), plus `quiet_tune`, which keeps Ray's and
Tune's banners out of a run.

The throughput is ONE number everywhere (the display, the closing "Done" line, `fade-sweep
status`): `SweepStatus.rate`, the run-steps this run has done divided by the wall seconds since
its packs started (Ray's start is reported apart). The display gets the status at every refresh
and a milestone when a pack is written (in a race: when a method's round is decided, so a line names the new
rounds, not the ones a landed pack just ended) and when the run ends; the numbers are its to word.

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
from typing import TYPE_CHECKING, Callable

from ray.tune import Callback

from sweeps.plan import Pack
from sweeps.store.location import StoreLocation
from sweeps.store.status import HEARTBEAT_SECONDS, SweepStatus, TrialStatus
from sweeps.tune.metrics import GaugeStart, SweepGauges, from_report

if TYPE_CHECKING:
    from sweeps.tune.options import ProgressDisplay

WRITE_EVERY_SECONDS = HEARTBEAT_SECONDS
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


class SweepProgress(Callback):
    """A Tune callback following every trial (= pack) of a sweep."""

    def __init__(self, sweep_name: str, packs: list[Pack], results_dir: StoreLocation, finished: list[Pack] = (),
                 display: Callable[[SweepStatus], ProgressDisplay] | None = None, gauges: GaugeStart | None = None):
        """`packs`: this run's trials; `finished`: packs that earlier runs of the sweep finished (shown as done);
        `display`: makes what a person sees of the run (None: nothing); `gauges`: what the dashboard's gauges
        start from (the store's runs of a resumed sweep)."""
        self.results_dir = results_dir
        self._make_display = display
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
        self._runs = {p.pack_id: p.runs for p in self._packs}  # a restored step is that many run-steps
        self._gauge_start = gauges
        self._gauges: SweepGauges | None = None  # made in `setup`, in the driver (Ray is up there)
        self._written_at = 0.0
        self._ended_at: float | None = None  # when Tune's experiment ended: the packs' clock stops there
        self._display: ProgressDisplay | None = None  # made in `setup`, in the driver

    def add(self, packs: list[Pack]) -> None:
        """Packs handed out after the start (a race's next rounds), pending until their trials start."""
        for pack in packs:
            self.status.trials[pack.pack_id] = TrialStatus(pack.pack_id, "pending", 0, pack.run_steps)
            self._runs[pack.pack_id] = pack.runs
        self._packs.extend(packs)
        if self._gauges is not None:
            self._gauges.add(packs)
        self.status.run_steps_total = max(self.status.run_steps_total, sum(t.run_steps_total for t in self.status.trials.values()))

    def race(self, rounds: dict[str, tuple[int, bool]], most_rounds: int, most_run_steps: int) -> None:
        """Where a race stands: each method's round (and whether it is finished), and the most run-steps the
        race can need, which is the total its progress counts towards (a race ends below it)."""
        self.status.rounds = {label: number for label, (number, _) in rounds.items()}
        self.status.rounds_finished = [label for label, (_, done) in rounds.items() if done]
        self.status.rounds_most = most_rounds
        self.status.run_steps_total = max(most_run_steps, sum(t.run_steps_total for t in self.status.trials.values()))
        self._refresh(force=True, milestone=True)  # a round decided: a progress line with the new rounds

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; the display and its maker stay behind.
        return {**self.__dict__, "_display": None, "_make_display": None, "_gauges": None, "_gauge_start": None}

    def setup(self, **info) -> None:
        self._gauges = SweepGauges(self.status.sweep, self._packs, self._gauge_start)
        self.status.started_at = time.time()
        self.status.driver_pid, self.status.host = os.getpid(), socket.gethostname()
        if self._make_display is not None:
            self._display = self._make_display(self.status)
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
        entry.restored_run_steps = entry.restored_from_step * self._runs[entry.pack_id]
        if result.get("written"):
            entry.state, entry.run_steps_done = "done", entry.run_steps_total
            if self._gauges is not None:
                self._gauges.runs_written(from_report(result.get("config_totals", [])))
            # a pack done: a progress line; in a race, the round it ends (race) has the line, with the new rounds
            self._refresh(force=True, milestone=not self.status.rounds)
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
        self._refresh(force=True, milestone=True)  # the last line: its rate is the Done line's
        if self._display is not None:
            self._display.close()
            self._display = None

    def on_experiment_end(self, trials, **info) -> None:
        # Provisional: the driver's `finish` has the last word, from the store.
        self._ended_at = time.time()
        failed = self.status.count("failed") > 0
        unfinished = self.status.count("done") < len(self.status.trials)
        self.status.state = "failed" if failed else "interrupted" if unfinished else "finished"
        self._refresh(force=True)

    def _refresh(self, force: bool = False, milestone: bool = False) -> None:
        now = time.time()
        # After the experiment's end the rate's clock stays there, so the display, the Done line
        # and `fade-sweep status` show one throughput.
        self.status.updated_at = self._ended_at or now
        if self._display is not None:
            self._display.update(self.status, milestone)
        if force or now - self._written_at >= WRITE_EVERY_SECONDS:
            self.status.write(self.results_dir)
            self._written_at = now
            if self._gauges is not None:
                self._gauges.update(self.status)
