"""The sweep's progress as Ray metrics, so Ray's dashboard (its Metrics page, Grafana) charts it.

Ray's own pages show the packs as Tune trials (each trial's reported `run_steps_done`,
`fraction_done`, `mean_loss`); these gauges add the sweep-level view, tagged with the sweep
and the experiment (`Experiment.label`): run-steps done, the sweep's rate, packs done and the
best score so far: the best configuration's mean over its finished seeds, by the best table's
rule (`sweeps.analysis.queries.best_configs`: a configuration with a diverged or non-finite
seed is never the best). Packs finished by an earlier run of the sweep count too (a `--resume`
starts from the store's scores). Ray exports the gauges from the driver's node to Prometheus
(docs/clusters.md, "The dashboard"). They are set from `SweepProgress`, at most once a second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ray.util.metrics import Gauge

from sweeps.plan import Pack
from sweeps.spec import Sweep
from sweeps.store import Store
from sweeps.store.status import SweepStatus
from tasks import get_task

TAGS = ("sweep", "experiment")
SWEEP_ONLY = ("sweep",)


class SeedTotals(NamedTuple):
    """A configuration's finished seeds so far: the sum of their scores, how many, and how many
    diverged or scored non-finite (any such seed keeps the configuration out of the best)."""

    total: float
    seeds: int
    unusable: int

    def __add__(self, other: SeedTotals) -> SeedTotals:  # type: ignore[override]
        return SeedTotals(self.total + other.total, self.seeds + other.seeds, self.unusable + other.unusable)


def config_totals(config_ids: Iterable[str], scores: Iterable[float], diverged: Iterable[bool]) -> dict[str, SeedTotals]:
    """Per configuration, the totals of the runs given (one per (config, seed), in any order): what a
    written pack reports to the driver, and what a resumed sweep reads back from its store."""
    totals: dict[str, SeedTotals] = {}
    for config_id, score, blew_up in zip(config_ids, scores, diverged):
        bad = bool(blew_up) or not math.isfinite(score)
        run = SeedTotals(0.0 if bad else float(score), 1, int(bad))
        totals[config_id] = totals[config_id] + run if config_id in totals else run
    return totals


def as_report(totals: Mapping[str, SeedTotals]) -> list[list]:
    """Totals as a Tune result's value: rows [config_id, total, seeds, unusable] (a list, which Tune
    keeps whole, where a dict would be flattened into a key per configuration)."""
    return [[config_id, *t] for config_id, t in totals.items()]


def from_report(rows: Iterable[list]) -> dict[str, SeedTotals]:
    """The totals a pack's final result carried (`as_report`)."""
    return {row[0]: SeedTotals(*row[1:]) for row in rows}


class GaugeStart(NamedTuple):
    """What a stage's gauges start from: each configuration's experiment label, and the totals of the
    runs already in the store (a resumed sweep's earlier packs)."""

    labels: dict[str, str]
    finished: dict[str, SeedTotals]


def gauge_start(sweep: Sweep, store: Store, stage: str) -> GaugeStart:
    """The sweep's configurations by experiment, and the store's committed runs of `stage` as totals."""
    labels = {c.config_id: e.label for e in sweep.experiments for c in e.cells}
    if not store.finished_runs(stage):
        return GaugeStart(labels, {})
    rows = store.scan("scores", stage=stage).select("config_id", "score", "diverged").collect()
    return GaugeStart(labels, config_totals(rows["config_id"], rows["score"], rows["diverged"]))


class SweepGauges:
    """The gauges of one sweep run (made in the driver, where Ray runs; never pickled with Tune's state)."""

    def __init__(self, sweep: str, packs: list[Pack], start: GaugeStart | None = None):
        """`packs`: this run's and the earlier runs' packs of the stage; `start`: the configurations'
        experiments and the store's runs (None: the packs' configurations, nothing written yet)."""
        self.sweep = sweep
        self.experiment: dict[str, str] = {}
        self.label_of: dict[str, str] = {}
        self.higher: dict[str, bool] = {}
        self.add(packs)
        self.label_of.update(start.labels if start else {})
        self.configs: dict[str, SeedTotals] = {}
        self.run_steps = Gauge("fade_sweep_run_steps_done", "run-steps done, per experiment of the sweep", TAGS)
        self.total = Gauge("fade_sweep_run_steps_total", "run-steps of the sweep, per experiment", TAGS)
        self.packs = Gauge("fade_sweep_packs_done", "packs written, per experiment of the sweep", TAGS)
        self.best_score = Gauge("fade_sweep_best_score",
                                "the best configuration's mean score over its finished seeds (no diverged seed)", TAGS)
        self.rate = Gauge("fade_sweep_run_steps_per_second", "the sweep's run-steps per second (as `status`)", SWEEP_ONLY)
        self.fraction = Gauge("fade_sweep_fraction_done", "share of the sweep's run-steps done", SWEEP_ONLY)
        self.runs_written(start.finished if start else {})

    def add(self, packs: list[Pack]) -> None:
        """Packs of the stage to follow (those a race's later rounds hand out, too)."""
        self.experiment.update({p.pack_id: p.experiment.label for p in packs})
        self.label_of.update({c.config_id: p.experiment.label for p in packs for c in p.configs})
        self.higher.update({p.experiment.label: get_task(p.experiment.task).higher_is_better for p in packs})

    def runs_written(self, totals: Mapping[str, SeedTotals]) -> None:
        """Runs written (a pack's, or the store's at start) join their configurations' totals; the best
        configuration of each experiment they touch is set again."""
        touched = set()
        for config_id, runs in totals.items():
            label = self.label_of.get(config_id)
            if label is None or label not in self.higher:  # a configuration outside this stage's packs
                continue
            self.configs[config_id] = self.configs[config_id] + runs if config_id in self.configs else runs
            touched.add(label)
        for label in touched:
            best = self.best(label)
            if best is not None:
                self.best_score.set(best, {"sweep": self.sweep, "experiment": label})

    def best(self, label: str) -> float | None:
        """The best mean over finished seeds of an experiment's configurations with no unusable seed (None: no such one)."""
        means = [t.total / t.seeds for c, t in self.configs.items() if self.label_of[c] == label and t.seeds and not t.unusable]
        if not means:
            return None
        return max(means) if self.higher[label] else min(means)

    def update(self, status: SweepStatus) -> None:
        """Set every gauge from the status `fade-sweep status` reads."""
        done: dict[str, int] = {}
        total: dict[str, int] = {}
        packs: dict[str, int] = {}
        for pack_id, trial in status.trials.items():
            label = self.experiment.get(pack_id)
            if label is None:  # not a pack of this stage's plan
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
