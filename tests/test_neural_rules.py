"""The neural parts as one rule: the tracer's refusals, and the C printer (the CUDA kernel's
arithmetic) compiled with this machine's C++ compiler against a plain per-element update of
algorithms.md §2 written here (float64 numpy, not derived from the rule)."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest

from fade_core.expression import RuleError, trace
from fade_core.neural import NEURAL_LEARNERS, NeuralLearner
from fade_core.neural.c_source import c_source
from fade_core.neural.parts import UPDATE_INPUTS
from fade_core.rulebind import parameters

COMBINED = [NeuralLearner("fade_sgd_wd_clip", "sgd", weight_decay="coupled", clip=True, fade="head"),
            NeuralLearner("fade_adamw_clip", "adam", weight_decay="decoupled", clip=True, fade="all")]
LEARNERS = list(NEURAL_LEARNERS.values()) + COMBINED
SCALARS = ("alpha", "lam", "factor", "theta", "bound", "step", "sqrt_bc2", "inv_bc2", "m_weight", "beta2", "v_weight", "eps")
ARRAYS = ("w", "m", "v", "gamma", "trace", "grad", "q")


def plain_update(learner: NeuralLearner, s: dict, k: int) -> dict:
    """algorithms.md §2 on arrays, float64: FADE (decay first), weight decay, SGD or Adam at
    step k, clipping."""
    w, m, v, gamma, trace_, grad = (s[n].astype(np.float64) for n in ("w", "m", "v", "gamma", "trace", "grad"))
    alpha = s["alpha"]
    if learner.fade != "none":
        alpha_eff = alpha
        if learner.base == "adam" and k > 1:
            alpha_eff = alpha / (np.sqrt(v / (1 - 0.999 ** (k - 1))) + 1e-8)
        gamma = np.clip(gamma - s["theta"] * grad * trace_, -15, 0)
        decay = np.exp(gamma)
        trace_ = trace_ * np.maximum(1 - decay - alpha_eff * s["q"], 0) - decay * w
        w = w * (1 - decay)
    if learner.weight_decay == "coupled":
        grad = grad + s["lam"] * w
    elif learner.weight_decay == "decoupled":
        w = w * (1 - alpha * s["lam"])
    if learner.base == "adam":
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w = w - alpha * (m / (1 - 0.9**k)) / (np.sqrt(v / (1 - 0.999**k)) + 1e-8)
    else:
        w = w - alpha * grad
    if learner.clip:
        w = np.clip(w, -s["bound"], s["bound"])
    return {"w": w, "m": m, "v": v, "gamma": gamma, "trace": trace_}


def _library(learner: NeuralLearner, dtype, tmp_path):
    """c_source's statements in a C++ loop over n elements, compiled with contraction off."""
    real = "float" if dtype == np.float32 else "double"
    inputs = {n: f"{n}[i]" for n in ARRAYS} | {n: n for n in SCALARS} | {"first_step": "first_step"}
    body = c_source(learner, dtype, inputs, {n: f"{n}[i]" for n in ("w", "m", "v", "gamma", "trace")}, style="c")
    arrays = ", ".join(f"{real}* {n}" for n in ARRAYS)
    scalars = ", ".join(f"{real} {n}" for n in SCALARS)
    source = (f"#include <cmath>\n#include <cstdint>\nusing std::exp; using std::sqrt; using std::fma;\n"
              f'extern "C" void update(int64_t n, {arrays}, {scalars}, bool first_step) {{\n'
              f"  for (int64_t i = 0; i < n; ++i) {{\n{body}\n  }}\n}}\n")
    (tmp_path / "update.cpp").write_text(source)
    out = tmp_path / "update.so"
    subprocess.run([shutil.which("g++") or "c++", "-O2", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
                    str(tmp_path / "update.cpp"), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out)).update


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a C++ compiler")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("learner", LEARNERS, ids=lambda learner: learner.name)
def test_c_source_matches_the_plain_update(learner, dtype, tmp_path):
    """Three Adam steps (k = 1 is FADE's first-step case) on 4096 elements, each input drawn
    where it matters (w near the clip bound, gamma across the clamp), against plain_update."""
    function = _library(learner, dtype, tmp_path)
    rng = np.random.default_rng(5)
    n = 4096
    state = {"w": rng.normal(0, 0.6, n), "m": np.zeros(n), "v": np.zeros(n), "gamma": rng.uniform(-16, 0.5, n),
             "trace": rng.normal(0, 0.1, n)}
    alpha, lam, kappa = 0.01 if learner.base == "sgd" else 0.003, 0.05, 1.0
    for k in (1, 2, 3):
        s = {**state, "grad": rng.normal(0, 1, n), "q": rng.uniform(0, 2, n)}
        bc1, bc2, bc2_before = 1 - 0.9**k, 1 - 0.999**k, 1 - 0.999 ** (k - 1)
        scalars = {"alpha": alpha, "lam": lam, "factor": 1 - alpha * lam, "theta": 0.5, "bound": kappa / math.sqrt(32),
                   "step": alpha / bc1, "sqrt_bc2": math.sqrt(bc2), "inv_bc2": 1 / bc2_before if k > 1 else 0.0,
                   "m_weight": 1 - 0.9, "beta2": 0.999, "v_weight": 1 - 0.999, "eps": 1e-8}
        expected = plain_update(learner, {**s, **scalars}, k)
        arrays = {name: np.ascontiguousarray(s[name], dtype=dtype) for name in ARRAYS}
        pointer = ctypes.c_float if dtype == np.float32 else ctypes.c_double
        function(ctypes.c_int64(n), *(a.ctypes.data_as(ctypes.POINTER(pointer)) for a in arrays.values()),
                 *(pointer(scalars[name]) for name in SCALARS), ctypes.c_bool(k == 1))
        rtol = 2e-5 if dtype == np.float32 else 1e-12
        for name, value in expected.items():
            np.testing.assert_allclose(arrays[name], value, rtol=rtol, atol=rtol * 1e-2, err_msg=f"{learner.name} k={k} {name}")
        state = {name: arrays[name].astype(np.float64) for name in state}


def test_c_source_prints_exact_literals_and_round_to_nearest_intrinsics():
    """The CUDA style: 1 - decay as __fsub_rn with 1 in float32 hex, gamma's clamp as selects
    that keep a NaN value, FADE's trace as fmaf; float64 the same with double names."""
    learner = NEURAL_LEARNERS["fade_sgd"]
    text = c_source(learner, np.float32, {n: n for n in UPDATE_INPUTS}, {"w": "w", "gamma": "gamma", "trace": "trace"})
    assert "__fsub_rn(0x1.0000000000000p+0f, " in text and "fmaf(" in text and "-0x1.e000000000000p+3f" in text
    assert " * " not in text and " + " not in text  # no operator the compiler could contract
    text64 = c_source(learner, np.float64, {n: n for n in UPDATE_INPUTS}, {"w": "w"})
    assert "__dmul_rn(" in text64 and "fmaf" not in text64


def test_c_source_names_a_missing_input():
    with pytest.raises(ValueError, match="reads 'theta'; name its C expression"):
        c_source(NEURAL_LEARNERS["fade_sgd"], np.float32, {"w": "w", "grad": "g", "alpha": "a"}, {"w": "w"})


def test_tracer_refuses_a_branch_on_a_value_and_reads_signatures():
    def branching(w, grad):
        if grad > 0:  # a value's sign: must be where(...)
            return w
        return w - grad

    with pytest.raises(RuleError, match="cannot branch on a value"):
        trace(branching, parameters(branching))

    def with_flag(w, grad, *, clip_on=False):
        return w - grad

    assert parameters(with_flag) == ("w", "grad")
    (node,) = trace(with_flag, ("w", "grad"), {"clip_on": True})
    assert node.op == "sub" and [a.value for a in node.args] == ["w", "grad"]


def _evaluate(outputs, values: dict) -> list:
    """A graph of fade_core.expression evaluated on float64 arrays, fma and lerp as plain
    Python's (a * b + c, a + w * (b - a): rounded twice), maximum/minimum as rulebind's."""
    from fade_core.expression import ssa

    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "neg": np.negative,
           "gt": np.greater, "lt": np.less, "ge": np.greater_equal, "le": np.less_equal, "exp": np.exp,
           "sqrt": np.sqrt, "div_approx": np.divide, "where": np.where, "fma": lambda a, b, c: a * b + c,
           "maximum": lambda a, b: np.where(b > a, b, a), "minimum": lambda a, b: np.where(b < a, b, a),
           "lerp": lambda a, b, w: a + w * (b - a)}
    ops["clamp"] = lambda x, lo, hi: ops["minimum"](ops["maximum"](x, lo), hi)  # (triton_rule.clamps' node)
    got: dict[int, object] = {}
    for node in ssa(outputs):
        got[id(node)] = (values[node.value] if node.op == "var" else node.value if node.op == "const"
                         else ops[node.op](*(got[id(arg)] for arg in node.args)))
    return [got[id(out)] for out in outputs]


@pytest.mark.parametrize("learner", LEARNERS, ids=lambda learner: learner.name)
def test_contract_writes_each_multiply_add_as_one_fma_on_the_same_operands(learner):
    """expression.contract (the persistent engine's fused rule): lerp and every add of a product
    used once become fmas; with fma rounded twice the contracted graph gives the original's bits
    (each operand where it was), and no product used elsewhere is fused (computed twice)."""
    from fade_core.expression import contract, ssa
    from fade_core.neural import parts

    flags = learner.flags(learner.fade != "none")
    graph = trace(parts.update, UPDATE_INPUTS, flags)
    fused = contract(graph)
    rng = np.random.default_rng(0)
    values = {n: rng.standard_normal(64) for n in UPDATE_INPUTS}
    values |= {n: np.abs(values[n]) for n in UPDATE_INPUTS if n not in ("w", "grad", "m", "trace", "gamma")}
    values |= {"gamma": -np.abs(values["gamma"]), "first_step": values["step"] > 0}
    for want, got in zip(_evaluate(graph, values), _evaluate(fused, values)):
        np.testing.assert_array_equal(got, want)
    before, after = [[node.op for node in ssa(g)] for g in (graph, fused)]
    assert "lerp" not in after and after.count("mul") == before.count("mul") - (after.count("fma") - before.count("fma")
                                                                                 - before.count("lerp"))
    uses = [arg for node in ssa(fused) for arg in node.args]
    assert not any(node.op in ("add", "lerp") and any(a.op == "mul" and uses.count(a) == 1 for a in node.args)
                   for node in ssa(fused))
    if learner.base == "adam":  # m by lerp, v = beta2 * v + (v_weight * grad) * grad: the gradient's product fused
        assert after.count("fma") >= before.count("fma") + 2


@pytest.mark.parametrize("learner", LEARNERS, ids=lambda learner: learner.name)
def test_triton_printer_joins_each_clamp_into_one_op_with_the_same_values(learner):
    """triton_rule.clamps: minimum(maximum(x, lo), hi), its maximum used nowhere else, becomes one
    clamp node on the same operands (printed as _clamp, fewer spills): the same values, a NaN weight
    still NaN; one per clip and one for FADE's gamma, no other maximum or minimum taken in."""
    from fade_core.expression import ssa
    from fade_core.neural import parts
    from fade_core.neural.triton_rule import clamps

    flags = learner.flags(learner.fade != "none")
    graph = trace(parts.update, UPDATE_INPUTS, flags)
    joined = clamps(graph)
    rng = np.random.default_rng(1)
    values = {n: rng.standard_normal(64) * 3 for n in UPDATE_INPUTS}
    values |= {n: np.abs(values[n]) for n in UPDATE_INPUTS if n not in ("w", "grad", "m", "trace", "gamma")}
    values |= {"gamma": -np.abs(values["gamma"]) * 8, "first_step": values["step"] > 1}
    values["w"][::5] = np.nan
    for want, got in zip(_evaluate(graph, values), _evaluate(joined, values)):
        np.testing.assert_array_equal(got, want)
    if learner.clip:
        assert np.isnan(_evaluate(joined, values)[0][::5]).all()
    before, after = [[node.op for node in ssa(g)] for g in (graph, joined)]
    assert after.count("clamp") == learner.clip + (learner.fade != "none")
    assert after.count("minimum") == before.count("minimum") - after.count("clamp") == 0
    assert after.count("maximum") == before.count("maximum") - after.count("clamp")  # (FADE's max(..., 0) stays)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_printer_moves_a_negated_fma_factor_without_changing_bits(dtype):
    """cpu_elements prints FADE's fma(-alpha_eff, q, 1 - decay) as fma(alpha_eff, -q, 1 - decay)
    (one register for alpha in the FADE-SGD rows): the printed fade_apply gives the bits of the
    rule's own form, computed here with the same FMA, on random values and signed zeros."""
    import numba

    from fade_core.neural import cpu_elements
    from fade_core.neural.cpu_arith import fma

    printed = cpu_elements.numba_source("fade_apply", cpu_elements._GRAPHS["fade_apply"],
                                        ("decay", "trace", "w", "q", "alpha_eff", "fc"), {})
    assert "fma(alpha_eff, t0, " in printed and "t0 = -q" in printed

    @numba.njit
    def rule_form(decay, trace_, w, q, alpha, fc):  # parts.fade_apply as written, fc as cpu_elements' constants
        one, zero = fc[2], fc[1]
        return fma(trace_, max(fma(-alpha, q, one - decay), zero), -(decay * w)), w * (one - decay)

    @numba.njit
    def both(decay, trace_, w, q, alpha, like):
        fc = cpu_elements.fade_constants(like)
        out = np.empty((decay.shape[0], 4), dtype=like.dtype)
        for i in range(decay.shape[0]):
            out[i, 0], out[i, 1] = cpu_elements.fade_apply(decay[i], trace_[i], w[i], q[i], alpha[i], fc)
            out[i, 2], out[i, 3] = rule_form(decay[i], trace_[i], w[i], q[i], alpha[i], fc)
        return out

    rng = np.random.default_rng(0)
    n = 4096
    values = [rng.uniform(0, 1, n), rng.normal(0, 1, n), rng.normal(0, 1, n), rng.exponential(1, n), rng.exponential(0.1, n)]
    for v in values[1:]:
        v[::17] = 0.0
        v[::23] = -0.0
    decay, trace_, w, q, alpha = (v.astype(dtype) for v in values)
    out = both(decay, trace_, w, q, alpha, np.zeros(1, dtype=dtype))
    assert cpu_elements.CONSTANTS[1:3] == (0.0, 1.0)
    np.testing.assert_array_equal(out[:, :2].view(np.uint32 if dtype is np.float32 else np.uint64),
                                  out[:, 2:].view(np.uint32 if dtype is np.float32 else np.uint64))
