"""What every test file shares: none inherits another's in-process Ray.

`bash .ci/run` runs the test files in parallel (pytest-xdist, `--dist loadfile`), so which files share a worker
process, and in which order, changes from run to run. A file whose in-process `fade-sweep run` or Ray left this
process connected would make the next file's own `ray.init` fail ("Maybe you called ray.init twice"): each
file's end shuts down a Ray this process still holds (one it started itself; no other process is touched)."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_to_the_next_file():
    yield
    ray = sys.modules.get("ray")  # never imported here for a file that did not
    if ray is not None and ray.is_initialized():
        ray.shutdown()


# The files whose tests take the longest (each a few minutes of Ray clusters, interrupts and resumes: `--durations`),
# handed out first: with one file per worker at a time, a long file left for last keeps one core busy alone.
LONGEST_FILES = ("test_race_runs.py", "test_interrupts.py", "test_cluster.py", "test_object_store.py",
                 "test_confirm.py", "test_end_to_end.py", "test_own_neural.py", "test_neural_learners.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in LONGEST_FILES)  # stable: a file's tests keep their order
