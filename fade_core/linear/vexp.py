"""exp(x) in float32 and float64 that LLVM can vectorise (numba; no libm call).

pip's llvmlite has no vector math library, so `math.exp` stays one scalar libm call
per component and blocks SIMD over runs. This is the classic construction instead:
x = k ln2 + r with k = round(x / ln2) and |r| <= ln2 / 2, exp(r) by its Taylor
polynomial (Horner, fused multiply-adds), and 2^k built directly in the exponent
bits. 2^k is applied as two factors 2^(k//2) 2^(k - k//2), so results that overflow
become inf and results in the subnormal range round once, as for libm. Inputs are
clamped just beyond the finite range first (exp(+big) = inf, exp(-big) = 0); NaN
propagates. Accuracy is measured in tests/test_linear_learners.py.

Compiled without 'reassoc': the rounding trick (t + M) - M and the two-part ln2 only
work in the written order. Numba compiles these as separate functions that LLVM
inlines into the kernels, keeping their own fast-math flags.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic


@intrinsic
def _bits(typingctx, value):
    """The IEEE bits of a float as the signed integer of its width."""
    integer = types.int32 if value.bitwidth == 32 else types.int64

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(integer))

    return integer(value), codegen


@intrinsic
def _float_from_bits(typingctx, bits, like):
    """The float of `like`'s type whose IEEE bits are the low bits of the integer `bits`."""
    width = like.bitwidth

    def codegen(context, builder, signature, args):
        low = args[0]
        if width < bits.bitwidth:  # numba widens integer arithmetic to int64
            low = builder.trunc(low, context.get_value_type(types.int32))
        return builder.bitcast(low, context.get_value_type(like))

    return like(bits, like), codegen


class _Format(NamedTuple):
    float: type  # np.float32 or np.float64
    mantissa_bits: int
    bias: int  # exponent bias
    degree: int  # of the Taylor polynomial of exp(r), |r| <= ln2 / 2: its remainder is below 0.1 ulp
    ln2_hi: float  # ln2 = ln2_hi + ln2_lo, ln2_hi with few significant bits so that k * ln2_hi is exact
    ln2_lo: float  # (the Cephes / fdlibm splits)
    lowest: float  # exp(x) rounds to 0 below this
    highest: float  # and overflows above this


_FORMATS = {
    np.dtype(np.float32): _Format(np.float32, 23, 127, 7, 0.693359375, -2.12194440e-4, -104.0, 89.0),
    np.dtype(np.float64): _Format(np.float64, 52, 1023, 13, 6.93147180369123816490e-01, 1.90821492927058770002e-10,
                                  -746.0, 710.0),
}


def _make_exp(fmt: _Format) -> Callable:
    f = fmt.float
    log2e, ln2_hi, ln2_lo = f(1 / math.log(2)), f(fmt.ln2_hi), f(fmt.ln2_lo)
    lowest, highest = f(fmt.lowest), f(fmt.highest)
    # t + shifter rounds t to an integer k (ties to even) held in the low mantissa bits: 1.5 * 2^mantissa_bits.
    shifter = f(1.5 * 2.0**fmt.mantissa_bits)
    shifter_bits = int(np.array(shifter).view(np.int32 if f is np.float32 else np.int64))
    coefficients = tuple(f(1 / math.factorial(n)) for n in range(fmt.degree, -1, -1))
    mantissa_bits, bias = fmt.mantissa_bits, fmt.bias

    def exp(x):
        xc = min(max(x, lowest), highest)  # NaN stays NaN, and so does every result below
        shifted = xc * log2e + shifter
        k_float = shifted - shifter
        r = (xc - k_float * ln2_hi) - k_float * ln2_lo
        p = coefficients[0]
        for c in coefficients[1:]:
            p = p * r + c
        k = _bits(shifted) - shifter_bits
        half = k >> 1
        scale_1 = _float_from_bits((half + bias) << mantissa_bits, x)
        scale_2 = _float_from_bits((k - half + bias) << mantissa_bits, x)
        return p * scale_1 * scale_2

    return numba.njit(fastmath={"contract"}, cache=True)(exp)


def exp_for(dtype: np.dtype | type) -> Callable:
    """The compiled exp of float32 or float64 arguments."""
    return _EXPS[np.dtype(dtype)]


_EXPS = {dtype: _make_exp(fmt) for dtype, fmt in _FORMATS.items()}
