"""A neural learner's per-parameter update printed as C statements (for a CUDA kernel).

`c_source(learner, dtype, inputs, outputs)` is the entry point: the learner's `parts.update`
traced once (fade_core/expression.py) and printed as C, one `const` declaration per
operation, reading the C expressions `inputs` names and assigning the `outputs`. A kernel
pastes the text into its element loop (e.g. NVRTC source built at run time), so the CUDA
engine's arithmetic is the rule's, with nothing written twice.

How the printed code keeps the rule's rounding, whatever the compiler's flags:
- style "cuda" (the default): every +, -, *, / and sqrt is a round-to-nearest intrinsic
  (`__fadd_rn`, `__dmul_rn`, `__fdiv_rn`, `__fsqrt_rn`, ...), which nvcc and NVRTC never
  contract into a multiply-add nor approximate (even under --use_fast_math); `fma` is
  `fmaf`/`fma`; `div_approx` is `__fdividef` in float32. exp is `expf`/`exp` (CUDA's: within
  2 ulp in float32, not libdevice-bitwise to anything on a CPU).
- style "c": plain operators, for a C/C++ compiler run with contraction off
  (`-ffp-contract=off`); the tests compile it with the machine's C++ compiler.
- literals are hexadecimal, in the run's dtype (`0x1.99999ap-4f` is 0.1 rounded to float32):
  exact, and never a double folded into a float expression.
- maximum(a, b) is `((b > a) ? b : a)`: a NaN in the value a stays NaN, as in every engine.
The temporaries are C++ (`const float t0 = ...;`), so they live in the caller's scope: wrap
the text in braces, or give each use its own `prefix`.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fade_core.expression import INFIX, Node, is_condition, statements, trace
from fade_core.neural.parts import UPDATE_INPUTS, UPDATE_OUTPUTS, update
from fade_core.neural.rules import NeuralLearner

_RN = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}


def c_literal(value: float, dtype: np.dtype) -> str:
    """`value` rounded to `dtype` as an exact C literal (hexadecimal; inf as INFINITY)."""
    rounded = float(np.dtype(dtype).type(value))
    if np.isinf(rounded):
        return "(-INFINITY)" if rounded < 0 else "INFINITY"
    text = rounded.hex()
    return f"{text}f" if np.dtype(dtype) == np.float32 else text


def c_source(learner: NeuralLearner, dtype: np.dtype | type, inputs: Mapping[str, str], outputs: Mapping[str, str],
             fade_on: bool | None = None, style: str = "cuda", prefix: str = "u") -> str:
    """The C statements of one parameter's update for `learner` in `dtype` (float32 or float64).

    inputs: each input of `parts.update` the learner reads (`UPDATE_INPUTS`: w, grad, q, alpha,
        lam, factor = 1 - alpha * lambda, theta, bound, m, v, gamma, trace, first_step (a bool),
        and Adam's coefficients step, sqrt_bc2, inv_bc2, m_weight, beta2, v_weight, eps, as
        `parts.adam_scalars` computes them and rounded to dtype; a researcher's base step's
        hyperparameters by their names) -> a C expression.
    outputs: which results to assign (`UPDATE_OUTPUTS`: w, m, v, gamma, trace) -> a C lvalue;
        an output the learner leaves unchanged is assigned only if its lvalue is not its input.
    fade_on: whether this parameter is FADE's (`NeuralLearner.flags`); style: "cuda" or "c".
    Raises ValueError naming an input the rule reads that `inputs` lacks.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"c_source: dtype must be float32 or float64, not {dtype}")
    if style not in ("cuda", "c"):
        raise ValueError(f"c_source: style must be 'cuda' or 'c', not {style!r}")
    flags = learner.flags(fade_on)
    if learner.own_base:  # a researcher's base step: its hyperparameters are inputs too
        flags["base"] = learner.own_base.traced_step()
    nodes = trace(update, UPDATE_INPUTS, flags)
    wanted = [(name, node) for name, node in zip(UPDATE_OUTPUTS, nodes) if name in outputs]
    real, f = ("float", "f") if dtype == np.float32 else ("double", "d")
    cuda = style == "cuda"

    def leaf(node: Node) -> str:
        if node.op == "const":
            return c_literal(node.value, dtype)
        if node.value not in inputs:
            raise ValueError(f"c_source: learner {learner.name!r} reads {node.value!r}; name its C expression in inputs")
        return f"({inputs[node.value]})"

    def render(node: Node, a: list[str]) -> str:
        op = node.op
        if op in _RN and cuda:
            return f"__{f}{_RN[op]}_rn({a[0]}, {a[1]})"
        if op in INFIX:
            return f"({a[0]} {INFIX[op]} {a[1]})"
        if op == "neg":
            return f"(-{a[0]})"
        if op == "sqrt":
            return f"__{f}sqrt_rn({a[0]})" if cuda else f"sqrt({a[0]})"
        if op == "exp":
            return f"exp{'f' if dtype == np.float32 else ''}({a[0]})"
        if op == "fma":
            return f"fma{'f' if dtype == np.float32 else ''}({a[0]}, {a[1]}, {a[2]})"
        if op == "div_approx":
            return f"__fdividef({a[0]}, {a[1]})" if cuda and dtype == np.float32 else render(Node("div"), a)
        if op == "where":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if op == "maximum":
            return f"(({a[1]} > {a[0]}) ? {a[1]} : {a[0]})"
        if op == "minimum":
            return f"(({a[1]} < {a[0]}) ? {a[1]} : {a[0]})"
        if op == "lerp":  # a + w * (b - a), each rounded
            difference = render(Node("sub"), [a[1], a[0]])
            return render(Node("add"), [a[0], render(Node("mul"), [a[2], difference])])
        raise ValueError(f"c_source: no C for operation {op!r}")

    def assign(name: str, node: Node, expression: str) -> str:
        return f"const {'bool' if is_condition(node) else real} {name} = {expression};"

    lines, results = statements([node for _, node in wanted], leaf, render, assign, prefix)
    for (name, node), result in zip(wanted, results):
        if not (node.op == "var" and node.value == name and inputs.get(name) == outputs[name]):
            lines.append(f"{outputs[name]} = {result};")
    return "\n".join(lines)
