"""The sweep's progress as Ray metrics, so Ray's dashboard (its Metrics page, Grafana) charts it.

Ray's own pages show the packs as Tune trials (each trial's reported `run_steps_done`,
`fraction_done`, `mean_loss`); these gauges add the sweep-level view, tagged with the sweep
and the experiment (`Experiment.label`): run-steps done, the sweep's rate, packs done and the
best score so far (the best finite score of the written packs, by the task's direction).
Ray exports them from the driver's node to Prometheus (README, "The dashboard").
Gauges are set from `SweepProgress`, at most once a second.
"""

from __future__ import annotations

import math

from ray.util.metrics import Gauge

from sweeps.spec import Pack
from sweeps.store.status import SweepStatus
from tasks import get_task

TAGS = ("sweep", "experiment")
SWEEP_ONLY = ("sweep",)


class SweepGauges:
    """The gauges of one sweep run (made in the driver, where Ray runs; never pickled with Tune's state)."""

    def __init__(self, sweep: str, packs: list[Pack]):
        self.sweep = sweep
        self.experiment = {p.pack_id: p.experiment.label for p in packs}
        self.higher = {p.experiment.label: get_task(p.experiment.task).higher_is_better for p in packs}
        self.best: dict[str, float] = {}
        self.run_steps = Gauge("fade_sweep_run_steps_done", "run-steps done, per experiment of the sweep", TAGS)
        self.total = Gauge("fade_sweep_run_steps_total", "run-steps of the sweep, per experiment", TAGS)
        self.packs = Gauge("fade_sweep_packs_done", "packs written, per experiment of the sweep", TAGS)
        self.best_score = Gauge("fade_sweep_best_score", "best finite score of the packs written so far", TAGS)
        self.rate = Gauge("fade_sweep_run_steps_per_second", "the sweep's run-steps per second (as `status`)", SWEEP_ONLY)
        self.fraction = Gauge("fade_sweep_fraction_done", "share of the sweep's run-steps done", SWEEP_ONLY)

    def pack_written(self, pack_id: str, best_score: float | None) -> None:
        """A written pack's best finite score joins its experiment's best so far."""
        label = self.experiment.get(pack_id)
        if label is None or best_score is None or not math.isfinite(best_score):
            return
        known = self.best.get(label)
        if known is None or (best_score > known if self.higher[label] else best_score < known):
            self.best[label] = best_score
            self.best_score.set(best_score, {"sweep": self.sweep, "experiment": label})

    def update(self, status: SweepStatus) -> None:
        """Set every gauge from the status `fade-sweep status` reads."""
        done: dict[str, int] = {}
        total: dict[str, int] = {}
        packs: dict[str, int] = {}
        for pack_id, trial in status.trials.items():
            label = self.experiment.get(pack_id)
            if label is None:  # a pack finished by an earlier run: counted in the sweep's totals only
                continue
            done[label] = done.get(label, 0) + trial.run_steps_done
            total[label] = total.get(label, 0) + trial.run_steps_total
            packs[label] = packs.get(label, 0) + (trial.state == "done")
        for label in total:
            tags = {"sweep": self.sweep, "experiment": label}
            self.run_steps.set(done[label], tags)
            self.total.set(total[label], tags)
            self.packs.set(packs[label], tags)
        self.rate.set(status.rate, {"sweep": self.sweep})
        self.fraction.set(status.run_steps_done / max(status.run_steps_total, 1), {"sweep": self.sweep})
