"""A neural run's numbers do not depend on whether its process compiled the CPU kernel or
loaded it from numba's cache (fade_core/neural/cached_build.py says why they could)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from fade_core.neural import cached_build

ROOT = Path(__file__).resolve().parents[1]

# Adam and FADE on Adam (whose numbers differed) on the nonlinear task's network, float32.
PROBE = """
import sys
import numpy as np
import torch
from fade_core.neural import StepSums, make_runs
from tasks.nonlinear_tracking import STUDENT, NonlinearTrackingSettings, NonlinearTrackingStream

x, y = NonlinearTrackingStream(NonlinearTrackingSettings(steps=400, score_window=100, bin=100), 0).chunk(0, 400)
out = {}
for optimizer, hp in (("adam", {"alpha": [1e-3]}), ("fade_adam", {"alpha": [1e-3], "theta_lambda": [10.0], "gamma0": [-6.9]})):
    runs = make_runs(optimizer, STUDENT, [0], hp, "squared_error", dtype=torch.float32)
    sums = StepSums.zeros(1, STUDENT, "squared_error", "cpu")
    runs.advance(x[:, None], y[:, None], torch.zeros(1, dtype=torch.int64), sums)
    out[optimizer] = runs.net.flat.numpy().copy()
    out[optimizer + "_loss"] = sums.loss.numpy().copy()
np.savez(sys.argv[1], **out)
"""


def test_a_process_that_compiled_the_kernel_and_one_that_loaded_it_agree_to_the_bit(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba_cache"), "PYTHONPATH": str(ROOT)}
    results = []
    for name in ("compiled", "loaded"):  # an empty cache first, then the cache the first left
        path = tmp_path / f"{name}.npz"
        subprocess.run([sys.executable, "-c", PROBE, str(path)], env=env, cwd=ROOT, check=True, timeout=900)
        results.append(np.load(path))
    compiled, loaded = results
    assert any((tmp_path / "numba_cache").rglob("*.nbc"))  # the second process had a cached build to load
    for key in compiled.files:
        assert np.isfinite(compiled[key]).all(), key
        np.testing.assert_array_equal(compiled[key], loaded[key], err_msg=key)


@numba.njit
def _double(a):
    for i in range(a.shape[0]):
        a[i] *= 2.0


def test_a_child_that_fails_silently_is_a_warning_and_the_call_still_runs(monkeypatch):
    """A child killed or failing without a word (OOM killer, a broken interpreter) is still reported."""
    monkeypatch.setattr(cached_build, "_in_cache", lambda kernel, signature: False)
    monkeypatch.setattr(sys, "executable", shutil.which("false"))  # exits 1, prints nothing
    a = np.ones(3)
    with pytest.warns(RuntimeWarning, match=r"_double: compiling it in a child process failed \(exit status 1\)"):
        cached_build.call_cached(_double, a)
    assert a.tolist() == [2.0, 2.0, 2.0]
