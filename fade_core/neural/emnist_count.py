"""Warp-instructions one run-step of the EMNIST kernel issues, read from its SASS (cuda_sass.sass), without a GPU.

The nonlinear kernel's step is one loop with everything unrolled (cuda_sass.step_loop). The EMNIST
kernel's step holds loops of its own (a warp's rows of W0, W1 and W2, a thread's rows of W1's
backward pass: `EmnistShape.loop_trips`, each `#pragma unroll 1`), so a step is counted as: the longest
path through the step loop's body along fall-throughs and forward branches, never through an
instruction that CALLs (the slow paths of IEEE division and square root, as cuda_sass), where each
inner loop counts as the longest path through its own body times its trips (the most any thread
makes). Path x warps is an upper bound of the warp-instructions a run-step issues: every warp is
counted on the longest path, warp 0's softmax and the threads of the W1 pass included.
"""

from __future__ import annotations

import re

from fade_core.neural.cuda_sass import _target  # (the branch target parser the nonlinear count uses)
from fade_core.neural.emnist_source import EmnistShape


def _loops(code: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(first, last) address of every loop: a conditional backward branch and its target."""
    return [(target, at) for at, ins in code
            if ins.startswith("@") and (target := _target(ins)) is not None and target < at]


def _path(body: list[tuple[int, str]], inner: dict[int, tuple[int, int]]) -> int:
    """Instructions on the longest path from body[0] to body[-1]; `inner`: index of an inner loop's first
    instruction -> (index of its last, instructions it issues in all)."""
    index = {at: i for i, (at, _) in enumerate(body)}
    best = [-1] * (len(body) + 1)
    best[0] = 0
    i = 0
    while i < len(body):
        if best[i] < 0:
            i += 1
            continue
        if i in inner:
            last, weight = inner[i]
            best[last + 1] = max(best[last + 1], best[i] + weight)
            i = last + 1
            continue
        at, ins = body[i]
        if re.search(r"\bCALL\b", ins):
            i += 1
            continue
        target = _target(ins)
        jumps = target is not None and not ins.startswith("@") and "BRA.DIV" not in ins
        if not jumps:
            best[i + 1] = max(best[i + 1], best[i] + 1)
        if target is not None and target > at and target in index:
            best[index[target]] = max(best[index[target]], best[i] + 1)
        i += 1
    if best[len(body)] < 0:
        raise ValueError("the loop's back edge is reachable only through a subroutine call")
    return best[len(body)]


def step_path(code: list[tuple[int, str]], trips: tuple[int, ...]) -> int:
    """Instructions one thread issues per step at most: the step loop (the widest loop) with its inner loops,
    in address order, counted `trips` times each. ValueError when the SASS's inner loops are not the source's
    (another number of them, or nested)."""
    loops = _loops(code)
    if not loops:
        raise ValueError("no step loop (backward branch) in the SASS")
    first, last = max(loops, key=lambda loop: loop[1] - loop[0])
    body = [(at, ins) for at, ins in code if first <= at <= last]
    inner = sorted(loop for loop in loops if first < loop[0] and loop[1] < last)
    if len(inner) != len(trips) or any(b[0] <= a[1] for a, b in zip(inner, inner[1:])):
        raise ValueError(f"the step loop holds loops at {[(hex(a), hex(b)) for a, b in inner]}; the source has "
                         f"{len(trips)} one after another")
    index = {at: i for i, (at, _) in enumerate(body)}
    weights = {}
    for (start, end), n in zip(inner, trips):
        loop_body = body[index[start] : index[end] + 1]
        weights[index[start]] = (index[end], _path(loop_body, {}) * n)
    return _path(body, weights)


def instructions_per_run_step(code: list[tuple[int, str]], shape: EmnistShape) -> int:
    """Warp-instructions of one run-step, at most (`step_path` x the block's warps)."""
    return step_path(code, shape.loop_trips()) * (shape.threads // 32)
