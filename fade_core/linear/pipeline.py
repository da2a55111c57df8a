"""The software-pipelined loop over a rule's components, for the rules whose step is a long
dependency chain (those that adapt a step size or decay): `stage_cuts` cuts the traced rule
into stages by depth, `pipelined` emits the loop, `Pipeline` places each instruction the
tracer (`simd.Tracer`) emits in its stage. A component gets the rule's instructions in the
rule's order, so the bits are those of the plain loop (tests/test_linear_learners.py).
"""

from __future__ import annotations

from typing import Callable

from llvmlite import ir
from numba.core import cgutils

from fade_core.linear.simd import Shape, Traced, Tracer

_I64 = ir.IntType(64)


class Pipeline:
    """One iteration of a step's loop over components, software-pipelined: the rule's
    instructions fall in stages by their depth (cut after the depths `cuts`), and iteration j
    runs stage s on component j - s. One component's chain (meta-update, clamp, exp, decay:
    ~22 instructions deep) is longer than the out-of-order core can overlap with the next
    components'; an iteration instead holds a piece of a chain per stage, each independent of
    the others. A component gets the rule's instructions in the rule's order, so its bits
    are the same. Values crossing stages are carried in a ring of slots per component (a
    stage runs at most RING - 1 components behind the first); instructions on invariants
    only go to a block before the stages, from which LLVM hoists them out of the loop.

    `Tracer.op` places each instruction (`stage_of`, `enter`, `carry`); `finish` closes the
    iteration's blocks."""

    RING = 4

    def __init__(self, builder: ir.IRBuilder, cuts: tuple[int, ...], j: ir.Value, d: ir.Value):
        stages = len(cuts) + 1
        assert stages <= self.RING
        self.builder, self.cuts = builder, cuts
        self.components, self.blocks, self.ends = [], [], []
        self.carried: dict[int, tuple[Traced, ir.Value]] = {}
        self.loads: dict[tuple[int, int], ir.Value] = {}
        self.head = builder.append_basic_block("invariants")  # closed by `finish`
        builder.branch(self.head)
        builder.position_at_end(builder.append_basic_block("stages"))
        self.stages_start = builder.block
        for stage in range(stages):
            c = builder.sub(j, ir.Constant(_I64, stage))
            inside = builder.and_(builder.icmp_signed(">=", c, ir.Constant(_I64, 0)), builder.icmp_signed("<", c, d))
            body, end = builder.append_basic_block(f"stage{stage}"), builder.append_basic_block(f"stage{stage}_end")
            builder.cbranch(inside, body, end)
            builder.position_at_end(end)
            self.components.append(c)
            self.blocks.append(body)
            self.ends.append(end)

    def component(self, stage: int) -> ir.Value:
        return self.components[stage]

    def stage_of(self, depth: int) -> int:
        return sum(depth > cut for cut in self.cuts)

    def enter_head(self) -> None:
        """Before the stages: where instructions on invariants go (LLVM hoists them from the loop)."""
        self.builder.position_at_end(self.head)

    def enter(self, stage: int) -> None:
        self.builder.position_at_end(self.blocks[stage])

    def carry(self, value: Traced, stage: int) -> ir.Value:
        """`value` (of an earlier stage) in `stage`: stored to its component's slot where it is
        made, loaded where it is used."""
        b = self.builder
        if id(value) not in self.carried:
            ring = cgutils.alloca_once(b, ir.ArrayType(value.value.type, self.RING))
            self.carried[id(value)] = value, ring
            self.enter(value.stage)
            b.store(value.value, self._slot(ring, value.stage))
        if (id(value), stage) not in self.loads:
            self.enter(stage)
            self.loads[id(value), stage] = b.load(self._slot(self.carried[id(value)][1], stage))
        return self.loads[id(value), stage]

    def _slot(self, ring: ir.Value, stage: int) -> ir.Value:
        index = self.builder.and_(self.component(stage), ir.Constant(_I64, self.RING - 1))
        return self.builder.gep(ring, [ir.Constant(_I64, 0), index])

    def finish(self) -> None:
        """Closes the stages' blocks; the builder continues after the last."""
        for body, end in [(self.head, self.stages_start), *zip(self.blocks, self.ends)]:
            self.builder.position_at_end(body)
            self.builder.branch(end)
        self.builder.position_at_end(self.ends[-1])


def pipelined(tracer: Tracer, d: ir.Value, cuts: tuple[int, ...], body: Callable[[Callable[[int], ir.Value]], None]
              ) -> None:
    """A loop over components 0 .. d - 1 in len(cuts) + 1 pipeline stages (`Pipeline`): per
    iteration, body(component) traces the rule once, component(stage) being the component that
    stage is on."""
    b = tracer.builder
    with cgutils.for_range(b, b.add(d, ir.Constant(_I64, len(cuts)))) as iteration:
        tracer.pipeline = Pipeline(b, cuts, iteration.index, d)
        body(tracer.pipeline.component)
        tracer.pipeline.finish()
        tracer.pipeline = None


def stage_cuts(rule: Shape, stages: int, slack: int = 2) -> tuple[int, ...]:
    """Where to cut a rule into `stages`: the depths after which a stage ends, each within
    `slack` of an even split, where the fewest values cross (they go through memory)."""
    cuts: list[int] = []
    for k in range(1, stages):
        ideal = round(rule.depth * k / stages)
        near = range(max(ideal - slack, cuts[-1] + 1 if cuts else 1), min(ideal + slack, rule.depth - 1) + 1)
        if near:  # (a rule too shallow for `stages` gets fewer)
            cuts.append(min(near, key=lambda c: (rule.crossing[c - 1], abs(c - ideal))))
    return tuple(cuts)
