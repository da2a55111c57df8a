"""Refusals before Ray starts: a check that needs no cluster never waits for one.

Each `fade-sweep run` here is a subprocess whose process tree is sampled while it lives
(Linux /proc): a refused run exits 2 with one line and never had a Ray daemon (`gcs_server`,
`raylet`) below it. A run that goes ahead holds the writer lock before its first Ray daemon
exists, so a second writer started meanwhile is refused at once, without a Ray of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cluster.local import descendants
from sweeps.store import StoreLocation

ROOT = Path(__file__).resolve().parents[1]
RAY_DAEMONS = {"gcs_server", "raylet"}
SWEEP = {
    "name": "refusals",
    "task": "linear_tracking",
    "task_settings": {"steps": 4000, "bin": 1000, "noise": 1.0},
    "seeds": 2,
    "optimizers": {"sgd": {"alpha": [0.01, 0.02]}},
}

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from Linux /proc")


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _ray_daemons(pid: int) -> set[str]:
    return {_name(p) for p in descendants({pid})} & RAY_DAEMONS


def _start(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)


def _refused(*args: str) -> str:
    """Run `fade-sweep run ARGS`, watching its process tree; it must exit 2 with one line and no Ray. Its stderr."""
    run = _start(*args)
    daemons: set[str] = set()
    while run.poll() is None:
        daemons |= _ray_daemons(run.pid)
        time.sleep(0.02)
    out, err = run.communicate()
    assert run.returncode == 2, out + err
    assert not daemons, f"Ray started before the refusal: {daemons}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fade-sweep: error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, Path, str]:
    """A run that goes ahead: it holds the writer lock before its first Ray daemon exists, and a second
    writer started while its Ray starts is refused without a Ray of its own. Returns (sweep file, storage,
    the second writer's error line) once the first run has finished."""
    root = tmp_path_factory.mktemp("refusals")
    sweep = root / "refusals.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    storage = root / "store"
    results_dir = storage / SWEEP["name"]
    run = _start(str(sweep), "--storage", str(storage), "--num-cpus", "1", "--no-report")
    deadline = time.monotonic() + 120
    while not _ray_daemons(run.pid):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.01)
    holder = StoreLocation.parse(results_dir).writer_lock().holder()  # sampled as soon as a Ray daemon of the run exists
    assert holder is not None and holder.pid == run.pid, "the writer lock was not held before Ray started"
    second = _refused(str(sweep), "--storage", str(storage), "--resume")
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out + err
    return sweep, storage, second


def test_a_second_writer_is_refused_before_its_ray_starts(first):
    _, storage, second = first
    assert f"{storage / SWEEP['name']} is being written by pid " in second


@pytest.mark.parametrize("change", ["dtype", "task_settings"])
def test_a_resume_that_changes_what_stored_runs_mean_is_refused_before_ray(first, tmp_path, change):
    sweep, storage, _ = first
    if change == "dtype":
        line = _refused(str(sweep), "--storage", str(storage), "--resume", "--dtype", "float64")
        assert "dtype: " in line and "holds float32 runs and this run asks for float64; rerun with --dtype float32" in line
        return
    edited = tmp_path / "refusals.yaml"
    edited.write_text(yaml.safe_dump({**SWEEP, "task_settings": {**SWEEP["task_settings"], "noise": 0.0}}))
    line = _refused(str(edited), "--storage", str(storage), "--resume")
    assert "task_settings.noise: changed from 1.0 to 0.0" in line


@pytest.fixture
def immutable(tmp_path):
    """A folder nobody may create files in: immutable (chattr +i) for root, read-only for others."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make an immutable folder here as root (chattr: {made.stderr.strip()})")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("where", ["empty", "proc", "immutable", "immutable-inside"])
def test_an_unwritable_storage_is_refused_before_ray(where, tmp_path, request):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    cwd_before = set(ROOT.iterdir())
    if where == "empty":
        line = _refused(str(sweep), "--storage", "")
        assert line == "fade-sweep: error: storage '': an empty path names no folder; give a folder (e.g. results) or s3://BUCKET/PREFIX"
        assert set(ROOT.iterdir()) == cwd_before  # nothing written into the current folder
        return
    if where == "proc":
        storage = Path("/proc/self/fade-store")
    else:
        folder = request.getfixturevalue("immutable")
        storage = folder if where == "immutable" else folder / "deeper"
    line = _refused(str(sweep), "--storage", str(storage))
    assert line.startswith(f"fade-sweep: error: storage {storage / SWEEP['name']} is not writable (") and \
        line.endswith("); choose another --storage"), line
    if where != "proc":
        assert not list(request.getfixturevalue("immutable").iterdir())  # nothing half-written
