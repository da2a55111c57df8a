"""The CUDA path of the neural packs (batched torch ops or fused Triton kernels, CUDA-graph replay) against the CPU
compiled path, which tests/test_neural_learners.py checks against a plain PyTorch
reference. Skipped where there is no GPU; `benchmarks/gpu_check.sh` runs them on one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fade_core import NEURAL_LEARNERS
from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import make_config, parse_sweep
from tests.emnist_fixture import write_idx_dataset
from tests.test_neural_learners import GRIDS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")

STEPS = 300
TASKS = {  # flips / permutations happen inside the 300 steps
    "nonlinear": ("nonlinear_tracking", {"steps": STEPS, "score_window": 100, "bin": 100, "period": 40, "slow_multiplier": 3}),
    "emnist": ("emnist_partial_permuted", {"steps": STEPS, "period": 70, "bin": 100}),
}
RTOL, ATOL = 2e-3, 1e-4  # float32 on two engines whose sums are ordered differently
# Accuracy counts argmax hits: a near-tie between two logits can flip on a rounding
# difference, so accuracies may differ by a few predictions (1% of the steps) while the
# continuous metrics (loss, weights, decays) agree to float32 tolerance.
FLIPS = 0.01
# Adam divides by sqrt(v): where a gradient is near zero its sign, which float32 rounding
# can flip, decides a whole step. Measured on an H200: one EMNIST fade_adam run's layer-3
# weight norm 0.5% apart after 300 steps, every other value within 2e-3. The float64 test
# below holds every optimizer to 1e-9.
ADAM_RTOL = 1e-2


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory):
    return write_idx_dataset(tmp_path_factory.mktemp("emnist"), images=470)


def _pack(task: str, optimizer: str, emnist_dir, configs=None, seeds=(0, 1), grid=None) -> Pack:
    name, settings = TASKS[task]
    if task == "emnist":
        settings = {**settings, "data_dir": str(emnist_dir)}
    grid = grid or {k: sorted({c[k] for c in GRIDS[optimizer]}) for k in GRIDS[optimizer][0]}
    experiment = parse_sweep({"name": "t", "task": name, "task_settings": settings, "seeds": list(seeds),
                              "optimizers": {optimizer: grid}}, "test").experiments[0]
    cells = experiment.configs() if configs is None else [experiment.configs()[i] for i in configs]
    return Pack(experiment, tuple(make_config(experiment, c) for c in cells), tuple(seeds))


def _run(pack: Pack, device: str, chunk: int = 128, stop_at: int | None = None, runner=None,
         dtype: torch.dtype = torch.float32, engine: str | None = None):
    runner = runner or make_runner(pack, chunk, dtype, device=device, engine=engine)
    for progress in runner.run():
        if stop_at is not None and progress.steps_done >= stop_at:
            return runner
    return runner


def _assert_close(a, b, rtol=RTOL, atol=ATOL):
    accuracy = "accuracy" in b.curves
    np.testing.assert_allclose(a.score, b.score, rtol=rtol, atol=max(atol, FLIPS * accuracy))
    assert np.array_equal(a.diverged, b.diverged)
    for name, values in b.curves.items():
        if values is None:
            assert a.curves[name] is None, name
        else:
            np.testing.assert_allclose(a.curves[name], values, rtol=rtol, atol=max(atol, FLIPS * (name == "accuracy")),
                                       err_msg=name)


_CPU_OUTCOMES: dict = {}  # (task, optimizer) -> the CPU kernel's outcome, shared by both CUDA variants


@pytest.mark.parametrize("kernels", ["triton", "torch"])
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("optimizer", sorted(NEURAL_LEARNERS))
def test_every_optimizer_on_cuda_matches_the_cpu_kernel(task, optimizer, kernels, emnist_dir):
    """Both CUDA engines: the fused Triton kernels ("triton") and the torch ops ("torch")."""
    pack = _pack(task, optimizer, emnist_dir)
    rtol = ADAM_RTOL if "adam" in optimizer and task == "emnist" else RTOL
    if (task, optimizer) not in _CPU_OUTCOMES:
        _CPU_OUTCOMES[task, optimizer] = _run(pack, "cpu").outcome()
    _assert_close(_run(pack, "cuda", engine=kernels).outcome(), _CPU_OUTCOMES[task, optimizer], rtol=rtol)


@pytest.mark.parametrize("optimizer", ["fade_adam", "adam_wclip", "fade_sgd"])
def test_fused_kernels_are_captured_in_cuda_graphs(optimizer, emnist_dir):
    """The Triton launches replay inside the runner's CUDA graphs (a failed capture would only
    warn and step eagerly), and the replayed steps equal the eager ones."""
    pack = _pack("emnist", optimizer, emnist_dir, configs=[0, 1], seeds=(0,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = _run(pack, "cuda", chunk=100)
    assert not [w for w in caught if "graph capture failed" in str(w.message)], [str(w.message) for w in caught]
    assert graphed._graph is not None and graphed.runs.engine.fused_params
    eager = _run(pack, "cuda", chunk=49)  # chunks shorter than a graph's 50 steps: eager only
    assert eager._graph is None
    a, b = graphed.outcome(), eager.outcome()
    np.testing.assert_allclose(a.score, b.score, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("optimizer", sorted(NEURAL_LEARNERS))
def test_every_optimizer_on_cuda_matches_the_cpu_kernel_in_float64(task, optimizer, emnist_dir):
    pack = _pack(task, optimizer, emnist_dir)
    gpu = _run(pack, "cuda", dtype=torch.float64).outcome()
    cpu = _run(pack, "cpu", dtype=torch.float64).outcome()
    _assert_close(gpu, cpu, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("task", TASKS)
def test_pack_size_and_chunking_change_nothing_on_cuda(task, emnist_dir):
    full = _run(_pack(task, "fade_adam", emnist_dir), "cuda", chunk=128).outcome()  # graphs of 50 steps + eager tails
    alone = _run(_pack(task, "fade_adam", emnist_dir, configs=[1], seeds=(1,)), "cuda", chunk=37).outcome()  # eager only
    run = 1 * 2 + 1  # config 1, seed slot 1 of the full pack
    np.testing.assert_allclose(alone.score, full.score[run : run + 1], rtol=1e-5, atol=1e-7)
    for name, values in full.curves.items():
        if values is not None:
            np.testing.assert_allclose(alone.curves[name], values[run : run + 1], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("resume_on", ["cuda", "cpu"])
def test_a_gpu_checkpoint_resumes_on_gpu_and_cpu(resume_on, tmp_path, emnist_dir):
    pack = _pack("nonlinear", "fade_adam", emnist_dir)
    straight = _run(pack, "cuda").outcome()
    first = _run(pack, "cuda", stop_at=150)
    torch.save(first.state_dict(), tmp_path / "pack.pt")
    resumed = make_runner(pack, 128, device=resume_on)
    resumed.load_state_dict(torch.load(tmp_path / "pack.pt", map_location="cpu", weights_only=True))
    assert resumed.steps_done == first.steps_done
    tolerance = {"rtol": 1e-6, "atol": 1e-8} if resume_on == "cuda" else {}
    _assert_close(_run(pack, resume_on, runner=resumed).outcome(), straight, **tolerance)


def test_a_diverging_run_leaves_its_neighbours_untouched_on_cuda(emnist_dir):
    grid = {"alpha": [0.01, 50.0], "theta_lambda": [1.0], "gamma0": [-4.6]}  # alpha 50 diverges
    both = _run(_pack("nonlinear", "fade_sgd", emnist_dir, grid=grid, seeds=(0,)), "cuda").outcome()
    alone = _run(_pack("nonlinear", "fade_sgd", emnist_dir, grid={**grid, "alpha": [0.01]}, seeds=(0,)), "cuda").outcome()
    assert both.diverged.tolist() == [False, True]
    np.testing.assert_allclose(both.score[:1], alone.score, rtol=1e-6)
