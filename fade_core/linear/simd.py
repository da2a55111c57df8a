"""A linear rule as explicit SIMD code: the plain-Python rule traced into LLVM vector IR.

The kernel keeps a block's runs in lanes (`kernel._run_blocks`). Left to LLVM's loop
vectoriser, a rule inlined in a loop over the lanes compiled to about twice the vector
instructions it needs (spills of the lane buffer's rows, runtime checks). Here the rule
is run once, in Python, on `Traced` values: each arithmetic operation, `max`/`min`,
`clamp` and `exp` (vexp's own algorithm, traced the same way) appends one vector
instruction to the IR being built. `intrinsics.advance_intrinsic` wraps that as a numba
intrinsic that applies the rule to every component of a block.

Semantics, lane by lane: IEEE arithmetic in the written order (nothing reassociated), a
product added or subtracted right away fused into one multiply-add by the tracer itself
(so the rounding is fixed by the rule's source, whatever LLVM would choose), `max(a, b)`
as numba compiles it (b if b > a else a, so a NaN `a` stays NaN), numeric literals in the
state's dtype. A lane's result never depends on the other lanes.
"""

from __future__ import annotations

import types
from typing import Callable

import numba
import numpy as np
from llvmlite import ir
from numba.core import types as nbtypes
from numba.extending import intrinsic

from fade_core.linear import vexp
from fade_core.linear.rules import clamp

# Plain IEEE operations: no fast-math flag (no reassociation, NaN/inf kept), and no
# 'contract' either, so LLVM fuses nothing on its own: which multiply-adds fuse is the
# tracer's choice (`Traced._binary`), fixed by the rule's source, not by the compiler.


def splat(builder: ir.IRBuilder, scalar: ir.Value, vector: ir.VectorType) -> ir.Value:
    """A vector of type `vector` with `scalar` in every lane."""
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [ir.Constant(ir.IntType(32), 0)] * vector.count)
    return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined), zeros)


class Tracer:
    """Emits vector instructions of one element type into `builder`."""

    def __init__(self, builder: ir.IRBuilder, dtype: np.dtype, lanes: int):
        self.builder, self.lanes = builder, lanes
        self.dtype = np.dtype(dtype)
        self.real = ir.FloatType() if self.dtype == np.float32 else ir.DoubleType()
        self.integer = ir.IntType(8 * self.dtype.itemsize)
        self.real_vector = ir.VectorType(self.real, lanes)
        self.int_vector = ir.VectorType(self.integer, lanes)

    def constant(self, value, is_int: bool) -> ir.Constant:
        if is_int:
            return ir.Constant(self.int_vector, [ir.Constant(self.integer, int(value))] * self.lanes)
        return ir.Constant(self.real_vector, [ir.Constant(self.real, float(self.dtype.type(value)))] * self.lanes)

    def splat(self, scalar: ir.Value) -> "Traced":
        """A vector with `scalar` in every lane."""
        return Traced(self, splat(self.builder, scalar, self.real_vector), False)

    def value(self, operand, is_int: bool) -> ir.Value:
        if isinstance(operand, Traced):
            if operand.is_int != is_int:
                raise TypeError("a traced rule mixes integer and float vectors")
            return operand.value
        return self.constant(operand, is_int)


class Traced:
    """One vector value of the rule being traced. Arithmetic with another Traced or a
    number emits an instruction; numbers become constants of the element type."""

    __slots__ = ("tracer", "value", "is_int", "factors")
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    def __init__(self, tracer: Tracer, value: ir.Value, is_int: bool, factors: tuple | None = None):
        self.tracer, self.value, self.is_int = tracer, value, is_int
        self.factors = factors  # (a, b) when this is the float product a * b: a sum may fuse it

    def _binary(self, other, float_op: str, int_op: str | None, reflected: bool = False) -> "Traced":
        """One instruction. A float sum or difference with a product fuses it into one
        multiply-add, rounded once: the right operand's if it is a product, else the left's
        (`a * b + c * d` is fma(c, d, a * b))."""
        t, b = self.tracer, self.tracer.builder
        left, right = (other, self) if reflected else (self, other)
        lhs, rhs = t.value(left, self.is_int), t.value(right, self.is_int)
        if self.is_int:
            if int_op is None:
                raise TypeError(f"{float_op} of integer vectors is not traced")
            return Traced(t, getattr(b, int_op)(lhs, rhs), True)
        if float_op == "fmul":
            return Traced(t, b.fmul(lhs, rhs), False, (lhs, rhs))
        if float_op in ("fadd", "fsub"):
            fused = _fused(b, left, right, float_op == "fsub")
            if fused is not None:
                return Traced(t, fused, False)
        return Traced(t, getattr(b, float_op)(lhs, rhs), False)

    def __add__(self, other):
        return self._binary(other, "fadd", "add")

    def __radd__(self, other):
        return self._binary(other, "fadd", "add", reflected=True)

    def __sub__(self, other):
        return self._binary(other, "fsub", "sub")

    def __rsub__(self, other):
        return self._binary(other, "fsub", "sub", reflected=True)

    def __mul__(self, other):
        return self._binary(other, "fmul", "mul")

    def __rmul__(self, other):
        return self._binary(other, "fmul", "mul", reflected=True)

    def __truediv__(self, other):
        return self._binary(other, "fdiv", None)

    def __rtruediv__(self, other):
        return self._binary(other, "fdiv", None, reflected=True)

    def __rshift__(self, other):
        return self._binary(other, "", "ashr")

    def __lshift__(self, other):
        return self._binary(other, "", "shl")


def fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a * b + c rounded once (llvm.fma of a float or double vector)."""
    vector = a.type
    element = "f32" if vector.element == ir.FloatType() else "f64"
    name = f"llvm.fma.v{vector.count}{element}"
    function = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
    return builder.call(function, [a, b, c])


def _fused(builder: ir.IRBuilder, left, right, subtract: bool) -> ir.Value | None:
    """left +/- right as one multiply-add when right (else left) is a traced product; None when
    neither is."""
    t = (left if isinstance(left, Traced) else right).tracer
    if isinstance(right, Traced) and right.factors is not None:
        a, b = right.factors
        return fma(builder, builder.fneg(a) if subtract else a, b, t.value(left, False))
    if isinstance(left, Traced) and left.factors is not None:
        c = t.value(right, False)
        return fma(builder, *left.factors, builder.fneg(c) if subtract else c)
    return None


def _select_if(op: str) -> Callable:
    """numba's max (op '>') / min ('<') of two floats: b if b op a else a (ordered compare)."""

    def pick(a, b):
        if not isinstance(a, Traced) and not isinstance(b, Traced):
            return max(a, b) if op == ">" else min(a, b)
        t = a.tracer if isinstance(a, Traced) else b.tracer
        av, bv = t.value(a, False), t.value(b, False)
        return Traced(t, t.builder.select(t.builder.fcmp_ordered(op, bv, av), bv, av), False)

    return pick


_max, _min = _select_if(">"), _select_if("<")


def _bits(value: Traced) -> Traced:
    t = value.tracer
    return Traced(t, t.builder.bitcast(value.value, t.int_vector), True)


def _float_from_bits(bits: Traced, like: Traced) -> Traced:
    t = bits.tracer
    return Traced(t, t.builder.bitcast(bits.value, t.real_vector), False)


def _retraced(function: Callable, **names) -> Callable:
    """`function` with its global `names` rebound (and max / min traced)."""
    scope = {**function.__globals__, "max": _max, "min": _min, **names}
    return types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__, function.__closure__)


def traced_rule(rule: Callable, dtype: np.dtype) -> Callable:
    """`rule` running on Traced values, with vexp's exp and clamp traced too."""
    exp = _retraced(vexp.exp_for(dtype), _bits=_bits, _float_from_bits=_float_from_bits)
    return _retraced(rule, exp=exp, clamp=_retraced(clamp))


def elementwise(function: Callable, dtype: np.dtype, lanes: int) -> Callable:
    """`function` (one argument, traced like a rule's `exp`) applied to a 1-D array whose
    length is a multiple of `lanes`: `apply(values, out)`, compiled. For tests of the
    traced code itself."""
    dtype = np.dtype(dtype)
    vectorised = _retraced(function, _bits=_bits, _float_from_bits=_float_from_bits)

    @intrinsic
    def chunk(typingctx, values, out, start):
        def codegen(context, builder, signature, args):
            tracer = Tracer(builder, dtype, lanes)
            pointers = [builder.bitcast(builder.gep(context.make_array(signature.args[k])(context, builder, args[k]).data,
                                                    [args[2]]), tracer.real_vector.as_pointer()) for k in (0, 1)]
            result = vectorised(Traced(tracer, builder.load(pointers[0], align=dtype.itemsize), False))
            builder.store(result.value, pointers[1], align=dtype.itemsize)
            return context.get_dummy_value()

        return nbtypes.void(values, out, start), codegen

    @numba.njit
    def apply(values, out):
        for start in range(0, values.shape[0], lanes):
            chunk(values, out, start)

    return apply
