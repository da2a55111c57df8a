"""Streams of any length cost per block what short ones do (issue 42), and paper-length streams keep their numbers.

The schedules (linear: which component flips; nonlinear: the teacher's sign changes) are made lazily by
segment (`tasks/schedule.py`). The references here are the tables as main drew them, whole and up front.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tasks import LinearTrackingSettings, LinearTrackingStream, NonlinearTrackingSettings, NonlinearTrackingStream
from tasks import get_task, linear_tracking, make_stream, nonlinear_tracking
from tasks.stream import counter_rng
from tests.emnist_fixture import write_idx_dataset

ROOT = Path(__file__).resolve().parents[1]
TRILLION = 10**12


def upfront_linear_weights(settings: LinearTrackingSettings, seed: int) -> np.ndarray:
    """(flips + 1, 5) relevant weights after k flips: main's table, every flip drawn at once."""
    signs0 = counter_rng(seed, 0).choice([-1.0, 1.0], size=5)
    flips = counter_rng(seed, 1).integers(0, 5, size=settings.steps // settings.period)
    onehot = np.zeros((len(flips) + 1, 5), dtype=np.int64)
    onehot[np.arange(1, len(flips) + 1), flips] = 1
    return signs0 * (1 - 2 * (np.cumsum(onehot, axis=0) % 2))


def upfront_signs(seed: int, purpose: int, changes: int, rows: int) -> np.ndarray:
    """(changes + 1, rows, 256) int8 sign patterns: main's table, every change drawn at once."""
    draws = counter_rng(seed, purpose).choice(np.array([-1, 1], dtype=np.int8), size=(changes + 1, rows, 256))
    draws[0] = 1
    return np.cumprod(draws, axis=0, dtype=np.int8)


@pytest.mark.parametrize("settings", [LinearTrackingSettings(), LinearTrackingSettings(noise=1.0, steps=2_000_000, period=7)])
def test_linear_streams_keep_the_numbers_of_the_whole_schedule_drawn_up_front(settings):
    stream = LinearTrackingStream(settings, seed=11)
    table = upfront_linear_weights(settings, 11)
    for start in (0, 4090, settings.steps // 2, settings.steps - 3000):
        steps = np.arange(start, start + 3000)
        np.testing.assert_array_equal(stream.target_weights(start, 3000)[:, :5], table[steps // settings.period])
        chunk = stream.chunk(start, 3000)
        expected = np.einsum("td,td->t", stream.target_weights(start, 3000), chunk.x.numpy())
        if settings.noise == 0:
            np.testing.assert_array_equal(chunk.y.numpy(), expected)


def test_nonlinear_streams_keep_the_teacher_of_the_whole_schedule_drawn_up_front():
    settings = NonlinearTrackingSettings()  # the paper's 2,000,000 steps
    stream = NonlinearTrackingStream(settings, seed=5)
    fast = upfront_signs(5, 2, settings.steps // settings.period, 7)
    slow = upfront_signs(5, 3, settings.steps // stream.slow_period, 7)
    for step in (0, 499, 500, 7_500, 1_000_000, settings.steps - 1):
        expected = stream.teacher_head.copy()
        expected[stream.groups["fast"]] *= fast[step // settings.period]
        expected[stream.groups["slow"]] *= slow[step // stream.slow_period]
        np.testing.assert_array_equal(stream.teacher_head_at(step), expected)


def test_a_linear_stream_is_version_1_s_up_to_its_shared_steps_and_not_after():
    """`shared_steps` (what a store's resume checks the stream version against) is where version 1's
    numbers, the whole flip table drawn up front, stop being version 2's."""
    settings = LinearTrackingSettings(steps=linear_tracking.shared_steps(LinearTrackingSettings()) + 20 * 4096)
    shared = linear_tracking.shared_steps(settings)
    version1 = upfront_linear_weights(settings, 4)
    stream = LinearTrackingStream(settings, seed=4)
    before, after = np.arange(shared - 3000, shared), np.arange(shared, settings.steps)
    np.testing.assert_array_equal(stream.target_weights(before[0], len(before))[:, :5], version1[before // 20])
    assert not np.array_equal(stream.target_weights(shared, len(after))[:, :5], version1[after // 20])
    assert get_task("linear_tracking").stream_version == linear_tracking.STREAM_VERSION == 2


def test_a_nonlinear_stream_is_version_1_s_up_to_its_shared_steps_and_not_after():
    settings = NonlinearTrackingSettings(steps=nonlinear_tracking.shared_steps(NonlinearTrackingSettings()) + 500 * 64,
                                         score_window=500)
    shared = nonlinear_tracking.shared_steps(settings)
    stream = NonlinearTrackingStream(settings, seed=5)
    fast = upfront_signs(5, 2, settings.steps // settings.period, 7)

    def version1(step: int) -> np.ndarray:  # the slow rows change 15 times less often: still in their shared part
        head = stream.teacher_head_at(step)
        head[stream.groups["fast"]] = stream.teacher_head[stream.groups["fast"]] * fast[step // settings.period]
        return head

    for step in (shared - 501, shared - 1):
        np.testing.assert_array_equal(stream.teacher_head_at(step), version1(step))
    assert not any(np.array_equal(stream.teacher_head_at(step), version1(step)) for step in range(shared, settings.steps, 500))
    assert get_task("nonlinear_tracking").stream_version == nonlinear_tracking.STREAM_VERSION == 2


@pytest.mark.parametrize("task, settings, past", [
    ("linear_tracking", {"period": 20}, (2**20 + 1) * 20),
    ("linear_tracking", {"period": 7}, (2**20 + 1) * 7),
    ("nonlinear_tracking", {"period": 500}, (2**13 + 1) * 500),
])
def test_a_stream_reaches_past_its_shared_steps_by_one_step(task, settings, past):
    spec = get_task(task)
    assert not spec.reaches_past_shared(spec.settings_type(**settings, steps=past))
    assert spec.reaches_past_shared(spec.settings_type(**settings, steps=past + 1))


def test_emnist_streams_have_one_version():
    for task in ("emnist_label_permuted", "emnist_partial_permuted"):
        spec = get_task(task)
        assert spec.stream_version == 1 and not spec.reaches_past_shared(spec.settings_type(steps=TRILLION))


def test_linear_far_schedule_flips_exactly_one_component_per_flip_across_every_seam():
    stream = LinearTrackingStream(LinearTrackingSettings(steps=TRILLION), seed=3)
    seams = [linear_tracking.LEGACY_FLIPS, linear_tracking.LEGACY_FLIPS + linear_tracking.FAR_FLIPS,
             TRILLION // 40 - TRILLION // 40 % linear_tracking.FAR_FLIPS]
    for seam in seams:
        parity = stream.parity.states(seam - 3000, seam + 3000).astype(int)
        assert (np.abs(np.diff(parity, axis=0)).sum(axis=1) == 1).all(), seam
    far = stream.parity.states(10**10, 10**10 + 200_000)
    assert set(np.unique(far)) == {0, 1} and 0.3 < far.mean() < 0.7  # every component moves, none stuck


def test_nonlinear_far_schedule_changes_every_period_and_stays_signs():
    stream = NonlinearTrackingStream(NonlinearTrackingSettings(steps=TRILLION, score_window=10**11), seed=3)
    seam = nonlinear_tracking.LEGACY_CHANGES
    patterns = stream._fast_signs.states(seam - 100, seam + 300)
    assert set(np.unique(patterns)) == {-1, 1}
    flipped = (np.diff(patterns.astype(int), axis=0) != 0).mean(axis=(1, 2))
    assert ((flipped > 0.35) & (flipped < 0.65)).all()  # each change multiplies every weight by a fresh sign


@pytest.mark.parametrize("task, settings", [
    ("linear_tracking", {"steps": TRILLION, "noise": 1.0}),
    ("nonlinear_tracking", {"steps": TRILLION, "score_window": 10**11}),
    ("emnist_label_permuted", {"steps": TRILLION}),
    ("emnist_partial_permuted", {"steps": TRILLION}),
])
def test_every_task_makes_a_block_far_along_a_trillion_step_stream(task, settings, tmp_path):
    if task.startswith("emnist"):
        settings = {**settings, "data_dir": str(write_idx_dataset(tmp_path, images=470))}
    stream = make_stream(task, settings, seed=2)
    chunk = stream.chunk(TRILLION // 2, 1000)
    again = make_stream(task, settings, seed=2).chunk(TRILLION // 2 + 400, 600)  # random access: a fresh stream agrees
    assert len(chunk.x) == 1000 and torch.equal(chunk.x[400:], again.x) and torch.equal(chunk.y[400:], again.y)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 * 2**20  # KiB: nowhere near a table of 1e12 steps


FIRST_CHUNK = """
import sys, torch
from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import make_config
from sweeps.spec.sweepfile import load_sweep
(experiment,) = load_sweep(sys.argv[1]).experiments
pack = Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), (0, 1))
progress = next(make_runner(pack, 10_000, torch.float32).run())
print(progress.steps_done)
"""
DATA_LIMIT = 2 * 2**30  # bytes of heap the commands below may take: main's 1e10-step dry run asked for 18.6 GiB


def _limited(command: list[str]) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))

    return subprocess.run(command, cwd=ROOT, preexec_fn=limit, capture_output=True, text=True, timeout=600)


def test_a_ten_billion_step_linear_sweep_s_dry_run_and_first_chunk_fit_in_two_gib(tmp_path):
    sweep = tmp_path / "long.yaml"
    sweep.write_text(yaml.safe_dump({"name": "long", "task": "linear_tracking", "seeds": 2,
                                     "task_settings": {"steps": 10**10, "bin": 10**8},
                                     "optimizers": {"sgd": {"alpha": [0.1, 0.05]}}}))
    dry = _limited([sys.executable, "-m", "sweeps.cli", "run", str(sweep), "--dry-run", "--num-cpus", "1",
                    "--storage", str(tmp_path / "results")])
    assert dry.returncode == 0, dry.stderr
    assert "Estimated wall time" in dry.stdout
    chunk = _limited([sys.executable, "-c", FIRST_CHUNK, str(sweep)])
    assert chunk.returncode == 0, chunk.stderr
    assert chunk.stdout.split() == ["10000"]
