"""The "cuda" engine's EMNIST kernel (fade_core/neural/emnist_source.py, emnist_engine.py): compiled by NVRTC
for sm_90 for every learner at the EMNIST size and read back from its machine code (no spill, shared memory
inside the block's limit, warp-instructions per run-step under the budgets below); its own source emulated
on the CPU (tests/emnist_emulation.py) against the torch engine at a small size, all nine learners; and,
on a GPU, every learner against the torch engine at the EMNIST size and a run's independence of its pack
(benchmarks/gpu_check_emnist.sh runs these).

Tolerance against the torch ops: test_cuda.py's (RTOL 2e-3, ATOL 1e-4); invariance is bitwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fade_core.architecture import Architecture
from fade_core.engines import EngineError
from fade_core.mlp import BatchedMLP
from fade_core.neural import NEURAL_LEARNERS, StepSums, cuda_compile, cuda_sass
from fade_core.neural.c_source import c_source
from fade_core.neural.cuda_rule import INPUTS, OUTPUTS
from fade_core.neural.emnist_count import instructions_per_run_step
from fade_core.neural.emnist_source import SHARED_LIMIT, EmnistShape, kernel_source
from fade_core.neural.runs import make_runs
from tasks.emnist import STUDENT
from tests import emnist_emulation
from tests.test_cuda import ATOL, RTOL

GPU = torch.cuda.is_available()
# 64 threads in the emulation: W0's rows in batches of 9 columns and a partial one (10 a lane), W1's backward pass
# in 2 column groups with a partial batch of rows, W2's in 5 groups of 9 rows (a batch of 8 and 1), 45 classes
# (softmax's lanes hold two).
SMALL = Architecture((300, 24, 12, 45), negative_slope=0.01)
# Warp-instructions per run-step at the EMNIST size (sm_90, SASS: the step loop's longest path, its inner
# loops times their trips, x the block's warps), 5% over the counts of 2026-11-27 (NVRTC 13.0; benchmarks/
# roofline.py --gpu-emnist prints them): sgd 119,136, sgd_wd 148,512, adam 595,648, adamw 606,256, sgd_wclip
# 170,032, adam_wclip 638,048, fade_sgd 126,464, fade_adam 570,864, fade_sgd_all 384,444. Each keeps the issue's
# target inside the H100's issue rate (~0.927T warp-instructions/s): fade_sgd at 1.2M run-steps/s may take 772K,
# adam and fade_adam at 0.42M 2.2M.
BUDGET = {"sgd": 125_000, "sgd_wd": 156_000, "adam": 625_000, "adamw": 637_000, "sgd_wclip": 179_000,
          "adam_wclip": 670_000, "fade_sgd": 133_000, "fade_adam": 600_000, "fade_sgd_all": 404_000}
HP = {"alpha": [0.01, 0.003, 0.001, 0.02], "lambda": [0.01, 0.1, 0.001, 0.05], "kappa": [0.3, 1.0, 2.0, 0.5],
      "theta_lambda": [0.5, 0.0, 2.0, 1.0], "gamma0": [-4.6, -1.0, -9.2, -2.3]}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emnist-cubins")


def _cubin(learner: str, cache) -> bytes:
    shape = EmnistShape(NEURAL_LEARNERS[learner], STUDENT.sizes, STUDENT.negative_slope)
    return cuda_compile.cubin(kernel_source(shape), 90, f"emnist_{learner}.cu", cache=cache)


@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_every_learner_compiles_for_sm90_without_spills_and_under_budget(learner, cache):
    code = _cubin(learner, cache)
    used = cuda_sass.resources(code)
    assert used.local == 0, (learner, used)
    sass = cuda_sass.sass(code)
    assert not any(ins.split()[0].lstrip("@!P0123456789T ").startswith(("LDL", "STL")) for _, ins in sass), learner
    shape = EmnistShape(NEURAL_LEARNERS[learner], STUDENT.sizes, STUDENT.negative_slope)
    assert used.shared + shape.dynamic_shared <= SHARED_LIMIT, used
    count = instructions_per_run_step(sass, shape)
    assert count <= BUDGET[learner], (learner, count)


@pytest.mark.parametrize("learner, target", [("fade_sgd", 1.2e6), ("adam", 0.42e6)])
def test_the_bytes_a_run_step_moves_keep_the_target_inside_the_hbm_bound(learner, target, tmp_path_factory):
    """Counted by the kernel's own source (every global access, emulated at the EMNIST size with the block's real
    threads): W0 and its streamed state read and written once a step, little else; the issue's target (2,000 runs,
    one H100 at ~3.0 TB/s, 132 SMs: 16 waves, the last one 20 runs wide) inside the bound."""
    spec = NEURAL_LEARNERS[learner]
    read, written = emnist_emulation.bytes_per_run_step(spec, STUDENT, tmp_path_factory.getbasetemp())
    n_in, h1, h2, out = STUDENT.sizes
    streamed = 4 * (n_in * h1 + (2 * (n_in * h1 + h1 * h2 + h2 * out) if spec.base == "adam" else 0))
    assert streamed <= written <= read <= 1.01 * streamed, (read, written, streamed)
    waves = -(-2000 // 132)
    assert target <= 3.0e12 / (read + written) * 2000 / (waves * 132), (read + written)


def test_the_kernel_runs_the_rule_printed_from_parts():
    for learner in NEURAL_LEARNERS.values():
        source = kernel_source(EmnistShape(learner, STUDENT.sizes, STUDENT.negative_slope))
        for fade_on in {False, learner.adapts_decay}:
            printed = c_source(learner, np.float32, INPUTS, OUTPUTS, fade_on=fade_on, prefix="f" if fade_on else "u")
            assert all(line in source for line in printed.splitlines()), (learner.name, fade_on)


def test_engine_cuda_runs_emnist_networks_on_this_kernel_and_refuses_what_it_does_not_run():
    hp = {"alpha": [0.01]}
    if not GPU:  # the EMNIST kernel's own refusal (the nonlinear kernel's says "one hidden layer")
        with pytest.raises(EngineError, match="engine 'cuda': it runs on CUDA GPUs, not cpu; choose torch"):
            make_runs("sgd", SMALL, [0], hp, "cross_entropy", "cpu", engine="cuda")
    device = "cuda" if GPU else "cpu"
    with pytest.raises(EngineError, match="engine 'cuda': the emnist kernel runs float32, not float64"):
        make_runs("sgd", SMALL, [0], hp, "cross_entropy", device, torch.float64, engine="cuda")
    with pytest.raises(EngineError, match="the emnist kernel needs hidden widths up to 512 and 2 to 64 classes"):
        make_runs("sgd", Architecture((8, 600, 16, 5)), [0], hp, "cross_entropy", device, engine="cuda")
    with pytest.raises(EngineError, match=r"keeps the two small layers in shared memory: \(8, 500, 120, 10\) needs"):
        make_runs("sgd", Architecture((8, 500, 120, 10)), [0], hp, "cross_entropy", device, engine="cuda")


# ---------------------------------------------------------------- the kernel emulated on the CPU
def _stream(steps: int, arch: Architecture, seed: int):
    """Normal inputs and random labels for 2 stream slots."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, 2, arch.sizes[0], generator=gen)
    return x, torch.randint(0, arch.sizes[-1], (steps, 2), generator=gen)


def _predicted_stream(steps: int, seed: int):
    """Normal inputs for 2 slots, labelled by what the initial network of seed 0 (slot 0) and 1 (slot 1) predicts:
    the first steps' argmax is right, so the count of correct predictions is exercised."""
    x, _ = _stream(steps, SMALL, seed)
    net = BatchedMLP.from_seeds(SMALL, [0, 1])
    return x, torch.stack([net.forward(x[t]).output.argmax(dim=1) for t in range(steps)])


def _state(nets, sums) -> dict[str, torch.Tensor]:
    return {**nets.state_dict(), **{f"sums.{i}": s for i, s in enumerate(sums.tensors())}}


def _emulated(learner: str, runs: list[int], x, y, folder, segments=None) -> dict[str, torch.Tensor]:
    spec = NEURAL_LEARNERS[learner]
    nets = make_runs(learner, SMALL, [r % 2 for r in runs], {k: [HP[k][r % 4] for r in runs] for k in spec.hyperparameters},
                     "cross_entropy", "cpu", engine="torch")  # (its state and tensors; its engine is not used)
    sums = StepSums.zeros(len(runs), SMALL, "cross_entropy", "cpu")
    slot, t = torch.tensor([r % 2 for r in runs]), 0
    for n in segments or [x.shape[0]]:
        emnist_emulation.advance(nets.learner, SMALL, nets.state_dict(), nets.hp, x[t : t + n], y[t : t + n], slot,
                                 sums.tensors(), folder)
        t += n
    return _state(nets, sums)


@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_every_learner_in_the_emulated_kernel_matches_the_torch_ops(learner, tmp_path_factory):
    """The kernel's own source (layout, the passes, reductions, barriers, the printed rule) on the CPU with its
    threads as OS threads, against the torch engine: 10 steps in two segments, 3 runs reading 2 stream slots."""
    folder = tmp_path_factory.getbasetemp()
    x, y = _predicted_stream(10, 3)
    got = _emulated(learner, [0, 1, 2], x, y, folder, segments=[6, 4])
    spec = NEURAL_LEARNERS[learner]
    ref = make_runs(learner, SMALL, [0, 1, 0], {k: HP[k][:3] for k in spec.hyperparameters}, "cross_entropy", "cpu",
                    engine="torch")
    sums = StepSums.zeros(3, SMALL, "cross_entropy", "cpu")
    ref.advance(x, y, torch.tensor([0, 1, 0]), sums)
    for key, want in _state(ref, sums).items():
        assert got[key].isfinite().all(), key
        torch.testing.assert_close(got[key], want, rtol=RTOL, atol=ATOL, msg=f"{learner} {key}")
    assert 0 < got["sums.2"].sum() < 30 and got["sums.3"].any(), "the argmax count and the fired units are exercised"


def test_the_emulated_kernel_gives_a_run_the_same_bits_alone_and_in_segments(tmp_path_factory):
    """fade_adam (the head's state in registers, Adam's moments streamed, per-step scalars): run 2 of a 3-run
    pack in one segment equals run 2 alone stepped in three uneven segments, bit for bit."""
    folder = tmp_path_factory.getbasetemp()
    x, y = _stream(6, SMALL, 5)
    whole = _emulated("fade_adam", [0, 1, 2], x, y, folder)
    alone = _emulated("fade_adam", [2], x, y, folder, segments=[1, 2, 3])
    for key, value in alone.items():
        assert torch.equal(value, whole[key] if value.dim() == 0 else whole[key][2:3]), key


# ---------------------------------------------------------------- on a GPU
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (benchmarks/gpu_check_emnist.sh runs these)")


def _gpu_state(learner: str, runs: list[int], engine: str, x, y, segments=None) -> dict[str, torch.Tensor]:
    spec = NEURAL_LEARNERS[learner]
    hp = {**HP, "alpha": [a / 10 for a in HP["alpha"]]} if spec.base == "adam" else HP  # (Adam's EMNIST step sizes)
    nets = make_runs(learner, STUDENT, [r % 2 for r in runs], {k: [hp[k][r % 4] for r in runs] for k in spec.hyperparameters},
                     "cross_entropy", "cuda", engine=engine)
    sums = StepSums.zeros(len(runs), STUDENT, "cross_entropy", "cuda")
    slot, t = torch.tensor([r % 2 for r in runs], device="cuda"), 0
    for n in segments or [x.shape[0]]:
        nets.advance(x[t : t + n], y[t : t + n], slot, sums)
        t += n
    return _state(nets, sums)


@needs_gpu
@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_every_learner_matches_the_torch_ops_on_the_gpu(learner):
    x, y = (t.cuda() for t in _stream(60, STUDENT, 1))
    x = (x > 0.5) * x.abs().clamp(max=1)  # image-like: in [0, 1], most pixels 0
    got = _gpu_state(learner, [0, 1, 2, 3], "cuda", x, y)
    want = _gpu_state(learner, [0, 1, 2, 3], "torch", x, y)
    for key, value in want.items():
        assert got[key].isfinite().all(), key
        torch.testing.assert_close(got[key], value, rtol=RTOL, atol=ATOL, msg=f"{learner} {key}")


@needs_gpu
@pytest.mark.parametrize("learner", ["fade_adam", "fade_sgd_all"])
def test_a_run_does_not_depend_on_its_pack_position_or_segments_on_the_gpu(learner):
    x, y = (t.cuda() for t in _stream(12, STUDENT, 2))
    whole = _gpu_state(learner, [0, 1, 2, 3], "cuda", x, y)
    alone = _gpu_state(learner, [2], "cuda", x, y, segments=[1, 4, 7])
    many = _gpu_state(learner, [0, 1, 2, 3] * 100, "cuda", x, y)
    for key, value in alone.items():
        if value.dim():
            assert torch.equal(value, whole[key][2:3]) and torch.equal(many[key][-2:-1], whole[key][2:3]), key
