"""The fast linear engine ("cpu": the vector-traced kernel) against the reference engine (the
rules of fade_core/linear/rules.py in a plain compiled loop, float64 arithmetic), every
learner, float32 and float64.

Stated tolerance, per step: from the same state and the same step's data, each state value
the fast engine writes is within ULPS[dtype] units in the last place of the state's dtype of
the reference's, the unit taken at the size of the value's terms (`_scale`: the old and new
value and x times the size of delta's terms, |x| (|y| + sum_i |w_i x_i|)), and the step's loss within LOSS_ULPS float64 ulps of
2 |delta| (|y| + sum_i |w_i x_i|) (both predict in float64; sgd and sgd_wd add two partial
sums, the reference one). Not bit for bit: the fast engine rounds every operation to the
state's dtype (the reference rounds once per step, from float64), fuses multiply-adds, and
computes exp with its own polynomial (vexp.py: float32 within 1.2 ulp, float64 within 5 ulp).
Over a whole run the two stay within float32 (float64) relative tolerance too."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fade_core.linear import LINEAR_LEARNERS, advance, get_linear_learner, hyperparameter_matrix, init_state
from fade_core.linear.rules import LinearLearner
from tests.helpers import compiled_then_loaded

ROOT = Path(__file__).resolve().parents[1]

ULPS = {torch.float32: 4, torch.float64: 4}  # measured: at most 1.7 (float32 coupled), 1.0 (float64)
LOSS_ULPS = 4
HP = {"alpha": [0.05, 0.01], "lambda": [1e-3, 0.02], "theta_alpha": [0.02, 0.1], "beta0": [-3.0, -5.0],
      "theta_lambda": [0.05, 0.5], "gamma0": [-3.0, -6.0], "theta": [0.02, 0.2]}
RUNS, SLOTS, D, STEPS = 20, 4, 20, 60  # 20 runs: two blocks of 8 lanes (16 for the adaptive float32 rules) and a tail


def _streams(dtype):
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(STEPS, SLOTS, D, generator=gen, dtype=torch.float64)
    y = (x[:, :, :5].sum(dim=2) + 0.1 * torch.randn(STEPS, SLOTS, generator=gen, dtype=torch.float64))
    return x.to(dtype), y.to(dtype)


def _runs(name: str, dtype):
    learner = get_linear_learner(name)
    hp = {k: torch.tensor(HP[k] * (RUNS // 2), dtype=torch.float64) for k in learner.hyperparameters}
    matrix = hyperparameter_matrix(learner, hp, RUNS, dtype)
    w0 = 0.1 * torch.randn(RUNS, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    return learner, matrix, init_state(learner, matrix, w0.to(dtype))


def _scale(old: torch.Tensor, new: torch.Tensor, increment: torch.Tensor) -> torch.Tensor:
    return torch.maximum(torch.maximum(old.abs(), new.abs()), increment.abs()).double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(LINEAR_LEARNERS))
def test_each_step_of_the_fast_engine_is_within_stated_ulps_of_the_reference(name, dtype):
    learner, hp, state = _runs(name, dtype)
    x, y = _streams(dtype)
    slot = torch.arange(RUNS) % SLOTS
    eps = torch.finfo(dtype).eps
    worst = 0.0
    for t in range(STEPS):
        fast, before = (type(state)(*(s.clone() for s in state)) for _ in range(2))
        sums = {e: np.zeros(RUNS) for e in ("cpu", "reference")}
        advance(learner, hp, fast, x[t : t + 1], y[t : t + 1], slot, loss_sums=sums["cpu"], engine="cpu")
        advance(learner, hp, state, x[t : t + 1], y[t : t + 1], slot, loss_sums=sums["reference"], engine="reference")
        xt, yt = x[t][slot].double(), y[t][slot].double()
        products = before.w.double() * xt
        delta = yt - products.sum(1)
        # the loss delta^2: a float64 delta rounded a few times over the size of its terms
        loss_scale = 2 * delta.abs() * (yt.abs() + products.abs().sum(1))
        assert (torch.from_numpy(sums["cpu"] - sums["reference"]).abs()
                <= LOSS_ULPS * torch.finfo(torch.float64).eps * loss_scale).all(), f"step {t} loss"
        increment = (xt * (yt.abs() + products.abs().sum(1))[:, None]).to(dtype)  # delta * x at the size of delta's terms
        for field, got, want, old in zip(state._fields, fast, state, before):
            ulps = (got.double() - want.double()).abs() / (eps * (_scale(old, want, increment) + torch.finfo(dtype).tiny))
            worst = max(worst, float(ulps.max()))
            assert float(ulps.max()) <= ULPS[dtype], f"step {t} {field}: {float(ulps.max()):.1f} ulps"
        assert all(torch.isfinite(s).all() for s in state)
    print(f"{name} {dtype}: at most {worst:.2f} ulps per step")


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 2e-4), (torch.float64, 1e-11)], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(LINEAR_LEARNERS))
def test_whole_runs_of_both_engines_agree(name, dtype, rtol):
    """The same runs over 2,000 steps in chunks of 700, each engine on its own: loss sums and
    final state."""
    x, y = _streams(dtype)
    x, y = x.repeat(34, 1, 1)[:2000].contiguous(), y.repeat(34, 1)[:2000].contiguous()
    slot = torch.arange(RUNS) % SLOTS
    results = {}
    for engine in ("cpu", "reference"):
        learner, hp, state = _runs(name, dtype)
        sums = np.zeros(RUNS)
        for lo in range(0, 2000, 700):
            advance(learner, hp, state, x[lo : lo + 700], y[lo : lo + 700], slot, loss_sums=sums, engine=engine)
        results[engine] = (torch.from_numpy(sums), *state)
    for field, got, want in zip(("loss_sum", *state._fields), results["cpu"], results["reference"]):
        torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * float(want.abs().max()), msg=field)


PROBE = """
import sys
import numpy as np
import torch
from fade_core.linear import LINEAR_LEARNERS, kernel, run_linear

gen = torch.Generator().manual_seed(0)
x, y = torch.randn(300, 9, 20, generator=gen), torch.randn(300, 9, generator=gen)
hp = {"alpha": 0.01, "theta": 0.02, "beta0": -4.0, "gamma0": -3.0}
out = {}
for name in ("sgd", "coupled"):
    learner = LINEAR_LEARNERS[name]
    for dtype in (torch.float32, torch.float64):
        run = run_linear(name, {k: hp[k] for k in learner.hyperparameters}, x, y, 0.1 * x[0], dtype=dtype)
        for field, tensor in (("losses", run.losses), *zip(run.state._fields, run.state)):
            out[f"{name}/{dtype}/{field}"] = tensor.numpy().copy()
        stats = kernel.driver(learner, np.dtype(str(dtype)[6:])).stats
        out[f"{name}/{dtype}/loaded"] = np.array(sum(stats.cache_hits.values()) > 0)
np.savez(sys.argv[1], **out)
"""


def test_a_process_that_compiled_the_linear_kernel_and_one_that_loaded_it_agree_to_the_bit(tmp_path):
    """The fast engine's drivers are specialised per learner as closures over plain values
    (kernel.driver), which numba's cache keeps across processes: a second fresh process on
    the cache the first left loads every driver (a closure over the per-learner intrinsic
    itself would miss: an intrinsic pickles with a per-process id) and computes the same bits."""
    compiled, loaded = compiled_then_loaded(PROBE, tmp_path)
    assert len(compiled.files) == 2 * 2 * 7
    for key in compiled.files:
        if key.endswith("/loaded"):
            assert not compiled[key] and loaded[key], f"{key}: the first process compiles, the second loads"
        else:
            assert np.isfinite(compiled[key]).all(), key
            assert compiled[key].tobytes() == loaded[key].tobytes(), key


def test_the_fast_engine_compiles_only_registered_learners():
    """The driver picks its block step by the learner's name (intrinsics.advance): a learner
    that is not the registry's under that name is refused, not compiled with the registry's rule."""
    from fade_core.linear import kernel

    def sgd(x, delta, w, beta, h, gamma, g, lo, hi, alpha):
        return w - alpha * delta * x, beta, h, gamma, g

    with pytest.raises(ValueError, match="not the one registered"):
        kernel.driver(LinearLearner("sgd", sgd, "sgd with the sign flipped"), np.dtype(np.float32))


def test_the_linear_kernel_is_specialised_in_code_a_reader_can_check():
    """The kernel is specialised per learner without changing numba's process-wide settings
    (numba.config: e.g. switching LLVM's SLP vectoriser on for every compile in the process)
    and without names a reader (or linter) cannot resolve: globals injected into a copy of a
    function's code object for numba to compile, each marked `noqa: F821`."""
    for path in sorted((ROOT / "fade_core" / "linear").glob("*.py")):
        source = path.read_text()
        assert not re.search(r"numba\.config\.\w+\s*=[^=]", source), f"{path.name} sets numba.config"
        assert "F821" not in source, f"{path.name} uses names defined nowhere in it"
