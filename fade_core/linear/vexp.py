"""exp(x) in float32 and float64 as vector code can compute it (no libm call).

pip's llvmlite has no vector math library, so `math.exp` stays one scalar libm call
per component and blocks SIMD over runs. This is the classic construction instead:
x = k ln2 + r with k = round(x / ln2) and |r| <= ln2 / 2, exp(r) by its Taylor
polynomial (Estrin's scheme), and 2^k built directly in the exponent bits. 2^k is applied as two
factors 2^(k//2) 2^(k - k//2), so results that overflow become inf and results in the
subnormal range round once, as for libm. Inputs are clamped just beyond the finite range
first (exp(+big) = inf, exp(-big) = 0); NaN propagates.

Written as plain Python on numpy scalars; `simd` traces it, like the rules, into the
kernels' vector instructions (a product added right away fuses into a multiply-add;
nothing is reassociated: the rounding trick (t + M) - M and the two-part ln2 only work
in the written order).
Accuracy of the traced code is measured in tests/test_linear_learners.py.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np


def _bits(value):
    """The IEEE bits of a float as the signed integer of its width (`simd` traces this as a bitcast)."""
    return np.asarray(value).view(np.int32 if np.asarray(value).dtype == np.float32 else np.int64)[()]


def _float_from_bits(bits, like):
    """The float of `like`'s type whose IEEE bits are the low bits of the integer `bits`."""
    kind = np.asarray(like).dtype
    return np.asarray(bits).astype(np.int32 if kind == np.float32 else np.int64).view(kind)[()]


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


def _polynomial(coefficients: tuple, r):
    """sum_n c_n r^n: the terms from r^2 on by Estrin's scheme (pairs c_2j + c_2j+1 r, then
    pairs of those with r^2, r^4, ...), then c0 + r (c1 + r q) fused, as Horner ends, so
    the result rounds like Horner's. Estrin is about log2(degree) multiply-adds deep
    instead of degree: the out-of-order core overlaps more of the kernels' chains."""
    terms = list(coefficients[2:])
    terms = [c0 + c1 * r for c0, c1 in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2:]
    power = r * r
    while len(terms) > 1:
        terms = [low + high * power for low, high in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2:]
        power = power * power
    return coefficients[0] + r * (coefficients[1] + r * terms[0])


def _make_exp(fmt: _Format) -> Callable:
    f = fmt.float
    log2e, ln2_hi, ln2_lo = f(1 / math.log(2)), f(fmt.ln2_hi), f(fmt.ln2_lo)
    lowest, highest = f(fmt.lowest), f(fmt.highest)
    # t + shifter rounds t to an integer k (ties to even) held in the low mantissa bits: 1.5 * 2^mantissa_bits.
    shifter = f(1.5 * 2.0**fmt.mantissa_bits)
    shifter_bits = int(np.array(shifter).view(np.int32 if f is np.float32 else np.int64))
    coefficients = tuple(f(1 / math.factorial(n)) for n in range(fmt.degree + 1))  # c0, c1, ...
    mantissa_bits, bias = fmt.mantissa_bits, fmt.bias

    def exp(x):
        xc = min(max(x, lowest), highest)  # NaN stays NaN, and so does every result below
        shifted = xc * log2e + shifter
        k_float = shifted - shifter
        r = (xc - k_float * ln2_hi) - k_float * ln2_lo
        p = _polynomial(coefficients, r)
        k = _bits(shifted) - shifter_bits
        half = k >> 1
        scale_1 = _float_from_bits((half + bias) << mantissa_bits, x)
        scale_2 = _float_from_bits((k - half + bias) << mantissa_bits, x)
        return p * scale_1 * scale_2

    return exp


def exp_for(dtype: np.dtype | type) -> Callable:
    """exp of float32 or float64 arguments, as plain Python on numpy scalars (slow: `simd`
    traces it into the kernels' vector code)."""
    return _EXPS[np.dtype(dtype)]


_EXPS = {dtype: _make_exp(fmt) for dtype, fmt in _FORMATS.items()}
