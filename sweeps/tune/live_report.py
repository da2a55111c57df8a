"""The live report: RESULTS_DIR/report.html rewritten by the driver while a sweep runs.

A Tune callback in the driver (never in the workers: a pack's hot loop does not know of it).
When a pack is written it marks the report due (not the experiment's last pack: the final
report follows); the report is then written at once for the first pack of the experiment and
afterwards at most every `ExecutionOptions.report_every` seconds, on a thread of the driver, so
Tune's event loop never waits for it. Its cost is kept under BUDGET of one core: after a write
that took c seconds of the driver's CPU, the next comes no sooner than c / BUDGET seconds later;
on Linux the thread runs at nice NICE, so on a full machine the packs' processes come first.
Each write reads the store afresh (what the trainables committed) and replaces the page
atomically (StoreLocation.write_bytes), so a browser never reads half a page. When the
experiment ends no further live page is started and the one being written is waited for: the
command then writes the final, static report (sweeps.cli.live). A live report that fails to
build is said once and the sweep goes on.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ray.tune import Callback

from sweeps.store.location import StoreLocation
from sweeps.tune.options import ExecutionOptions

REPORT_FILE = "report.html"
BUDGET = 0.02  # the most of one driver core the live report may take
NICE = 10  # the writing thread's nice value (Linux): below the packs' processes
log = logging.getLogger(__name__)


class LiveReport(Callback):
    """Rewrites `location`/report.html as packs land (see the module docstring)."""

    def __init__(self, location: StoreLocation, every: float):
        self.location = location
        self.every = every
        self._due = False
        self._next_at = 0.0  # monotonic time before which no write starts (0: the first pack writes at once)
        self._closed = False
        self._failed = False
        self._written = 0  # packs of this experiment written so far
        self._thread: threading.Thread | None = None
        self.writes = 0  # live pages written (for tests and the benchmark)

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; a thread does not travel.
        return {**self.__dict__, "_thread": None}

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if result.get("written"):
            self._written += 1
            self._due = self._written < len(trials)  # the experiment's last pack: the final report comes next
            self._start_if_due()

    def on_step_begin(self, iteration, trials, **info) -> None:
        self._start_if_due()

    def on_experiment_end(self, trials, **info) -> None:
        self.close()

    def close(self) -> None:
        """No further live page; wait for the one being written (the final report must come after it)."""
        self._closed = True
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _start_if_due(self) -> None:
        if not self._due or self._closed or self._failed or time.monotonic() < self._next_at:
            return
        if self._thread is not None and self._thread.is_alive():
            return
        self._due = False
        self._thread = threading.Thread(target=self._write, name="fade-sweep-live-report", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        from sweeps.analysis.report import write_report  # plotly and polars: only a run that reports loads them
        from sweeps.store.store import Store

        _lower_priority()
        started = time.process_time()  # the whole driver's CPU while it writes (polars' threads too): on the safe side
        try:
            store = Store.open(self.location)
            if not self._closed:
                write_report(store, self.location / REPORT_FILE, live_every=self.every)
                self.writes += 1
        except Exception as err:  # noqa: BLE001 - a report is never worth a sweep
            self._failed = True
            log.warning("the live report stopped (%s: %s); the report is written when the sweep ends",
                        type(err).__name__, err)
        cost = time.process_time() - started
        self._next_at = time.monotonic() + max(self.every, cost / BUDGET)


def _lower_priority() -> None:
    """On Linux, a thread's nice value is its own: this one yields to the packs' processes on a full machine."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: the budget alone bounds the cost
        pass


def live_reports(location: StoreLocation, options: ExecutionOptions) -> list[LiveReport]:
    """The live report's callback for one Tune experiment (none when the run writes no report)."""
    return [] if options.report_every is None else [LiveReport(location, options.report_every)]
