"""The "triton" engine (fade_core/neural/triton_update.py's fused updates) against the torch ops
they replace (the "torch" engine, the neural reference), learner by learner, from random
optimizer state.

Without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, numpy on the CPU); with
one, compiled, against torch's CUDA ops. Stated tolerance after one update: MAX_ULPS ulps of the
largest term of each element's update (see `_scales`). Not bitwise on CPUs: the kernels round
sqrt and divide exactly (as torch does on CUDA), while this torch build's CPU float32 sqrt is
off by one ulp in about a sixth of the elements, and exp(gamma) comes from numpy here. Over many
steps the two paths stay within float32 (float64) relative tolerance of each other.
"""

from __future__ import annotations

import importlib
import os
import zlib

import numpy as np
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Must be set before triton.jit defines the kernels (on import of triton_update).
os.environ.setdefault("TRITON_INTERPRET", "0" if DEVICE == "cuda" else "1")
pytest.importorskip("triton", reason="Triton does not import here (torch ships it on Linux x86-64)")

from fade_core.mlp import Architecture  # noqa: E402
from fade_core.neural import NEURAL_LEARNERS, NeuralRuns, make_runs, triton_rule, triton_update  # noqa: E402

if triton_rule.INTERPRET != (os.environ["TRITON_INTERPRET"] == "1"):  # imported earlier in the other mode
    importlib.reload(triton_rule)
    importlib.reload(triton_update)

# Measured in the interpreter over 300 random states of adamw (squared error, 3 Adam steps before): 1-4 ulps in
# 299, 6 in one; the whole suite once drew 8. The two paths round the same terms in different orders.
MAX_ULPS = 8
ARCH = Architecture((5, 7, 6, 4), negative_slope=0.01)
RUNS = 3
HP = {"alpha": [0.01, 0.003, 0.05], "lambda": [0.01, 0.1, 0.001], "kappa": [0.3, 1.0, 2.0],
      "theta_lambda": [0.5, 0.0, 2.0], "gamma0": [-4.6, -1.0, -9.2]}
from tests.test_neural_learners import COMBINED  # noqa: E402 (FADE with weight decay and clipping)

LEARNERS = {**NEURAL_LEARNERS, **COMBINED}
# Every learner the fused kernel runs (coupled decay runs the torch ops), the combined one included.
FUSED = sorted(n for n, spec in LEARNERS.items() if (spec.base == "adam" or spec.fade != "none") and spec.weight_decay != "coupled")


def _runs(learner: str, loss: str, fused: bool, dtype=torch.float32) -> NeuralRuns:
    spec = LEARNERS[learner]
    hp = {k: HP[k] for k in spec.hyperparameters}
    return make_runs(spec, ARCH, list(range(RUNS)), hp, loss, DEVICE, dtype, engine="triton" if fused else "torch")


def _batch(loss: str, gen: torch.Generator, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(RUNS, ARCH.sizes[0], generator=gen, dtype=dtype)
    y = (torch.randint(0, ARCH.sizes[-1], (RUNS,), generator=gen) if loss == "cross_entropy"
         else torch.randn(RUNS, ARCH.sizes[-1], generator=gen, dtype=dtype))
    return x.to(DEVICE), y.to(DEVICE)


def _random_state(runs: NeuralRuns, gen: torch.Generator, adam_steps: int) -> dict[str, torch.Tensor]:
    """Every state tensor drawn at random, gamma partly outside FADE's clamp, v partly zero."""
    state = {}
    for name, t in runs.state_dict().items():
        shape, dtype = t.shape, t.dtype
        if name == "adam_steps":
            value = torch.tensor(float(adam_steps), dtype=dtype)
        elif name == "gamma":
            value = torch.rand(shape, generator=gen, dtype=dtype) * 17 - 16
        elif name == "adam_v":
            value = torch.rand(shape, generator=gen, dtype=dtype) ** 4 * 1e-3
            value[..., ::5] = 0
        else:
            value = torch.randn(shape, generator=gen, dtype=dtype) * {"params": 0.5, "adam_m": 0.01, "trace": 0.1}[name]
        state[name] = value.to(DEVICE)
    return state


def _ulps(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    """Largest |a - b| in units of the last place of `scale` (elementwise magnitudes)."""
    spacing = np.spacing(scale.abs().cpu().numpy())
    return float(np.max(np.abs((a - b).cpu().numpy()) / spacing, initial=0.0))


def _scales(runs: NeuralRuns, before: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per element, the magnitude its error is measured against: the largest term of its update,
    max(|before|, |after|, |after - before|), and for FADE's trace also the decay term exp(gamma) |P|."""
    scales = {}
    for name, after in runs.state_dict().items():
        scales[name] = torch.maximum(torch.maximum(before[name].abs(), after.abs()), (after - before[name]).abs())
    if runs.fade_index:
        decay_term = runs.state_dict()["gamma"].exp() * before["params"][:, runs.fade_start:].abs()
        scales["trace"] = torch.maximum(scales["trace"], decay_term)
    return scales


def test_the_engine_name_alone_chooses_the_fused_kernels(monkeypatch):
    """"triton" fuses every Adam-family and FADE parameter, "torch" none; the variable that used
    to switch them is read no more."""
    monkeypatch.setenv("FADE_TRITON", "0")
    assert _runs("fade_adam", "cross_entropy", True).engine.fused_params == set(range(2 * ARCH.layers))
    assert _runs("fade_sgd", "cross_entropy", True).engine.fused_params == {2 * ARCH.layers - 2, 2 * ARCH.layers - 1}
    monkeypatch.setenv("FADE_TRITON", "1")
    assert not _runs("fade_adam", "cross_entropy", False).engine.fused_params


@pytest.mark.parametrize("adam_steps", [0, 3])
@pytest.mark.parametrize("loss", ["cross_entropy", "squared_error"])
@pytest.mark.parametrize("learner", FUSED)
def test_one_fused_update_matches_the_torch_ops(learner, loss, adam_steps):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{learner}/{loss}/{adam_steps}".encode()))  # (hash(): per process)
    fused, plain = _runs(learner, loss, True), _runs(learner, loss, False)
    assert fused.engine.fused_params and not plain.engine.fused_params
    state = _random_state(plain, gen, adam_steps)
    fused.load_state_dict(state)
    plain.load_state_dict(state)
    x, y = _batch(loss, gen, torch.float32)
    a, b = fused.engine.step(x, y), plain.engine.step(x, y)
    torch.testing.assert_close(a.loss, b.loss, rtol=0, atol=0)  # the forward pass is shared
    scales = _scales(plain, state)
    for name, want in plain.state_dict().items():
        got = fused.state_dict()[name]
        assert not torch.equal(want, state[name]) or name in ("adam_steps",) or want.numel() == 0, f"{name} unchanged"
        assert _ulps(got, want, scales[name]) <= MAX_ULPS, f"{name}: {_ulps(got, want, scales[name]):.1f} ulps"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("learner", FUSED)
def test_fused_runs_follow_the_torch_ops_over_many_steps(learner, dtype):
    """20 classification steps: the same losses and state for two ordinary runs, and for a third
    with alpha 50 (chaotic under Adam, overflowing under SGD) the same non-finite values."""
    HP["alpha"][2] = 50.0
    try:
        fused = _runs(learner, "cross_entropy", True, dtype)
        plain = _runs(learner, "cross_entropy", False, dtype)
    finally:
        HP["alpha"][2] = 0.05
    gen = torch.Generator().manual_seed(7)
    tol = {"rtol": 1e-4, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-11, "atol": 1e-13}
    losses = [], []
    for _ in range(20):
        x, y = _batch("cross_entropy", gen, dtype)
        losses[0].append(fused.engine.step(x, y).loss)
        losses[1].append(plain.engine.step(x, y).loss)
    pairs = [(torch.stack(losses[0]).T, torch.stack(losses[1]).T, "loss")]
    states = fused.state_dict()
    pairs += [(states[k].reshape(RUNS, -1), v.reshape(RUNS, -1), k) for k, v in plain.state_dict().items() if v.dim()]
    for got, want, name in pairs:
        torch.testing.assert_close(got[:2], want[:2], msg=name, **tol)
        finite = want[2].isfinite()
        assert torch.equal(got[2].isfinite(), finite), name
        torch.testing.assert_close(got[2][~finite], want[2][~finite], rtol=0, atol=0, equal_nan=True, msg=name)


COMPILE = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from fade_core.neural import triton_update as tu
from fade_core.neural.rules import NeuralLearner
from fade_core.neural.triton_rule import rule_for
kernel = tu._update_kernel
fade = bool(int(sys.argv[1]))
learner = NeuralLearner("adam_clip_fade", "adam", clip=True, fade="head")
flags = dict(RULE=rule_for(learner, fade), ADAM=1, FADE=fade, WEIGHT=1, HEAD_FACTOR=1, BLOCK=tu.MAX_BLOCK)
signature = {n: "constexpr" if n in flags else "*fp32" if n.endswith("_ptr") else "i32" for n in kernel.arg_names}
source = ASTSource(kernel, signature, constexprs={(kernel.arg_names.index(n),): v for n, v in flags.items()})
ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False}).asm["ptx"]
ops = ("fma.rn.f32", "div.rn.f32", "sqrt.rn.f32", "div.full", "div.approx", "sqrt.approx", "max.NaN.f32", "min.NaN.f32")
print(json.dumps({op: ptx.count(op) for op in ops}))
"""


@pytest.mark.skipif(DEVICE == "cuda", reason="the compiled kernels run against torch's CUDA ops above")
@pytest.mark.parametrize("fade", [0, 1])
def test_the_kernel_compiles_for_hopper_with_exact_rounding(fade):
    """Without a GPU: Triton compiles the Adam (+FADE) variant for sm_90 with exactly the rule's
    rounding: per element, an IEEE division, square root and FMA for each the traced rule has
    (launched with fp_fusion off: no contracted multiply-add beside them; libdevice's expf uses
    flush-to-zero ones of its own), and no approximate division or square root; each clamp (the
    clip, FADE's gamma) as one NaN-propagating max and min (triton_rule._clamp)."""
    import json
    import subprocess
    import sys

    from fade_core.expression import ssa
    from fade_core.neural.rules import NeuralLearner

    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", COMPILE, str(fade)], env=env, capture_output=True, text=True,
                          timeout=600)
    if done.returncode and "ptxas" in done.stderr:
        pytest.skip(f"no ptxas for sm_90 here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    per_thread = triton_update.MAX_BLOCK // (32 * 4)
    learner = NeuralLearner("adam_clip_fade", "adam", clip=True, fade="head")
    rule = [node.op for node in ssa(triton_rule._graph(learner.flags(bool(fade))))]
    assert counts["div.full"] == counts["div.approx"] == counts["sqrt.approx"] == 0, counts
    assert (rule.count("sqrt"), rule.count("div"), rule.count("fma")) == (1 + fade, 2 + fade, 2 * fade)  # the rule's
    assert counts["sqrt.rn.f32"] == per_thread * rule.count("sqrt"), counts
    assert counts["div.rn.f32"] == per_thread * rule.count("div"), counts
    assert counts["fma.rn.f32"] == per_thread * rule.count("fma"), counts
    clamps = [node.op for node in ssa(triton_rule.clamps(triton_rule._graph(learner.flags(bool(fade)))))].count("clamp")
    assert clamps == 1 + fade  # the clip, and FADE's clamp of gamma
    assert counts["max.NaN.f32"] == counts["min.NaN.f32"] == per_thread * clamps, counts
