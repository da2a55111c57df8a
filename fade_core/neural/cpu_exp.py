"""exp over FADE's clamp range as vectorisable numba code (the CPU kernel's binding of a
rule's `exp`, cpu_elements), and the kernel's compile flags.

libm's exp is a scalar call that LLVM cannot vectorise, and it dominated the FADE rows: here
it is a polynomial in the parameters' own dtype, its constants passed in at run time.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from fade_core.neural.cpu_arith import fma

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


def exp_constants(dtype: type) -> tuple[float, ...]:
    """`exp_small`'s constants in float64: log2(e), 1/2, ln 2 split in a high part whose product
    with k is exact and a low part (Cody-Waite), then the Taylor coefficients 1/n! of exp(r)
    for |r| <= ln 2 / 2: degree 7 in float32 (measured: within 1.2 ulp of exp over [-15, 0]),
    12 in float64 (5 ulp, relative 8e-16)."""
    if dtype is np.float32:
        split, degree = (0.693359375, -2.12194440e-4), 7
    else:
        split, degree = (6.93147180369123816490e-01, 1.90821492927058770002e-10), 12
    return (1 / math.log(2), 0.5, *split, *(1 / math.factorial(n) for n in range(degree + 1)))


def exp_small(x, c):
    """exp(x) for x in FADE's clamp range [-15, 0], in x's dtype, with c the dtype's
    `exp_constants` (compiled only)."""


@overload(exp_small, fastmath=FASTMATH)
def _exp_small_for(x, c):
    """exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2, exp(r) by Horner's scheme.
    libm's exp is a scalar call that LLVM cannot vectorise, and it dominated the FADE rows."""
    last = len(exp_constants(np.float32 if x.bitwidth == 32 else np.float64)) - 1

    def compiled(x, c):
        k = np.floor(x * c[0] + c[1])
        r = (x - k * c[2]) - k * c[3]
        poly = c[last]
        for n in range(last - 1, 3, -1):  # Horner, one fused multiply-add per coefficient
            poly = fma(r, poly, c[n])
        return _pow2(k) * poly

    return compiled
