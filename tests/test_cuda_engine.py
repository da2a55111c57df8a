"""The "cuda" engine (fade_core/neural/cuda_engine.py): its kernel compiled by NVRTC for sm_80 and
sm_90 for every learner and read back from its machine code (no spill; warp-instructions per
run-step under the budgets below), its warp reduction's plan, the compile cache; and, on a GPU,
every learner against the torch ops, pack/position/segment invariance, divergence kept to its run,
and a pack through the runner against the CPU kernel.

Without a GPU everything but the last group runs (NVRTC, cuobjdump and nvdisasm come from the
test extra's wheels), and the kernel's own source runs on the CPU (tests/cuda_emulation.py: the machine's
C++ compiler, a block's threads as OS threads) against the torch ops, all nine learners. Tolerance against the torch ops: test_cuda.py's (RTOL 2e-3, ATOL 1e-4:
float32 on engines whose sums are ordered differently); invariance is bitwise.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from fade_core.architecture import Architecture
from fade_core.engines import EngineError
from fade_core.neural import NEURAL_LEARNERS, StepSums, cuda_compile, cuda_sass
from fade_core.neural.c_source import c_source
from fade_core.neural.cuda_rule import INPUTS, OUTPUTS
from fade_core.neural.cuda_source import KernelShape, halving_plan, kernel_source
from fade_core.neural.runs import make_runs
from tests import cuda_emulation

GPU = torch.cuda.is_available()
STUDENT = Architecture((32, 256, 20))  # the nonlinear task's
WARPS = 256 // 32
# Warp-instructions per run-step (sm_90, SASS: the step loop's longest fast path x 8 warps), a few
# percent over what was counted on 2026-11-27 (NVRTC 13.0, the rule of rules@9d2b6ce: SGD as w - alpha*G):
# sgd 3,904, sgd_wd 4,768, sgd_wclip 5,632, adam 20,808, adamw 21,240, adam_wclip 22,816, fade_sgd 7,096,
# fade_adam 29,752, fade_sgd_all 12,872. At an H100's ~0.92T warp-instructions/s each budget keeps 1.5x
# headroom over issue 39's targets: sgd 4,100 -> a 225M cap (target 100M), fade_sgd 7,500 -> 123M (50M),
# adam 22,000 -> 42M and fade_adam 30,500 -> 30.3M (20M). benchmarks/persistent_regs.py --engines cuda
# prints the counts.
BUDGET = {"sgd": 4_100, "sgd_wd": 5_000, "sgd_wclip": 5_900, "adam": 22_000, "adamw": 22_500, "adam_wclip": 24_000,
          "fade_sgd": 7_500, "fade_adam": 30_500, "fade_sgd_all": 13_500}
HP = {"alpha": [0.01, 0.003, 0.001, 0.02], "lambda": [0.01, 0.1, 0.001, 0.05], "kappa": [0.3, 1.0, 2.0, 0.5],
      "theta_lambda": [0.5, 0.0, 2.0, 1.0], "gamma0": [-4.6, -1.0, -9.2, -2.3]}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cubins")


@pytest.fixture(scope="module")
def cubins(cache):
    """The cache folder, every learner's kernel compiled into it for sm_80 and sm_90 by NVRTC two at a time in
    the background (NVRTC releases the GIL: a compile overlaps a test reading the previous machine code), and
    a wait for one (learner, arch): its compile's error, if any, raised in that test."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        compiled = {(name, arch): pool.submit(_cubin, name, arch, cache) for name in sorted(NEURAL_LEARNERS) for arch in (80, 90)}
        yield cache, lambda learner, arch: compiled[learner, arch].result()
        for future in compiled.values():
            future.cancel()  # (a -k run: the compiles no test asked for)


def _cubin(learner: str, arch: int, cache) -> bytes:
    return cuda_compile.cubin(kernel_source(KernelShape(NEURAL_LEARNERS[learner], STUDENT.sizes)), arch, cache=cache)


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_every_learner_compiles_without_spills(learner, arch, cubins):
    code = cubins[1](learner, arch)
    used = cuda_sass.resources(code)
    assert used.stack == 0 and used.local == 0, (learner, arch, used)
    assert used.registers <= 255
    ops = " ".join(ins for _, ins in cuda_sass.sass(code))
    assert " LDL" not in f" {ops}" and " STL" not in f" {ops}", "local-memory traffic in the kernel"


@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_instructions_per_run_step_stay_under_budget(learner, cubins):
    code = cuda_sass.sass(cubins[1](learner, 90))
    count = cuda_sass.step_loop(code, WARPS)
    mix = cuda_sass.opcode_mix(code)
    assert mix["BAR"] == 2, "the step loop found is not the one with the kernel's two barriers"
    assert mix["SHFL"] >= 20, mix  # the warp reduction of the head's 20 outputs is in it
    assert count.per_run_step <= BUDGET[learner], (learner, count)


def test_the_kernel_runs_the_rule_printed_from_parts():
    """apply_rule holds the statements c_source prints from fade_core/neural/parts.py, both with and
    without FADE's part where the learner has it: no arithmetic of the rule is written in the kernel."""
    for learner in NEURAL_LEARNERS.values():
        source = kernel_source(KernelShape(learner, STUDENT.sizes))
        for fade_on in {False, learner.adapts_decay}:
            printed = c_source(learner, np.float32, INPUTS, OUTPUTS, fade_on=fade_on, prefix="f" if fade_on else "u")
            assert all(line in source for line in printed.splitlines()), (learner.name, fade_on)


@pytest.mark.parametrize("outputs", [1, 2, 3, 5, 7, 20, 31, 32])
def test_the_halving_reduction_sums_every_output_over_the_warp(outputs):
    """The plan the kernel's warp reduction is printed from, run on 32 lanes in float64: the lane
    chosen to write each output holds the sum of that output over all 32 lanes."""
    stages, index = halving_plan(outputs)
    values = np.random.default_rng(outputs).normal(size=(32, outputs))
    r = values.copy()
    for stage in stages:
        hi = (np.arange(32) & stage.offset) != 0
        partner = np.arange(32) ^ stage.offset
        new = r.copy()
        for lo, h in stage.pairs:
            keep, send = np.where(hi, r[:, h], r[:, lo]), np.where(hi, r[:, lo], r[:, h])
            new[:, lo] = keep + send[partner]
        if stage.whole is not None:
            new[:, stage.whole] = r[:, stage.whole] + r[partner, stage.whole]
        r = new
    assert sorted(set(index)) == list(range(outputs))
    np.testing.assert_allclose(r[:, 0], values.sum(axis=0)[index], rtol=1e-12)


def test_a_compiled_kernel_is_cached_by_source_and_target(tmp_path):
    source = kernel_source(KernelShape(NEURAL_LEARNERS["sgd"], STUDENT.sizes))
    first = cuda_compile.cubin(source, 90, cache=tmp_path)
    cached = list(tmp_path.glob("*.cubin"))
    assert len(cached) == 1 and cached[0].read_bytes() == first
    cached[0].write_bytes(b"from the cache")  # a second call reads the file, it does not compile
    assert cuda_compile.cubin(source, 90, cache=tmp_path) == b"from the cache"
    assert cuda_compile.cache_key(source, 80) != cuda_compile.cache_key(source, 90)
    assert cuda_compile.cache_key(source + "\n", 90) != cuda_compile.cache_key(source, 90)


def test_a_source_that_does_not_compile_is_one_error_with_the_log():
    with pytest.raises(EngineError, match=r"NVRTC could not compile bad.cu for sm_90: .*error"):
        cuda_compile.compile_source("this is not C++", 90, "bad.cu")


def test_the_engine_refuses_what_it_does_not_run():
    hp = {"alpha": [0.01]}
    if not GPU:
        with pytest.raises(EngineError, match="engine 'cuda': it runs on CUDA GPUs, not cpu; choose torch"):
            make_runs("sgd", STUDENT, [0], hp, "squared_error", "cpu", engine="cuda")
    device = "cuda" if GPU else "cpu"
    with pytest.raises(EngineError, match="engine 'cuda': the cuda engine runs networks with one hidden layer, not 2"):
        make_runs("sgd", Architecture((9, 64, 32, 4)), [0], hp, "squared_error", device, engine="cuda")
    with pytest.raises(EngineError, match="engine 'cuda': the cuda engine runs float32, not float64"):
        make_runs("sgd", STUDENT, [0], hp, "squared_error", device, torch.float64, engine="cuda")


# ---------------------------------------------------------------- the kernel emulated on the CPU
# The student's inputs and outputs with 64 hidden units: two warps (the head's sums still cross warps through
# shared memory, every thread still has a hidden unit), a quarter of the student's OS threads and barrier waits
# on the CPU. The compiled kernels above are the student's own.
EMULATED = Architecture((STUDENT.sizes[0], 64, STUDENT.sizes[-1]))


@pytest.fixture(scope="module")
def emulations(cache):
    """The folder of the emulated kernels, each learner's built in the background in the order the tests use
    them (the C++ compile is most of an emulated test's time: the next one compiles while a test runs), and a
    wait for one learner's build."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = {name: pool.submit(cuda_emulation.compiled, KernelShape(spec, EMULATED.sizes, float(EMULATED.negative_slope)),
                                   cache) for name, spec in sorted(NEURAL_LEARNERS.items())}
        yield cache, lambda learner: built[learner].result()
        for future in built.values():
            future.cancel()  # (a -k run: the builds no test asked for)


def _emulated(learner: str, runs: list[int], x, y, emulations, segments=None) -> dict[str, torch.Tensor]:
    folder, wait_for_build = emulations
    wait_for_build(learner)  # (its library is complete before advance looks for it)
    spec = NEURAL_LEARNERS[learner]
    nets = make_runs(learner, EMULATED, [r % 2 for r in runs], {k: [HP[k][r % 4] for r in runs] for k in spec.hyperparameters},
                     "squared_error", "cpu", engine="torch")  # (its state and tensors; its engine is not used)
    sums = StepSums.zeros(len(runs), EMULATED, "squared_error", "cpu")
    slot, t = torch.tensor([r % 2 for r in runs]), 0
    for n in segments or [x.shape[0]]:
        cuda_emulation.advance(nets.learner, EMULATED, nets.state_dict(), nets.hp, x[t : t + n], y[t : t + n], slot,
                               sums.tensors(), folder)
        t += n
    return {**nets.state_dict(), **{f"sums.{i}": s for i, s in enumerate(sums.tensors())}}


@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_every_learner_in_the_emulated_kernel_matches_the_torch_ops(learner, emulations):
    """The kernel's own source (layout, reductions, barriers, the printed rule), compiled for the CPU with
    its threads as OS threads (tests/cuda_emulation.py), against the torch engine: 10 steps, 3 runs
    reading 2 stream slots, the 32-64-20 network (EMULATED). Measured 2026-11-27: 1e-7 relative on the loss sums, 1e-3 on an Adam moment
    near zero; test_cuda.py's tolerance."""
    from tests.test_cuda import ATOL, RTOL

    gen = torch.Generator().manual_seed(10)
    x, y = torch.randn(10, 2, 32, generator=gen), torch.randn(10, 2, 20, generator=gen)
    got = _emulated(learner, [0, 1, 2], x, y, emulations)
    spec = NEURAL_LEARNERS[learner]
    ref = make_runs(learner, EMULATED, [0, 1, 0], {k: HP[k][:3] for k in spec.hyperparameters}, "squared_error", "cpu",
                    engine="torch")
    sums = StepSums.zeros(3, EMULATED, "squared_error", "cpu")
    ref.advance(x, y, torch.tensor([0, 1, 0]), sums)
    for key, want in {**ref.state_dict(), **{f"sums.{i}": s for i, s in enumerate(sums.tensors())}}.items():
        assert got[key].isfinite().all(), key
        torch.testing.assert_close(got[key], want, rtol=RTOL, atol=ATOL, msg=f"{learner} {key}")


def test_the_emulated_kernel_gives_a_run_the_same_bits_alone_and_in_segments(emulations):
    """fade_adam (the head's state in shared memory, Adam's per-step scalars): run 2 of a 3-run pack in one
    segment equals run 2 alone stepped in three uneven segments, bit for bit."""
    gen = torch.Generator().manual_seed(7)
    x, y = torch.randn(7, 2, 32, generator=gen), torch.randn(7, 2, 20, generator=gen)
    whole = _emulated("fade_adam", [0, 1, 2], x, y, emulations)
    alone = _emulated("fade_adam", [2], x, y, emulations, segments=[1, 2, 4])
    for key, value in alone.items():
        assert torch.equal(value, whole[key] if value.dim() == 0 else whole[key][2:3]), key


# ---------------------------------------------------------------- on a GPU
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (benchmarks/gpu_check.sh runs these)")


def _runs(learner: str, runs: list[int], engine: str, hp=None, arch: Architecture = STUDENT):
    spec, hp = NEURAL_LEARNERS[learner], hp or HP
    values = {k: [hp[k][r % 4] for r in runs] for k in spec.hyperparameters}
    return make_runs(learner, arch, [r % 2 for r in runs], values, "squared_error", "cuda", engine=engine)


def _stream(steps: int, arch: Architecture = STUDENT) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(steps)
    x = torch.randn(steps, 2, arch.sizes[0], generator=gen)
    return x.cuda(), torch.randn(steps, 2, arch.sizes[-1], generator=gen).cuda()


def _advance(nets, x, y, runs: list[int], segments=None) -> dict[str, torch.Tensor]:
    """Steps over x, y in `segments` (default one); every state tensor and sum afterwards."""
    sums = StepSums.zeros(nets.net.runs, nets.net.arch, "squared_error", "cuda")
    slot = torch.tensor([r % 2 for r in runs], device="cuda")
    t = 0
    for n in segments or [x.shape[0]]:
        nets.advance(x[t : t + n], y[t : t + n], slot, sums)
        t += n
    return {**nets.state_dict(), **{f"sums.{i}": s for i, s in enumerate(sums.tensors())}}


@needs_gpu
@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_every_learner_matches_the_torch_ops(learner):
    from tests.test_cuda import ATOL, RTOL

    x, y = _stream(300)
    got = _advance(_runs(learner, [0, 1, 2, 3], "cuda"), x, y, [0, 1, 2, 3])
    want = _advance(_runs(learner, [0, 1, 2, 3], "torch"), x, y, [0, 1, 2, 3])
    for key, value in want.items():
        assert got[key].isfinite().all(), key
        torch.testing.assert_close(got[key], value, rtol=RTOL, atol=ATOL, msg=f"{learner} {key}")


@needs_gpu
@pytest.mark.parametrize("learner", ["fade_adam", "fade_sgd_all", "adamw", "sgd_wclip"])
def test_a_run_does_not_depend_on_its_pack_position_or_segments(learner):
    """Bitwise: run 2 of a four-run pack in one segment equals run 2 alone in three uneven segments,
    and run 2 at the end of a pack of 1,000 copies (several waves)."""
    x, y = _stream(16)
    whole = _advance(_runs(learner, [0, 1, 2, 3], "cuda"), x, y, [0, 1, 2, 3])
    alone = _advance(_runs(learner, [2], "cuda"), x, y, [2], segments=[1, 5, 10])
    many = _advance(_runs(learner, [0, 1, 2, 3] * 250, "cuda"), x, y, [0, 1, 2, 3] * 250)
    for key, value in alone.items():
        if value.dim():
            assert torch.equal(value, whole[key][2:3]) and torch.equal(many[key][-2:-1], whole[key][2:3]), key


@needs_gpu
def test_a_diverging_run_becomes_non_finite_alone():
    hp = {**HP, "alpha": [0.01, 50.0, 0.003, 0.001]}  # run 1 overflows
    x, y = _stream(20)
    both = _advance(_runs("fade_sgd", [0, 1], "cuda", hp), x, y, [0, 1])
    alone = _advance(_runs("fade_sgd", [0], "cuda", hp), x, y, [0])
    assert not both["sums.0"][1].isfinite() and not both["params"][1].isfinite().all()
    assert torch.equal(both["sums.0"][:1], alone["sums.0"]) and torch.equal(both["params"][:1], alone["params"])


@needs_gpu
@pytest.mark.parametrize("optimizer", ["fade_sgd", "adam", "fade_adam", "sgd_wclip", "fade_sgd_all"])
def test_a_nonlinear_pack_on_the_cuda_engine_matches_the_cpu_kernel(optimizer):
    """Through the pack runner (bins, chunks split at bin ends, metrics, checkpoints' state)."""
    from tests.test_cuda import _assert_close, _pack, _run

    pack = _pack("nonlinear", optimizer, None)
    runner = _run(pack, "cuda", 128, engine="cuda")
    assert runner.runs.engine.name == "cuda" and runner._graph is None
    _assert_close(runner.outcome(), _run(pack, "cpu").outcome())
