"""`fade-sweep status STORAGE`: the sweeps of a storage, each with its task, state, runs and last change;
`status --watch`: the view printed until the sweep ends, Ctrl-C stopping only the watching."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweeps.cli import main
from sweeps.store import Store
from sweeps.store.listing import list_sweeps
from sweeps.store.location import StoreLocation
from sweeps.store.records import SweepStatus
from tests.helpers import write_known_store

ROOT = Path(__file__).resolve().parents[1]
DOC = {
    "task": "linear_tracking",
    "task_settings": {"steps": 4, "bin": 2},
    "seeds": 2,
    "optimizers": {"sgd": {"alpha": [0.1, 0.01]}},
}
ALL = {("sgd", (0.1,)): [1.0, 2.0], ("sgd", (0.01,)): [3.0, 4.0]}
HALF = {("sgd", (0.1,)): [1.0, 2.0]}


def _sweep(storage: Path, name: str, scores: dict, state: str | None, driver_pid: int | None = None) -> Path:
    folder = write_known_store(storage / name, {**DOC, "name": name}, scores)
    if state is not None:
        now = time.time()
        status = SweepStatus(name, state, now - 60, now, 16, driver_pid=driver_pid or os.getpid())
        status.write(Store.open(folder).location)
    return folder


@pytest.fixture
def storage(tmp_path) -> Path:
    """Four sweeps: running (this process is its driver), interrupted, finished, damaged (a manifest cut short)."""
    _sweep(tmp_path, "a-running", HALF, "running")
    _sweep(tmp_path, "b-interrupted", HALF, "interrupted")
    _sweep(tmp_path, "c-finished", ALL, "finished")
    damaged = _sweep(tmp_path, "d-damaged", ALL, "finished")
    manifest = sorted((damaged / "manifests").iterdir())[0]
    manifest.write_text(manifest.read_text()[:40])
    (tmp_path / "not-a-sweep").mkdir()  # a folder without results is left out
    return tmp_path


def test_a_storage_lists_its_sweeps_with_their_state(storage, capsys):
    entries = {e.name: e for e in list_sweeps(StoreLocation.parse(storage))}
    assert list(entries) == ["a-running", "b-interrupted", "c-finished", "d-damaged"]
    assert {n: e.state for n, e in entries.items()} == {
        "a-running": "running", "b-interrupted": "interrupted", "c-finished": "finished", "d-damaged": "damaged"}
    assert {n: (e.runs_done, e.runs_total) for n, e in entries.items()} == {
        "a-running": (2, 4), "b-interrupted": (2, 4), "c-finished": (4, 4), "d-damaged": (2, 4)}  # a damaged manifest's runs: missing
    assert all(e.tasks == ("linear_tracking",) and time.time() - e.last_change < 60 for e in entries.values())
    assert "damaged manifest" in entries["d-damaged"].damage and "--resume" in entries["d-damaged"].damage
    assert main(["status", str(storage)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{storage}: 4 sweeps" and out[1].split() == ["sweep", "task", "state", "runs", "done", "last", "change"]
    assert out[2].split()[:6] == ["a-running", "linear_tracking", "running", "2", "of", "4"]
    assert out[5].split()[:6] == ["d-damaged", "linear_tracking", "damaged", "2", "of", "4"]
    assert out[6].startswith("d-damaged: damaged: skipped 1 damaged manifest")


def test_a_sweep_whose_driver_died_is_interrupted(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _sweep(tmp_path, "killed", HALF, "running", driver_pid=int(dead.stdout))
    (entry,) = list_sweeps(StoreLocation.parse(tmp_path))
    assert entry.state == "interrupted"


def test_watch_prints_until_the_sweep_ends(tmp_path, capsys):
    folder = _sweep(tmp_path, "w", HALF, "running")
    location = Store.open(folder).location

    def finish():
        time.sleep(1.5)
        now = time.time()
        SweepStatus("w", "finished", now - 60, now, 16).write(location)

    threading.Thread(target=finish).start()
    assert main(["status", str(folder), "--watch", "--every", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- ") >= 2 and "sweep w: running" in out and out.rstrip().splitlines()[-4].endswith("finished (updated 0 s ago)")


def test_ctrl_c_stops_only_the_watching(storage):
    # As from a terminal, Ctrl-C's default: a child inherits an ignored SIGINT, and in whole suites the test
    # process has had SIGINT ignored by the time this ran (the watcher then never heard it)
    watching = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "status", str(storage / "a-running"), "--watch"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert watching.stdout.readline().startswith("--- ")  # the first view is out
    time.sleep(1)
    assert watching.poll() is None  # the sweep still runs (this process is its driver): still watching
    watching.send_signal(signal.SIGINT)
    try:
        out = watching.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        watching.kill()
        raise
    assert watching.returncode == 0 and out.rstrip().endswith("stopped watching (the sweep goes on)"), out
    assert Store.open(storage / "a-running").status().state == "running"
