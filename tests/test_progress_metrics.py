"""The sweep's progress reaches Ray's dashboard: gauges per experiment (run-steps, packs, best score
so far by the task's direction) and per sweep (rate, fraction), set from the status `status` reads;
the run says how to sign in to the dashboard. No Ray is started: the gauges are recorded."""

import math

import pytest

from sweeps.spec import parse_sweep, plan_packs
from sweeps.store.status import SweepStatus, TrialStatus, progress_line
from sweeps.tune import metrics
from sweeps.tune.driver import dashboard_notice
from sweeps.tune.trainable import _best_score

SWEEP = {
    "name": "gauged",
    "task": "linear_tracking",
    "task_settings": {"steps": 1000, "bin": 500},
    "seeds": 2,
    "variants": [{"task_settings": {"noise": 0.0}}, {"task_settings": {"noise": 1.0}}],
    "optimizers": {"sgd": {"alpha": [0.1, 0.01]}},
}


class _Recorded:
    """Stands for ray.util.metrics.Gauge: keeps the last value per tag set."""

    made: dict[str, "_Recorded"] = {}

    def __init__(self, name, description="", tag_keys=()):
        self.name, self.tag_keys, self.values = name, tag_keys, {}
        _Recorded.made[name] = self

    def set(self, value, tags=None):
        assert set(tags) == set(self.tag_keys)
        self.values[tuple(sorted(tags.items()))] = value


@pytest.fixture
def gauges(monkeypatch):
    monkeypatch.setattr(metrics, "Gauge", _Recorded)
    _Recorded.made = {}
    packs = plan_packs(parse_sweep(SWEEP, "test"), 1, runs_per_pack=2)
    return metrics.SweepGauges("gauged", packs), packs


def _value(name, experiment=None):
    tags = {"sweep": "gauged", **({"experiment": experiment} if experiment else {})}
    return _Recorded.made[name].values[tuple(sorted(tags.items()))]


def test_gauges_per_experiment_from_the_status(gauges):
    gauge, packs = gauges
    assert len(packs) == 4  # 2 experiments x 2 packs
    status = SweepStatus("gauged", "running", 100.0, 110.0, sum(p.run_steps for p in packs),
                         {p.pack_id: TrialStatus(p.pack_id, "pending", 0, p.run_steps) for p in packs})
    first, second = [p for p in packs if p.experiment.settings.noise == 0.0]
    status.trials[first.pack_id].state, status.trials[first.pack_id].run_steps_done = "done", first.run_steps
    status.trials[second.pack_id].state, status.trials[second.pack_id].run_steps_done = "running", 500
    gauge.update(status)
    label = first.experiment.label
    assert label == "linear_tracking[steps=1000,bin=500] sgd"  # noise 0.0 is the default
    assert _value("fade_sweep_run_steps_done", label) == first.run_steps + 500
    assert _value("fade_sweep_run_steps_total", label) == first.run_steps + second.run_steps
    assert _value("fade_sweep_packs_done", label) == 1
    other = next(p for p in packs if p.experiment.settings.noise == 1.0).experiment.label
    assert other != label and _value("fade_sweep_run_steps_done", other) == 0
    assert _value("fade_sweep_run_steps_per_second") == pytest.approx(status.rate)
    assert _value("fade_sweep_fraction_done") == pytest.approx((first.run_steps + 500) / status.run_steps_total)
    assert "packs 1 done, 1 running, 0 failed, 2 pending" in progress_line(status)  # the log line: same numbers


def test_best_score_so_far_follows_the_tasks_direction(gauges):
    gauge, packs = gauges
    label = packs[0].experiment.label
    same = [p for p in packs if p.experiment.label == label]
    gauge.pack_written(same[0].pack_id, 0.5)
    gauge.pack_written(same[1].pack_id, 0.7)  # MSE: lower is better, 0.5 stays
    assert _value("fade_sweep_best_score", label) == 0.5
    gauge.pack_written(same[1].pack_id, None)  # every run of a pack diverged: nothing to show
    assert _value("fade_sweep_best_score", label) == 0.5
    assert _best_score([math.inf, 0.3, math.nan, 0.4], higher_is_better=False) == 0.3
    assert _best_score([0.3, 0.9, math.nan], higher_is_better=True) == 0.9
    assert _best_score([math.nan, math.inf], higher_is_better=False) is None


def test_the_run_says_how_to_sign_in_to_the_dashboard():
    text = "\n".join(dashboard_notice("http://127.0.0.1:8265"))
    assert "http://127.0.0.1:8265" in text and "ray get-auth-token" in text
    assert "fade_sweep_" in text and "Tune trials" in text
