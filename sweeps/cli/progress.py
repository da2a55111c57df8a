"""What a person sees of a running sweep: a bar on a terminal, else progress lines (a log file,
nohup, a Ray Job, CI): one when a pack is written and at least every LINE_EVERY_SECONDS, with the
numbers `fade-sweep status` shows, and a last one at the end whose rate is the "Done" line's;
never one per step or chunk. The driver's Tune callback feeds either the run's status
(sweeps.tune.options.ProgressDisplay)."""

from __future__ import annotations

import sys
import time

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sweeps.cli.text import format_rate, progress_line, rounds_text
from sweeps.store.records import SweepStatus
from sweeps.tune.options import ProgressDisplay

LINE_EVERY_SECONDS = 60.0  # a progress line at least this often where no bar is drawn


class Bar:
    """A rich bar: the share of the sweep's run-steps done, packs done, the throughput, elapsed and ETA. Of a
    race: the share of the most run-steps it can need (which shrinks as configurations are eliminated) and each
    method's round in place of the packs (a race's packs come with its rounds: their count says nothing)."""

    def __init__(self, status: SweepStatus):
        self._progress = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(),
            TaskProgressColumn(),  # of the sweep's run-steps
            TextColumn("{task.fields[packs]}"),
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
        self._progress.update(self._task, total=status.run_steps_total, completed=status.run_steps_done,
                              packs=bar_text(status), rate=format_rate(status.rate))

    def close(self) -> None:
        self._progress.stop()


def bar_text(status: SweepStatus) -> str:
    """What the bar says beside its share: packs done of all, or a race's rounds."""
    return rounds_text(status) if status.rounds else f"packs {status.count('done')}/{len(status.trials)}"


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
