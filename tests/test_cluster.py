"""The cluster path: a two-node Ray cluster on loopback (head + one worker node, token
auth on), job submission, fault tolerance (a worker killed, the driver killed), and the
errors for bad addresses, impossible resources and unusable storage. Ray here listens on
loopback only, and the tests stop only the Ray processes they started (by PID)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from cluster import local as local_cluster
from cluster.local import ClusterStartFailed, auth_env, cluster_pids, descendants, running, start_local_cluster, stop_local_cluster
from cluster.ports import in_use, listener
from sweeps.store import Store
from tests.helpers import read_status_json, scores_in_process

# Long enough packs (coupled learner, float64) to be interrupted mid-run on a quiet machine too (a pack
# of 2M steps ran in ~5 s there, and the window between its first checkpoint and its middle closed
# between two status writes); 4 packs of 3 runs.
SWEEP = {
    "name": "faults",
    "task": "linear_tracking",
    "task_settings": {"steps": 4_000_000, "bin": 200_000, "noise": 1.0},
    "seeds": 3,
    "optimizers": {"coupled": {"theta": [0.01, 0.005], "beta0": [-4.6], "gamma0": [-2.3, -4.6]}},
}
RUN_OPTIONS = ["--runs-per-pack", "3", "--chunk-steps", "20000", "--checkpoint-every", "10", "--dtype", "float64", "--no-report"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    local = start_local_cluster(worker_nodes=1, cpus_per_node=1, port=6391, dashboard_port=8276, token_path=root / "auth_token",
                                temp_dir=Path(tempfile.mkdtemp(prefix="fade-ray-")))  # short: Ray's socket paths
    with pytest.MonkeyPatch.context() as patch:
        for key, value in local.env.items():
            patch.setenv(key, value)
        yield local, root
    stop_local_cluster(local.temp_dir)


@pytest.fixture(scope="module")
def sweep_file(two_nodes):
    _, root = two_nodes
    path = root / "faults.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


@pytest.fixture(scope="module")
def reference_scores() -> dict:
    """Every run of SWEEP computed in-process, one pack, no interruption."""
    return scores_in_process(SWEEP)


def _cli(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweeps.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def _wait_for(predicate, timeout: float, what: str, process: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}:\n{process.communicate()[0][-3000:]}")
        time.sleep(0.05)
    if process is not None:
        process.kill()
        raise AssertionError(f"timed out waiting for {what}:\n{process.communicate()[0][-3000:]}")
    raise AssertionError(f"timed out waiting for {what}")


CHECKPOINTED = 11 * 20_000 * 3  # run-steps of a pack once the driver has seen its first checkpoint (chunk 10)


def _checkpointed_running_trial(results_dir: Path):
    """A running trial whose first checkpoint the driver has registered, a quarter of its steps still ahead.

    status.json is written by the driver as it processes results in order, so a reported
    chunk past the checkpoint's means the checkpoint is known to Tune."""
    for trial in read_status_json(results_dir)["trials"]:
        if trial["state"] == "running" and trial["pid"] and CHECKPOINTED <= trial["run_steps_done"] < 3 * trial["run_steps_total"] // 4:
            return trial
    return None


def _assert_complete_and_exact(results_dir: Path, reference: dict) -> pl.DataFrame:
    scores = Store.open(results_dir).scan("scores").collect()
    curves = Store.open(results_dir).scan("curves").collect()
    assert scores.height == len(reference)
    assert scores.select("config_id", "seed").unique().height == len(reference)
    assert curves.height == len(reference) * 20 and curves.select("config_id", "seed", "step").unique().height == curves.height
    for row in scores.iter_rows(named=True):
        assert row["score"] == reference[(row["config_id"], row["seed"])]  # bit for bit
    return scores


def test_two_node_cluster_runs_trials_on_both_nodes(two_nodes, tmp_path):
    local, _ = two_nodes
    sweep = tmp_path / "small.yaml"
    sweep.write_text(yaml.safe_dump({**SWEEP, "name": "small", "task_settings": {"steps": 20_000, "bin": 1000}}))
    done = _cli("run", str(sweep), "--storage", str(tmp_path), "--address", local.address, "--runs-per-pack", "3", "--no-report")
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0, out
    status = read_status_json(tmp_path / "small")
    assert status["state"] == "finished"
    assert len({t["node_id"] for t in status["trials"]}) == 2, status  # both nodes ran packs
    assert Store.open(tmp_path / "small").scan("scores").collect().height == 12
    assert "on 2 node(s)" in out


def test_killed_worker_is_retried_from_its_checkpoint(two_nodes, sweep_file, reference_scores, tmp_path):
    local, _ = two_nodes
    results_dir = tmp_path / "faults"
    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), "--address", local.address, *RUN_OPTIONS)
    victim = _wait_for(lambda: _checkpointed_running_trial(results_dir), 240, "a checkpointed running trial", run)
    os.kill(victim["pid"], signal.SIGKILL)
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    restored = {t["pack_id"]: t["restored_from_step"] for t in read_status_json(results_dir)["trials"]}
    assert restored[victim["pack_id"]] > 0, restored  # continued from its checkpoint, not from step 0
    _assert_complete_and_exact(results_dir, reference_scores)


def test_killed_driver_then_resume(two_nodes, sweep_file, reference_scores, tmp_path):
    local, _ = two_nodes
    results_dir = tmp_path / "faults"
    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), "--address", local.address, *RUN_OPTIONS, start_new_session=True)
    finished_file = _wait_for(lambda: next(iter((results_dir / "scores").glob("**/*.parquet")), None), 300, "a finished pack", run)
    _wait_for(lambda: _checkpointed_running_trial(results_dir), 240, "a checkpointed running trial", run)
    os.killpg(run.pid, signal.SIGKILL)
    run.communicate()
    finished = {p: p.stat().st_mtime_ns for p in (results_dir / "scores").glob("**/*.parquet")}
    assert finished_file in finished and len(finished) < 4
    resume = _cli("run", str(sweep_file), "--storage", str(tmp_path), "--address", local.address, "--resume", *RUN_OPTIONS)
    out, _ = resume.communicate(timeout=600)
    assert resume.returncode == 0, out
    assert all(p.stat().st_mtime_ns == t for p, t in finished.items())  # finished packs were not re-run
    assert any(t["restored_from_step"] > 0 for t in read_status_json(results_dir)["trials"]), out + json.dumps(read_status_json(results_dir))  # interrupted ones continued
    _assert_complete_and_exact(results_dir, reference_scores)
    # and the status command reads it back
    status = _cli("status", str(results_dir))
    assert "packs: 4 done, 0 running, 0 failed" in status.communicate(timeout=60)[0]


def test_job_submission_status_logs_and_results(two_nodes, tmp_path):
    local, _ = two_nodes
    sweep = tmp_path / "job.yaml"
    sweep.write_text(yaml.safe_dump({**SWEEP, "name": "job", "task_settings": {"steps": 20_000, "bin": 1000}}))
    submit = _cli("submit", str(sweep), "--address", local.dashboard_url, "--storage", str(tmp_path), "--", "--no-report")
    out, _ = submit.communicate(timeout=120)
    assert submit.returncode == 0, out
    job_id = next(line for line in out.splitlines() if line.startswith("raysubmit_"))
    # `logs --follow` returns when the job ends: the wait, without a `status` process every few seconds
    follow = _cli("logs", job_id, "--address", local.dashboard_url, "--follow")
    try:
        followed = follow.communicate(timeout=300)[0]
    except subprocess.TimeoutExpired:
        follow.kill()
        raise AssertionError(f"the job did not end in 300 s:\n{follow.communicate()[0][-3000:]}") from None

    def ended() -> str | None:
        line = _cli("status", job_id, "--address", local.dashboard_url).communicate(timeout=60)[0]
        return line if "SUCCEEDED" in line or "FAILED" in line else None

    final = _wait_for(ended, 60, "the job to end")
    logs = _cli("logs", job_id, "--address", local.dashboard_url).communicate(timeout=60)[0]
    assert "SUCCEEDED" in final, logs
    done = re.compile(r"Done: \d+ packs?,")  # as many packs as the cluster has slots for 12 runs
    assert done.search(logs) and "| **coupled** |" in logs
    assert done.search(followed) and "| **coupled** |" in followed
    assert Store.open(tmp_path / "job").scan("scores").collect().height == 12
    assert job_id in _cli("status", "--address", local.dashboard_url).communicate(timeout=60)[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "{sweep}", "--address", "{address}", "--cpus-per-pack", "4"], "no node can run a pack asking for 4 CPU and 0 GPU"),
        (["run", "{sweep}", "--address", "{address}", "--gpus-per-pack", "1"], "linear_tracking runs on CPUs only"),
        (["run", "{sweep}", "--address", "{address}", "--storage", "/proc/fade"], "storage /proc/fade/faults is not writable"),
    ],
    ids=["too-many-cpus", "gpu-for-cpu-task", "unwritable-storage"],
)
def test_clear_errors(two_nodes, sweep_file, tmp_path, args, message):
    """Refusals on a cluster that is up: in a subprocess, as attaching leaves that process connected to it."""
    local, _ = two_nodes
    storage = tmp_path / "store"
    args = [a.format(sweep=sweep_file, address=local.address) for a in args]
    if "--storage" not in args:
        args += ["--storage", str(storage)]
    started = time.monotonic()
    done = _cli(*args)
    out, _ = done.communicate(timeout=120)
    assert done.returncode == 2, out
    assert message in out, out
    assert out.strip().splitlines()[-1].startswith("fade-sweep: error:")
    assert not storage.exists()  # nothing half-written
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "{sweep}", "--address", "127.0.0.1:1", "--storage", "{tmp}"], "cannot reach a Ray cluster at 127.0.0.1:1"),
        (["submit", "{sweep}", "--address", "http://127.0.0.1:1", "--storage", "{tmp}"], "cannot reach a Ray dashboard at 127.0.0.1:1"),
    ],
    ids=["unreachable-cluster", "unreachable-dashboard"],
)
def test_clear_errors_for_an_address_nothing_answers(tmp_path, capsys, args, message):
    """In this process: nothing is attached (test_interrupts.py runs `run --address 127.0.0.1:1` as a subprocess)."""
    from sweeps.cli import main

    sweep, storage = tmp_path / "faults.yaml", tmp_path / "store"
    sweep.write_text(yaml.safe_dump(SWEEP))
    started = time.monotonic()
    assert main([a.format(sweep=sweep, tmp=storage) for a in args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("fade-sweep: error:"), err
    assert not storage.exists()  # nothing half-written
    assert time.monotonic() - started < 60


def _listening(pids: set[int]) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes `pids` hold (Linux /proc)."""
    sockets = {}
    for table in ("tcp", "tcp6"):
        with open(f"/proc/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    address, port = fields[1].split(":")
                    raw = bytes.fromhex(address)  # 32-bit words in host (little-endian) order
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
                    sockets[f"socket:[{fields[9]}]"] = (socket.inet_ntop(family, raw), int(port, 16))
    found = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue  # gone
        found |= {(pid, *sockets[link]) for link in links if link in sockets}
    return found


def _off_loopback(listening: set[tuple[int, str, int]]) -> list[str]:
    """The listeners not on loopback (127.0.0.0/8, ::1, or 127.x as an IPv4-mapped IPv6 address)."""
    def loopback(address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)

    return sorted(f"{address}:{port} ({_name(pid)})" for pid, address, port in listening if not loopback(address))


def test_an_embedded_run_listens_on_loopback_only(tmp_path):
    sweep = tmp_path / "embedded.yaml"
    sweep.write_text(yaml.safe_dump({**SWEEP, "name": "embedded", "task_settings": {"steps": 200_000, "bin": 10_000}}))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = _cli("run", str(sweep), "--storage", str(tmp_path), "--num-cpus", "2", "--runs-per-pack", "3", "--no-report", env=env)
    seen = set()
    while run.poll() is None:  # every listener of the run's processes, sampled while it runs
        seen |= _listening(descendants({run.pid}))
        time.sleep(0.1)
    out = run.communicate()[0]
    assert run.returncode == 0, out
    assert len({pid for pid, _, _ in seen}) >= 4, seen  # GCS, raylet, agents, driver, workers
    assert not _off_loopback(seen), _off_loopback(seen)


def test_the_local_cluster_listens_on_loopback_only(two_nodes):
    local, _ = two_nodes
    seen = _listening(cluster_pids(local.temp_dir))
    assert len({pid for pid, _, _ in seen}) >= 6, seen  # two raylets, two agents each, GCS, dashboard
    assert not _off_loopback(seen), _off_loopback(seen)


def test_stopping_a_local_cluster_leaves_another_ray_running(tmp_path):
    other_dir = Path(tempfile.mkdtemp(prefix="fade-other-ray-"))
    other = subprocess.run(
        ["ray", "start", "--head", "--disable-usage-stats", "--node-ip-address", "127.0.0.1", "--port", "6395",
         "--temp-dir", str(other_dir), "--num-cpus", "1", "--include-dashboard=false", "--ray-client-server-port", "6396",
         "--node-manager-port", "24000", "--object-manager-port", "24001", "--dashboard-agent-listen-port", "24002",
         "--dashboard-agent-grpc-port", "24003", "--metrics-export-port", "24004", "--runtime-env-agent-port", "24005",
         "--min-worker-port", "24100", "--max-worker-port", "24999"],
        env={**os.environ, **auth_env(tmp_path / "other_token")}, capture_output=True, text=True)
    try:
        assert other.returncode == 0, other.stdout[-2000:] + other.stderr[-2000:]
        daemons = {pid for pid in cluster_pids(other_dir) if _name(pid) in ("gcs_server", "raylet")}
        mine = start_local_cluster(worker_nodes=0, port=6397, dashboard_port=8277, token_path=tmp_path / "token",
                                   temp_dir=Path(tempfile.mkdtemp(prefix="fade-ray-")), ports_from=23000)
        started = cluster_pids(mine.temp_dir)
        client_server = listener(6398)  # Ray's client server: it names no folder, and its parent has exited
        assert len(daemons) == 2 and started and not started & cluster_pids(other_dir)
        assert client_server is not None and client_server not in started
        before = sorted(p.name for p in other_dir.iterdir())
        for taken in (6395, 6397):  # the other Ray's GCS port; this project's own other cluster's
            refused = _local_up("--port", str(taken), "--dashboard-port", "8279", "--ports-from", "26000")
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
            assert re.match(rf"cluster.local up: port {taken} \(the GCS\) is held by pid \d+ \(gcs_server\); pick other "
                            "ports: --port P", refused.stderr), refused.stderr
        assert all(running(pid) for pid in daemons | started)  # both untouched: their processes and the folder
        assert sorted(p.name for p in other_dir.iterdir()) == before
        stop_local_cluster(mine.temp_dir)
        assert not any(running(pid) for pid in started | {client_server})  # down stops exactly its own
        assert not in_use(6398) and not in_use(6397)
        assert all(running(pid) for pid in daemons)  # the other Ray is untouched, its GCS still serving
        assert 6395 in {port for _, _, port in _listening(cluster_pids(other_dir))}
    finally:
        stop_local_cluster(other_dir)  # by its own PIDs
    assert not cluster_pids(other_dir)


def _local_up(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.local", "up", *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])


def test_local_up_on_a_port_another_process_holds_refuses_before_starting_anything():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        folder = Path(tempfile.gettempdir()) / f"fade-local-ray-{port}"
        refused = _local_up("--port", str(port), "--dashboard-port", str(port + 2), "--ports-from", "27000")
        assert refused.returncode == 2 and refused.stderr == (
            f"cluster.local up: port {port} (the GCS) is held by pid {os.getpid()} ({_name(os.getpid())}); pick other "
            "ports: --port P (the GCS; the client server takes P+1), --dashboard-port D, --ports-from N (node i takes "
            "N+1000i to N+1000i+999)\n")
        assert not folder.exists()  # refused before its folder (or anything else) was made
        other.getsockname()  # still ours, still open


def test_local_up_whose_port_ranges_overlap_refuses_in_one_line_before_starting_anything():
    folder = Path(tempfile.gettempdir()) / "fade-local-ray-7600"
    assert not folder.exists()
    refused = _local_up("--port", "7600", "--workers", "0", "--dashboard-port", "7602", "--ports-from", "7500")
    assert refused.returncode == 2 and refused.stderr == (
        "cluster.local up: port 7600 would serve both the GCS and the head's worker processes (7600-8499) (--port 7600, "
        "--dashboard-port 7602, --ports-from 7500); pick other ports: --port P (the GCS; the client server takes P+1), "
        "--dashboard-port D, --ports-from N (node i takes N+1000i to N+1000i+999), so that no two overlap\n")
    assert not folder.exists()


def _failing_ray_start(folder: Path):
    """A `ray start` that makes the cluster's folder (as Ray does) and then fails as Ray does: a traceback."""
    def ray(args, env):
        (folder / "session_latest").mkdir(parents=True, exist_ok=True)
        return subprocess.CompletedProcess(args, 1, "Usage stats collection is disabled.\n",
                                           "Traceback (most recent call last):\n  File ...\nValueError: Ray component "
                                           "worker_ports is trying to use a port number 7600 that is used by other components.\n")
    return ray


@pytest.mark.parametrize("there_before", [False, True])
def test_a_failed_ray_start_removes_only_what_this_up_made_and_says_so_in_one_line(tmp_path, monkeypatch, capsys, there_before):
    folder = tmp_path / "ray"
    if there_before:
        folder.mkdir()
        (folder / "kept").write_text("not this up's")
    monkeypatch.setattr(local_cluster, "_ray", _failing_ray_start(folder))
    with pytest.raises(ClusterStartFailed, match="^`ray start` of the head failed: ValueError: Ray component worker_ports"):
        start_local_cluster(0, port=28390, dashboard_port=28392, ports_from=28400, token_path=tmp_path / "token",
                            temp_dir=folder)
    assert folder.exists() == there_before and (not there_before or {p.name for p in folder.iterdir()} == {"kept", "session_latest"})
    monkeypatch.setattr(local_cluster, "default_temp_dir", lambda port: folder)
    monkeypatch.setattr(local_cluster, "auth_env", lambda path: {})
    monkeypatch.setattr(sys, "argv", ["cluster.local", "up", "--workers", "0", "--port", "28390", "--dashboard-port",
                                      "28392", "--ports-from", "28400"])
    with pytest.raises(SystemExit) as exited:
        local_cluster.main()
    assert exited.value.code == 1 and capsys.readouterr().err == (
        "cluster.local up: `ray start` of the head failed: ValueError: Ray component worker_ports is trying to use a port "
        "number 7600 that is used by other components; stopped what it had started\n")


def test_local_down_says_what_it_stopped(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(local_cluster, "default_temp_dir", lambda port: tmp_path)
    monkeypatch.setattr(sys, "argv", ["cluster.local", "down", "--port", "28390"])
    local_cluster.main()
    assert capsys.readouterr().out == f"cluster down: no cluster ran in {tmp_path}; nothing stopped\n"
    monkeypatch.setattr(local_cluster, "stop_local_cluster", lambda folder: {101, 102})
    local_cluster.main()
    assert capsys.readouterr().out == f"cluster down: stopped 2 processes of the cluster in {tmp_path}\n"


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def test_a_node_death_is_one_line_of_output(tmp_path, monkeypatch, capsys):
    from ray._private import process_watcher, worker

    from cluster.connect import _node_deaths_in_one_line

    # Ray's own message for a raylet that died, with the tail of its log (state dumps)
    (tmp_path / "raylet.out").write_text("".join(f"[state-dump] NodeManager line {i}\n" for i in range(40)))
    sent = []
    monkeypatch.setattr(process_watcher.ray._private.utils, "publish_error_to_driver", lambda kind, message, **_: sent.append(message))
    process_watcher.report_raylet_error_logs(str(tmp_path), gcs_client=None)
    assert len(sent) == 1 and sent[0].count("[state-dump]") == 20
    monkeypatch.setattr(worker, "print_to_stdstream", worker.print_to_stdstream)  # restored after the test
    _node_deaths_in_one_line()
    _node_deaths_in_one_line()  # idempotent: wraps once
    worker.print_to_stdstream({"lines": [sent[0]], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    worker.print_to_stdstream({"lines": ["a worker's line"], "pid": 12345, "is_err": False}, ignore_prefix=False)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and "Raylet is terminated. Termination is unexpected." in out[0], out
    assert "raylet.out on that node" in out[0] and "a worker's line" in out[1]


def test_dry_run_on_16_declared_cpus_plans_a_pack_per_cpu(tmp_path):
    """On a loopback cluster of 16 declared CPUs (one node: the plan reads the cluster's total, and the two-node
    tests run trials across nodes), nonlinear-sensitivity's dry run plans at least 16 packs: every CPU gets
    work (9fdfec8 planned 2 packs whatever the cluster, from this 2-core machine)."""
    local = start_local_cluster(worker_nodes=0, cpus_per_node=16, port=6393, dashboard_port=8278, token_path=tmp_path / "auth_token",
                                temp_dir=Path(tempfile.mkdtemp(prefix="fade-ray-")), ports_from=30000)  # beside two_nodes
    try:
        dry = _cli("run", "nonlinear-sensitivity", "--dry-run", "--address", local.address, env={**os.environ, **local.env})
        out, _ = dry.communicate(timeout=300)
    finally:
        stop_local_cluster(local.temp_dir)
    assert dry.returncode == 0, out
    plan = re.search(r"Plan for sweep nonlinear-sensitivity: (\d+) packs, .*; (\d+) CPU packs at once", out)
    assert plan and int(plan.group(2)) == 16 and int(plan.group(1)) >= 16, out
