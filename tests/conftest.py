"""Test distribution: `bash .ci/run` runs pytest on two workers (pytest-xdist, --dist loadgroup).

Every module that starts Ray (an embedded run, a local cluster, a job) is in one group, so
those tests run one after another on one worker: two Rays on two cores at once slow each
other past the interrupt tests' waits. Every other module is its own group (its module
fixtures are built once), and those run on the other worker meanwhile."""

from __future__ import annotations

import pytest

RAY_MODULES = {
    "test_architecture", "test_cluster", "test_cluster_configs", "test_confirm", "test_end_to_end", "test_interrupts",
    "test_neural_end_to_end", "test_object_store", "test_run_output", "test_store", "test_sweep_validation",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        item.add_marker(pytest.mark.xdist_group("ray" if module in RAY_MODULES else module))
