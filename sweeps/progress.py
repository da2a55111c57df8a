"""Driver-side progress display for a sweep: packs done, run-steps per second, ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from ray.tune import Callback


class SweepProgress(Callback):
    """A Tune callback that draws one rich progress bar over the sweep's run-steps."""

    def __init__(self, total_packs: int, total_run_steps: int, console: Console | None = None):
        self.total_packs = total_packs
        self.packs_done = 0
        self._done_by_trial: dict[str, int] = {}
        self.total_run_steps = total_run_steps
        self._console = console
        self._progress: Progress | None = None

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; the live display stays behind.
        return {**self.__dict__, "_progress": None, "_console": None}

    def setup(self, **info) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("packs {task.fields[packs]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self._console,
            transient=False,
        )
        self._task = self._progress.add_task("sweep", total=self.total_run_steps, packs=f"0/{self.total_packs}", rate="")
        self._progress.start()

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        self._done_by_trial[trial.trial_id] = result.get("run_steps_done", 0)
        self._refresh()

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.packs_done += 1
        self._refresh()

    def _refresh(self) -> None:
        if self._progress is None:
            return
        done = sum(self._done_by_trial.values())
        task = self._progress.tasks[0]
        speed = task.speed or 0.0
        self._progress.update(
            self._task, completed=done, packs=f"{self.packs_done}/{self.total_packs}", rate=f"{speed / 1e6:.1f}M run-steps/s"
        )

    def on_experiment_end(self, trials, **info) -> None:
        if self._progress is not None:
            self._progress.stop()
