"""The planner sizes packs by their cost so that the slots end together: the modelled makespan is
close to total cost / slots; packs never mix experiments, cover every pending run once, come
longest first (the order Tune starts them in), and a resume re-plans for any slot count."""

import itertools

import pytest

from sweeps.plan import CostModel, plan_packs
from sweeps.spec import parse_sweep, resolve_sweep
from sweeps.plan.costs import GpuRate, Overheads
from sweeps.spec.engines import default_pack_runs
from sweeps.plan.packing import makespan, pack_seconds

COSTS = CostModel()
PRESETS = ("nonlinear-sensitivity", "nonlinear", "nonlinear-best", "linear-noise0", "linear-demo", "emnist-sensitivity", "emnist")
SYNTHETIC = {
    # one heavy learner beside light ones: costs differ by ~20x between experiments
    "mixed-linear": {"name": "mixed-linear", "task": "linear_tracking", "task_settings": {"steps": 2_000_000}, "seeds": 10,
                     "optimizers": {"sgd": {"alpha": [0.1, 0.05, 0.01]},
                                    "coupled": {"theta": [0.1, 0.05, 0.01, 0.005, 0.001], "beta0": [-2.3, -4.6, -5.3],
                                                "gamma0": [-1.2, -2.3, -4.6, -6.9]}}},
    # few configurations, many seeds: slots are filled by splitting seeds apart
    "few-configs": {"name": "few-configs", "task": "nonlinear_tracking", "task_settings": {"steps": 200_000, "score_window": 50_000}, "seeds": 30,
                    "optimizers": {"fade_adam": {"alpha": 0.0001, "theta_lambda": [0.5, 1], "gamma0": -4.6}}},
}
SLOTS = (2, 16, 64)


def _sweeps():
    return [resolve_sweep(name) for name in PRESETS] + [parse_sweep(doc, "test") for doc in SYNTHETIC.values()]


def _check_cover(sweep, packs, done=frozenset()):
    """Every pending (config, seed) in exactly one pack, each pack of one experiment's configs."""
    pairs = [pair for p in packs for pair in p.pairs()]
    assert len(pairs) == len(set(pairs)) and set(pairs) == set(sweep.pairs) - set(done)
    for pack in packs:
        assert {c.config_id for c in pack.configs} <= {c.config_id for c in pack.experiment.cells}
        assert pack.runs <= default_pack_runs(pack.experiment.task, "cpu")


def _ideal(sweep, slots, costs, device="cpu"):
    """Total cost / slots, each experiment costed as one pack (no split's extra start-ups), and the longest run."""
    total = sum(costs.pack_seconds(e, len(e.cells) * len(sweep.seeds), device) for e in sweep.experiments)
    longest = max(costs.pack_seconds(e, 1, device) for e in sweep.experiments)
    return total / slots, longest


@pytest.mark.parametrize("slots", SLOTS)
def test_cpu_makespan_is_close_to_total_cost_over_slots(slots):
    judged = 0
    for sweep in _sweeps():
        packs = plan_packs(sweep, slots)
        _check_cover(sweep, packs)
        seconds = [pack_seconds(p, COSTS) for p in packs]
        assert seconds == sorted(seconds, reverse=True), f"{sweep.name}: not longest first"
        ideal, longest = _ideal(sweep, slots, COSTS)
        if longest <= 0.15 * ideal:  # no single run longer than the margin: the slots can be balanced
            judged += 1
            assert makespan(seconds, slots) <= 1.15 * ideal, f"{sweep.name} on {slots} slots: {len(packs)} packs"
        if sweep.runs >= slots:
            assert len(packs) >= slots, f"{sweep.name} on {slots} slots: {len(packs)} packs"
    assert judged >= 2  # the bound was checked, not skipped everywhere


@pytest.mark.parametrize("preset", ("nonlinear", "emnist"))
def test_gpu_packs_stay_large_and_balance_the_gpu_slots(preset):
    """A GPU pack's rate grows with its size (GpuRate): packs are cut only as far as more slots need."""
    sweep = resolve_sweep(preset)
    for gpu_slots in (1, 2, 4, 16):
        packs = plan_packs(sweep, 2, gpu=True, gpu_slots=gpu_slots)
        _check_cover(sweep, packs)
        span = makespan([pack_seconds(p, COSTS, "cuda") for p in packs], gpu_slots)
        assert len(packs) >= gpu_slots
        if gpu_slots == 1:  # one GPU: nothing to balance, one pack per experiment (the device stays full)
            assert len(packs) == len(sweep.experiments)
        if gpu_slots <= 4:
            assert span <= 1.15 * _ideal(sweep, gpu_slots, COSTS, "cuda")[0]
        else:  # many slots: cutting costs efficiency, yet ends sooner than one pack per experiment
            whole = plan_packs(sweep, 2, gpu=True, gpu_slots=1)
            assert span < makespan([pack_seconds(p, COSTS, "cuda") for p in whole], gpu_slots)


def test_gpu_cost_is_not_linear_in_pack_size():
    rate = GpuRate(peak=1e6, half_runs=100)
    assert rate(100) == pytest.approx(0.5e6) and rate(10_000) > 0.99 * 0.99e6
    experiment = resolve_sweep("nonlinear").experiments[0]
    costs = CostModel(rate=lambda e, runs, device: rate(runs))
    per_run = {runs: costs.pack_seconds(experiment, runs, "cuda") / runs for runs in (10, 1000)}
    assert per_run[10] > 5 * per_run[1000]  # a small pack wastes the device


def test_sixteen_slots_get_sixteen_packs_of_nonlinear_sensitivity():
    """The issue's case: 2 packs of 80 runs whatever the cluster; now at least one pack per slot."""
    sweep = resolve_sweep("nonlinear-sensitivity")
    packs = plan_packs(sweep, 16)
    assert len(packs) >= 16
    # the heavier learner gets more (or larger-costing) packs: fade_adam costs more per run than fade_sgd
    by_learner = {o: [p for p in packs if p.experiment.optimizer == o] for o in ("fade_sgd", "fade_adam")}
    assert all(by_learner.values())


def test_learner_costs_drive_the_split():
    """A learner 3x as costly as another gets about 3x as many packs (equal pack costs), not the same."""
    sweep = resolve_sweep("nonlinear-sensitivity")
    sgd, adam = sweep.experiments
    rates = {sgd.optimizer: 300e3, adam.optimizer: 100e3}
    costs = CostModel(rate=lambda e, runs, device: rates[e.optimizer])
    for slots in (4, 8):  # enough slots to cut both, too few to cut every run apart
        packs = plan_packs(sweep, slots, costs=costs)
        count = {o: sum(p.experiment.optimizer == o for p in packs) for o in rates}
        assert 2.5 <= count[adam.optimizer] / count[sgd.optimizer] <= 3.5, count
        seconds = [pack_seconds(p, costs) for p in packs]
        assert makespan(seconds, slots) <= 1.15 * _ideal(sweep, slots, costs)[0]


def test_overheads_keep_packs_few_where_they_would_dominate():
    """Start-ups cost: a sweep of seconds is not cut into one pack per run."""
    sweep = resolve_sweep("linear-demo")
    costly = CostModel(overheads=Overheads(pack_start=5.0))
    assert len(plan_packs(sweep, 2, costs=costly)) <= 2 * 16
    assert len(plan_packs(sweep, 2, costs=costly)) < len(plan_packs(sweep, 64, costs=costly))


def test_a_resume_replans_for_another_slot_count():
    sweep = resolve_sweep("nonlinear-sensitivity")
    first = plan_packs(sweep, 2)
    done = set(itertools.chain.from_iterable(p.pairs() for p in first[:1]))
    done |= {(c.config_id, 0) for c in sweep.experiments[1].cells[:3]}  # and some seeds of another experiment
    again = plan_packs(sweep, 16, done)
    _check_cover(sweep, again, done)
    assert len(again) >= 16


def test_tune_starts_trials_in_the_order_of_the_plan():
    """The searcher hands Tune the packs longest first by the cost model, the plan's order, each once; then
    nothing while trials run, and FINISHED once they are all in."""
    from sweeps.tune.searcher import PackSearcher

    packs = plan_packs(resolve_sweep("nonlinear-sensitivity"), 16, costs=COSTS)
    searcher = PackSearcher(packs, lambda p: pack_seconds(p, COSTS), lambda p: None)
    handed = [searcher.suggest(f"t{i}")["pack_id"] for i in range(len(packs))]
    assert handed == [p.pack_id for p in packs]
    assert searcher.suggest("t-more") is None  # trials still run: a later round could add packs
    for i in range(len(packs)):
        searcher.on_trial_complete(f"t{i}")
    assert searcher.suggest("t-last") == PackSearcher.FINISHED


def test_runs_per_pack_is_a_ceiling():
    sweep = resolve_sweep("nonlinear-sensitivity")  # 16 configs x 5 seeds per learner
    for size, expected in ((80, 2), (20, 8), (3, 2 * 16 * 2)):
        packs = plan_packs(sweep, 2, runs_per_pack=size)
        _check_cover(sweep, packs)
        assert max(p.runs for p in packs) <= size and len(packs) == expected


def test_a_cut_is_as_even_as_the_runs_allow():
    """Four pieces of 16 configs x 5 seeds: configs apart (4 x 20 runs), not seeds apart (40, 20, 20, 20 ... )."""
    from sweeps.plan.packing import _Group, _split

    experiment = resolve_sweep("nonlinear-sensitivity").experiments[0]
    group = _Group(experiment, (0, 1, 2, 3, 4), experiment.cells, "cpu")
    assert sorted(p.runs for p in _split(group, 4, "tuning")) == [20, 20, 20, 20]
    assert sorted(p.runs for p in _split(group, 5, "tuning")) == [16] * 5  # seeds apart: no stream drawn twice
    assert all(len(p.configs) == 16 for p in _split(group, 5, "tuning"))


def test_a_linear_pack_costs_whole_simd_blocks_and_its_streams_and_bins():
    """A linear pack's kernel works in SIMD blocks (fade_core.linear.kernel.lanes_for: 16 runs for a float32 rule
    that adapts a step size or decay, 8 otherwise), so 3 survivors cost a whole block; each seed's stream is copied
    per pack and each bin reduced: a pack on 5 seeds, or in 10x the bins, costs more by exactly those overheads."""
    from sweeps.plan.costs import lanes

    sweep = parse_sweep(SYNTHETIC["mixed-linear"], "test")
    sgd, coupled = sorted(sweep.experiments, key=lambda e: e.optimizer != "sgd")
    assert [lanes(coupled, r) for r in (1, 16, 17)] == [16, 16, 32]
    assert lanes(coupled, 3, dtype="float64") == 8 and [lanes(sgd, r) for r in (1, 8, 9)] == [8, 8, 16]
    assert lanes(coupled, 3, device="cuda") == 3
    neural = parse_sweep(SYNTHETIC["few-configs"], "test").experiments[0]
    assert lanes(neural, 3) == 3  # the neural engines have no blocks to fill
    costs, steps = CostModel(), coupled.settings.steps
    kernel = steps / costs.run_steps_per_second(coupled, 1)  # one run's
    per_run = costs.overheads.per_checkpoint_run * (steps // costs.chunk_steps // costs.checkpoint_every)
    # 3 runs and 16 cost one block of kernel work (they differ by their checkpoints' tensors only); a 17th, a block more
    assert costs.pack_seconds(coupled, 16) - costs.pack_seconds(coupled, 3) == pytest.approx(13 * per_run)
    assert costs.pack_seconds(coupled, 17) - costs.pack_seconds(coupled, 16) == pytest.approx(16 * kernel + per_run)
    five = costs.pack_seconds(coupled, 15, seeds=5) - costs.pack_seconds(coupled, 15, seeds=1)
    assert five == pytest.approx(4 * steps * costs.overheads.per_seed_step)
    fine = parse_sweep({**SYNTHETIC["mixed-linear"], "task_settings": {"steps": 2_000_000, "bin": 2_000}}, "test")
    finer = next(e for e in fine.experiments if e.optimizer == "coupled")
    assert costs.pack_seconds(finer, 16) - costs.pack_seconds(coupled, 16) == pytest.approx(
        (steps // 2_000 - steps // coupled.settings.bin) * costs.overheads.per_bin)
