"""benchmarks/compare_stores.py, the check that two engines (CPU and GPU) gave the same scores:
rounding within tolerance passes; a run diverged on one side only, or bad arguments, do not."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_known_store

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {"name": "pair", "task": "linear_tracking", "task_settings": {"steps": 4, "bin": 2}, "seeds": 2,
         "optimizers": {"sgd": {"alpha": [0.1, 0.01]}}}


def _compare(*dirs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_stores.py"), *map(str, dirs)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("other, code, says", [
    ([1.0, 2.0, 3.0, math.inf], 0, "same numbers"),  # the same, a diverged run diverged on both sides
    ([1.0000001, 2.0, 3.0, math.inf], 0, "same numbers"),  # rounding
    ([1.01, 2.0, 3.0, math.inf], 1, "DIFFERENT"),  # beyond the tolerance
    ([1.0, 2.0, 3.0, 4.0], 1, "disagree on which runs diverged"),  # diverged on one side only
])
def test_scores_compared_within_tolerance_and_divergence_compared_exactly(tmp_path, other, code, says):
    base = [1.0, 2.0, 3.0, math.inf]
    stores = [write_known_store(tmp_path / name, SWEEP, {("sgd", (0.1,)): s[:2], ("sgd", (0.01,)): s[2:]})
              for name, s in (("a", base), ("b", other))]
    done = _compare(*stores)
    assert (done.returncode, says in done.stdout) == (code, True), done.stdout + done.stderr


@pytest.mark.parametrize("other, code", [([0.2, 0.205, 0.3, 0.3], 0), ([0.2, 0.2, 0.3, 0.312], 1)])
def test_accuracy_scores_are_compared_within_a_hundredth_of_the_predictions(tmp_path, other, code):
    """--accuracy: 0.2 against 0.205 is 2.5% relative (beyond RTOL) but half a hundredth: the same."""
    stores = [write_known_store(tmp_path / name, SWEEP, {("sgd", (0.1,)): s[:2], ("sgd", (0.01,)): s[2:]})
              for name, s in (("a", [0.2, 0.2, 0.3, 0.3]), ("b", other))]
    assert _compare(*stores).returncode == 1  # relative, by default
    done = _compare(*stores, "--accuracy")
    assert done.returncode == code and "accuracy tolerance 0.01 absolute" in done.stdout, done.stdout + done.stderr


def test_bad_arguments_are_one_line_exit_2(tmp_path):
    for args in ([], [tmp_path], [tmp_path / "none", tmp_path]):
        done = _compare(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
