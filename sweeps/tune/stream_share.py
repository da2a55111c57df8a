"""A node's stream segments drawn once and read by all its workers, through Ray's object store.

Every worker of a node reads the same seeds' streams, and drawing them is most of a small pack's time
(a 2M-step linear seed: 336 MB, about a second). For one Tune experiment the driver starts a
`SegmentBoard` actor on each alive node (`node_boards`, ended with the experiment); a worker of that node
attaches to it (`attach`) as its process's `tasks.stream_cache.NodeSegments`. The board only keeps
accounts: who is drawing which segment, and a reference to each one published. A worker puts what it
draws into the object store (shared memory: the node's other workers map it without a copy) and hands
the board the reference; the board drops its oldest references past its budget (a share of the node's
object store), and Ray frees a segment once no worker holds it either.

Nothing here can change a result: a segment is the same arrays whoever draws it, and where the board
does not answer (it died, or a segment's owner did) a worker draws alone, as without a board.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections import OrderedDict
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tasks.stream_cache import SHARED_SEGMENTS, Claim, Segment, segment_bytes

STALE_SECONDS = 60.0  # a claim not published by then goes to the next asker (its drawer died or hangs)
# A board costs an actor (a process's start, about a CPU second): started only where drawing the experiment's streams
# once takes longer (at the dry run's rates), and there are slots to share them.
MIN_DRAW_SECONDS = 2.0
OBJECT_STORE_SHARE = 0.75  # of a node's object store, the most its board keeps published (more spills to disk)


@ray.remote(num_cpus=0)
class SegmentBoard:
    """Who draws which segment of a node, and the published ones (references, oldest dropped past the budget)."""

    def __init__(self, budget_bytes: int):
        self._budget = budget_bytes
        self._used = 0
        self._published: OrderedDict[str, tuple[list, int]] = OrderedDict()  # key -> ([ref], bytes)
        self._drawing: dict[str, float] = {}  # key -> when it was claimed
        self._events: dict[str, asyncio.Event] = {}  # key -> set when it is published or released

    async def claim(self, key: str, wait: bool) -> list | str:
        """[ref] of a published segment (in a list: the reference travels unresolved), "draw" (the caller is now
        its drawer), or "busy" (another is drawing it, and the caller does not `wait`)."""
        while True:
            if key in self._published:
                self._published.move_to_end(key)
                return self._published[key][0]
            now = time.monotonic()
            since = self._drawing.get(key)
            if since is None or now - since >= STALE_SECONDS:
                self._drawing[key] = now
                return "draw"
            if not wait:
                return "busy"
            event = self._events.setdefault(key, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), since + STALE_SECONDS - now)
            except asyncio.TimeoutError:
                pass

    def publish(self, key: str, ref: list, nbytes: int) -> None:
        self._drawing.pop(key, None)
        if key not in self._published:
            self._published[key] = (ref, nbytes)
            self._used += nbytes
            while self._used > self._budget and len(self._published) > 1:
                self._used -= self._published.popitem(last=False)[1][1]
        self._wake(key)

    def release(self, key: str) -> None:
        """The drawer gave up (its draw raised): the next claim draws it."""
        self._drawing.pop(key, None)
        self._wake(key)

    def forget(self, key: str) -> None:
        """A published segment could not be read (its owner, the worker that drew it, is gone)."""
        if key in self._published:
            self._used -= self._published.pop(key)[1]

    def _wake(self, key: str) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()


class BoardShare:
    """A worker's side of its node's board (`tasks.stream_cache.NodeSegments`); one that stops answering
    leaves the worker drawing alone."""

    def __init__(self, board: Any, prefix: str):
        self._board = board
        self.prefix = prefix  # the boards' name: one per Tune experiment
        self.alive = True

    def claim(self, key: str, wait: bool) -> Claim:
        for _ in range(2):  # a second time after forgetting a segment whose owner is gone
            if not self.alive:
                return "draw"
            try:
                answer = ray.get(self._board.claim.remote(key, wait))
                return answer if isinstance(answer, str) else ray.get(answer[0])
            except ray.exceptions.ObjectLostError:
                self._call("forget", key)
            except ray.exceptions.RayActorError:
                self.alive = False
        return "draw"

    def publish(self, key: str, segment: Segment) -> Segment:
        if not self.alive:
            return segment
        ref = ray.put(segment)
        self._call("publish", key, [ref], segment_bytes(segment))
        return ray.get(ref)  # the shared copy: this process's drawn arrays can go

    def release(self, key: str) -> None:
        self._call("release", key)

    def _call(self, method: str, *args: Any) -> None:
        if self.alive:
            try:
                ray.get(getattr(self._board, method).remote(*args))
            except ray.exceptions.RayActorError:
                self.alive = False


def node_boards(draw_seconds: float = math.inf, slots: int = 2) -> tuple[str | None, list]:
    """A board on every alive node, named PREFIX-NODE_ID with a fresh prefix; returns the prefix the trials
    attach with and the boards' handles (the caller ends them: `end_boards`). Each keeps at most
    OBJECT_STORE_SHARE of its node's object store. None and no boards where nothing would be shared: one slot,
    or streams drawn in under MIN_DRAW_SECONDS (`draw_seconds`: drawing each once)."""
    if slots < 2 or draw_seconds < MIN_DRAW_SECONDS:
        return None, []
    prefix = f"fade-stream-segments-{uuid.uuid4().hex[:12]}"
    boards = []
    for node in ray.nodes():
        if node.get("Alive"):
            budget = int(OBJECT_STORE_SHARE * node.get("Resources", {}).get("object_store_memory", 0))
            placement = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            boards.append(SegmentBoard.options(name=f"{prefix}-{node['NodeID']}", scheduling_strategy=placement)
                          .remote(budget))
    return prefix, boards


def end_boards(boards: list) -> None:
    for board in boards:
        ray.kill(board)


def attach(prefix: str | None) -> None:
    """Read this worker's streams through its node's board named by `prefix` (None: alone). Once per process
    and prefix: a reused trial actor keeps its attachment."""
    current = SHARED_SEGMENTS.node
    if isinstance(current, BoardShare) and current.prefix == prefix and current.alive:
        return
    SHARED_SEGMENTS.node = None
    if prefix is None:
        return
    try:
        board = ray.get_actor(f"{prefix}-{ray.get_runtime_context().get_node_id()}")
    except ValueError:  # a node that joined after the experiment started has no board
        return
    SHARED_SEGMENTS.node = BoardShare(board, prefix)
