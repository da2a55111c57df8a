"""Resources per task family: in one sweep, packs of CPU-only tasks ask for CPUs alone and
fill the CPU slots; packs of GPU-capable tasks ask for the GPU share and fill the device."""

from __future__ import annotations

import pytest
import torch

from sweeps.packs.neural import use_tf32
from sweeps.plan import plan_packs
from sweeps.spec import PackResources, SweepError, parse_sweep
from sweeps.spec.engines import default_pack_runs

MIXED = {
    "name": "mixed",
    "seeds": 5,
    "variants": [
        {"task": "linear_tracking", "task_settings": {"steps": 1000},
         "optimizers": {"sgd": {"alpha": [0.1, 0.05, 0.01, 0.005]}, "fade": {"alpha": [0.1, 0.05], "theta_lambda": [0.0, 0.01],
                                                                           "gamma0": [-1.2, -2.3, -4.6]}}},
        {"task": "nonlinear_tracking", "task_settings": {"steps": 1000, "score_window": 500, "bin": 500},
         "optimizers": {"fade_sgd": {"alpha": [0.01, 0.001], "theta_lambda": [0.0, 0.5, 1.0], "gamma0": [-4.6, -9.2]}}},
    ],
    "resources": {"gpus_per_pack": 0.5},
}


def test_a_mixed_sweep_with_gpus_is_valid_and_each_family_asks_for_its_own():
    sweep = parse_sweep(MIXED, "test")
    assert sweep.resources == PackResources(1.0, 0.5)
    assert sweep.resources.for_task(runs_on_gpu=False) == PackResources(1.0, 0.0)
    assert sweep.resources.for_task(runs_on_gpu=True) == PackResources(1.0, 0.5)
    assert PackResources(2.0, 0.5).as_tune() == {"CPU": 2.0, "GPU": 0.5}


def test_gpu_packs_fill_the_device_and_cpu_packs_the_cpu_slots():
    sweep = parse_sweep(MIXED, "test")
    packs = plan_packs(sweep, cpus=4, gpu=True, runs_per_pack=None)
    by_task: dict[str, list[int]] = {}
    for pack in packs:
        by_task.setdefault(pack.experiment.task, []).append(pack.runs)
    assert by_task["nonlinear_tracking"] == [12 * 5], "one pack holds every neural run (below the engine table's pack size)"
    assert 12 * 5 <= default_pack_runs("nonlinear_tracking", "cuda")
    assert sum(by_task["linear_tracking"]) == (4 + 12) * 5
    assert len(by_task["linear_tracking"]) >= 4, "the CPU packs keep the 4 CPU slots busy"
    without_gpu = plan_packs(sweep, cpus=4)  # the neural packs share the CPU slots too
    assert sum(p.runs for p in without_gpu) == (4 + 12 + 12) * 5
    assert len([p for p in without_gpu if p.experiment.task == "nonlinear_tracking"]) >= 1


def test_gpus_for_a_sweep_of_cpu_only_tasks_are_refused():
    linear_only = {**MIXED, "variants": MIXED["variants"][:1]}
    with pytest.raises(SweepError, match="linear_tracking runs on CPUs only; remove gpus_per_pack"):
        parse_sweep(linear_only, "test")


def test_tf32_is_set_explicitly_for_every_pack():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        use_tf32(True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        use_tf32(False)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_each_trial_asks_ray_for_its_familys_resources():
    from sweeps.tune.wiring import pack_placement

    from sweeps.tune.resume import config_index
    from sweeps.tune.searcher import pack_config

    sweep = parse_sweep(MIXED, "test")
    packs = plan_packs(sweep, cpus=2, gpu=True)
    request = pack_placement(config_index(sweep), PackResources(2.0, 0.5))
    bundles = {p.experiment.task: request(pack_config(p)).bundles for p in packs}
    assert bundles["linear_tracking"] == [{"CPU": 2.0}]
    assert bundles["nonlinear_tracking"] == [{"CPU": 2.0, "GPU": 0.5}]
