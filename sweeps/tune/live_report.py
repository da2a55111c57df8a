"""The live report: RESULTS_DIR/report.html rewritten by the driver while a sweep runs.

A Tune callback in the driver (never in the workers: a pack's hot loop does not know of it).
When a pack is written it marks the report due (not the experiment's last pack: the final
report follows); the report is then made at once for the first pack of the experiment and
afterwards at most every `ExecutionOptions.report_every` seconds. It is made in a helper
process (one per experiment, started with the experiment at nice 10 and importing what a page
needs while the first pack runs), not on a thread of the
driver: building figures holds an interpreter for seconds, and the driver's interpreter is the
one that takes the packs' reports (a trainable waits on it), so a thread there slowed the packs
themselves. Its cost is kept under BUDGET of one core: after a page that took c seconds of the
helper's CPU, the next comes no sooner than c / BUDGET seconds later. The driver writes each
page it gets back atomically (StoreLocation.write_bytes), so a browser never reads half a page.
When the experiment ends no further page is written (one still being made is dropped, never
waited for): the command then writes the final, static report (sweeps.cli.live). A live report
that fails is said once and the sweep goes on.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from multiprocessing.pool import AsyncResult, Pool

from ray.tune import Callback

from sweeps.analysis.live_page import live_page, prepare_helper
from sweeps.store.location import StoreLocation
from sweeps.tune.options import ExecutionOptions

REPORT_FILE = "report.html"
BUDGET = 0.02  # the most of one core the live report may take
log = logging.getLogger(__name__)


class LiveReport(Callback):
    """Rewrites `location`/report.html as packs land (see the module docstring)."""

    def __init__(self, location: StoreLocation, every: float):
        self.location = location
        self.every = every
        self._due = False
        self._next_at = 0.0  # monotonic time before which no page starts (0: the first pack's at once)
        self._closed = False
        self._written = 0  # packs of this experiment written so far
        self._helper: Pool | None = None
        self._making: AsyncResult | None = None
        self.writes = 0  # live pages written (for tests and the benchmark)

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; a process does not travel.
        return {**self.__dict__, "_helper": None, "_making": None}

    def setup(self, **info) -> None:
        self._helper = multiprocessing.get_context("spawn").Pool(1, initializer=prepare_helper)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if result.get("written"):
            self._written += 1
            self._due = self._written < len(trials)  # the experiment's last pack: the final report comes next
            self._start_if_due()

    def on_step_begin(self, iteration, trials, **info) -> None:
        self._take_page()
        self._start_if_due()

    def on_experiment_end(self, trials, **info) -> None:
        self.close()

    def close(self) -> None:
        """No further live page is written, from now on: a page being made is dropped (its process ends),
        so whatever the command writes next (the final report) stays. Never waits for a page."""
        self._closed = True
        if self._helper is not None:
            self._helper.terminate()  # a page half made is not worth its CPU
            self._helper = self._making = None

    def _start_if_due(self) -> None:
        if not self._due or self._closed or self._making is not None or time.monotonic() < self._next_at:
            return
        self._due = False
        if self._helper is None:  # a callback Tune restored without its process
            self.setup()
        self._making = self._helper.apply_async(live_page, (self.location.uri, self.every))

    def _take_page(self) -> None:
        """Write the page the helper made, if it is ready (on Tune's loop: one atomic file write)."""
        if self._making is None or not self._making.ready():
            return
        making, self._making = self._making, None
        try:
            page, cost = making.get()
        except Exception as err:  # noqa: BLE001 - a report is never worth a sweep
            self.close()
            log.warning("the live report stopped (%s: %s); the report is written when the sweep ends",
                        type(err).__name__, err)
            return
        if not self._closed:
            self.location.write_bytes(REPORT_FILE, page)
            self.writes += 1
        self._next_at = time.monotonic() + max(self.every, cost / BUDGET)


def live_reports(location: StoreLocation, options: ExecutionOptions) -> list[LiveReport]:
    """The live report's callback for one Tune experiment (none when the run writes no report)."""
    return [] if options.report_every is None else [LiveReport(location, options.report_every)]
