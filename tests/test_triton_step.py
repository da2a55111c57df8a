"""The "triton_step" engine (fade_core/neural/triton_fused_step.py) against the "torch" engine, the
neural reference, for all nine learners, from several steps of `NeuralRuns.advance`.

Without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, numpy on the CPU); with one,
compiled, against torch's CUDA ops. The per-element rule is the learner's, printed by triton_rule (tests/test_triton.py
holds triton_update's kernel to the torch ops ulp by ulp); what is new here is the order of the passes: W^T delta read from the
weights before their update in the same pass, the first layer's update fused with the next step's
forward product, and a segment's one forward-only pass. Only the sums' order differs from torch's
products, so the two paths agree to float32 (float64) tolerance over many steps.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
os.environ.setdefault("TRITON_INTERPRET", "0" if DEVICE == "cuda" else "1")  # before triton.jit defines the kernels
pytest.importorskip("triton", reason="Triton does not import here (torch ships it on Linux x86-64)")

from fade_core.mlp import Architecture  # noqa: E402
from fade_core.neural import NEURAL_LEARNERS, triton_fused_step, triton_rule, triton_update  # noqa: E402
from fade_core.neural.runs import make_runs  # noqa: E402
from fade_core.neural.state import NeuralRuns, StepSums  # noqa: E402

if triton_rule.INTERPRET != (os.environ["TRITON_INTERPRET"] == "1"):  # imported earlier in the other mode
    importlib.reload(triton_rule)
    importlib.reload(triton_update)
    importlib.reload(triton_fused_step)

ARCH = Architecture((5, 7, 6, 4), negative_slope=0.01)
HP = {"alpha": [0.01, 0.003, 50.0], "lambda": [0.01, 0.1, 0.001], "kappa": [0.3, 1.0, 2.0],
      "theta_lambda": [0.5, 0.0, 2.0], "gamma0": [-4.6, -1.0, -9.2]}  # run 2: alpha 50 diverges or goes chaotic
SLOT = [0, 1, 1]  # runs 1 and 2 read the same stream
STEPS = 8


def _runs(learner: str, loss: str, fused: bool, dtype=torch.float32, runs=(0, 1, 2)) -> NeuralRuns:
    """Runs on the "triton_step" engine (`fused`) or the "torch" reference."""
    spec = NEURAL_LEARNERS[learner]
    hp = {k: [HP[k][r] for r in runs] for k in spec.hyperparameters}
    return make_runs(learner, ARCH, list(runs), hp, loss, DEVICE, dtype, engine="triton_step" if fused else "torch")


def _stream(loss: str, dtype, steps=STEPS) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(steps, 2, ARCH.sizes[0], generator=gen, dtype=dtype)
    y = (torch.randint(0, ARCH.sizes[-1], (steps, 2), generator=gen) if loss == "cross_entropy"
         else torch.randn(steps, 2, ARCH.sizes[-1], generator=gen, dtype=dtype))
    return x.to(DEVICE), y.to(DEVICE)


def _advance(runs: NeuralRuns, loss: str, x, y, pieces=(STEPS,), slot=SLOT) -> StepSums:
    sums = StepSums.zeros(runs.net.runs, ARCH, loss, DEVICE)
    slot = torch.tensor(slot, device=DEVICE)
    t = 0
    for n in pieces:
        runs.advance(x[t : t + n], y[t : t + n], slot, sums)
        t += n
    return sums


def _flat(runs: NeuralRuns, sums: StepSums) -> dict[str, torch.Tensor]:
    out = {k: v.reshape(runs.net.runs, -1) for k, v in runs.state_dict().items() if v.dim()}
    return {**out, **{f"sums.{i}": s.reshape(runs.net.runs, -1).double() for i, s in enumerate(sums.tensors())}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("loss", ["cross_entropy", "squared_error"])
@pytest.mark.parametrize("learner", sorted(NEURAL_LEARNERS))
def test_the_fused_step_follows_the_torch_ops(learner, loss, dtype):
    """Weights, moments, gamma, traces and the step sums after STEPS steps: two ordinary runs within
    float32 (float64) tolerance, and the third (alpha 50) with the same non-finite values."""
    fused, plain = _runs(learner, loss, True, dtype), _runs(learner, loss, False, dtype)
    assert fused.engine.name == "triton_step" and plain.engine.name == "torch"
    x, y = _stream(loss, dtype)
    got, want = _flat(fused, _advance(fused, loss, x, y)), _flat(plain, _advance(plain, loss, x, y))
    tol = {"rtol": 2e-4, "atol": 2e-6} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    for name, w in want.items():
        g = got[name]
        torch.testing.assert_close(g[:2], w[:2], msg=name, **tol)
        finite = w[2].isfinite() if w.dtype != torch.bool else torch.ones_like(w[2])
        assert torch.equal(g[2].isfinite() if g.dtype != torch.bool else finite, finite), name
    assert not torch.equal(got["params"], _runs(learner, loss, False, dtype).net.flat)  # it stepped


@pytest.mark.parametrize("learner", ["fade_adam", "sgd_wclip", "fade_sgd_all", "adamw"])
def test_the_fused_step_does_not_depend_on_segmenting_or_pack(learner):
    """Bit for bit: a segment in one call or in three (each starts with its own forward-only pass over
    W0), and run 1 alone or in its pack."""
    x, y = _stream("cross_entropy", torch.float32)
    whole = _runs(learner, "cross_entropy", True)
    pieces = _runs(learner, "cross_entropy", True)
    alone = _runs(learner, "cross_entropy", True, runs=(1,))
    a = _flat(whole, _advance(whole, "cross_entropy", x, y))
    b = _flat(pieces, _advance(pieces, "cross_entropy", x, y, (3, 1, 4)))
    c = _flat(alone, _advance(alone, "cross_entropy", x, y, slot=[1]))
    for name in a:
        assert torch.equal(a[name].nan_to_num(7.0), b[name].nan_to_num(7.0)), name
        assert torch.equal(a[name][1:2], c[name]), name


def test_the_engine_name_alone_chooses_the_fused_step():
    """"triton_step" runs whole steps in triton_fused_step's passes, "triton" the per-parameter kernels."""
    assert _runs("fade_sgd", "cross_entropy", True).engine._whole_step is triton_fused_step
    triton = make_runs("fade_sgd", ARCH, [0], {k: [HP[k][0]] for k in NEURAL_LEARNERS["fade_sgd"].hyperparameters},
                       "cross_entropy", DEVICE, engine="triton")
    assert triton.engine.name == "triton" and triton.engine._whole_step is None


COMPILE = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from fade_core.neural import triton_fused_step as fs
from fade_core.neural.rules import NeuralLearner
from fade_core.neural.triton_rule import rule_for
rule = rule_for(NeuralLearner("adam_clip_fade", "adam", clip=True, fade="head"), True)
counts = {}
for name, extra in (("_update_forward_kernel", dict(UPDATE=1, FORWARD=1)), ("_backward_update_kernel", {})):
    kernel = getattr(fs, name)
    flags = dict(HEAD_FACTOR=1, RULE=rule, ADAM=1, FADE=1, BJ=16, BI=128, **extra)
    signature = {n: "constexpr" if n in flags else "*fp32" if n.endswith("_ptr") else "i32" for n in kernel.arg_names}
    source = ASTSource(kernel, signature, constexprs={(kernel.arg_names.index(n),): v for n, v in flags.items()})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False}).asm["ptx"]
    counts[name] = {op: ptx.count(op) for op in ("div.approx", "sqrt.approx", "div.full", "ld.local", "st.local")}
print(json.dumps(counts))
"""


@pytest.mark.skipif(DEVICE == "cuda", reason="on a GPU the kernels run compiled in the tests above")
def test_the_fused_step_compiles_for_hopper_with_exact_rounding():
    """Without a GPU: Triton compiles both kernels (Adam + FADE + clipping, the head factor) for sm_90,
    with IEEE division and square root only and nothing spilled to local memory."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode and "ptxas" in done.stderr:
        pytest.skip(f"no ptxas for sm_90 here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    for name, counts in json.loads(done.stdout.strip().splitlines()[-1]).items():
        assert not any(counts.values()), (name, counts)
