"""The GPU check's bundle (benchmarks/gpu_bundle.py, gpu_bundle.sh): derived from pyproject.toml, and
enough for the run path on the GPU image.

The run-path test replays what a GPU sweep's processes import (tests/run_path_probe.py) in a fresh
interpreter that sees only the image's packages and the bundle's: every other installed
distribution is hidden from its imports, as it is on the device machine. An optional import a
library guards (jsonschema's format checkers, say) then fails there as it would on the image; a
needed one fails the probe. Nothing is downloaded: the bundle's file list comes from the installed
distributions' RECORDs, the versions gpu_bundle.sh fetches.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_bundle  # noqa: E402

# What a fresh interpreter loads that belongs to no distribution: the standard library, the project,
# Cython's per-module runtime, an editable install's finder.
PROJECT = {"fade_core", "tasks", "sweeps", "cluster", "tests"}
GENERATED = ("_cython_", "cython_runtime", "_cyutility", "__editable__", "_sysconfigdata_", "__main__", "__mp_main__")

_HIDE = """
import importlib.abc, importlib.metadata as md, json, runpy, sys
allowed = set(json.loads(sys.argv[1]))
owners = md.packages_distributions()
hidden = sorted(n for n, dists in owners.items() if n not in allowed)

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image nor in the bundle)", name=name)
        return None

sys.meta_path.insert(0, Hide())
sys.argv = ["run_path_probe", *sys.argv[2:]]
runpy.run_module("tests.run_path_probe", run_name="__main__")
"""


def _carried_file(file: str | None) -> str | None:
    """The top-level entry of site-packages a module file lies in (Ray's vendored psutil and
    colorama live under ray/), or None."""
    parts = Path(file).parts if file else ()
    return parts[parts.index("site-packages") + 1] if "site-packages" in parts[:-1] else None


def _normalised(names) -> set[str]:
    return {gpu_bundle.norm(n) for n in names}


def test_the_bundle_is_pyprojects_closure_less_the_image():
    image, carried = gpu_bundle.image_packages(), gpu_bundle.carried()
    direct = {gpu_bundle.norm(r.name) for r in gpu_bundle.project_requirements()}
    # every direct dependency is on the image or carried; nothing carried is on the image
    assert direct <= image | set(carried), direct - image - set(carried)
    assert not set(carried) & image
    # the ones the image lacks, named in pyproject.toml (plotly was missing from the hand-made list)
    assert {"ray", "polars", "plotly", "pydantic"} <= set(carried)
    assert {"torch", "numpy", "pyarrow", "pyyaml", "rich", "numba"} <= image
    assert "pydantic-core" in carried  # pydantic's own need, found through the installed metadata
    assert "py-spy" not in carried


def test_closure_names_a_missing_distribution(tmp_path):
    from packaging.requirements import Requirement

    with pytest.raises(ValueError, match="no-such-dist-xyz .needed by pyproject.toml. is not installed here"):
        gpu_bundle.closure([Requirement("no-such-dist-xyz>=1")], frozenset())
    # markers are the image's (Python 3.12), not this interpreter's
    assert gpu_bundle.closure([Requirement("polars; python_version < '3.12'")], frozenset()) == {}
    assert "polars" in gpu_bundle.closure([Requirement("polars; python_version >= '3.12'")], frozenset())


def test_every_import_of_the_run_path_resolves_from_the_image_and_the_bundle(tmp_path):
    from importlib.metadata import packages_distributions

    from tests.emnist_fixture import write_idx_dataset

    image, carried = gpu_bundle.image_packages(), gpu_bundle.carried()
    provided = gpu_bundle.provided_modules(carried)
    owners = packages_distributions()
    allowed = sorted(PROJECT | {n for n, dists in owners.items() if n in provided or _normalised(dists) & image})
    data = write_idx_dataset(tmp_path / "emnist", images=100)
    done = subprocess.run([sys.executable, "-c", _HIDE, json.dumps(allowed), str(data), str(tmp_path / "store")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])["modules"]
    assert {"ray", "polars", "torch", "pydantic"} <= set(loaded)  # the probe ran the driver's and a worker's code
    standard = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    unknown = sorted(m for m, file in loaded.items() if m not in allowed and m not in standard
                     and not m.startswith(GENERATED) and _carried_file(file) not in provided)
    assert unknown == [], f"loaded, yet neither on the image, in the bundle nor in the standard library: {unknown}"
