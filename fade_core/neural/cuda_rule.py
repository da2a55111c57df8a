"""One parameter's update of algorithms.md §2 printed as CUDA C++: the only arithmetic of the rule
that the CUDA engine's kernel (cuda_source.py) runs; the kernel itself is layout, loops and
reductions.

`rule_source(learner)` returns the device function `apply_rule<USE_FADE>(...)` with the learner's
parts (base step, weight decay, clipping) written in and the rest left out, so the kernel of each
learner holds exactly its own rule. It mirrors torch_ops (the neural reference) operation by
operation: FADE's gamma, decay, trace and decay of P first, weight decay, the SGD or Adam step
with the gradient taken at the old P, then clipping; SGD's weights as torch's baddbmm forms them
(P + (-alpha * delta) * input). Clamps are written as comparisons so that a NaN stays NaN, as
torch's clamp keeps it (fminf/fmaxf would drop it); the compiler may contract a*b+c into FMAs
(as the Triton engines do), so a step agrees with torch to float32 rounding, not bitwise.

This module is the one place to swap for a printer that derives the C source from a
backend-neutral rule: the kernel asks for nothing but `rule_source`.
"""

from __future__ import annotations

from fade_core.neural.rules import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN, NeuralLearner


def _f32(value: float) -> str:
    """A float constant as a C float literal (rounded from its Python double as torch rounds a scalar)."""
    return f"{float(value)!r}f"


def rule_source(learner: NeuralLearner) -> str:
    """C++ source of `apply_rule<USE_FADE>(P, gd, gx, m, v, gamma, trace, q, s, bound)`: the update of one
    parameter P whose gradient is gd * gx (gx = 1 for a bias), FADE's curvature q; `s` holds the
    per-run and per-step scalars (struct `Scalars`: alpha, lam, theta, step, sqrt_bc2, inv_bc2, eps_fade: Adam's
    eps once a step was taken, else 1).
    USE_FADE is a template flag: which layers FADE covers is the kernel's choice (head or all)."""
    adam, wd = learner.base == "adam", learner.weight_decay
    plain_sgd = not adam and not learner.adapts_decay and wd == "none"
    lines = [] if plain_sgd else ["    float G = gd * gx;"]
    if learner.adapts_decay:
        lines.append("    if (USE_FADE) {")
        alpha_eff = "s.alpha"
        if adam:  # alpha / (sqrt(v_hat) + eps), v_hat before this step's update. On the first step inv_bc2 = 0
            # and s.eps_fade = 1: alpha / (0 + 1) = alpha exactly, with no branch (a branch has the compiler
            # copy the whole head update, once per side)
            lines.append("        const float alpha_eff = s.alpha / (sqrtf(v * s.inv_bc2) + s.eps_fade);")
            alpha_eff = "alpha_eff"
        lines += [
            f"        gamma = clamp_nan(gamma - s.theta * G * trace, {_f32(GAMMA_MIN)}, {_f32(GAMMA_MAX)});",
            "        const float decay = expf(gamma);",
            f"        float c = 1.0f - decay - {alpha_eff} * q;",
            "        c = c < 0.0f ? 0.0f : c;  // [.]+, NaN kept",
            "        trace = trace * c - decay * P;",
            "        P = P * (1.0f - decay);",
            "    }",
        ]
    if wd == "coupled":  # torch.optim.SGD(weight_decay): G + lambda * P (baddbmm on the weights)
        lines.append("    G = fmaf(gd, gx, s.lam * P);")
    elif wd == "decoupled":  # AdamW
        lines.append("    P = P * (1.0f - s.alpha * s.lam);")
    if adam:
        lines += [
            f"    m = fmaf({_f32(1 - BETA1)}, G - m, m);",
            f"    v = fmaf({_f32(1 - BETA2)} * G, G, v * {_f32(BETA2)});",
            f"    P = P - (s.step * m) / (sqrtf(v) / s.sqrt_bc2 + {_f32(EPS)});",
        ]
    elif not plain_sgd:
        lines.append("    P = P - s.alpha * G;")
    else:  # as torch's baddbmm: P + (delta * -alpha) * input (the product hoisted out of a row)
        lines.append("    P = fmaf(gd * -s.alpha, gx, P);")
    if learner.clip:
        lines.append("    P = clamp_nan(P, -bound, bound);")
    body = "\n".join(lines)
    return f"""// {learner.name}: one parameter's update (fade_core/neural/cuda_rule.py)
template <bool USE_FADE>
__device__ __forceinline__ void apply_rule(float &P, const float gd, const float gx, float &m, float &v, float &gamma,
                                           float &trace, const float q, const Scalars &s, const float bound)
{{
{body}
}}
"""
