"""What every stream shares: counter-based generators, fixed blocks, random-access chunks.

A stream is a pure function of (settings, seed). Each random draw comes from its own
generator keyed by (seed, purpose, index), never from a generator that advances with
use, so the stream can be read from any step: samples are drawn in fixed blocks of
`BLOCK` steps and `chunk(start, n)` slices them. One chunk of 1000 steps therefore equals
chunks of 400 and 600 joined, and resuming at step t needs only t. Blocks are drawn and
kept a segment (`SEGMENT_BLOCKS` of them) at a time: the unit `tasks/stream_cache.py` keeps
and a node's workers share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Sequence

import numpy as np

from tasks.stream_cache import SHARED_SEGMENTS, Segment

if TYPE_CHECKING:
    import torch

BLOCK = 4096  # steps per block; block indices key the generators, so changing it changes every stream
# Blocks per segment, what is drawn, kept and shared at once (22 MB of a linear stream, 27 MB of a nonlinear one):
# large enough that a node's workers ask each other for a 2M-step seed 16 times, not 489; the values do not
# depend on it.
SEGMENT_BLOCKS = 32
SEGMENT_STEPS = SEGMENT_BLOCKS * BLOCK
CACHED_SEGMENTS = 2  # segments kept per stream: a chunk spans at most two (chunks are shorter than a segment)


class Chunk(NamedTuple):
    """Steps [start, start + n) of one seed's stream, on the CPU.

    linear_tracking: x float64 (n, 20) inputs, y float64 (n,) noisy targets.
    nonlinear_tracking: x float32 (n, 32) inputs, y float32 (n, 20) teacher outputs.
    EMNIST tasks: x int64 (n,) image indices (`inputs` turns them into pixels),
    y int64 (n,) permuted labels.
    """

    x: torch.Tensor
    y: torch.Tensor


def check_settings(task: str, **positive: float) -> None:
    """The check every task's settings share: each one named is above zero, a problem one line naming the
    key and its value."""
    for key, value in positive.items():
        if value <= 0:
            raise ValueError(f"{task}: {key} must be positive, got {value}")


def counter_rng(seed: int, purpose: int, index: int = 0) -> np.random.Generator:
    """The generator of draw `index` for `purpose` of `seed`: independent of every other one."""
    return np.random.default_rng(np.random.SeedSequence([seed, purpose, index]))


class CounterStream(ABC):
    """Random-access stream of one seed; subclasses say how block `b` is drawn."""

    def __init__(self, settings: Any, seed: int):
        self.settings = settings  # a task's settings dataclass; `steps` is the stream length
        self.seed = seed
        self._segments: OrderedDict[int, Segment] = OrderedDict()

    @abstractmethod
    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """x and y of steps [b * BLOCK, (b + 1) * BLOCK), in the dtypes `Chunk` documents.

        The last block may run past the stream's end; those steps are never returned.
        """

    def chunk(self, start: int, n: int) -> Chunk:
        """Steps [start, start + n), the same whatever chunks were read before."""
        x, y = stacked([self], start, n)
        import torch  # here, not at import time: the task registry is read by commands that never run a stream

        return Chunk(torch.from_numpy(x[:, 0]), torch.from_numpy(y[:, 0]))

    def segments(self, start: int, n: int) -> range:
        """The segments steps [start, start + n) fall in."""
        if start < 0 or n < 0 or start + n > self.settings.steps:
            raise ValueError(f"steps [{start}, {start + n}) outside the stream's {self.settings.steps} steps")
        return range(start // SEGMENT_STEPS, max(start, start + n - 1) // SEGMENT_STEPS + 1)

    def draw_blocks(self, first: int, last: int) -> Segment:
        """Blocks [first, last) drawn afresh, each its x and y. Never joined: a kept segment's 22 MB in one array
        cost more in the kernel's page faults than drawing it (huge pages compacted on this 2-core VM)."""
        return tuple(self._block(b) for b in range(first, last))

    def _spans(self, start: int, n: int) -> Iterator[tuple[tuple[np.ndarray, ...], int, int]]:
        """(block, first, last): the pieces of steps [start, start + n), in order, as steps
        [first, last) of the blocks of kept segments."""
        last = max(start, start + n - 1) // BLOCK
        for g in self.segments(start, n):
            segment = self._segment(g)
            for b in range(max(start // BLOCK, g * SEGMENT_BLOCKS), min(last + 1, (g + 1) * SEGMENT_BLOCKS)):
                yield segment[b - g * SEGMENT_BLOCKS], max(start - b * BLOCK, 0), min(start + n - b * BLOCK, BLOCK)

    def inputs(self, x: torch.Tensor, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """The network's inputs for a chunk's `x` (here `x` itself, moved and cast)."""
        return x.to(device, dtype)

    def _segment(self, g: int) -> Segment:
        if g in self._segments:
            self._segments.move_to_end(g)
        else:
            if len(self._segments) >= CACHED_SEGMENTS:
                self._segments.popitem(last=False)  # least recently used
            # (this per-stream LRU still serves consecutive chunks when the shared cache is full or off)
            self._segments[g] = SHARED_SEGMENTS.get(*self._wanted(g))
        return self._segments[g]

    def _wanted(self, g: int):
        """What the segment cache needs to find or draw segment g: its group, key, node-wide name and draw."""
        blocks = -(-self.settings.steps // BLOCK)
        name = f"{type(self).__module__}.{type(self).__qualname__}:{self.settings!r}:{self.seed}:{g}"
        return ((type(self), self.settings), (self.seed, g), name,
                lambda: self.draw_blocks(g * SEGMENT_BLOCKS, min((g + 1) * SEGMENT_BLOCKS, blocks)))


def stacked(streams: Sequence[CounterStream], start: int, n: int, dtype: np.dtype | type | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Steps [start, start + n) of every stream side by side: x (n, S, ...) and y (n, S, ...),
    in `dtype` (default: the streams' own), written straight from the kept segments in one
    pass: a pack reads its chunks this way (joining per-seed copies, stacking and casting
    took twice as long). New arrays: a caller never holds (or edits) a kept segment."""
    kinds = len({(type(stream), stream.settings) for stream in streams})
    if kinds != 1:
        raise ValueError(f"stacked reads the streams of one task and settings (a pack's seeds), got {len(streams)} "
                         f"stream(s) of {kinds} task/settings pair(s)")
    # The segments this chunk starts (the node's workers divide their draws), then each stream's pieces.
    SHARED_SEGMENTS.gather([stream._wanted(g) for stream in streams for g in stream.segments(start, n)
                            if g not in stream._segments])
    spans = [list(stream._spans(start, n)) for stream in streams]
    first = spans[0][0][0]  # every stream of a pack is of one kind: the same shapes and dtypes
    x, y = (np.empty((n, len(streams), *a.shape[1:]), dtype or a.dtype) for a in first)
    for s, pieces in enumerate(spans):
        at = 0
        for (block_x, block_y), lo, hi in pieces:
            x[at : at + hi - lo, s] = block_x[lo:hi]
            y[at : at + hi - lo, s] = block_y[lo:hi]
            at += hi - lo
    return x, y
