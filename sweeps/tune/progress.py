"""Driver-side progress of a sweep: a rich progress bar (packs done, run-steps per second,
ETA) and the status.json file that `fade-sweep status` reads."""

from __future__ import annotations

import time
from pathlib import Path

from ray.tune import Callback
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sweeps.results.status import SweepStatus, TrialStatus, format_rate
from sweeps.spec import Pack

WRITE_EVERY_SECONDS = 1.0


class SweepProgress(Callback):
    """A Tune callback following every trial (= pack) of a sweep."""

    def __init__(self, sweep_name: str, packs: list[Pack], results_dir: Path, show: bool = True):
        self.results_dir = results_dir
        self.show = show
        self.status = SweepStatus(
            sweep=sweep_name,
            state="running",
            started_at=time.time(),
            updated_at=time.time(),
            run_steps_total=sum(p.run_steps for p in packs),
            trials={p.pack_id: TrialStatus(p.pack_id, "pending", 0, p.run_steps) for p in packs},
        )
        self._written_at = 0.0
        self._progress: Progress | None = None

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; the live display stays behind.
        return {**self.__dict__, "_progress": None}

    def setup(self, **info) -> None:
        self.status.started_at = time.time()
        if self.show:
            self._progress = Progress(
                TextColumn("[bold]sweep"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("packs {task.fields[packs]}"),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._task = self._progress.add_task("sweep", total=self.status.run_steps_total, packs="", rate="")
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
            entry.run_steps_done = entry.run_steps_total
        self._refresh()

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        entry = self._trial(trial)
        entry.state, entry.run_steps_done = "done", entry.run_steps_total
        self._refresh(force=True)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self._trial(trial).state = "failed"
        self._refresh(force=True)

    def on_trial_recover(self, iteration, trials, trial, **info) -> None:
        self._trial(trial).state = "running"
        self._refresh(force=True)

    def on_step_begin(self, iteration, trials, **info) -> None:
        # Trials finished before a restore report nothing again: take their state from Tune.
        for trial in trials:
            entry = self._trial(trial)
            if trial.status == "TERMINATED" and entry.state != "done":
                entry.state, entry.run_steps_done = "done", entry.run_steps_total

    def on_experiment_end(self, trials, **info) -> None:
        self.on_step_begin(0, trials)
        failed = any(t.status == "ERROR" for t in trials)
        unfinished = any(t.status != "TERMINATED" for t in trials)
        self.status.state = "failed" if failed else "interrupted" if unfinished else "finished"
        self._refresh(force=True)
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _refresh(self, force: bool = False) -> None:
        now = time.time()
        self.status.updated_at = now
        if self._progress is not None:
            task = self._progress.tasks[0]
            self._progress.update(
                self._task,
                completed=self.status.run_steps_done,
                packs=f"{self.status.count('done')}/{len(self.status.trials)}",
                rate=format_rate(task.speed or 0),
            )
        if force or now - self._written_at >= WRITE_EVERY_SECONDS:
            self.status.write(self.results_dir)
            self._written_at = now
