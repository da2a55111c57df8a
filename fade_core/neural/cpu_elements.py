"""The per-parameter rules of the compiled CPU kernel (cpu_kernel): `parts`' rules printed as
numba scalar functions, which cpu_layers' row loops call.

Each element rule of `fade_core/neural/parts.py` is traced once (fade_core/expression.py)
and printed as Python for numba, one assignment per operation in the rule's order: `fma` as
cpu_arith's (an FMA by construction; a negated first factor moved to the second,
`negation_on_second_factor`), `exp` as cpu_exp's vectorisable polynomial,
maximum/minimum as Python's max/min with the value first (a NaN value stays NaN), and every
literal read from a tuple of constants in the parameters' dtype (`fade_constants`), never
written as a literal: a float64 literal in a float32 run would make numba widen the whole
rule to float64 (half the vector width, plus conversions), and as literals LLVM
re-broadcast each from the constant pool in every iteration; made at run time, they stay
out of the row loops as whole vectors. LLVM inlines the functions into the row loops and
vectorises those. (numba's IR-level inline="always" defeated vectorisation: 4x slower.)

The printed source is compiled under this file's name, each function's name carrying a
digest of its text, so numba caches it like a written function and a changed rule is a
new cache entry.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable, Mapping, Sequence

import numba
import numpy as np
from numba.extending import overload
from numba.np.numpy_support import as_dtype
from numba.np.unsafe.ndarray import to_fixed_tuple

from fade_core.expression import INFIX, Node, constants, ssa, statements, trace
from fade_core.neural import parts
from fade_core.neural.cpu_arith import fma
from fade_core.neural.cpu_exp import ERRORS, FASTMATH, exp_constants, exp_small
from fade_core.rulebind import bind, parameters, where

_scalar = numba.njit(fastmath=FASTMATH, error_model=ERRORS, cache=True)

# What the kernel's rows call: name -> (rule, the printed function's arguments, the rule's
# inputs read from them). "fc" is the constants tuple, "ac" Adam's coefficients (`adam_constants`).
_AC = {"step": "ac[0]", "sqrt_bc2": "ac[1]", "inv_bc2": "ac[2]", "m_weight": "ac[3]", "beta2": "ac[4]",
       "v_weight": "ac[5]", "eps": "ac[6]"}
_PRINTED: dict[str, tuple[Callable, tuple[str, ...], Mapping[str, str]]] = {
    "fade_decay": (parts.fade_decay, ("gamma", "trace", "grad", "theta_lambda", "fc"), {}),
    "fade_apply": (parts.fade_apply, ("decay", "trace", "w", "q", "alpha_eff", "fc"), {}),
    "adam": (parts.adam, ("m", "v", "w", "grad", "ac"), _AC),
    "adam_alpha_eff": (parts.adam_alpha_eff, ("v", "alpha", "first_step", "ac"), _AC),
    "coupled_decay": (parts.coupled_decay, ("grad", "w", "lam"), {}),
    "decoupled_decay": (parts.decoupled_decay, ("w", "factor"), {}),
    "shrink": (parts.shrink, ("alpha", "lam", "fc"), {}),
    "sgd": (parts.sgd, ("w", "grad", "alpha"), {}),
    "clip": (parts.clip, ("w", "bound"), {}),
}
_GRAPHS = {name: trace(rule, parameters(rule)) for name, (rule, _, _) in _PRINTED.items()}
# Every printed rule's constants, in one tuple (then exp's): the rows pass one `fc`.
CONSTANTS: tuple[float, ...] = tuple(dict.fromkeys(v for g in _GRAPHS.values() for v in constants(g)))
_EXP_AT = len(CONSTANTS)


def negation_on_second_factor(outputs: Sequence[Node]) -> tuple[Node, ...]:
    """The graph with each fma(-x, y, z) as fma(x, -y, z): the same product exactly (a negation
    is exact), so the same bits. LLVM hoists a negated loop invariant out of a row loop into a
    register of its own, where a negation computed in the loop is folded into the FMA
    (vfnmadd): FADE's fma(-alpha, q, 1 - decay) beside SGD's alpha * grad held both alpha and
    -alpha, one vector register more in the FADE-SGD rows, whose per-row code then spilled."""
    done: dict[int, Node] = {}
    for node in ssa(outputs):
        args = tuple(done.get(id(arg), arg) for arg in node.args)
        if node.op == "fma" and args[0].op == "neg":
            done[id(node)] = Node("fma", (args[0].args[0], Node("neg", (args[1],)), args[2]))
        elif any(new is not arg for new, arg in zip(args, node.args)):
            done[id(node)] = Node(node.op, args, node.value)
    return tuple(done.get(id(out), out) for out in outputs)


def numba_source(name: str, outputs: Sequence[Node], arguments: Sequence[str], inputs: Mapping[str, str],
                 constant: Callable[[float], str] | None = None, stores: Sequence[str] = ()) -> str:
    """The graph `outputs` as a Python function `name(*arguments)` for numba: an input reads
    `inputs.get(its name, its name)`, a constant `constant(value)` (default `fc[k]`, its place in
    CONSTANTS); the first len(`stores`) outputs are returned, each later one assigned to its
    lvalue in `stores` (an own base step writes its state in place: cpu_own)."""

    def leaf(node: Node) -> str:
        if node.op == "const":
            return constant(node.value) if constant else f"fc[{CONSTANTS.index(node.value)}]"
        return inputs.get(node.value, node.value)

    def render(node: Node, a: list[str]) -> str:
        op = node.op
        if op in INFIX:
            return f"{a[0]} {INFIX[op]} {a[1]}"
        calls = {"neg": "-{0}", "sqrt": "np.sqrt({0})", "exp": f"exp_small({{0}}, fc[{_EXP_AT}:])", "fma": "fma({0}, {1}, {2})",
                 "div_approx": "{0} / {1}", "where": "{1} if {0} else {2}", "maximum": "max({0}, {1})",
                 "minimum": "min({0}, {1})"}
        if op == "lerp":  # a + w * (b - a), each rounded (torch's lerp_ for |w| < 0.5)
            return f"{a[0]} + {a[2]} * ({a[1]} - {a[0]})"
        return calls[op].format(*a)

    lines, results = statements(negation_on_second_factor(outputs), leaf, render,
                                lambda t, node, expression: f"    {t} = {expression}")
    kept = len(results) - len(stores)
    lines += [f"    {lvalue} = {result}" for lvalue, result in zip(stores, results[kept:])]
    return "\n".join([f"def {name}({', '.join(arguments)}):", *lines, f"    return {', '.join(results[:kept])}", ""])


def printed_function(name: str, text: str, doc: str | None) -> Callable:
    """The function `name` of printed source `text`, compiled (cached by numba under a digest of the text)."""
    scope = {"__name__": __name__, "np": np, "fma": fma, "exp_small": exp_small}
    exec(compile(text, __file__, "exec"), scope)  # the printed rule, under this file's name (numba's cache)
    function = scope[name]
    function.__qualname__ = f"{name}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    function.__doc__ = doc
    return _scalar(function)


def _compile() -> dict[str, Callable]:
    """Every rule of _PRINTED printed and compiled."""
    return {name: printed_function(name, numba_source(name, _GRAPHS[name], arguments, inputs), rule.__doc__)
            for name, (rule, arguments, inputs) in _PRINTED.items()}


_RULES = _compile()
fade_decay, fade_apply, adam, adam_alpha_eff = (_RULES[n] for n in ("fade_decay", "fade_apply", "adam", "adam_alpha_eff"))
coupled_decay, decoupled_decay, shrink, sgd, clip_to = (_RULES[n] for n in ("coupled_decay", "decoupled_decay", "shrink",
                                                                             "sgd", "clip"))


def fade_constants(like):
    """The printed rules' constants (CONSTANTS, then exp's) in the dtype of array `like`.
    Values made at run time, not literals: LLVM keeps them out of the row loops as whole
    vectors (in registers, or spilled and read as memory operands); as literals it
    re-broadcast each from the constant pool in every iteration."""


@overload(fade_constants)
def _fade_constants_for(like):
    values = np.array((*CONSTANTS, *exp_constants(as_dtype(like.dtype).type)))
    count = len(values)

    def made(like):
        out = np.empty(count, dtype=like.dtype)
        for k in range(count):
            out[k] = values[k]
        return to_fixed_tuple(out, count)

    return made


@_scalar
def fade(gamma, trace, w, grad, q, alpha_eff, theta, fc):
    """FADE on one parameter before its base step -> (gamma, trace, decayed w)."""
    gamma, decay = fade_decay(gamma, trace, grad, theta, fc)
    return (gamma, *fade_apply(decay, trace, w, q, alpha_eff, fc))


clip_bound = _scalar(bind(parts.clip_bound, {"sqrt": math.sqrt}))
_adam_scalars = _scalar(bind(parts.adam_scalars, {"sqrt": math.sqrt, "where": _scalar(where)}))


@_scalar
def adam_constants(alpha, k, out):
    """`parts.adam_scalars` for step k (1-based), computed in float64 as torch.optim.Adam does
    on the host, into `out` (the parameters' dtype, so the element loops stay in that
    precision) -> the tuple `adam` and `adam_alpha_eff` read as `ac`."""
    s = _adam_scalars(alpha, k)
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = s[0], s[1], s[2], s[3], s[4], s[5], s[6]
    return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])


@_scalar
def null_adam(out):
    """Constants for which `adam` with gradient 0 leaves m, v and the parameter exactly as they
    are (1 - beta1 = 0, beta2 = 1, 1 - beta2 = 0, step 0), in `out`'s dtype."""
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0
    return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])
