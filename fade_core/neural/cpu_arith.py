"""Arithmetic the CPU kernel writes out rather than leaves to fast-math flags: fused
multiply-adds (`fma`) and the dot product (`dot`), as explicit LLVM code with a fixed order.

The kernel has no fast-math flag (cpu_elements.FASTMATH says why), so LLVM neither fuses a
multiply and an add nor reorders a sum by itself; where that speed matters it is written
here, the same in every build.

A dot product vectorises only if its sum may be reassociated, and under fast-math
'reassoc' LLVM chooses the order itself: it may choose differently when it optimises a
kernel again (numba's cache keeps a caller's build with its callees linked in and
optimised once more), so a process that compiled the kernel and one that loaded it could
disagree in the last bits. Here the order is written out: ACCUMULATORS vectors of LANES
partial sums, fused multiply-adds (llvm.fma: FMA by construction, not by contraction).
Blocks of ACCUMULATORS * LANES elements go to the accumulators in turn (several, so that
consecutive multiply-adds do not wait on each other), then the remaining whole vectors of
LANES to the first, in order; the accumulators are added as a fixed tree, then their lanes,
then the tail (fewer than LANES elements) in order. The instructions carry no fast-math
flags: every build computes exactly these operations.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8  # partial sums per accumulator: one AVX2 vector of float32, two of float64
ACCUMULATORS = 4  # (one: 1.6x the time of a reassociated loop on a 784-long row; four: as fast)


def _fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a * b + c rounded once (llvm.fma of a float, a double, or a vector of them)."""
    kind = a.type.element if isinstance(a.type, ir.VectorType) else a.type
    suffix = "f32" if kind == ir.FloatType() else "f64"
    name = f"llvm.fma.v{a.type.count}{suffix}" if isinstance(a.type, ir.VectorType) else f"llvm.fma.{suffix}"
    function = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(function, [a, b, c])


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma), for floats of one dtype."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        return _fma(builder, *args)

    return a(a, b, c), codegen


def _load(builder: ir.IRBuilder, data: ir.Value, i: ir.Value, kind: ir.Type, align: int) -> ir.Value:
    """The element, or LANES-vector, of `data` (an element pointer) at index i."""
    return builder.load(builder.bitcast(builder.gep(data, [i]), kind.as_pointer()), align=align)


def _sum_of_products(context, builder, dtype, first, b_data: ir.Value, count: ir.Value) -> ir.Value:
    """sum_{i < count} first(i) * b[i] in the order of the module docstring; first(i, kind)
    gives the first factor at i as an element or a LANES-vector (kind)."""
    element = context.get_value_type(dtype)
    vector = ir.VectorType(element, LANES)
    size = element.get_abi_size(context.target_data)
    index = count.type
    blocks = builder.mul(builder.sdiv(count, ir.Constant(index, LANES * ACCUMULATORS)), ir.Constant(index, LANES * ACCUMULATORS))
    whole = builder.mul(builder.sdiv(count, ir.Constant(index, LANES)), ir.Constant(index, LANES))
    partial = [cgutils.alloca_once_value(builder, ir.Constant(vector, [0.0] * LANES)) for _ in range(ACCUMULATORS)]

    def accumulate(into, i):
        product = _fma(builder, first(i, vector), _load(builder, b_data, i, vector, size), builder.load(into))
        builder.store(product, into)

    with cgutils.for_range_slice(builder, ir.Constant(index, 0), blocks, ir.Constant(index, LANES * ACCUMULATORS)) as (i, _):
        for k, into in enumerate(partial):
            accumulate(into, builder.add(i, ir.Constant(index, k * LANES)))
    with cgutils.for_range_slice(builder, blocks, whole, ir.Constant(index, LANES)) as (i, _):
        accumulate(partial[0], i)
    vectors = [builder.load(p) for p in partial]
    while len(vectors) > 1:  # (acc0 + acc1) + (acc2 + acc3)
        vectors = [builder.fadd(vectors[k], vectors[k + 1]) for k in range(0, len(vectors), 2)]
    sums = [builder.extract_element(vectors[0], ir.Constant(ir.IntType(32), k)) for k in range(LANES)]
    while len(sums) > 1:  # ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
        sums = [builder.fadd(sums[k], sums[k + 1]) for k in range(0, len(sums), 2)]
    total = cgutils.alloca_once_value(builder, sums[0])
    with cgutils.for_range_slice(builder, whole, count, ir.Constant(index, 1)) as (i, _):
        builder.store(_fma(builder, first(i, element), _load(builder, b_data, i, element, size), builder.load(total)), total)
    return builder.load(total)


def _float_arrays(*arrays) -> bool:
    return all(isinstance(a, types.Array) and a.ndim == 1 and a.dtype == arrays[0].dtype for a in arrays) and \
        isinstance(arrays[0].dtype, types.Float)


@intrinsic
def dot(typingctx, a, b, n):
    """sum_{i < n} a[i] * b[i] in a's dtype, in the fixed order of the module docstring. a and b:
    1-D arrays of one float dtype whose first n elements are contiguous (rows and slices of
    C-contiguous arrays); n an integer."""
    if not (_float_arrays(a, b) and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        a_data, b_data = (context.make_array(t)(context, builder, v).data for t, v in zip(signature.args[:2], args[:2]))
        align = context.get_value_type(a.dtype).get_abi_size(context.target_data)
        count = context.cast(builder, args[2], signature.args[2], types.intp)
        return _sum_of_products(context, builder, a.dtype, lambda i, kind: _load(builder, a_data, i, kind, align),
                                b_data, count)

    return a.dtype(a, b, n), codegen


@intrinsic
def axpy_dot(typingctx, w, c, x, b, n):
    """w[i] <- fma(c, x[i], w[i]) for i < n, in place, and the dot product of the new w with b
    (as `dot(w, b, n)` after the update, bit for bit) in one pass over w: an SGD row step and
    the next step's product of that row. Arrays as for `dot`; c a float of their dtype."""
    if not (_float_arrays(w, x, b) and c == w.dtype and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        w_data, x_data, b_data = (context.make_array(signature.args[k])(context, builder, args[k]).data for k in (0, 2, 3))
        element = context.get_value_type(w.dtype)
        align = element.get_abi_size(context.target_data)
        count = context.cast(builder, args[4], signature.args[4], types.intp)
        vector = ir.VectorType(element, LANES)
        c_vector = builder.shuffle_vector(builder.insert_element(ir.Constant(vector, None), args[1], ir.Constant(ir.IntType(32), 0)),
                                          ir.Constant(vector, None), ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))

        def updated(i, kind):
            scale = c_vector if kind == vector else args[1]
            new = _fma(builder, scale, _load(builder, x_data, i, kind, align), _load(builder, w_data, i, kind, align))
            builder.store(new, builder.bitcast(builder.gep(w_data, [i]), kind.as_pointer()), align=align)
            return new

        return _sum_of_products(context, builder, w.dtype, updated, b_data, count)

    return w.dtype(w, c, x, b, n), codegen
