"""What a person sees of a running sweep: a bar on a terminal, else progress lines (a log file,
nohup, a Ray Job, CI): one when a pack is written and at least every LINE_EVERY_SECONDS, with the
numbers `fade-sweep status` shows, and a last one at the end whose rate is the "Done" line's;
never one per step or chunk. The driver's Tune callback feeds either the run's status
(sweeps.tune.options.ProgressDisplay)."""

from __future__ import annotations

import sys
import time

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sweeps.cli.text import format_rate, progress_line
from sweeps.store.records import SweepStatus
from sweeps.tune.options import ProgressDisplay

LINE_EVERY_SECONDS = 60.0  # a progress line at least this often where no bar is drawn


class Bar:
    """A rich bar: the share of the sweep's run-steps done, packs done, the throughput, elapsed and ETA."""

    def __init__(self, status: SweepStatus):
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
        self._task = self._progress.add_task("sweep", total=status.run_steps_total, completed=status.run_steps_done,
                                             packs="", rate="")
        self._progress.start()

    def update(self, status: SweepStatus, milestone: bool) -> None:
        self._progress.update(self._task, completed=status.run_steps_done,
                              packs=f"{status.count('done')}/{len(status.trials)}", rate=format_rate(status.rate))

    def close(self) -> None:
        self._progress.stop()


class Lines:
    """Progress lines on stdout: the first at once, then at each milestone and at least every LINE_EVERY_SECONDS."""

    def __init__(self, status: SweepStatus):
        self._line_at = 0.0  # when the last line was written

    def update(self, status: SweepStatus, milestone: bool) -> None:
        now = time.time()
        if milestone or now - self._line_at >= LINE_EVERY_SECONDS:
            self._line_at = now
            print(progress_line(status), flush=True)

    def close(self) -> None:
        pass


def progress_display(status: SweepStatus) -> ProgressDisplay:
    """The bar where stdout is a terminal, the lines elsewhere."""
    return Bar(status) if sys.stdout.isatty() else Lines(status)
