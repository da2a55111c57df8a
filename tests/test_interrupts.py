"""Results you can trust: honest interrupts, embedded means embedded, nothing executable read back.

Each test drives `fade-sweep run` in a subprocess (embedded Ray, --num-cpus 2) on a small
linear sweep of 6 packs and checks what a user sees: exit codes, messages, status.json,
the status command, and that a resumed sweep's scores equal an uninterrupted computation
bit for bit.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sweeps.store import Store
from sweeps.spec import parse_sweep
from sweeps.tune.resume import newest_checkpoints, recorded_packs
from tests.helpers import read_status_json, scores_in_process

# 6 configs x 2 seeds, 2 runs per pack: 6 packs of a few seconds each, 2 at a time.
SWEEP = {
    "name": "interrupts",
    "task": "linear_tracking",
    "task_settings": {"steps": 600_000, "bin": 60_000, "noise": 1.0},
    "seeds": 2,
    "optimizers": {"coupled": {"theta": [0.01, 0.005, 0.002], "beta0": [-4.6], "gamma0": [-2.3, -4.6]}},
}
PACKS = 6
RUN_OPTIONS = ["--num-cpus", "2", "--runs-per-pack", "2", "--chunk-steps", "10000", "--checkpoint-every", "5", "--dtype", "float64"]


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "interrupts.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


@pytest.fixture(scope="module")
def reference_scores() -> dict:
    """Every run of SWEEP computed in-process, one pack, no interruption."""
    return scores_in_process(SWEEP)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, **extra}


def _cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    # Its own session, as a terminal's foreground job: a Ctrl-C reaches the whole group.
    return subprocess.Popen([sys.executable, "-m", "sweeps.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env or _env(), start_new_session=True)


def _wait_for(predicate, timeout: float, what: str, process: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}:\n{process.communicate()[0][-3000:]}")
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"timed out waiting for {what}:\n{process.communicate()[0][-3000:]}")


def _packs_in_store(results_dir: Path) -> int:
    try:
        return len(Store.open(results_dir).finished_runs()) // 2
    except Exception:  # noqa: BLE001 - mid-write
        return 0


def _some_but_not_all_packs(results_dir: Path) -> bool:
    return 0 < _packs_in_store(results_dir) < PACKS


def _assert_identical(results_dir: Path, reference: dict) -> None:
    scores = Store.open(results_dir).scan("scores").collect()
    assert scores.height == len(reference)
    assert scores.select("config_id", "seed").unique().height == len(reference)
    for row in scores.iter_rows(named=True):
        assert row["score"] == reference[(row["config_id"], row["seed"])]  # bit for bit
    curves = Store.open(results_dir).scan("curves").collect()
    assert curves.height == len(reference) * 10 and curves.select("config_id", "seed", "step").unique().height == curves.height


def _assert_interrupted(run: subprocess.Popen, out: str, results_dir: Path, sweep_file: Path, storage: Path) -> int:
    """Exit 130, the hint, status.json `interrupted`, no report, no Done line; returns the packs saved."""
    assert run.returncode == 130, out
    saved = _packs_in_store(results_dir)
    assert 0 < saved < PACKS, out
    expected = (f"fade-sweep: interrupted: {saved} of {PACKS} packs done; continue with "
                f"`fade-sweep run {sweep_file} --storage {storage} --dtype float64 --resume`")  # RUN_OPTIONS' dtype
    assert out.strip().splitlines()[-1] == expected, out
    assert "Done:" not in out
    if (results_dir / "report.html").exists():  # a live page written before the interrupt, made static
        page = (results_dir / "report.html").read_text()
        assert "id='completeness'" in page and "runs missing" in page and "location.reload" not in page
    assert "to skip" not in out and "Stop signal received" not in out, out  # Tune's hint: the CLI's line says it
    status = read_status_json(results_dir)
    assert status["state"] == "interrupted" and status["driver_pid"] == run.pid, status
    assert sum(t["state"] == "done" for t in status["trials"]) == saved, status
    shown = _cli("status", str(results_dir)).communicate(timeout=60)[0]
    assert "interrupted" in shown and "ETA" not in shown, shown
    return saved


def test_sigterm_stops_the_sweep_like_ctrl_c(sweep_file, tmp_path):
    results_dir = tmp_path / SWEEP["name"]
    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), *RUN_OPTIONS)
    _wait_for(lambda: _some_but_not_all_packs(results_dir), 180, "a finished pack", run)
    os.kill(run.pid, signal.SIGTERM)  # the driver only, as `ray job stop` or a scheduler does
    out, _ = run.communicate(timeout=120)
    _assert_interrupted(run, out, results_dir, sweep_file, tmp_path)


def test_sigterm_while_ray_starts_is_an_interrupt_too(sweep_file, tmp_path):
    """SIGTERM before the packs (the store open, Ray starting: ours, then Ray's own handler, which exits 15) means
    what Ctrl-C means: exit 130 and the resume hint, not a silent 15."""
    results_dir = tmp_path / SWEEP["name"]
    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), *RUN_OPTIONS)
    _wait_for(lambda: results_dir.is_dir(), 120, "the store opened", run)
    os.kill(run.pid, signal.SIGTERM)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 130, out
    assert out.strip().splitlines()[-1].startswith("fade-sweep: interrupted; continue with `fade-sweep run "), out
    assert "Done:" not in out


LOST_INTERRUPT = """
import os, signal, sys, time
from sweeps.cli import _sigterm_as_ctrl_c

signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a command a shell started in the background

class SignalledWhileCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs here, inside the finalizer, where it cannot raise
            pass

hook = sys.unraisablehook
try:
    with _sigterm_as_ctrl_c():
        SignalledWhileCollected()
        time.sleep(30)  # without the redelivery the interrupt is lost and this returns
    print("lost")
except KeyboardInterrupt:
    print("interrupted", sys.unraisablehook is hook, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def test_an_interrupt_that_lands_where_python_cannot_raise_it_is_delivered_again():
    """CI saw SIGTERM land in logging's at-fork hook while Ray started: Python printed "Exception ignored"
    and the command ran on to Done with exit 0. Here it lands in a finalizer, the same kind of place: the
    command's handler must deliver it again, and restore the interpreter's hook and handler after (in a
    process of its own: the handler is installed only on a main thread, which a test worker's may not be)."""
    done = subprocess.run([sys.executable, "-c", LOST_INTERRUPT], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["interrupted", "True", "True"], done.stdout + done.stderr


def test_ctrl_c_then_kill_then_resume_a_copy_is_exact(sweep_file, reference_scores, tmp_path):
    """Ctrl-C: an honest interrupt. --resume, then kill -9: status says the driver is gone. A copy of
    the folder, with Tune's experiment state deleted and a booby-trapped packs.pkl, resumes from
    the store and the checkpoints alone to bit-identical results, reports into the copy,
    continues a pack from its checkpoint, and never unpickles anything."""
    storage = tmp_path / "first"
    original = storage / SWEEP["name"]
    run = _cli("run", str(sweep_file), "--storage", str(storage), *RUN_OPTIONS)
    _wait_for(lambda: _some_but_not_all_packs(original), 180, "a finished pack", run)
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    out, _ = run.communicate(timeout=120)
    saved = _assert_interrupted(run, out, original, sweep_file, storage)

    run = _cli("run", str(sweep_file), "--storage", str(storage), "--resume", *RUN_OPTIONS)

    sweep = parse_sweep(SWEEP, "test")

    def checkpointed_unfinished(folder: Path) -> bool:
        """A recorded pack with a checkpoint and none of its runs in the store: what a resume continues."""
        store = Store.open(folder)
        done, packs = store.finished_runs(), recorded_packs(store, sweep)
        return any(pid in packs and not any((c.config_id, s) in done for c in packs[pid].configs for s in packs[pid].seeds)
                   for pid in newest_checkpoints(store, "float64"))

    def checkpointed_and_more_done():
        # one more pack in the store, and an unfinished one with a checkpoint on disk
        return saved < _packs_in_store(original) < PACKS and checkpointed_unfinished(original)

    _wait_for(checkpointed_and_more_done, 180, "one more finished pack and a checkpointed running one", run)
    os.killpg(run.pid, signal.SIGKILL)
    run.communicate()
    shown = _cli("status", str(original)).communicate(timeout=60)[0]
    resume = f"fade-sweep run {original}/sweep.yaml --storage {original.parent} --dtype float64 --resume"
    assert f"driver (pid {run.pid}) is not running: the sweep was interrupted; continue with `{resume}`" in shown, shown
    assert "ETA" not in shown, shown

    copy = tmp_path / "copy" / SWEEP["name"]
    shutil.copytree(original, copy)
    original_status = (original / "status.json").read_bytes()
    # Ray's workers may outlive the killed driver for a moment and finish the checkpointed pack (a race
    # the test cannot close): resuming from a checkpoint is asserted only when the copy still has one.
    resumable = checkpointed_unfinished(copy)
    experiments = list(copy.glob("tune-*"))
    assert len(experiments) == 2 and list(copy.glob("tune-*/*/checkpoint_*/pack_state.pt"))
    for state in copy.glob("tune-*/experiment_state*.json"):
        state.unlink()
    for state in copy.glob("tune-*/tuner.pkl"):
        state.write_bytes(b"garbage")
    marker = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self):
            return (Path.touch, (marker,))

    for experiment in experiments:
        (experiment / "packs.pkl").write_bytes(pickle.dumps(Trap()))

    resume = _cli("run", str(sweep_file), "--storage", str(tmp_path / "copy"), "--resume", "--no-report", *RUN_OPTIONS)
    out, _ = resume.communicate(timeout=300)
    assert resume.returncode == 0, out
    assert not marker.exists()  # nothing from the store was unpickled
    assert (original / "status.json").read_bytes() == original_status  # the copy reported into itself
    status = read_status_json(copy)
    assert status["state"] == "finished" and status["driver_pid"] == resume.pid
    assert [t["state"] for t in status["trials"]] == ["done"] * PACKS, status  # the whole sweep, earlier runs' packs too
    if resumable:
        assert any(t["restored_from_step"] > 0 for t in status["trials"]), out  # continued from a checkpoint
        assert re.search(r"Resumed: (1 interrupted pack continued from its checkpoint|\d+ interrupted packs continued from their checkpoints)\.", out), out
    _assert_identical(copy, reference_scores)


OTHER_RAY_PORT = 6389


def _other_ray(tmp_path: Path) -> subprocess.Popen:
    """A second Ray on this machine (1 CPU), in its own session so that the test can stop exactly it."""
    base = 29000  # apart from every range tests/test_cluster.py takes: the two files may run at once (.ci/run)
    command = ["ray", "start", "--head", "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
               "--port", str(OTHER_RAY_PORT), "--num-cpus", "1", "--include-dashboard", "false",
               "--node-manager-port", str(base), "--object-manager-port", str(base + 1),
               "--dashboard-agent-listen-port", str(base + 2), "--dashboard-agent-grpc-port", str(base + 3),
               "--metrics-export-port", str(base + 4), "--runtime-env-agent-port", str(base + 5),
               "--min-worker-port", str(base + 100), "--max-worker-port", str(base + 999)]
    log = open(tmp_path / "other-ray.log", "w")
    other = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", OTHER_RAY_PORT), timeout=1).close()
            return other
        except OSError:
            if other.poll() is not None:
                break
            time.sleep(0.5)
    os.killpg(other.pid, signal.SIGKILL)
    raise AssertionError(f"the other Ray did not start:\n{(tmp_path / 'other-ray.log').read_text()[-3000:]}")


def test_embedded_run_ignores_another_ray_on_the_machine(sweep_file, tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump({**SWEEP, "name": "small", "task_settings": {"steps": 20_000, "bin": 10_000}}))
    other = _other_ray(tmp_path)
    try:
        done = _cli("run", str(small), "--storage", str(tmp_path), "--num-cpus", "2", "--runs-per-pack", "6", "--no-report")
        out, _ = done.communicate(timeout=180)
    finally:
        os.killpg(other.pid, signal.SIGTERM)
        try:
            other.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(other.pid, signal.SIGKILL)
            other.wait()
    assert done.returncode == 0, out
    assert "2 packs at once on 1 node(s)" in out, out  # its own Ray with 2 CPUs, not the other one's 1
    assert Store.open(tmp_path / "small").scan("scores").collect().height == 12


@pytest.mark.parametrize("address", ["127.0.0.1:1", "http://127.0.0.1:1", "ray://127.0.0.1:1"])
def test_unreachable_address_fails_in_seconds(monkeypatch, address):
    from cluster.connect import check_reachable, connect
    from cluster.errors import ClusterError

    started = time.monotonic()
    with pytest.raises(ClusterError, match="cannot reach a Ray cluster at 127.0.0.1:1"):
        check_reachable(address)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(ClusterError, match="cannot reach a Ray cluster at 127.0.0.1:1"):
        connect(None)  # RAY_ADDRESS is an explicit address too: checked, not retried for minutes
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("how", ["--address", "RAY_ADDRESS"])
def test_unreachable_address_exit_2(sweep_file, tmp_path, how):
    args = ["run", str(sweep_file), "--storage", str(tmp_path), "--num-cpus", "2"]
    env = _env()
    if how == "--address":
        args += ["--address", "127.0.0.1:1"]
    else:
        env["RAY_ADDRESS"] = "127.0.0.1:1"
    done = _cli(*args, env=env)
    out, _ = done.communicate(timeout=90)  # mostly Python's imports; Ray's own retries took > 100 s
    assert done.returncode == 2, out
    lines = out.strip().splitlines()
    if how == "RAY_ADDRESS":
        assert lines[0] == "Attaching to the Ray cluster at 127.0.0.1:1 (RAY_ADDRESS is set)", out
    assert lines[-1].startswith("fade-sweep: error: cannot reach a Ray cluster at 127.0.0.1:1"), out
    assert not (tmp_path / SWEEP["name"]).exists()


def test_status_of_a_dead_driver(tmp_path):
    from sweeps.store import StoreLocation
    from sweeps.cli.text import format_status
    from sweeps.store.status import STALE_SECONDS, SweepStatus, TrialStatus, driver_gone, read_status

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    status = SweepStatus("s", "running", now - 10, now, 200, {"a": TrialStatus("a", "running", 100, 200)}, driver_pid=dead.pid)
    status.write(StoreLocation.parse(tmp_path))
    back = read_status(StoreLocation.parse(tmp_path))
    assert (back.driver_pid, back.host) == (dead.pid, socket.gethostname())
    text = format_status(back, 0, "fade-sweep run s.yaml --storage x --resume")
    assert driver_gone(back) and "ETA" not in text
    assert f"driver (pid {dead.pid}) is not running: the sweep was interrupted; continue with `fade-sweep run s.yaml --storage x --resume`" in text
    alive = SweepStatus("s", "running", now - 10, now, 200, {"a": TrialStatus("a", "running", 100, 200)})
    assert not driver_gone(alive) and "ETA" in format_status(alive, 0)
    elsewhere = SweepStatus("s", "running", now - 100, now - STALE_SECONDS - 1, 200, {}, driver_pid=1, host="elsewhere")
    assert driver_gone(elsewhere) and "not running" in format_status(elsewhere, 0)
    assert not driver_gone(SweepStatus("s", "running", now - 100, now - 1, 200, {}, driver_pid=1, host="elsewhere"))


def test_status_of_a_sweep_still_starting_or_killed_while_starting(tmp_path, capsys):
    """No status.json and no results yet, but a writer lock: the sweep is starting (the lock held) or its driver
    died before the first pack (its name left in the lock file: the resume command); a folder with neither is
    refused."""
    from sweeps.cli import main
    from sweeps.store import StoreLocation
    from sweeps.store.holder import LOCK_FILE, holder_body
    from sweeps.store.records import record_json

    folder = tmp_path / "s"
    folder.mkdir()
    assert main(["status", str(folder)]) == 2
    assert "no status.json there" in capsys.readouterr().err
    with StoreLocation.parse(folder).writer_lock("fade-sweep run s.yaml"):  # a driver that has not reported yet
        assert main(["status", str(folder)]) == 0
        assert f"starting (pid {os.getpid()} on" in capsys.readouterr().out
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / LOCK_FILE).write_bytes(record_json(holder_body("fade-sweep run s.yaml", "t").model_copy(update={"pid": dead.pid})))
    assert main(["status", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"its driver (pid {dead.pid} on" in out and "stopped before its first pack; continue with `" in out, out
