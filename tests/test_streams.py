"""What every stream of tasks/ promises: random access, one batch type, inputs(), fixed values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tasks import (
    TASKS,
    Chunk,
    EmnistSettings,
    LinearTrackingSettings,
    LinearTrackingStream,
    NonlinearTrackingSettings,
    NonlinearTrackingStream,
    PartialEmnistSettings,
    make_stream,
)
from tasks.stream import SEGMENT_STEPS, stacked
from tasks.stream_cache import SHARED_SEGMENTS, SegmentCache
from tests.emnist_fixture import write_idx_dataset


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory):
    return str(write_idx_dataset(tmp_path_factory.mktemp("emnist"), images=470))


# name -> (task, settings of 10,000 steps, x dtype, x shape per step, y dtype, y shape per step)
STREAMS = {
    "linear": ("linear_tracking", {"noise": 1.0, "steps": 10_000}, torch.float64, (20,), torch.float64, ()),
    "nonlinear": ("nonlinear_tracking", {"steps": 10_000, "score_window": 1000, "period": 500, "bin": 1000},
                  torch.float32, (32,), torch.float32, (20,)),
    "emnist": ("emnist_label_permuted", {"steps": 10_000, "period": 2500}, torch.int64, (), torch.int64, ()),
    "emnist_partial": ("emnist_partial_permuted", {"steps": 10_000, "period": 2500}, torch.int64, (), torch.int64, ()),
}


def _stream(case, emnist_dir, seed=0):
    task, settings = STREAMS[case][:2]
    if task.startswith("emnist"):
        settings = {**settings, "data_dir": emnist_dir}
    return make_stream(task, settings, seed)


@pytest.mark.parametrize("start", [0, 3700])  # 3700: the pieces cross a block boundary
@pytest.mark.parametrize("case", STREAMS)
def test_one_chunk_equals_chunks_joined(case, start, emnist_dir):
    whole = _stream(case, emnist_dir).chunk(start, 1000)
    fresh = _stream(case, emnist_dir)
    parts = [fresh.chunk(start + 400, 600), fresh.chunk(start, 400)]  # out of order, through the block cache
    assert torch.equal(torch.cat([parts[1].x, parts[0].x]), whole.x)
    assert torch.equal(torch.cat([parts[1].y, parts[0].y]), whole.y)


@pytest.mark.parametrize("case", STREAMS)
def test_chunk_type_dtypes_and_shapes(case, emnist_dir):
    _, _, x_dtype, x_shape, y_dtype, y_shape = STREAMS[case]
    chunk = _stream(case, emnist_dir).chunk(100, 7)
    assert isinstance(chunk, Chunk)
    assert (chunk.x.dtype, chunk.x.shape) == (x_dtype, (7, *x_shape))
    assert (chunk.y.dtype, chunk.y.shape) == (y_dtype, (7, *y_shape))


@pytest.mark.parametrize("case", STREAMS)
def test_inputs_give_the_network_inputs(case, emnist_dir):
    stream = _stream(case, emnist_dir)
    x = stream.chunk(0, 5).x
    inputs = stream.inputs(x, "cpu", torch.float64)
    spec = TASKS[STREAMS[case][0]]
    width = spec.architecture.sizes[0] if spec.architecture else 20
    assert inputs.dtype == torch.float64 and inputs.shape == (5, width)


@pytest.mark.parametrize("case", STREAMS)
def test_a_chunk_is_a_copy_not_the_cached_block(case, emnist_dir):
    stream = _stream(case, emnist_dir)
    first = stream.chunk(0, 10)
    expected = first.x.clone()
    first.x.zero_()
    assert torch.equal(stream.chunk(0, 10).x, expected)


@pytest.mark.parametrize("case", STREAMS)
def test_a_segment_is_drawn_once_per_process_and_shared_by_the_streams_of_its_seed(case, emnist_dir, monkeypatch):
    SHARED_SEGMENTS.clear()
    stream = _stream(case, emnist_dir)
    drawn = []
    draw = type(stream)._block
    monkeypatch.setattr(type(stream), "_block", lambda self, b: drawn.append((self.seed, b)) or draw(self, b))
    first = stream.chunk(4000, 200)  # in blocks 0 and 1 of the one segment of 10,000 steps: blocks 0, 1 and 2
    again = _stream(case, emnist_dir).chunk(4000, 200)  # another pack's stream of the seed: from the cache
    other_seed = _stream(case, emnist_dir, seed=1).chunk(4000, 200)
    assert drawn == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert torch.equal(first.x, again.x) and torch.equal(first.y, again.y)
    assert not torch.equal(first.y, other_seed.y)
    SHARED_SEGMENTS.clear()
    drawn.clear()
    assert torch.equal(_stream(case, emnist_dir).chunk(4000, 200).x, first.x) and len(drawn) == 3  # drawn anew, same


def test_a_chunk_across_segments_equals_its_blocks_joined():
    """A long stream is kept in segments of SEGMENT_STEPS: a chunk over a segment's end is the blocks' steps."""
    stream = make_stream("linear_tracking", {"noise": 1.0, "steps": 2 * SEGMENT_STEPS + 5000, "bin": 1}, 4)
    start, n = SEGMENT_STEPS - 700, 2000
    got = stream.chunk(start, n)
    blocks = make_stream("linear_tracking", {"noise": 1.0, "steps": 2 * SEGMENT_STEPS + 5000, "bin": 1}, 4)
    first = start // 4096
    x, y = (np.concatenate(parts) for parts in zip(*blocks.draw_blocks(first, (start + n) // 4096 + 1)))
    at = start - first * 4096
    assert torch.equal(got.x, torch.from_numpy(x[at : at + n])) and torch.equal(got.y, torch.from_numpy(y[at : at + n]))
    assert list(stream.segments(start, n)) == [0, 1] and list(stream.segments(2 * SEGMENT_STEPS, 5000)) == [2]


class FakeBoard:
    """A node's board as `tasks.stream_cache.NodeSegments` promises it, in one process: `others` are segments
    another worker is drawing, which it publishes when a claim waits for them."""

    def __init__(self, others):
        self.published, self.drawing, self.others, self.asked = {}, set(), dict(others), []

    def claim(self, key, wait):
        self.asked.append((key, wait))
        if key in self.published:
            return self.published[key]
        if key in self.others:
            if not wait:
                return "busy"
            self.published[key] = self.others.pop(key)()  # the other worker publishes it
            return self.published[key]
        self.drawing.add(key)
        return "draw"

    def publish(self, key, segment):
        self.drawing.discard(key)
        self.published[key] = tuple(tuple(a.copy() for a in block) for block in segment)
        return self.published[key]

    def release(self, key):
        self.drawing.discard(key)


def test_a_node_s_workers_divide_the_segments_a_chunk_starts_and_read_each_other_s(monkeypatch):
    """Seeds 0 and 2 are being drawn by another worker: this one draws 1 and 3 first, then reads 0 and 2 from the
    board; every value is the stream's own."""
    settings = {"noise": 1.0, "steps": 10_000}  # one segment of three blocks
    streams = [make_stream("linear_tracking", settings, seed) for seed in range(4)]
    names = [stream._wanted(0)[2] for stream in streams]
    fresh = [make_stream("linear_tracking", settings, seed).draw_blocks(0, 3) for seed in range(4)]
    board = FakeBoard({names[s]: (lambda s=s: fresh[s]) for s in (0, 2)})
    cache = SegmentCache(budget_bytes=2**30)
    cache.node = board
    drawn = []
    draw = LinearTrackingStream._block
    monkeypatch.setattr(LinearTrackingStream, "_block", lambda self, b: drawn.append(self.seed) or draw(self, b))
    cache.gather([stream._wanted(0) for stream in streams])
    assert drawn == [1, 1, 1, 3, 3, 3]
    assert board.asked == [(names[0], False), (names[1], False), (names[2], False), (names[3], False),
                           (names[0], True), (names[2], True)]
    for seed, stream in enumerate(streams):
        kept = cache.get(*stream._wanted(0))
        assert len(kept) == 3 and all(np.array_equal(a, b) for k, f in zip(kept, fresh[seed]) for a, b in zip(k, f))
    assert drawn == [1, 1, 1, 3, 3, 3] and not board.drawing  # nothing drawn twice, every claim published


def test_a_failed_draw_gives_its_claim_back():
    board = FakeBoard({})
    cache = SegmentCache(budget_bytes=2**30)
    cache.node = board

    def fails():
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        cache.get("g", 0, "g:0", fails)
    assert not board.drawing  # released: the next claim draws it


@pytest.mark.parametrize("case", STREAMS)
def test_stacked_puts_each_seed_s_chunk_in_its_column_in_the_pack_s_dtype(case, emnist_dir):
    """What a pack reads per chunk (`stacked`): the seeds' steps side by side, across a block
    boundary, cast as a tensor cast would (float32 for the float tasks), and a copy."""
    streams = [_stream(case, emnist_dir, seed) for seed in (3, 0, 5)]
    start, n = 4000, 300  # blocks 0 and 1
    dtype = np.float32 if STREAMS[case][2].is_floating_point else None
    got = stacked(streams, start, n, dtype)
    for part in (0, 1):  # x, y: each stream's blocks drawn afresh and joined by hand
        columns = [np.concatenate([s._block(0)[part], s._block(1)[part]])[start : start + n] for s in streams]
        expected = torch.stack([torch.from_numpy(c) for c in columns], dim=1)
        if dtype is not None:
            expected = expected.to(torch.float32)
        assert torch.equal(torch.from_numpy(got[part]), expected)
    kept = streams[1].chunk(start, n).x.clone()
    got[0][:] = 0
    assert torch.equal(streams[1].chunk(start, n).x, kept)  # the cached blocks are untouched
    assert [a.shape[:2] for a in stacked(streams, start, 0)] == [(0, 3), (0, 3)]
    with pytest.raises(ValueError, match="streams of one task and settings"):
        stacked([], start, n)


def test_stacked_refuses_streams_of_different_tasks(emnist_dir):
    with pytest.raises(ValueError, match="streams of one task and settings"):
        stacked([_stream("linear", emnist_dir), _stream("emnist", emnist_dir)], 0, 10)


def test_segment_cache_keeps_a_too_large_group_s_first_segments_and_evicts_old_groups():
    segment = ((np.zeros(10), np.zeros(6)),)  # one block, 128 bytes
    cache = SegmentCache(budget_bytes=2 * 128)
    made = []

    def get(group, key):
        return cache.get(group, key, f"{group}:{key}", lambda: made.append((group, key)) or tuple(tuple(a.copy() for a in b) for b in segment))

    for _ in range(2):  # a group read start to end twice: the first two segments hit the second time
        for key in range(4):
            get("a", key)
    assert made == [("a", k) for k in range(4)] + [("a", 2), ("a", 3)] and cache.used == 256
    assert not get("a", 0)[0][0].flags.writeable  # a stored segment is read-only
    get("b", 0)  # a new group evicts the least recently used other groups
    made.clear()
    get("b", 0), get("a", 0)
    assert made == [("a", 0)] and cache.used == 128 + 128
    off = SegmentCache(budget_bytes=0)
    assert off.get("a", 0, "a:0", lambda: segment) is segment and off.used == 0


@pytest.mark.parametrize("case", STREAMS)
def test_out_of_range_chunk_rejected(case, emnist_dir):
    with pytest.raises(ValueError, match=r"steps \[9990, 10010\) outside the stream's 10000 steps"):
        _stream(case, emnist_dir).chunk(9990, 20)


# Values of seed 0 computed by the streams before tasks/stream.py existed: the shared base
# must reproduce every stream bit for bit (runs already stored depend on it).
GOLDEN = {
    # steps 0, 1, 2, 5000 of y (nonlinear: outputs 0, 1, 2, 19 of those steps), and x[5000, 3]
    "linear": ([-0.04478487354593075, -3.834304372079427, -0.6593505272945452, -0.6141270878709812],
               0.2995200060545717),
    "nonlinear": ([0.32548463344573975, 0.14551617205142975, -0.10798586905002594, 0.03572234511375427],
                  0.9811294674873352),
}
GOLDEN_EMNIST = {  # image indices and permuted labels of steps 0, 1, 2, 5000
    "emnist": ([399, 299, 240, 336], [43, 21, 17, 25]),
    "emnist_partial": ([399, 299, 240, 336], [24, 17, 5, 39]),
}


@pytest.mark.parametrize("case", GOLDEN)
def test_golden_values(case, emnist_dir):
    x, y = _stream(case, emnist_dir).chunk(0, 10_000)
    steps = [0, 1, 2, 5000]
    picked = y[steps] if y.ndim == 1 else y[steps, [0, 1, 2, 19]]
    targets, x_value = GOLDEN[case]
    assert torch.equal(picked, torch.tensor(targets, dtype=y.dtype))
    assert x[5000, 3].item() == x_value


@pytest.mark.parametrize("case", GOLDEN_EMNIST)
def test_golden_values_emnist(case, emnist_dir):
    index, target = _stream(case, emnist_dir).chunk(0, 10_000)
    steps = [0, 1, 2, 5000]
    assert (index[steps].tolist(), target[steps].tolist()) == GOLDEN_EMNIST[case]


def test_make_stream_from_a_mapping_or_settings(emnist_dir):
    from_mapping = make_stream("linear_tracking", {"noise": 1, "steps": 500}, seed=4)
    assert isinstance(from_mapping, LinearTrackingStream)
    assert from_mapping.settings == LinearTrackingSettings(noise=1.0, steps=500)
    settings = NonlinearTrackingSettings(steps=1000, score_window=1000, bin=1000)
    assert isinstance(make_stream("nonlinear_tracking", settings, seed=1), NonlinearTrackingStream)
    partial = make_stream("emnist_partial_permuted", {"data_dir": emnist_dir}, seed=0)
    assert isinstance(partial.settings, PartialEmnistSettings) and len(partial.stable) == 24
    assert make_stream("emnist_label_permuted", EmnistSettings(data_dir=emnist_dir)).stable.size == 0
    with pytest.raises(ValueError, match="unknown setting"):
        make_stream("linear_tracking", {"nosie": 1.0})
    with pytest.raises(ValueError, match="unknown task"):
        make_stream("linear", {})


def test_tasks_imports_no_sweeps_cluster_or_ray():
    code = "import sys, tasks; print(sorted({m.split('.')[0] for m in sys.modules} & {'sweeps', 'cluster', 'ray'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1]).stdout
    assert out.strip() == "[]"
