"""The streams' segments kept for the packs that follow: in this process, and shared by the processes of a node.

A worker runs pack after pack of one sweep, and those packs read the same seeds' streams (every
optimizer and configuration of a task sees the same seeds). Drawing is the expensive part: a 2M-step
linear seed is 336 MB and takes about a second, as long as the kernels of most small packs. So a
segment is drawn once per process (`SegmentCache`, up to a byte budget) and, where the process has a
`NodeSegments` attached (Ray workers: `sweeps/tune/stream_share.py`), once per node: the workers of a
node divide each chunk's segments between them, each drawing the ones nobody else is drawing, and read
the others' from shared memory.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from typing import Callable, Hashable, Literal, Protocol, Sequence, Union

import numpy as np

STREAM_CACHE_MB = "FADE_STREAM_CACHE_MB"  # environment variable: the process-wide cache's budget (0: off)
MIN_STREAM_CACHE_MB = 512  # the budget where the machine's memory cannot be read, and the least default
MEMORY_SHARE = 1 / 3  # of the machine's memory, shared by the workers a pack per CPU makes, is the default budget

Segment = tuple[tuple[np.ndarray, ...], ...]  # a segment's blocks, each its x and y; kept read-only
Claim = Union[Segment, Literal["draw", "busy"]]


class NodeSegments(Protocol):
    """Segments shared by the processes of one node, each drawn by one of them.

    `claim(key, wait)` answers the segment if it is published; "draw" if the caller is now the one to draw
    it (it must `publish` it, or `release` the claim if drawing fails); "busy" if another process is
    drawing it and `wait` is False (with `wait`, the call returns when it is published, or answers "draw"
    when its drawer has not published it in time: a drawer that died). A node share that stops answering
    answers "draw": the caller draws alone, as without one."""

    def claim(self, key: str, wait: bool) -> Claim: ...

    def publish(self, key: str, segment: Segment) -> Segment:
        """Publish a drawn segment; returns the shared copy to read (the drawn arrays may then be freed)."""

    def release(self, key: str) -> None:
        """Give a claim back unpublished (the draw failed): the next claim of `key` draws it."""


class SegmentCache:
    """Segments kept for every stream of this process, up to a byte budget, and the node's share.

    Segments are grouped by stream kind and settings. A new group evicts the least recently used
    other groups; a group larger than the budget keeps its first segments and draws the rest each
    time (evicting inside a group that is read start to end, pack after pack, would leave no
    segment to hit). Segments are stored read-only; `CounterStream.chunk` hands out copies.
    """

    def __init__(self, budget_bytes: int | None):
        self.budget = budget_bytes  # None: stream_cache_budget(), read on first use
        self.used = 0
        self.node: NodeSegments | None = None  # attached by a Ray worker (sweeps/tune/stream_share.py)
        self._groups: OrderedDict[Hashable, dict[Hashable, Segment]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, group: Hashable, key: Hashable, name: str, draw: Callable[[], Segment]) -> Segment:
        """The segment `key` of `group`: kept here, else the node's (`name` is its node-wide key), else `draw()`n."""
        kept = self._kept(group, key)
        if kept is not None:
            return kept
        if self.node is None:
            return self._keep(group, key, draw())
        claim = self.node.claim(name, wait=True)
        return self._keep(group, key, self._drawn(name, draw) if claim == "draw" else claim)

    def gather(self, wanted: Sequence[tuple[Hashable, Hashable, str, Callable[[], Segment]]]) -> None:
        """Bring every wanted segment (group, key, node-wide name, draw) here, sharing the draws with the
        node's other processes: the ones another process is drawing are taken last, after those this
        process draws, so workers reading the same seeds at once divide them rather than wait in turn."""
        if self.node is None:
            return
        later = []
        for group, key, name, draw in wanted:
            if self._kept(group, key) is not None:
                continue
            claim = self.node.claim(name, wait=False)
            if claim == "busy":
                later.append((group, key, name, draw))
            else:
                self._keep(group, key, self._drawn(name, draw) if claim == "draw" else claim)
        for group, key, name, draw in later:
            self.get(group, key, name, draw)

    def _drawn(self, name: str, draw: Callable[[], Segment]) -> Segment:
        try:
            segment = draw()
        except BaseException:
            self.node.release(name)
            raise
        return self.node.publish(name, segment)

    def _kept(self, group: Hashable, key: Hashable) -> Segment | None:
        with self._lock:
            segments = self._groups.get(group)
            if segments is None:
                return None
            self._groups.move_to_end(group)
            return segments.get(key)

    def _keep(self, group: Hashable, key: Hashable, segment: Segment) -> Segment:
        size = segment_bytes(segment)
        with self._lock:
            if self.budget is None:
                self.budget = stream_cache_budget()
            segments = self._groups.setdefault(group, {})
            self._groups.move_to_end(group)
            while self.used + size > self.budget and len(self._groups) > 1:
                self._evict(next(iter(self._groups)))
            if key not in segments and self.used + size <= self.budget:
                for block in segment:
                    for array in block:
                        array.flags.writeable = False
                segments[key] = segment
                self.used += size
            return segments.get(key, segment)

    def _evict(self, group: Hashable) -> None:
        self.used -= sum(segment_bytes(segment) for segment in self._groups.pop(group).values())

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()
            self.used = 0


def segment_bytes(segment: Segment) -> int:
    return sum(array.nbytes for block in segment for array in block)


def stream_cache_budget() -> int:
    """Bytes the segments of this process may take: $FADE_STREAM_CACHE_MB MiB (0: none), by default a third of this
    machine's memory over its CPUs (a worker per CPU; at least MIN_STREAM_CACHE_MB). Why that much: a 2M-step
    linear stream is 336 MB a seed, and a worker that cannot keep its sweep's seeds draws them again for every
    pack (1.2 s a seed, more than most packs' kernels), so on a 24 GiB, 2-CPU machine ten such seeds fit
    (4 GiB a worker) where 512 MiB held one. Raises ValueError naming the variable for anything but a finite
    number >= 0."""
    text = os.environ.get(STREAM_CACHE_MB)
    if text is None:
        return max(MIN_STREAM_CACHE_MB * 2**20, int(memory_bytes() * MEMORY_SHARE / (os.cpu_count() or 1)))
    try:
        mib = float(text)
    except ValueError:
        mib = math.nan
    if not (math.isfinite(mib) and mib >= 0):
        raise ValueError(f"{STREAM_CACHE_MB}={text!r}: give the stream cache's size in MiB, a number >= 0 (0 turns it off)")
    return int(mib * 2**20)


def memory_bytes() -> int:
    """This machine's physical memory (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 0


SHARED_SEGMENTS = SegmentCache(None)
