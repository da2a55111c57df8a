"""A linear rule as explicit SIMD code: the plain-Python rule traced into LLVM vector IR.

The kernel keeps a block's runs in lanes (`kernel._block_driver`). Left to LLVM's loop
vectoriser, a rule inlined in a loop over the lanes compiled to about twice the vector
instructions it needs (spills of the lane buffer's rows, runtime checks). Here the rule
is run once, in Python, on `Traced` values: each arithmetic operation, `max`/`min`,
`clamp` and `exp` (vexp's own algorithm, traced the same way) appends one vector
instruction to the IR being built. `intrinsics.advance` wraps that as a numba intrinsic
that applies the rule to every component of a block.

Semantics, lane by lane: IEEE arithmetic in the written order (nothing reassociated), a
product added or subtracted right away fused into one multiply-add by the tracer itself
(so the rounding is fixed by the rule's source, whatever LLVM would choose), `max(a, b)`
as numba compiles it (b if b > a else a, so a NaN `a` stays NaN), numeric literals in the
state's dtype. A lane's result never depends on the other lanes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numba
import numpy as np
from llvmlite import ir
from numba.core import types as nbtypes
from numba.extending import intrinsic

from fade_core.linear import vexp
from fade_core.linear.rules import clamp
from fade_core.rulebind import bind

# Plain IEEE operations: no reassociation, NaN/inf kept, and no 'contract' either, so LLVM
# fuses nothing on its own: which multiply-adds fuse is the tracer's choice
# (`Traced._binary`), fixed by the rule's source, not by the compiler. But numba gives every
# float operation of a function that has no flag the function's fast-math flags
# (reassociation and contraction included: numba.core.fastmathpass), and the intrinsics are
# inlined into the fastmath driver; so each traced operation carries the one flag 'arcp'
# (`ieee`), which only licenses x / y as x * (1 / y) (the rules divide by nothing).


def ieee(value: ir.Value) -> ir.Value:
    """`value` (a float instruction) kept as written: flagged 'arcp' so that numba's fast-math
    pass, which flags only instructions without flags, leaves it alone."""
    if isinstance(value, ir.Instruction) and value.opname in ("fadd", "fsub", "fmul", "fdiv", "frem") and not value.flags:
        value.flags.append("arcp")
    return value


def splat(builder: ir.IRBuilder, scalar: ir.Value, vector: ir.VectorType) -> ir.Value:
    """A vector of type `vector` with `scalar` in every lane."""
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [ir.Constant(ir.IntType(32), 0)] * vector.count)
    return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined), zeros)


class Tracer:
    """Emits vector instructions of one element type into `builder`. With a `pipeline` set
    (`pipeline.Pipeline`), each instruction goes to the pipeline stage its depth falls in,
    and values that cross stages are carried by the pipeline."""

    def __init__(self, builder: ir.IRBuilder, dtype: np.dtype, lanes: int):
        self.builder, self.lanes = builder, lanes
        self.dtype = np.dtype(dtype)
        self.real = ir.FloatType() if self.dtype == np.float32 else ir.DoubleType()
        self.integer = ir.IntType(8 * self.dtype.itemsize)
        self.real_vector = ir.VectorType(self.real, lanes)
        self.int_vector = ir.VectorType(self.integer, lanes)
        self.pipeline = None
        self.constants: dict[float, ir.Value] = {}
        self.uses: list[tuple[int, int, Traced]] | None = None  # kept by `shape`: (depth made, depth used, value)

    def constant(self, value, is_int: bool) -> ir.Value:
        """A number as a vector of the element type. Inside a pipeline, a float constant is made
        once, in the function's entry block, as a value LLVM cannot see through (`_opaque`):
        LLVM would otherwise re-broadcast it from the constant pool at every use (two
        instructions each under numba's code model) once the stages use all registers; opaque,
        it is kept or spilled once and read as a memory operand."""
        if is_int:
            return ir.Constant(self.int_vector, [ir.Constant(self.integer, int(value))] * self.lanes)
        constant = ir.Constant(self.real_vector, [ir.Constant(self.real, float(self.dtype.type(value)))] * self.lanes)
        if self.pipeline is None:
            return constant
        key = float(self.dtype.type(value))
        if key not in self.constants:
            with self.builder.goto_entry_block():
                self.constants[key] = _opaque(self.builder, constant)
        return self.constants[key]

    def splat(self, scalar: ir.Value) -> "Traced":
        """A vector with `scalar` in every lane (an invariant: usable in every stage)."""
        return Traced(self, splat(self.builder, scalar, self.real_vector), False)

    def value(self, operand, is_int: bool, stage: int = 0) -> ir.Value:
        """The operand as an LLVM value in `stage` (a number as a constant)."""
        if isinstance(operand, Traced):
            if operand.is_int != is_int:
                raise TypeError("a traced rule mixes integer and float vectors")
            return operand.value_in(stage)
        return self.constant(operand, is_int)

    def op(self, make: Callable, operands: tuple, is_int: bool, *, result_int: bool | None = None, cost: int = 1,
           factors: tuple | None = None) -> "Traced":
        """One instruction make(builder, *operand values), in the stage of its depth (one more than
        its deepest operand's, `cost` 0 for a bitcast) or of a later operand."""
        traced = [o for o in operands if isinstance(o, Traced)]
        stages = [o.stage for o in traced if o.stage is not None]
        out_int = is_int if result_int is None else result_int
        if not stages:  # of invariants only: an invariant, before the pipeline's stages
            if self.pipeline is not None:
                self.pipeline.enter_head()
            values = [self.value(o, is_int) for o in operands]
            return Traced(self, ieee(make(self.builder, *values)), out_int, factors)
        depth = max(o.depth for o in traced) + cost
        stage = 0 if self.pipeline is None else max(self.pipeline.stage_of(depth), *stages)
        values = [self.value(o, is_int, stage) for o in operands]
        self.enter(stage)  # after the operands' loads, which may have moved the builder
        result = Traced(self, ieee(make(self.builder, *values)), out_int, factors, depth, stage)
        if self.uses is not None:
            self.uses.extend((o.depth, depth, o) for o in traced if o.stage is not None)
        return result

    def enter(self, stage: int) -> None:
        """Emit into pipeline stage `stage`'s block (no-op without a pipeline)."""
        if self.pipeline is not None:
            self.pipeline.enter(stage)

    def place(self, operand) -> tuple[int, ir.Value]:
        """The stage where `operand` is made (0 for an invariant or a number) and its value
        there; the builder emits there next."""
        stage = operand.stage if isinstance(operand, Traced) and operand.stage is not None else 0
        value = self.value(operand, False, stage)
        self.enter(stage)
        return stage, value


class Traced:
    """One vector value of the rule being traced. Arithmetic with another Traced or a
    number emits an instruction; numbers become constants of the element type. `stage` is
    None for an invariant (defined before the rule, usable anywhere)."""

    __slots__ = ("tracer", "value", "is_int", "factors", "depth", "stage")
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    def __init__(self, tracer: Tracer, value: ir.Value | None, is_int: bool, factors: tuple | None = None,
                 depth: int = 0, stage: int | None = None):
        self.tracer, self.value, self.is_int = tracer, value, is_int
        self.factors = factors  # the operands (a, b) when this is the float product a * b: a sum may fuse it
        self.depth, self.stage = depth, stage

    def value_in(self, stage: int) -> ir.Value:
        """This value where stage `stage`'s instructions can use it."""
        if self.stage is None or self.stage == stage or self.tracer.pipeline is None:
            return self.value
        return self.tracer.pipeline.carry(self, stage)

    def _binary(self, other, float_op: str, int_op: str | None, reflected: bool = False) -> "Traced":
        """One instruction. A float sum or difference with a product fuses it into one
        multiply-add, rounded once: the right operand's if it is a product, else the left's
        (`a * b + c * d` is fma(c, d, a * b))."""
        t = self.tracer
        left, right = (other, self) if reflected else (self, other)
        if self.is_int:
            if int_op is None:
                raise TypeError(f"{float_op} of integer vectors is not traced")
            return t.op(lambda b, l, r: getattr(b, int_op)(l, r), (left, right), True)
        if float_op == "fmul":
            return t.op(lambda b, l, r: b.fmul(l, r), (left, right), False, factors=(left, right))
        if float_op in ("fadd", "fsub"):
            fused = _fused(t, left, right, float_op == "fsub")
            if fused is not None:
                return fused
        return t.op(lambda b, l, r: getattr(b, float_op)(l, r), (left, right), False)

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


class Leaf(Traced):
    """An input of the rule read per stage (a state row, x): `load(stage)` emits the read
    where that stage's instructions are, once per stage."""

    __slots__ = ("load", "loaded")

    def __init__(self, tracer: Tracer, load: Callable[[int], ir.Value]):
        super().__init__(tracer, None, False, stage=0)
        self.load, self.loaded = load, {}

    def value_in(self, stage: int) -> ir.Value:
        if stage not in self.loaded:
            self.tracer.enter(stage)
            self.loaded[stage] = self.load(stage)
        return self.loaded[stage]


def _opaque(builder: ir.IRBuilder, constant: ir.Constant) -> ir.Value:
    """`constant` (a splat) as a value LLVM cannot see through: an empty asm per 256-bit
    register, the halves of a wider vector joined."""
    vector = constant.type
    if vector.count * (32 if vector.element == ir.FloatType() else 64) <= 256:
        return builder.asm(ir.FunctionType(vector, [vector]), "", "=x,0", [constant], False)
    half = _opaque(builder, ir.Constant(ir.VectorType(vector.element, vector.count // 2), constant.constant[: vector.count // 2]))
    joined = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), list(range(vector.count)))
    return builder.shuffle_vector(half, half, joined)


def fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a * b + c rounded once (llvm.fma of a float or double vector)."""
    vector = a.type
    element = "f32" if vector.element == ir.FloatType() else "f64"
    name = f"llvm.fma.v{vector.count}{element}"
    function = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
    return builder.call(function, [a, b, c])


def _fused(tracer: Tracer, left, right, subtract: bool) -> Traced | None:
    """left +/- right as one multiply-add when right (else left) is a traced product; None when
    neither is."""
    if isinstance(right, Traced) and right.factors is not None:
        if subtract:
            return tracer.op(lambda b, a, c, s: fma(b, b.fneg(a), c, s), (*right.factors, left), False)
        return tracer.op(lambda b, a, c, s: fma(b, a, c, s), (*right.factors, left), False)
    if isinstance(left, Traced) and left.factors is not None:
        if subtract:
            return tracer.op(lambda b, a, c, s: fma(b, a, c, b.fneg(s)), (*left.factors, right), False)
        return tracer.op(lambda b, a, c, s: fma(b, a, c, s), (*left.factors, right), False)
    return None


def _select_if(op: str) -> Callable:
    """numba's max (op '>') / min ('<') of two floats: b if b op a else a (ordered compare)."""

    def pick(a, b):
        if not isinstance(a, Traced) and not isinstance(b, Traced):
            return max(a, b) if op == ">" else min(a, b)
        t = a.tracer if isinstance(a, Traced) else b.tracer
        return t.op(lambda bld, av, bv: bld.select(bld.fcmp_ordered(op, bv, av), bv, av), (a, b), False)

    return pick


_max, _min = _select_if(">"), _select_if("<")


def _bits(value: Traced) -> Traced:
    t = value.tracer
    return t.op(lambda b, v: b.bitcast(v, t.int_vector), (value,), False, result_int=True, cost=0)


def _float_from_bits(bits: Traced, like: Traced) -> Traced:
    t = bits.tracer
    return t.op(lambda b, v: b.bitcast(v, t.real_vector), (bits,), True, result_int=False, cost=0)


def _retraced(function: Callable, **names) -> Callable:
    """`function` with its global `names` rebound (and max / min traced): rulebind's one helper."""
    return bind(function, {"max": _max, "min": _min, **names})


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


class Shape(NamedTuple):
    """A traced function's dependency structure: the longest chain of instructions from its
    arguments to its results (bitcasts free), and for each depth c < depth, how many values
    made at depth <= c are used deeper (what a pipeline cut after depth c carries)."""

    depth: int
    crossing: tuple[int, ...]  # crossing[c - 1]: across a cut after depth c


def shape(vectorised: Callable, invariant: Sequence[bool], dtype: np.dtype, lanes: int) -> Shape:
    """`vectorised`'s Shape: traced once into a scratch function. `invariant`: the arguments
    that are the same for every component (they start no chain)."""
    function = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "shape")
    tracer = Tracer(ir.IRBuilder(function.append_basic_block()), dtype, lanes)
    uses = tracer.uses = []
    undefined = ir.Constant(tracer.real_vector, ir.Undefined)
    arguments = [Traced(tracer, undefined, False, stage=None if i else 0) for i in invariant]
    results = vectorised(*arguments)
    depth = max(r.depth for r in results if isinstance(r, Traced))
    crossing = tuple(len({v for made, used, v in uses if 0 < made <= c < used}) for c in range(1, depth))
    return Shape(depth, crossing)
