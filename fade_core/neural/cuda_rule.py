"""One parameter's update of algorithms.md §2 as the CUDA engine's kernel runs it: printed from the
rule (`fade_core/neural/parts.py`'s `update`, through `c_source.c_source`), so the kernel runs the
arithmetic the CPU tests prove; the kernel itself (cuda_source.py) is layout, loops and reductions.

`rule_source(learner)` wraps the printed statements in the device function `apply_rule<USE_FADE>`
the kernel calls per parameter, and names the rule's inputs after the kernel's variables: the
gradient is the product gd * gx (gx = 1 for a bias) rounded once, the per-run and per-step scalars
come from the struct `Scalars`, and Adam's constants are literals in float32. The printer's
"cuda" style writes every +, -, *, / and sqrt as a round-to-nearest intrinsic, so NVRTC neither
contracts nor approximates them: the arithmetic is the rule's, operation by operation.
"""

from __future__ import annotations

import numpy as np

from fade_core.neural.c_source import c_literal, c_source
from fade_core.neural.parts import BETA1, BETA2, EPS
from fade_core.neural.rules import NeuralLearner

_F32 = np.float32
# The rule's inputs as the kernel's C expressions (apply_rule's arguments, Scalars' fields).
INPUTS = {
    "w": "P", "grad": "G", "q": "q", "alpha": "s.alpha", "lam": "s.lam", "factor": "s.factor", "theta": "s.theta",
    "bound": "bound", "m": "m", "v": "v", "gamma": "gamma", "trace": "trace", "first_step": "s.first_step",
    "step": "s.step", "sqrt_bc2": "s.sqrt_bc2", "inv_bc2": "s.inv_bc2",
    "m_weight": c_literal(1 - BETA1, _F32), "beta2": c_literal(BETA2, _F32), "v_weight": c_literal(1 - BETA2, _F32),
    "eps": c_literal(EPS, _F32),
}
OUTPUTS = {"w": "P", "m": "m", "v": "v", "gamma": "gamma", "trace": "trace"}

# The per-run and per-step scalars every parameter's update reads (filled by the kernel).
SCALARS = """struct Scalars {
    float alpha, lam, factor, theta;    // per run: factor = 1 - alpha * lam (AdamW's shrink)
    float step, sqrt_bc2, inv_bc2;      // per step: Adam's (the step from float64, as torch.optim)
    bool first_step;                    // no Adam step taken before this one
};
"""


def _body(learner: NeuralLearner, fade_on: bool) -> str:
    text = c_source(learner, _F32, INPUTS, OUTPUTS, fade_on=fade_on, prefix="f" if fade_on else "u")
    return "\n".join(f"        {line}" for line in text.splitlines())


def rule_source(learner: NeuralLearner) -> str:
    """C++ source of `Scalars` and `apply_rule<USE_FADE>(P, gd, gx, m, v, gamma, trace, q, s, bound)`: the
    update of one parameter P with gradient gd * gx and FADE's curvature q, FADE's part on it when
    USE_FADE (which layers FADE covers is the kernel's layout: the head, or every layer)."""
    fade_branch = _body(learner, True) if learner.adapts_decay else "        // (no FADE in this learner)"
    return f"""{SCALARS}
// {learner.name}: one parameter's update, printed from fade_core/neural/parts.py's rule
template <bool USE_FADE>
__device__ __forceinline__ void apply_rule(float &P, const float gd, const float gx, float &m, float &v, float &gamma,
                                           float &trace, const float q, const Scalars &s, const float bound)
{{
    const float G = __fmul_rn(gd, gx);
    if (USE_FADE) {{
{fade_branch}
    }} else {{
{_body(learner, False)}
    }}
}}
"""
