"""The linear tracking stream of tasks.md: flips, relevant/irrelevant structure, noise, chunking."""

import numpy as np
import pytest
import torch

from tasks.linear_tracking import RELEVANT, LinearTrackingSettings, LinearTrackingStream


def test_flip_schedule_one_relevant_sign_per_period():
    stream = LinearTrackingStream(LinearTrackingSettings(steps=2000, period=20), seed=3)
    w = stream.target_weights(0, 2000)
    assert set(np.unique(w[:, :RELEVANT])) == {-1.0, 1.0}
    assert (w[:, RELEVANT:] == 0).all()  # irrelevant weights are 0 forever
    changes = (w[1:] != w[:-1]).sum(axis=1)
    flip_steps = np.flatnonzero(changes) + 1
    np.testing.assert_array_equal(flip_steps, np.arange(20, 2000, 20))  # after steps 20, 40, ...
    assert (changes[flip_steps - 1] == 1).all()  # exactly one component each time
    flipped = np.argmax(w[flip_steps] != w[flip_steps - 1], axis=1)
    assert set(flipped) == set(range(RELEVANT))  # uniform over the relevant ones (all hit in 99 flips)
    groups = {k: v.tolist() for k, v in stream.groups.items()}
    assert groups == {"relevant": [0, 1, 2, 3, 4], "irrelevant": list(range(5, 20))}


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_targets_and_noise_level(noise):
    stream = LinearTrackingStream(LinearTrackingSettings(noise=noise, steps=20000), seed=1)
    x, y = (v.numpy() for v in stream.chunk(0, 20000))
    residual = y - np.einsum("td,td->t", stream.target_weights(0, 20000), x)
    assert x.shape == (20000, 20)
    assert abs(x.std() - 1) < 0.02 and abs(x.mean()) < 0.02
    if noise == 0:
        assert np.abs(residual).max() < 1e-12
    else:
        assert abs(residual.std() - noise) < 0.03


def test_chunks_join_and_seeds_differ():
    settings = LinearTrackingSettings(steps=10000)
    a = LinearTrackingStream(settings, seed=7)
    whole_x, whole_y = a.chunk(0, 9000)
    parts = [LinearTrackingStream(settings, seed=7).chunk(s, n) for s, n in [(0, 400), (400, 4500), (4900, 4100)]]
    assert torch.equal(torch.cat([p.x for p in parts]), whole_x)
    assert torch.equal(torch.cat([p.y for p in parts]), whole_y)
    other_x, _ = LinearTrackingStream(settings, seed=8).chunk(0, 9000)
    assert not torch.allclose(other_x, whole_x)


def test_targets_at_the_stream_end():
    """The last block runs past the stream; its final steps still follow the schedule."""
    stream = LinearTrackingStream(LinearTrackingSettings(steps=5000, period=20), seed=2)
    x, y = stream.chunk(4990, 10)
    np.testing.assert_array_equal(y.numpy(), np.einsum("td,td->t", stream.target_weights(4990, 10), x.numpy()))


def test_out_of_range_chunk_rejected():
    with pytest.raises(ValueError, match="outside the stream"):
        LinearTrackingStream(LinearTrackingSettings(steps=100), seed=0).chunk(90, 20)
