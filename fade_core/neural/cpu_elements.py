"""The per-parameter rules of the compiled CPU kernel (cpu_kernel), as scalar functions.

LLVM inlines them into the row loops of cpu_layers and vectorises those, so every rule
here is branch-free arithmetic in the parameters' own dtype: a float64 constant in a
float32 run would make numba widen the whole rule to float64 (half the vector width,
plus conversions), and torch computes a float32 run's rule in float32 too. The dtype's
constants come in as tuples made at run time (`fade_constants`, `adam_constants`).
(numba's IR-level inline="always" defeated vectorisation: 4x slower.)
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype
from numba.np.unsafe.ndarray import to_fixed_tuple

from fade_core.neural.cpu_arith import fma
from fade_core.neural.rules import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN

# No fast-math flag: every flag lets LLVM change the arithmetic ('reassoc', 'arcp', 'afn',
# 'nsz'; 'contract' where it forms a fused multiply-add), and it may choose differently when
# numba's cache optimises a kernel's callees once more inside it: a process that compiled the
# kernel and one that loaded it disagreed in the last bits (tests/test_neural_compile_or_load.py;
# with 'contract' alone Adam still did). The dot products, which needed 'reassoc' to
# vectorise, are explicit vector code, and the multiply-adds that matter for speed explicit
# FMAs (cpu_arith). IEEE NaN/inf semantics stay, so a diverging run shows as NaN/inf.
FASTMATH: set[str] = set()
# error_model="numpy": a float division by zero gives inf/NaN as in torch instead of raising
# ZeroDivisionError. Python's model puts a test and a branch before every division, and a
# loop with one does not vectorise (Adam's rows, two divisions per weight, ran 4.5x slower).
# No divisor here can be 0 except through a NaN/inf run, so no number changes.
ERRORS = "numpy"

_scalar = numba.njit(fastmath=FASTMATH, error_model=ERRORS, cache=True)


@intrinsic
def _pow2(typingctx, k):
    """2 ** k for an integral float k whose power is a normal number, written as its bits
    (exponent field k + bias): a shift and an add, which LLVM vectorises (ldexp is a libm call)."""
    if not isinstance(k, types.Float):
        return None

    def codegen(context, builder, signature, args):
        bits, mantissa, bias = (32, 23, 127) if k.bitwidth == 32 else (64, 52, 1023)
        integer = ir.IntType(bits)
        field = builder.add(builder.fptosi(args[0], integer), ir.Constant(integer, bias))
        return builder.bitcast(builder.shl(field, ir.Constant(integer, mantissa)), context.get_value_type(k))

    return k(k), codegen


def _exp_constants(dtype: type) -> tuple[float, ...]:
    """`_exp_small`'s constants in float64: log2(e), 1/2, ln 2 split in a high part whose product
    with k is exact and a low part (Cody-Waite), then the Taylor coefficients 1/n! of exp(r)
    for |r| <= ln 2 / 2: degree 7 in float32 (measured: within 1.2 ulp of exp over [-15, 0]),
    12 in float64 (5 ulp, relative 8e-16)."""
    if dtype is np.float32:
        split, degree = (0.693359375, -2.12194440e-4), 7
    else:
        split, degree = (6.93147180369123816490e-01, 1.90821492927058770002e-10), 12
    return (1 / math.log(2), 0.5, *split, *(1 / math.factorial(n) for n in range(degree + 1)))


def _exp_small(x, c):
    """exp(x) for x in FADE's clamp range [-15, 0], in x's dtype, with c the dtype's
    `_exp_constants` (compiled only)."""


@overload(_exp_small, fastmath=FASTMATH)
def _exp_small_for(x, c):
    """exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2, exp(r) by Horner's scheme.
    libm's exp is a scalar call that LLVM cannot vectorise, and it dominated the FADE rows."""
    last = len(_exp_constants(np.float32 if x.bitwidth == 32 else np.float64)) - 1

    def exp_small(x, c):
        k = np.floor(x * c[0] + c[1])
        r = (x - k * c[2]) - k * c[3]
        poly = c[last]
        for n in range(last - 1, 3, -1):  # Horner, one fused multiply-add per coefficient
            poly = fma(r, poly, c[n])
        return _pow2(k) * poly

    return exp_small


def fade_constants(like):
    """FADE's constants in the dtype of array `like`: gamma's lower and upper clamp, 1, 0, then
    exp's (`_exp_constants`). Values made at run time, not literals: LLVM keeps them out of
    the row loops as whole vectors (in registers, or spilled and read as memory operands); as
    literals it re-broadcast each from the constant pool in every iteration."""


@overload(fade_constants)
def _fade_constants_for(like):
    values = np.array((GAMMA_MIN, GAMMA_MAX, 1.0, 0.0, *_exp_constants(as_dtype(like.dtype).type)))
    count = len(values)

    def constants(like):
        out = np.empty(count, dtype=like.dtype)
        for k in range(count):
            out[k] = values[k]
        return to_fixed_tuple(out, count)

    return constants


@_scalar
def fade_decay(gamma, trace, grad, theta, fc):
    """FADE's meta-update of one parameter's log decay rate -> (gamma, decay = exp(gamma)):
    the first half of `fade`, the long dependency chain (clamp, exp)."""
    gamma = min(max(gamma - theta * grad * trace, fc[0]), fc[1])
    return gamma, _exp_small(gamma, fc[4:])


@_scalar
def fade_apply(decay, trace, w, q, alpha_eff, fc):
    """The second half of `fade` -> (trace, decayed w)."""
    one, zero = fc[2], fc[3]
    return fma(trace, max(fma(-alpha_eff, q, one - decay), zero), -(decay * w)), w * (one - decay)


@_scalar
def fade(gamma, trace, w, grad, q, alpha_eff, theta, fc):
    """FADE on one parameter before its base step -> (gamma, trace, decayed w); fc from
    `fade_constants`."""
    gamma, decay = fade_decay(gamma, trace, grad, theta, fc)
    return (gamma, *fade_apply(decay, trace, w, q, alpha_eff, fc))


@_scalar
def adam_constants(alpha, k, out):
    """Adam's per-step scalars for step k (1-based), computed in float64 as torch.optim.Adam does
    on the host, into `out` (the parameters' dtype, so the element loops stay in that precision):
    alpha / (1 - beta1^k), sqrt(1 - beta2^k), 1 / (1 - beta2^(k-1)) (for FADE's v_hat before the
    update), 1 - beta1, beta2, 1 - beta2, eps."""
    out[0] = alpha / (1.0 - BETA1**k)
    out[1] = math.sqrt(1.0 - BETA2**k)
    out[2] = 1.0 / (1.0 - BETA2 ** (k - 1)) if k > 1 else 0.0
    out[3], out[4], out[5], out[6] = 1.0 - BETA1, BETA2, 1.0 - BETA2, EPS
    return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])


@_scalar
def null_adam(out):
    """Constants for which `adam` with gradient 0 leaves m, v and the parameter exactly as they
    are (1 - beta1 = 0, beta2 = 1, 1 - beta2 = 0, step 0), in `out`'s dtype."""
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0
    return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])


@_scalar
def adam_alpha_eff(v, alpha, first_step, ac):
    """alpha / (sqrt(v_hat) + eps) with v_hat before this step's update; alpha on the first step."""
    return alpha if first_step else alpha / (np.sqrt(v * ac[2]) + ac[6])


# Adam's element rule as torch.optim.Adam writes it: sqrt(v) / sqrt(bias correction 2) is a
# division, not a product with a reciprocal.
@_scalar
def adam(m, v, w, grad, ac):
    """torch.optim.Adam on one parameter -> (m, v, w); ac from `adam_constants`."""
    m = m + ac[3] * (grad - m)  # torch's lerp_
    v = ac[4] * v + ac[5] * grad * grad
    return m, v, w - ac[0] * m / (np.sqrt(v) / ac[1] + ac[6])  # torch's addcdiv_(m, sqrt(v)/sqrt(bc2) + eps)
