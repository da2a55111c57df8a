"""The sweep's progress reaches Ray's dashboard: gauges per experiment (run-steps, packs, the best
configuration's mean so far by the best table's rule) and per sweep (rate, fraction), set from the
status `status` reads, a resumed sweep's earlier packs included; the run says how to sign in to the
dashboard. No Ray is started: the gauges are recorded."""

import math

import pytest

from sweeps.cli.text import progress_line
from sweeps.plan import plan_packs
from sweeps.spec import parse_sweep
from sweeps.store.status import SweepStatus, TrialStatus
from sweeps.tune import metrics
from sweeps.tune.driver import dashboard_notice

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


def _written(gauge, pack, scores, diverged=None):
    """The driver's side of a written pack: the totals its trial reports (as Tune hands them back)."""
    ids = [c for c, _ in pack.pairs()]
    report = metrics.as_report(metrics.config_totals(ids, scores, diverged or [False] * len(ids)))
    gauge.runs_written(metrics.from_report(report))


def test_best_score_is_the_best_configurations_mean_over_its_finished_seeds(gauges):
    gauge, packs = gauges
    label = packs[0].experiment.label
    first, second = [p for p in packs if p.experiment.label == label]  # one config x 2 seeds each
    _written(gauge, first, [0.1, 0.9])  # mean 0.5: the best single run (0.1) is not the best configuration
    assert _value("fade_sweep_best_score", label) == pytest.approx(0.5)
    _written(gauge, second, [0.3, 0.5])  # mean 0.4: MSE, lower is better
    assert _value("fade_sweep_best_score", label) == pytest.approx(0.4)
    assert gauge.best(label) == pytest.approx(0.4)


def test_a_config_with_a_diverged_or_non_finite_seed_is_never_the_best(gauges):
    gauge, packs = gauges
    label = packs[0].experiment.label
    first, second = [p for p in packs if p.experiment.label == label]
    _written(gauge, first, [0.6, 0.8])
    _written(gauge, second, [0.01, 0.02], diverged=[False, True])  # far lower, but one seed diverged
    assert _value("fade_sweep_best_score", label) == pytest.approx(0.7)
    other = [p for p in packs if p.experiment.label != label]
    _written(gauge, other[0], [math.nan, 0.1])  # not flagged diverged, yet not finite: no best for it yet
    assert gauge.best(other[0].experiment.label) is None
    assert ("experiment", other[0].experiment.label) not in {k for t in _Recorded.made["fade_sweep_best_score"].values for k in t}


def test_seeds_of_one_config_across_packs_are_averaged_together(monkeypatch):
    monkeypatch.setattr(metrics, "Gauge", _Recorded)
    sweep = parse_sweep({**SWEEP, "variants": [{"task_settings": {"noise": 0.0}}]}, "test")
    packs = plan_packs(sweep, 1, runs_per_pack=1)  # every (config, seed) a pack of its own
    gauge = metrics.SweepGauges("gauged", packs)
    label = packs[0].experiment.label
    by_config = {}
    for pack in packs:
        by_config.setdefault(pack.configs[0].config_id, []).append(pack)
    (a1, a2), (b1, b2) = by_config.values()
    _written(gauge, a1, [0.2])
    _written(gauge, b1, [0.3])
    _written(gauge, a2, [0.6])  # config a: mean 0.4 over its two seeds
    assert gauge.best(label) == pytest.approx(0.3)  # config b has one seed so far: its mean is 0.3
    _written(gauge, b2, [0.7])  # b: 0.5; a: 0.4
    assert _value("fade_sweep_best_score", label) == pytest.approx(0.4)


def test_a_resumed_sweep_starts_its_gauges_from_the_store(monkeypatch):
    """Packs finished before a --resume count in every per-experiment gauge from the start."""
    monkeypatch.setattr(metrics, "Gauge", _Recorded)
    _Recorded.made = {}
    packs = plan_packs(parse_sweep(SWEEP, "test"), 1, runs_per_pack=2)
    earlier, now = packs[:1], packs[1:]
    ids = [c for c, _ in earlier[0].pairs()]
    start = metrics.GaugeStart({c.config_id: p.experiment.label for p in packs for c in p.configs},
                               metrics.config_totals(ids, [0.25, 0.75], [False, False]))
    gauge = metrics.SweepGauges("gauged", [*earlier, *now], start)
    label = earlier[0].experiment.label
    assert _value("fade_sweep_best_score", label) == pytest.approx(0.5)
    status = SweepStatus("gauged", "running", 100.0, 110.0, sum(p.run_steps for p in packs),
                         {p.pack_id: TrialStatus(p.pack_id, "pending", 0, p.run_steps) for p in now},
                         run_steps_at_start=earlier[0].run_steps)
    status.trials[earlier[0].pack_id] = TrialStatus(earlier[0].pack_id, "done", earlier[0].run_steps, earlier[0].run_steps)
    gauge.update(status)
    assert _value("fade_sweep_packs_done", label) == 1
    assert _value("fade_sweep_run_steps_done", label) == earlier[0].run_steps


def test_the_run_says_how_to_sign_in_to_the_dashboard():
    text = "\n".join(dashboard_notice("http://127.0.0.1:8265"))
    assert "http://127.0.0.1:8265" in text and "ray get-auth-token" in text
    assert "fade_sweep_" in text and "Tune trials" in text


def test_gauge_start_reads_the_stores_runs(tmp_path):
    """gauge_start: the store's committed scores as totals per configuration, each labelled by its experiment."""
    import numpy as np

    from sweeps.packs import PackOutcome
    from sweeps.store import Store, StoreLocation
    from sweeps.store.sweep_record import check_and_record

    sweep = parse_sweep(SWEEP, "test")
    check_and_record(StoreLocation.parse(tmp_path / "db"), sweep, "float32")
    store = Store.open(tmp_path / "db")
    assert metrics.gauge_start(sweep, store, "tuning").finished == {}  # nothing written: nothing read
    pack = plan_packs(sweep, 1, runs_per_pack=2)[0]  # 1 config x 2 seeds
    curves = {"mse": np.zeros((2, 2)), **{k: None for k in ("decay_relevant", "decay_irrelevant", "step_size_relevant",
                                                             "step_size_irrelevant")}}
    store.write_pack(pack, PackOutcome(np.array([0.2, 0.4]), np.array([False, True]), np.array([500, 1000]), curves, 1.0))
    start = metrics.gauge_start(sweep, Store.open(tmp_path / "db"), "tuning")
    config = pack.configs[0].config_id
    assert start.labels[config] == pack.experiment.label and len(start.labels) == 4
    assert start.finished == {config: metrics.SeedTotals(0.2, 2, 1)}


def test_run_steps_a_checkpoint_restored_are_not_this_runs_work():
    """A resumed pack continues from its checkpoint: the steps it restored were done by an earlier run, so the
    rate (the progress display's, `status`'s) and the Done line count only what this run did."""
    from types import SimpleNamespace

    from sweeps.cli.text import done_line

    trials = {"a": TrialStatus("a", "done", 1000, 1000, restored_from_step=60, restored_run_steps=600),
              "b": TrialStatus("b", "done", 1000, 1000)}
    status = SweepStatus("resumed", "finished", 100.0, 110.0, 3000, trials | {"c": TrialStatus("c", "done", 1000, 1000)},
                         run_steps_at_start=1000)  # pack c: finished by an earlier run
    assert status.run_steps_this_run == 1400 and status.rate == pytest.approx(140.0)
    run = SimpleNamespace(packs=2, run_steps=2000, wall_seconds=15.0, ray_start_seconds=5.0, slots=2, nodes={"n"})
    assert done_line(run, status).startswith("Done: 2 packs, 1.400e+03 run-steps in 15.0 s wall")
    assert "140.0K" not in done_line(run, status) and "0.1K run-steps/s" in done_line(run, status)


def test_the_callback_counts_a_restored_checkpoint_in_run_steps_of_its_pack(tmp_path):
    """`restored_from_step` is per run: the callback turns it into the pack's run-steps (steps x runs)."""
    from types import SimpleNamespace

    from sweeps.store.location import StoreLocation
    from sweeps.tune.progress import SweepProgress

    packs = plan_packs(parse_sweep(SWEEP, "test"), 1, runs_per_pack=2)
    progress = SweepProgress("s", packs, StoreLocation.parse(tmp_path))
    pack = packs[0]
    progress.on_trial_result(0, [], SimpleNamespace(config={"pack_id": pack.pack_id}),
                             {"run_steps_done": 70 * pack.runs, "restored_from_step": 60})
    assert progress.status.trials[pack.pack_id].restored_run_steps == 60 * pack.runs == 120
    assert progress.status.run_steps_this_run == 10 * pack.runs
