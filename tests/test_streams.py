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
from tasks.stream import SHARED_BLOCKS, BlockCache, stacked
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
def test_a_block_is_drawn_once_per_process_and_shared_by_the_streams_of_its_seed(case, emnist_dir, monkeypatch):
    SHARED_BLOCKS.clear()
    stream = _stream(case, emnist_dir)
    drawn = []
    draw = type(stream)._block
    monkeypatch.setattr(type(stream), "_block", lambda self, b: drawn.append((self.seed, b)) or draw(self, b))
    first = stream.chunk(4000, 200)  # blocks 0 and 1
    again = _stream(case, emnist_dir).chunk(4000, 200)  # another pack's stream of the seed: from the cache
    other_seed = _stream(case, emnist_dir, seed=1).chunk(4000, 200)
    assert drawn == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert torch.equal(first.x, again.x) and torch.equal(first.y, again.y)
    assert not torch.equal(first.y, other_seed.y)
    SHARED_BLOCKS.clear()
    drawn.clear()
    assert torch.equal(_stream(case, emnist_dir).chunk(4000, 200).x, first.x) and len(drawn) == 2  # drawn anew, same


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


def test_block_cache_keeps_a_too_large_group_s_first_blocks_and_evicts_old_groups():
    block = (np.zeros(10), np.zeros(6))  # 128 bytes
    cache = BlockCache(budget_bytes=2 * 128)
    made = []

    def get(group, key):
        return cache.get(group, key, lambda: made.append((group, key)) or tuple(a.copy() for a in block))

    for _ in range(2):  # a group read start to end twice: the first two blocks hit the second time
        for key in range(4):
            get("a", key)
    assert made == [("a", k) for k in range(4)] + [("a", 2), ("a", 3)] and cache.used == 256
    assert not get("a", 0)[0].flags.writeable  # a stored block is read-only
    get("b", 0)  # a new group evicts the least recently used other groups
    made.clear()
    get("b", 0), get("a", 0)
    assert made == [("a", 0)] and cache.used == 128 + 128
    off = BlockCache(budget_bytes=0)
    assert off.get("a", 0, lambda: block) is block and off.used == 0


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
