"""A linear rule as explicit SIMD code: the plain-Python rule traced into LLVM vector IR.

The kernel keeps a block's runs in lanes (`kernel._run_blocks`). Left to LLVM's loop
vectoriser, a rule inlined in a loop over the lanes compiled to about twice the vector
instructions it needs (spills of the lane buffer's rows, runtime checks). Here the rule
is run once, in Python, on `Traced` values: each arithmetic operation, `max`/`min`,
`clamp` and `exp` (vexp's own algorithm, traced the same way) appends one vector
instruction to the IR being built. `step_intrinsic` wraps that as a numba intrinsic that
loads component i's rows of the lane buffer as vectors, applies the rule and stores the
rows it changed.

Semantics are those of the compiled scalar rule, lane by lane: IEEE arithmetic with
'contract' only (a multiply-add may fuse; nothing is reassociated), `max(a, b)` as numba
compiles it (b if b > a else a, so a NaN `a` stays NaN), numeric literals in the state's
dtype. A lane's result never depends on the other lanes.
"""

from __future__ import annotations

import types
from typing import Callable, Sequence

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.core import types as nbtypes
from numba.extending import intrinsic

from fade_core.linear import vexp
from fade_core.linear.rules import STATE_ARGS, clamp

_FLAGS = ("contract",)  # fused multiply-add allowed; no reassociation, NaN/inf kept


class _Tracer:
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
        b = self.builder
        one = b.insert_element(ir.Constant(self.real_vector, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), self.lanes), [ir.Constant(ir.IntType(32), 0)] * self.lanes)
        return Traced(self, b.shuffle_vector(one, ir.Constant(self.real_vector, ir.Undefined), zeros), False)

    def value(self, operand, is_int: bool) -> ir.Value:
        if isinstance(operand, Traced):
            if operand.is_int != is_int:
                raise TypeError("a traced rule mixes integer and float vectors")
            return operand.value
        return self.constant(operand, is_int)


class Traced:
    """One vector value of the rule being traced. Arithmetic with another Traced or a
    number emits an instruction; numbers become constants of the element type."""

    __slots__ = ("tracer", "value", "is_int")
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    def __init__(self, tracer: _Tracer, value: ir.Value, is_int: bool):
        self.tracer, self.value, self.is_int = tracer, value, is_int

    def _binary(self, other, float_op: str, int_op: str | None, reflected: bool = False) -> "Traced":
        t, b = self.tracer, self.tracer.builder
        lhs, rhs = self.value, t.value(other, self.is_int)
        if reflected:
            lhs, rhs = rhs, lhs
        if self.is_int:
            if int_op is None:
                raise TypeError(f"{float_op} of integer vectors is not traced")
            return Traced(t, getattr(b, int_op)(lhs, rhs), True)
        return Traced(t, getattr(b, float_op)(lhs, rhs, flags=_FLAGS), False)

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


def _lane_rows(context, builder: ir.IRBuilder, array_type, array: ir.Value) -> tuple[Callable, ir.Value]:
    """For a lane buffer (d, rows, columns): `row(k, vector, component=None)`, a pointer of type
    `vector`* to row k of component 0 or of the component starting `component` bytes in, and the
    bytes from one component to the next."""
    buffer = context.make_array(array_type)(context, builder, array)
    data = builder.bitcast(buffer.data, ir.IntType(8).as_pointer())
    row_bytes = builder.extract_value(buffer.strides, 1)

    def row(k: int, vector: ir.VectorType, component: ir.Value | None = None) -> ir.Value:
        position = builder.mul(ir.Constant(ir.IntType(64), k), row_bytes)
        position = position if component is None else builder.add(component, position)
        return builder.bitcast(builder.gep(data, [position]), vector.as_pointer())

    return row, builder.extract_value(buffer.strides, 0)


def step_intrinsic(rule: Callable, dtype: np.dtype, lanes: int, slots: Sequence[int], x_row: int,
                   delta_row: int, hp_row: int) -> Callable:
    """A numba intrinsic `step(A, i, lo, hi)`: component i of a block, every lane at once.

    A is the block's lane buffer (d, rows, columns) of `dtype` (lanes contiguous), lane l of row
    k of component i at A[i, k, l]; `slots` are the rows of (w, beta, h, gamma, g), then x,
    the hyperparameters from hp_row on, and the error delta (row delta_row of component 0
    only). Rows the rule returns unchanged are not stored."""
    dtype = np.dtype(dtype)
    n_hp = len(rule.__code__.co_varnames[: rule.__code__.co_argcount]) - len(STATE_ARGS)
    vectorised = traced_rule(rule, dtype)

    @intrinsic
    def step(typingctx, A, i, lo, hi):
        def codegen(context, builder, signature, args):
            array, index, lo_value, hi_value = args
            tracer = _Tracer(builder, dtype, lanes)
            row_of, component_bytes = _lane_rows(context, builder, signature.args[0], array)
            base = builder.mul(context.cast(builder, index, signature.args[1], nbtypes.int64), component_bytes)

            def row(k: int) -> ir.Value:
                return row_of(k, tracer.real_vector, base)

            def load(pointer: ir.Value) -> Traced:
                return Traced(tracer, builder.load(pointer, align=dtype.itemsize), False)

            delta = row_of(delta_row, tracer.real_vector)  # the error is one per lane: component 0's row
            inputs = [load(row(x_row)), load(delta), *(load(row(k)) for k in slots)]
            real = numba.from_dtype(dtype)
            lo_v = tracer.splat(context.cast(builder, lo_value, signature.args[2], real))
            hi_v = tracer.splat(context.cast(builder, hi_value, signature.args[3], real))
            hps = [load(row(hp_row + j)) for j in range(n_hp)]
            outputs = vectorised(*inputs, lo_v, hi_v, *hps)
            for k, before, after in zip(slots, inputs[2:], outputs):
                if after is not before:
                    builder.store(tracer.value(after, False), row(k), align=dtype.itemsize)
            return context.get_dummy_value()

        return nbtypes.void(A, i, lo, hi), codegen

    return step


def error_intrinsic(lanes: int, w_row: int, x_row: int, y_row: int, delta_row: int, error_row: int,
                    sum_row: int) -> Callable:
    """A numba intrinsic `error(A64, A, d)`: every lane's prediction p = sum_i w_i x_i and
    error y - p in float64; the error into A64[0, error_row], its square added to
    A64[0, sum_row], and the error in the state's dtype into A[0, delta_row] for the rule.

    A is the lane buffer in the state's dtype (rows w, x of every component, y of component
    0), A64 the same buffer as float64. Products are exact in float64 for float32 factors;
    the sum runs over components 0..d-1 in order in one vector accumulator (multiply-adds
    fuse), so a lane's bits never depend on the others. Written by hand because LLVM
    vectorised a loop over lanes across the components instead, with a gather per lane."""

    @intrinsic
    def error(typingctx, A64, A, d):
        def codegen(context, builder, signature, args):
            wide = ir.VectorType(ir.DoubleType(), lanes)
            element = context.get_value_type(signature.args[1].dtype)
            narrow = ir.VectorType(element, lanes)
            row64, _ = _lane_rows(context, builder, signature.args[0], args[0])
            row, component_bytes = _lane_rows(context, builder, signature.args[1], args[1])

            def widened(pointer: ir.Value) -> ir.Value:
                vector = builder.load(pointer, align=4)
                return vector if element == ir.DoubleType() else builder.fpext(vector, wide)

            total = cgutils.alloca_once_value(builder, ir.Constant(wide, None))
            count = context.cast(builder, args[2], signature.args[2], nbtypes.int64)
            with cgutils.for_range(builder, count) as loop:
                base = builder.mul(loop.index, component_bytes)
                product = builder.fmul(widened(row(w_row, narrow, base)), widened(row(x_row, narrow, base)), flags=_FLAGS)
                builder.store(builder.fadd(builder.load(total), product, flags=_FLAGS), total)
            difference = builder.fsub(widened(row(y_row, narrow)), builder.load(total), flags=_FLAGS)
            builder.store(difference, row64(error_row, wide), align=8)
            sum_pointer = row64(sum_row, wide)
            squared = builder.fmul(difference, difference, flags=_FLAGS)
            builder.store(builder.fadd(builder.load(sum_pointer, align=8), squared, flags=_FLAGS), sum_pointer, align=8)
            delta = difference if element == ir.DoubleType() else builder.fptrunc(difference, narrow)
            builder.store(delta, row(delta_row, narrow), align=4)
            return context.get_dummy_value()

        return nbtypes.void(A64, A, d), codegen

    return error


def elementwise(function: Callable, dtype: np.dtype, lanes: int) -> Callable:
    """`function` (one argument, traced like a rule's `exp`) applied to a 1-D array whose
    length is a multiple of `lanes`: `apply(values, out)`, compiled. For tests of the
    traced code itself."""
    dtype = np.dtype(dtype)
    vectorised = _retraced(function, _bits=_bits, _float_from_bits=_float_from_bits)

    @intrinsic
    def chunk(typingctx, values, out, start):
        def codegen(context, builder, signature, args):
            tracer = _Tracer(builder, dtype, lanes)
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
