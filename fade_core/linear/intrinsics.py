"""The linear kernel's block step as one numba intrinsic: a tile of steps of LANES runs.

A block is LANES runs in the lanes of one vector (`kernel._block_driver`); its lane buffer
A (d, rows, columns) holds, per component i, one row per state slot and hyperparameter
(lane l of row k at A[i, k, l]); component 0's rows also hold the hyperparameters and, in
the float64 view A64 of the same buffer, the loss sums.

`advance` runs the steps of a tile in one piece of straight vector code: per step it
applies the rule (traced into vector code by `simd`) to every component and, in the same
pass, accumulates the next step's prediction from the new weights, so the weights are
touched once per step and the error, delta and loss sum never leave registers. For the
rules that adapt a step size or decay, the loop over components is software-pipelined
(`pipeline.Pipeline`). A lane reads its seed's stream straight from the tile's slot-major copies
x (S, tile, d), x_wide (the same in float64) and y (S, tile) float64: one
broadcast per element when all lanes of the block read one slot, two and a blend when
they read two (a block where one seed's runs end and the next seed's begin), a load per
lane when more. Each gives a lane the same values, so a run's bits do not depend on its
block.

The prediction p = sum_i w_i x_i is accumulated in float64 (products of float32 factors
are exact) over components 0..d-1 in order, into one or two partial sums
(`partial_sums`) added at the end, products fused into the sums; then the error y - p,
its square (a step's loss: into the tile's losses, and fused into the loss sum), and the
error in the state's dtype (delta, read by the next step's rule).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.core import types as nbtypes
from numba.extending import intrinsic

from fade_core.linear.pipeline import pipelined, stage_cuts
from fade_core.learners import learner_for_key
from fade_core.linear.rules import STATE_ARGS
from fade_core.linear.simd import Leaf, Traced, Tracer, fma, ieee, shape, splat, traced_rule

_I64 = ir.IntType(64)

# The rows of a block's lane buffer (d, sum_row(P) + 1, lanes) float64, viewed as the state's dtype
# for all but the float64 row: per component i, the state slots (w, beta, h, gamma, g); in the
# rows of i = 0 only, the P hyperparameters and the float64 loss sums. A row of a component is
# one vector. (A float32 view has 2 lanes columns; the first lanes are used.)
STATE_ROWS = ROW_W, ROW_BETA, ROW_H, ROW_GAMMA, ROW_G = (0, 1, 2, 3, 4)
ROW_HP = 5


def sum_row(hyperparameters: int) -> int:
    """The row of the loss sums, after the hyperparameters' rows: at least 3 of them (the built-in
    rules take 1 to 3: one layout for all of them), more for a researcher's rule that takes more."""
    return ROW_HP + max(3, hyperparameters)


class _Buffer:
    """A numba array's data as bytes, its strides and shape, in the IR being built."""

    def __init__(self, context, builder: ir.IRBuilder, array_type, value: ir.Value):
        array = context.make_array(array_type)(context, builder, value)
        self.builder = builder
        self.data = builder.bitcast(array.data, ir.IntType(8).as_pointer())
        self.strides = cgutils.unpack_tuple(builder, array.strides)
        self.shape = cgutils.unpack_tuple(builder, array.shape)

    def at(self, offset: ir.Value, element: ir.Type) -> ir.Value:
        """A pointer of type element* `offset` bytes into the data."""
        return self.builder.bitcast(self.builder.gep(self.data, [offset]), element.as_pointer())


class _LaneBuffer(_Buffer):
    """A block's lane buffer: row k of component i as a vector pointer."""

    def row(self, k: int, vector: ir.VectorType, component: ir.Value | None = None) -> ir.Value:
        b = self.builder
        offset = b.mul(ir.Constant(_I64, k), self.strides[1])
        if component is not None:
            offset = b.add(offset, b.mul(component, self.strides[0]))
        return self.at(offset, vector)


class _Stream(NamedTuple):
    """One stream array as a block reads it: element (slot, step) at slot * slot_stride +
    (first + step) * step_stride bytes."""

    buffer: _Buffer
    slot_stride: ir.Value
    step_stride: ir.Value
    first: ir.Value  # the array's step of the tile's step 0
    element: ir.Type


class _Streams:
    """Where a block's lanes read x and y. Runs come sorted by slot, so the lanes read one
    slot (`reading` 1: a load and a broadcast per element), two (2: lanes from the first
    whose slot differs read the last lane's: two broadcasts and a blend), or more (`lanes`: a
    load per lane). The first two read the tile's slot-major copies (x (S, tile, d) and, for
    float32, x_wide in float64; y (S, tile) in float64); the third reads the streams in place,
    x (T, S, d) and y (T, S) from step t_full: where every lane reads its own slot, a copy
    would cost more than it saves. Each gives a lane the same values."""

    def __init__(self, context, builder: ir.IRBuilder, signature, args, reading: int, lanes: int, real: ir.Type):
        self.builder, self.lanes, self.real = builder, lanes, real
        buffers = [_Buffer(context, builder, signature.args[k], args[k]) for k in range(2, 8)]
        x_tile, x_wide, y_tile, x_full, y_full, slots = buffers
        slot = [builder.load(slots.at(ir.Constant(_I64, 8 * l), _I64)) for l in range(lanes)]
        zero, f64 = ir.Constant(_I64, 0), ir.DoubleType()
        if reading == lanes:
            t_full = context.cast(builder, args[8], signature.args[8], nbtypes.int64)
            self.x = _Stream(x_full, x_full.strides[1], x_full.strides[0], t_full, real)
            self.x_wide = None
            self.y = _Stream(y_full, y_full.strides[1], y_full.strides[0], t_full, real)
        else:
            self.x = _Stream(x_tile, x_tile.strides[0], x_tile.strides[1], zero, real)
            self.x_wide = _Stream(x_wide, x_wide.strides[0], x_wide.strides[1], zero, f64)
            self.y = _Stream(y_tile, y_tile.strides[0], y_tile.strides[1], zero, f64)
        self.read = {1: slot[:1], 2: [slot[0], slot[-1]], lanes: slot}[reading]
        self.second = None
        if reading == 2:  # lanes whose slot is not the first lane's
            first = splat(builder, slot[0], ir.VectorType(_I64, lanes))
            every = ir.Constant(ir.VectorType(_I64, lanes), ir.Undefined)
            for l, s in enumerate(slot):
                every = builder.insert_element(every, s, ir.Constant(ir.IntType(32), l))
            self.second = builder.icmp_signed("!=", every, first)

    def _lanes(self, stream: _Stream, t: ir.Value, offset: ir.Value) -> ir.Value:
        """Each lane's element of step t, `offset` bytes into the step's row of its slot, as a vector."""
        b = self.builder
        base = b.add(b.mul(b.add(stream.first, t), stream.step_stride), offset)
        values = [b.load(stream.buffer.at(b.add(base, b.mul(s, stream.slot_stride)), stream.element)) for s in self.read]
        vector = ir.VectorType(stream.element, self.lanes)
        if len(values) == 1:
            return splat(b, values[0], vector)
        if self.second is not None:
            return b.select(self.second, splat(b, values[1], vector), splat(b, values[0], vector))
        out = ir.Constant(vector, ir.Undefined)
        for l, v in enumerate(values):
            out = b.insert_element(out, v, ir.Constant(ir.IntType(32), l))
        return out

    def _wide(self, vector: ir.Value) -> ir.Value:
        if vector.type.element == ir.DoubleType():
            return vector
        return self.builder.fpext(vector, ir.VectorType(ir.DoubleType(), self.lanes))

    def x_at(self, t: ir.Value, i: ir.Value, wide: bool = False) -> ir.Value:
        """x of step t, component i: in the state's dtype, or in float64 (`wide`)."""
        stream = self.x_wide if wide and self.x_wide is not None else self.x
        vector = self._lanes(stream, t, self.builder.mul(i, stream.buffer.strides[2]))
        return self._wide(vector) if wide else vector

    def y64_at(self, t: ir.Value) -> ir.Value:
        """y of step t in float64."""
        return self._wide(self._lanes(self.y, t, ir.Constant(_I64, 0)))


class _Prediction:
    """p = sum_i w_i x_i in float64, in `parts` partial sums added in order at the end: a
    fixed order (it depends on d only), with chains 1 / parts as long as one sum's."""

    def __init__(self, builder: ir.IRBuilder, lanes: int, parts: int):
        self.builder = builder
        self.wide = ir.VectorType(ir.DoubleType(), lanes)
        self.sums = [cgutils.alloca_once(builder, self.wide) for _ in range(parts)]

    def start(self) -> None:
        for total in self.sums:
            self.builder.store(ir.Constant(self.wide, None), total)

    def add(self, k: int, w: ir.Value, x64: ir.Value) -> None:
        """Adds w x64 to sum k."""
        b = self.builder
        w64 = w if w.type == self.wide else b.fpext(w, self.wide)
        b.store(fma(b, w64, x64, b.load(self.sums[k])), self.sums[k])

    def total(self) -> ir.Value:
        b = self.builder
        s = [b.load(total) for total in self.sums]
        prediction = s[0]
        for v in s[1:]:
            prediction = ieee(b.fadd(prediction, v))
        return prediction


def _components(builder: ir.IRBuilder, d: ir.Value, parts: int, body: Callable[[ir.Value, int], None]) -> None:
    """body(i, part) for i = 0 .. d - 1 in order: part i % parts for the first d // parts * parts
    components (`parts` per loop iteration, so each one's part is known when the IR is built),
    part 0 for the rest."""
    k_count = ir.Constant(_I64, parts)
    groups = builder.udiv(d, k_count)
    with cgutils.for_range(builder, groups) as loop:
        first = builder.mul(loop.index, k_count)
        for k in range(parts):
            body(builder.add(first, ir.Constant(_I64, k)), k)
    if parts > 1:
        with cgutils.for_range(builder, d, start=builder.mul(groups, k_count)) as loop:  # [start, d)
            body(loop.index, 0)


@intrinsic(prefer_literal=True)
def advance(typingctx, step, A64, A, x, x_wide, y, x_full, y_full, lane_slot, t_full, t0, t1, slots_read, lo, hi,
            tile_losses):
    """`advance(step, A64, A, x, x_wide, y, x_full, y_full, lane_slot, t_full, t0, t1, slots_read,
    lo, hi, tile_losses)`: steps t0 .. t1 - 1 of a block, every component and lane.

    `step` picks the code: a tuple of literals (learner key: a built-in's name or a researcher's
    rule's name@digest, `learners.learner_for_key`; dtype name, lanes, partial sums, pipeline
    stages), a constant of the caller (`kernel.driver` closes over it), so each
    learner and dtype compiles its own; the loop over components runs in `stages` pipeline
    stages (fewer for a rule too shallow; none with several partial sums). The state is in
    A's rows STATE_ROWS, the hyperparameters in rows ROW_HP on and the float64 loss sums in
    A64's row `sum_row`, of component 0. Each step's loss (the squared error before the update)
    goes to row t - t0 of tile_losses (tile, lanes) and is added to the loss sum.
    `slots_read`: how many slots of x and y the lanes read (lane_slot, sorted by slot). Rows
    the rule returns unchanged are not stored."""
    key = tuple(getattr(item, "literal_value", None) for item in getattr(step, "types", ()))
    if len(key) != 5 or None in key:
        return None  # not (yet) the literal key: numba tries the literal types too
    return (nbtypes.void(step, A64, A, x, x_wide, y, x_full, y_full, lane_slot, t_full, t0, t1, slots_read, lo, hi,
                         tile_losses), _block_step(*key))


@functools.cache
def _block_step(learner: str, dtype_name: str, lanes: int, partial_sums: int, stages: int) -> Callable:
    """`advance`'s code generator for one key: the learner's rule traced into vector code."""
    dtype = np.dtype(dtype_name)
    record = learner_for_key(learner)
    rule, n_hp = record.rule, len(record.hyperparameters)
    vectorised = traced_rule(rule, dtype)
    invariant = [name in ("delta", "lo", "hi") for name in STATE_ARGS] + [True] * n_hp
    cuts = stage_cuts(shape(vectorised, invariant, dtype, lanes), stages) if partial_sums == 1 else ()

    def codegen(context, builder, signature, args):
        signature, args = signature.replace(args=signature.args[1:]), args[1:]  # past the key: no value
        b = builder
        tracer = Tracer(b, dtype, lanes)
        narrow, wide = tracer.real_vector, ir.VectorType(ir.DoubleType(), lanes)
        rows64 = _LaneBuffer(context, b, signature.args[0], args[0])
        rows = _LaneBuffer(context, b, signature.args[1], args[1])
        losses = _Buffer(context, b, signature.args[14], args[14])
        first, end = args[9], args[10]
        real = numba.from_dtype(dtype)
        lo_v = tracer.splat(context.cast(b, args[12], signature.args[12], real))
        hi_v = tracer.splat(context.cast(b, args[13], signature.args[13], real))
        sum_pointer = rows64.row(sum_row(n_hp), wide)
        loss_sum = cgutils.alloca_once_value(b, b.load(sum_pointer, align=8))
        error = cgutils.alloca_once(b, wide)

        hps = [Traced(tracer, b.load(rows.row(ROW_HP + j, narrow), align=dtype.itemsize), False)
               for j in range(n_hp)]  # component 0's rows: the same for all

        def emit(reading: int) -> None:
            streams = _Streams(context, b, signature, args, reading, lanes, tracer.real)
            prediction = _Prediction(b, lanes, partial_sums)

            def predicted(t: ir.Value) -> None:
                b.store(ieee(b.fsub(streams.y64_at(t), prediction.total())), error)

            prediction.start()  # step t0's from the weights in A; later steps' are fused into the update
            def weight(i: ir.Value, part: int) -> None:
                w = b.load(rows.row(ROW_W, narrow, i), align=dtype.itemsize)
                prediction.add(part, w, streams.x_at(first, i, wide=True))

            _components(b, rows.shape[0], partial_sums, weight)
            predicted(first)

            with cgutils.for_range(b, end, start=first) as loop:  # [t0, t1)
                t = loop.index
                e = b.load(error)
                squared = ieee(b.fmul(e, e))
                b.store(fma(b, e, e, b.load(loss_sum)), loss_sum)  # e^2 fused into the sum
                row = b.mul(b.sub(t, first), losses.strides[0])
                b.store(squared if dtype == np.float64 else b.fptrunc(squared, narrow), losses.at(row, narrow),
                        align=dtype.itemsize)
                delta = Traced(tracer, e if dtype == np.float64 else b.fptrunc(e, narrow), False)
                # the next step's prediction, fused into the update (after the tile's last step it
                # reads step t again, is never used, and the next tile predicts from the weights)
                t_next = b.add(t, ir.Constant(_I64, 1))
                t_next = b.select(b.icmp_signed("<", t_next, end), t_next, t)
                prediction.start()

                def rule_on(component: Callable[[int], ir.Value], part: int) -> None:
                    """The rule on a component (component(stage): the one a pipeline stage is on),
                    its changed rows stored and its new weight added to prediction sum `part`."""
                    def row(k: int, stage: int) -> ir.Value:
                        return rows.row(k, narrow, component(stage))

                    state = [Leaf(tracer, lambda stage, k=k: b.load(row(k, stage), align=dtype.itemsize))
                             for k in STATE_ROWS]
                    x_t = Leaf(tracer, lambda stage: streams.x_at(t, component(stage)))
                    outputs = vectorised(x_t, delta, *state, lo_v, hi_v, *hps)
                    for k, before, after in zip(STATE_ROWS, state, outputs):
                        if after is not before:
                            stage, value = tracer.place(after)
                            b.store(value, row(k, stage), align=dtype.itemsize)
                    stage, w = tracer.place(outputs[0])
                    prediction.add(part, w, streams.x_at(t_next, component(stage), wide=True))

                if cuts:
                    pipelined(tracer, rows.shape[0], cuts, lambda component: rule_on(component, 0))
                else:
                    _components(b, rows.shape[0], partial_sums, lambda i, part: rule_on(lambda stage: i, part))
                predicted(t_next)

        slots_read = context.cast(b, args[11], signature.args[11], nbtypes.int64)
        with b.if_else(b.icmp_signed("==", slots_read, ir.Constant(_I64, 1))) as (one, more):
            with one:
                emit(1)
            with more:
                with b.if_else(b.icmp_signed("==", slots_read, ir.Constant(_I64, 2))) as (two, many):
                    with two:
                        emit(2)
                    with many:
                        emit(lanes)
        b.store(b.load(loss_sum), sum_pointer, align=8)
        return context.get_dummy_value()

    return codegen
