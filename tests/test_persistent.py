"""The persistent engine (fade_core/neural/persistent.py) against the torch ops and the CPU kernel,
all nine learners, float32; pack, position, wave and segment invariance; divergence kept to its run.

Without a GPU the kernel runs in Triton's interpreter (TRITON_INTERPRET=1, numpy on the CPU) at
short streams; with one, compiled, at longer ones.
Tolerance: test_cuda.py's (RTOL 2e-3, ATOL 1e-4: float32 on two engines whose sums are ordered
differently); measured in the interpreter after 30 steps: 1e-5 relative or better (the test: 15). Invariance
is bitwise: a run's program reads nothing of the other runs'.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Must be set before triton.jit defines the kernels (on import of triton_update and persistent).
os.environ.setdefault("TRITON_INTERPRET", "0" if DEVICE == "cuda" else "1")
pytest.importorskip("triton", reason="Triton does not import here (torch ships it on Linux x86-64)")

from fade_core.architecture import Architecture  # noqa: E402
from fade_core.neural import NEURAL_LEARNERS, StepSums, persistent, triton_rule, triton_update  # noqa: E402
from fade_core.neural.runs import make_runs  # noqa: E402
from sweeps.packs.neural import NeuralPackRunner  # noqa: E402
from tests.test_cuda import RTOL, ATOL, _assert_close, _pack, _run  # noqa: E402
from tests.test_neural_learners import COMBINED  # noqa: E402 (FADE with weight decay and clipping)

LEARNERS = {**NEURAL_LEARNERS, **COMBINED}

if triton_rule.INTERPRET != (os.environ["TRITON_INTERPRET"] == "1"):  # imported earlier in the other mode
    importlib.reload(triton_rule)
    importlib.reload(triton_update)
    importlib.reload(persistent)

GPU = DEVICE == "cuda"
STUDENT = Architecture((32, 256, 20))  # the nonlinear task's
ODD = Architecture((7, 40, 5), negative_slope=0.01)  # no width a power of two: every tile padded
STEPS = 300 if GPU else 15
HP = {"alpha": [0.01, 0.003, 0.001, 0.02], "lambda": [0.01, 0.1, 0.001, 0.05], "kappa": [0.3, 1.0, 2.0, 0.5],
      "theta_lambda": [0.5, 0.0, 2.0, 1.0], "gamma0": [-4.6, -1.0, -9.2, -2.3]}
SEEDS = [0, 1, 0, 1]  # run r reads stream slot r % 2


def _runs(learner: str, arch: Architecture, runs: list[int], device: str = DEVICE, hp=None, engine="torch",
          dtype=torch.float32):
    """Runs `runs` (indices into SEEDS/HP) of `learner`, starting as a full pack's would."""
    spec = LEARNERS[learner]
    hp = hp or HP
    values = {k: [hp[k][r] for r in runs] for k in spec.hyperparameters}
    return make_runs(spec, arch, [SEEDS[r] for r in runs], values, "squared_error", device, dtype, engine=engine)


def _stream(arch: Architecture, steps: int, seed: int = 0, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, 2, arch.sizes[0], generator=gen, dtype=dtype)
    return x.to(DEVICE), torch.randn(steps, 2, arch.sizes[-1], generator=gen, dtype=dtype).to(DEVICE)


def _advance(nets, x, y, runs: list[int], segments=None, config=None) -> StepSums:
    """Persistent steps over x, y in `segments` (lengths; default: one), sums of the whole stream."""
    sums = StepSums.zeros(nets.net.runs, nets.net.arch, "squared_error", nets.net.flat.device)
    slot = torch.tensor([r % 2 for r in runs], device=nets.net.flat.device)
    t = 0
    for n in segments or [x.shape[0]]:
        persistent.advance(nets.learner, nets.net.arch, nets.state_dict(), nets.hp, x[t : t + n], y[t : t + n], slot,
                           sums.tensors(), config)
        t += n
    return sums


def _everything(nets, sums: StepSums) -> dict[str, torch.Tensor]:
    named = {f"sums.{i}": t for i, t in enumerate(sums.tensors())}
    return {**{k: v for k, v in nets.state_dict().items()}, **named}


@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_every_learner_matches_the_torch_ops_and_the_cpu_kernel(learner):
    runs = [0, 1, 2] if GPU else [1, 2]  # (runs 1 and 2 read different slots)
    x, y = _stream(STUDENT, STEPS)
    fast = _runs(learner, STUDENT, runs)
    got = _everything(fast, _advance(fast, x, y, runs))
    references = {"torch ops": _runs(learner, STUDENT, runs)}
    if not GPU:
        references["cpu kernel"] = _runs(learner, STUDENT, runs, engine="cpu")
    for name, ref in references.items():
        sums = StepSums.zeros(len(runs), STUDENT, "squared_error", DEVICE)
        ref.advance(x, y, torch.tensor([r % 2 for r in runs], device=DEVICE), sums)
        for key, want in _everything(ref, sums).items():
            assert got[key].isfinite().all(), key
            torch.testing.assert_close(got[key], want, rtol=RTOL, atol=ATOL, msg=f"{learner} {key} vs {name}")


@pytest.mark.parametrize("learner", ["fade_adam", "sgd_wd"])
def test_float64_runs_match_the_torch_ops_to_float64_rounding(learner):
    """float64 too (the leaky slope and Adam's scalars in the run's dtype): test_cuda.py's 1e-9."""
    x, y = _stream(ODD, 12, dtype=torch.float64)
    fast, ref = (_runs(learner, ODD, [0, 1, 2], dtype=torch.float64) for _ in range(2))
    got = _everything(fast, _advance(fast, x, y, [0, 1, 2]))
    sums = StepSums.zeros(3, ODD, "squared_error", DEVICE)
    ref.advance(x, y, torch.tensor([0, 1, 0], device=DEVICE), sums)
    for key, want in _everything(ref, sums).items():
        assert got[key].dtype == want.dtype, key
        torch.testing.assert_close(got[key], want, rtol=1e-9, atol=1e-12, msg=key)


@pytest.mark.parametrize("learner", ["adam", "fade_adam", "fade_sgd_all", "adamw", "sgd_wclip"])
def test_a_run_does_not_depend_on_its_pack_position_or_segments(learner):
    """Bitwise: run 2 of a four-run pack in one segment equals run 2 alone (position 0, pack of
    one) stepped in three uneven segments, and, on a GPU, run 2 at the end of a pack of 1,000
    copies of the pack (several waves)."""
    x, y = _stream(ODD, 16)
    full = _runs(learner, ODD, [0, 1, 2, 3])
    whole = _everything(full, _advance(full, x, y, [0, 1, 2, 3]))
    alone = _runs(learner, ODD, [2])
    pieces = _everything(alone, _advance(alone, x, y, [2], segments=[1, 5, 10]))
    for key, value in pieces.items():
        want = whole[key] if value.dim() == 0 else whole[key][2:3]
        assert torch.equal(value, want), key
    if GPU:
        many = _runs(learner, ODD, [0, 1, 2, 3] * 250)
        last = _everything(many, _advance(many, x, y, [0, 1, 2, 3] * 250))
        for key, value in last.items():
            assert value.dim() == 0 or torch.equal(value[-2:-1], whole[key][2:3]), key


@pytest.mark.parametrize("config", [{"stream": 0}, {"stream": 1}, {"exact": False}])
def test_the_knobs_change_where_state_lives_not_the_numbers(config):
    """Where the moments live, warps, approximate division: the same numbers to float32 rounding (a
    GPU compiles the variants' reductions differently; the interpreter gives the same bits)."""
    x, y = _stream(ODD, 12)
    nets = {c: _runs("fade_adam", ODD, [0, 1]) for c in ("default", "knob")}
    default = _everything(nets["default"], _advance(nets["default"], x, y, [0, 1]))
    knob_config = persistent.KernelConfig(num_warps=4, **config)
    knob = _everything(nets["knob"], _advance(nets["knob"], x, y, [0, 1], config=knob_config))
    for key, value in knob.items():
        torch.testing.assert_close(value, default[key], rtol=1e-4 if "exact" in config else 1e-5, atol=1e-7, msg=key)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
def test_a_diverging_run_becomes_non_finite_alone():
    hp = {**HP, "alpha": [0.01, 50.0, 0.003, 0.001]}  # run 1 overflows
    x, y = _stream(ODD, 20)
    both = _runs("fade_sgd", ODD, [0, 1], hp=hp)
    sums = _advance(both, x, y, [0, 1])
    alone = _runs("fade_sgd", ODD, [0], hp=hp)
    alone_sums = _advance(alone, x, y, [0])
    assert not sums.loss[1].isfinite() and not both.net.flat[1].isfinite().all()
    assert torch.equal(sums.loss[:1], alone_sums.loss) and torch.equal(both.net.flat[:1], alone.net.flat)


def test_the_engine_refuses_what_it_does_not_run():
    emnist_like = Architecture((9, 6, 5, 4))
    assert "one hidden layer" in persistent.unsupported(NEURAL_LEARNERS["sgd"], emnist_like, "squared_error")
    assert "regression" in persistent.unsupported(NEURAL_LEARNERS["sgd"], STUDENT, "cross_entropy")
    with pytest.raises(ValueError, match="stream 0, 1 or 2"):
        persistent.KernelConfig(stream=3)


def test_the_engine_is_chosen_by_name_and_refuses_other_networks():
    """The engine is an explicit choice (fade_core.engines: "persistent"), never an environment variable;
    on a network it does not run, making the runs is one line naming the engine."""
    from fade_core.engines import EngineError

    runs = make_runs("fade_sgd", STUDENT, [0, 1], {"alpha": [0.01] * 2, "gamma0": [-4.6] * 2, "theta_lambda": [0.0] * 2},
                     "squared_error", DEVICE, engine="persistent")
    assert isinstance(runs.engine, persistent.PersistentKernel) and runs.engine.name == "persistent"
    with pytest.raises(EngineError, match="engine 'persistent': .*one hidden layer"):
        make_runs("sgd", Architecture((9, 6, 5, 4)), [0], {"alpha": [0.01]}, "squared_error", DEVICE, engine="persistent")


@pytest.mark.parametrize("optimizer", ["fade_sgd", "adam"] + (["fade_adam", "sgd_wclip", "fade_sgd_all"] if GPU else []))
def test_a_nonlinear_pack_on_the_persistent_engine_matches_the_cpu_kernel(optimizer, monkeypatch, tmp_path):
    """Through the pack runner (bins, chunks split at bin ends, group metrics, checkpoints' state):
    the persistent engine against the CPU kernel's outcome."""
    if GPU:
        pack = _pack("nonlinear", optimizer, None)
    else:  # interpreter: two configurations, one seed, 60 steps in bins of 20, chunks of 25
        from tests.test_cuda import TASKS

        monkeypatch.setitem(TASKS, "nonlinear", ("nonlinear_tracking", {"steps": 60, "score_window": 20, "bin": 20,
                                                                        "period": 15, "slow_multiplier": 2}))
        pack = _pack("nonlinear", optimizer, None, configs=[0, 1], seeds=(0,))
    cpu = _run(pack, "cpu").outcome()
    # The engine table offers "persistent" on CUDA only: in the interpreter the runner is built with it directly.
    chunk = 25 if not GPU else 128
    runner = _run(pack, DEVICE, chunk, runner=None if GPU else NeuralPackRunner(pack, chunk, torch.float32, DEVICE, "persistent"),
                  engine="persistent")
    assert isinstance(runner.runs.engine, persistent.PersistentKernel) and runner._graph is None
    _assert_close(runner.outcome(), cpu)
    assert np.isfinite(cpu.score).all()
