"""What every stream shares: counter-based generators, fixed blocks, random-access chunks.

A stream is a pure function of (settings, seed). Each random draw comes from its own
generator keyed by (seed, purpose, index), never from a generator that advances with
use, so the stream can be read from any step: samples are drawn in fixed blocks of
`BLOCK` steps and `chunk(start, n)` slices them. One chunk of 1000 steps therefore equals
chunks of 400 and 600 joined, and resuming at step t needs only t.
"""

from __future__ import annotations

import math
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterator, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

BLOCK = 4096  # steps per block; block indices key the generators, so changing it changes every stream
CACHED_BLOCKS = 4  # blocks kept per stream: consecutive chunks usually share one
STREAM_CACHE_MB = "FADE_STREAM_CACHE_MB"  # environment variable: the process-wide cache's budget (0: off)
MIN_STREAM_CACHE_MB = 512  # the budget where the machine's memory cannot be read, and the least default
MEMORY_SHARE = 1 / 3  # of the machine's memory, shared by the workers a pack per CPU makes, is the default budget


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
        self._blocks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

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

    def _spans(self, start: int, n: int) -> Iterator[tuple[tuple[np.ndarray, np.ndarray], int, int]]:
        """(block, first, last): the pieces of steps [start, start + n), in order, as steps
        [first, last) of cached blocks."""
        if start < 0 or n < 0 or start + n > self.settings.steps:
            raise ValueError(f"steps [{start}, {start + n}) outside the stream's {self.settings.steps} steps")
        for b in range(start // BLOCK, max(start, start + n - 1) // BLOCK + 1):
            yield self._cached_block(b), max(start - b * BLOCK, 0), min(start + n - b * BLOCK, BLOCK)

    def inputs(self, x: torch.Tensor, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """The network's inputs for a chunk's `x` (here `x` itself, moved and cast)."""
        return x.to(device, dtype)

    def _cached_block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        if b in self._blocks:
            self._blocks.move_to_end(b)
        else:
            if len(self._blocks) >= CACHED_BLOCKS:
                self._blocks.popitem(last=False)  # least recently used
            # (this per-stream LRU still serves consecutive chunks when the shared cache is full or off)
            self._blocks[b] = SHARED_BLOCKS.get((type(self), self.settings), (self.seed, b), lambda: self._block(b))
        return self._blocks[b]


def stacked(streams: Sequence[CounterStream], start: int, n: int, dtype: np.dtype | type | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Steps [start, start + n) of every stream side by side: x (n, S, ...) and y (n, S, ...),
    in `dtype` (default: the streams' own), written straight from the cached blocks in one
    pass: a pack reads its chunks this way (joining per-seed copies, stacking and casting
    took twice as long). New arrays: a caller never holds (or edits) a cached block."""
    kinds = len({(type(stream), stream.settings) for stream in streams})
    if kinds != 1:
        raise ValueError(f"stacked reads the streams of one task and settings (a pack's seeds), got {len(streams)} "
                         f"stream(s) of {kinds} task/settings pair(s)")
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


class BlockCache:
    """Blocks kept for every stream of this process, up to a byte budget.

    A worker runs pack after pack of one sweep, and those packs read the same seeds'
    streams (every optimizer and configuration of a task sees the same seeds): without this
    each pack would draw every block again (a sixth of a linear pack's time). Blocks are
    grouped by stream kind and settings. A new group evicts the least recently used other
    groups; a group larger than the budget keeps its first blocks and draws the rest each
    time (evicting inside a group that is read start to end, pack after pack, would leave
    no block to hit). Blocks are stored read-only; `CounterStream.chunk` hands out copies.
    """

    def __init__(self, budget_bytes: int | None):
        self.budget = budget_bytes  # None: stream_cache_budget(), read on first use
        self.used = 0
        self._groups: OrderedDict[Hashable, dict[Hashable, tuple[np.ndarray, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, group: Hashable, key: Hashable, make: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        with self._lock:
            blocks = self._groups.get(group)
            if blocks is not None:
                self._groups.move_to_end(group)
                if key in blocks:
                    return blocks[key]
        block = make()
        size = sum(a.nbytes for a in block)
        with self._lock:
            if self.budget is None:
                self.budget = stream_cache_budget()
            blocks = self._groups.setdefault(group, {})
            self._groups.move_to_end(group)
            while self.used + size > self.budget and len(self._groups) > 1:
                self._evict(next(iter(self._groups)))
            if key not in blocks and self.used + size <= self.budget:
                for array in block:
                    array.flags.writeable = False
                blocks[key] = block
                self.used += size
            return blocks.get(key, block)

    def _evict(self, group: Hashable) -> None:
        self.used -= sum(a.nbytes for block in self._groups.pop(group).values() for a in block)

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()
            self.used = 0


def stream_cache_budget() -> int:
    """Bytes the blocks of this process may take: $FADE_STREAM_CACHE_MB MiB (0: none), by default a third of this
    machine's memory over its CPUs (a worker per CPU; at least MIN_STREAM_CACHE_MB). Why that much: a 2M-step
    linear stream is 336 MB a seed, and a worker that cannot keep its sweep's seeds draws them again for every
    pack (1.2 s a seed, more than most packs' kernels), so on a 24 GiB, 2-CPU machine ten such seeds fit
    (4 GiB a worker) where 512 MiB held one. Raises ValueError naming the variable for anything but a finite
    number >= 0."""
    text = os.environ.get(STREAM_CACHE_MB)
    if text is None:
        return max(MIN_STREAM_CACHE_MB * 2**20, int(_memory_bytes() * MEMORY_SHARE / (os.cpu_count() or 1)))
    try:
        mib = float(text)
    except ValueError:
        mib = math.nan
    if not (math.isfinite(mib) and mib >= 0):
        raise ValueError(f"{STREAM_CACHE_MB}={text!r}: give the stream cache's size in MiB, a number >= 0 (0 turns it off)")
    return int(mib * 2**20)


def _memory_bytes() -> int:
    """This machine's physical memory (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 0


SHARED_BLOCKS = BlockCache(None)
