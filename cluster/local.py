"""Start and stop a local multi-node Ray cluster on one machine (loopback only).

A head node plus worker nodes, each a separate raylet with its own ports, all on
127.0.0.1, with token authentication on: what the tests (and anyone trying the
cluster path on a laptop) need. `python -m cluster.local up|down [--port P]`.

The cluster keeps its own Ray temp dir (default TMPDIR/fade-local-ray-PORT), which every
one of its daemons names on its command line: stopping it signals those processes and
their children by PID, so another Ray on the machine (a user's sweep) is left running,
where `ray stop` would stop them all. Ray's client server (GCS port + 1) does not name the
folder and outlives the `ray start` that made it: `up` records its PID (with its start time,
so a reused PID is never signalled) in the folder (CLUSTER_RECORD), and `down` stops it too.

Before anything starts, `up` checks every port it will use (the GCS port, the client
server's, the dashboard's, each node's ports and worker ports) and that no process runs in
its folder: a port or folder held by another process or cluster is a one-line refusal (exit 2)
naming the holder and how to pick other ports, and that other is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cluster.connect import SINGLE_HOST
from cluster.errors import ClusterError
from cluster.ports import holder, listener, overlap, started_at
from cluster.processes import cluster_pids, descendants, running, same_process, signal_all

__all__ = ["LocalCluster", "cluster_pids", "descendants", "running", "start_local_cluster", "stop_local_cluster"]

LOOPBACK = "127.0.0.1"
CLUSTER_RECORD = "fade-local-cluster.json"  # in the cluster's folder: the processes `down` stops that do not name it
PORTS_HINT = ("pick other ports: --port P (the GCS; the client server takes P+1), --dashboard-port D, --ports-from N "
              "(node i takes N+1000i to N+1000i+999)")


@dataclass(frozen=True)
class LocalCluster:
    address: str  # the GCS address, for `fade-sweep run --address`
    dashboard_url: str  # the job server, for `fade-sweep submit --address`
    env: dict[str, str]  # what a client process needs in its environment (token auth; 127.0.0.1 kept as is)
    temp_dir: Path  # Ray's temp dir for every node of this cluster: what `stop_local_cluster` finds it by


def auth_env(token_path: Path) -> dict[str, str]:
    """Environment that makes Ray's servers and clients use the token in `token_path`."""
    if not token_path.is_file():
        token_path.parent.mkdir(parents=True, exist_ok=True)
        token_path.write_text(secrets.token_hex(32))
        token_path.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


# The `ray` command with 127.0.0.1 kept as it is (cluster.connect.loopback_node_ip): a node started so
# listens on loopback only, and a client reaches it at 127.0.0.1 rather than at the machine's LAN address.
# (Not SINGLE_HOST in its own environment: with it `ray start --address` refuses to add a worker node.)
_RAY = ("import sys; from cluster.connect import loopback_node_ip; from ray.scripts.scripts import main; "
        "sys.argv[0] = 'ray'\nwith loopback_node_ip(): main()")


def _ray(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RAY, *args], env=env, capture_output=True, text=True)


def _ray_start(args: list[str], env: dict[str, str]) -> None:
    env = {k: v for k, v in {**os.environ, **env}.items() if k not in SINGLE_HOST}  # set for its children only
    done = _ray(["start", "--disable-usage-stats", *args], env)
    if done.returncode != 0:
        node = "the head" if "--head" in args else "a worker node"
        raise ClusterStartFailed(f"`ray start` of {node} failed: {last_error(done.stdout + chr(10) + done.stderr)}")


class ClusterStartFailed(RuntimeError):
    """Ray refused or failed to start a node (not a refusal of ours before anything started: ClusterError)."""


def last_error(output: str) -> str:
    """The line of Ray's output that says what went wrong: its last error line (a traceback's exception),
    else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":", 1)[0] or line.startswith("Error")]
    return (errors or lines or ["no output"])[-1]


def default_temp_dir(port: int) -> Path:
    """Where the cluster on GCS `port` keeps its sessions (short: Ray's socket paths must fit 107 bytes)."""
    return Path(tempfile.gettempdir()) / f"fade-local-ray-{port}"


def start_local_cluster(
    worker_nodes: int = 1,
    cpus_per_node: int = 1,
    port: int = 6390,
    dashboard_port: int = 8275,
    token_path: Path = Path.home() / ".ray" / "auth_token",
    temp_dir: Path | None = None,
    ports_from: int = 20000,
) -> LocalCluster:
    """Start a head and `worker_nodes` workers on loopback; node i (the head first) takes the
    1000 ports from `ports_from + 1000 i` for its servers and workers, so clusters with
    distinct `port` and `ports_from` run side by side."""
    temp_dir = Path(temp_dir or default_temp_dir(port))
    check_free(temp_dir, port, dashboard_port, ports_from, worker_nodes)  # before anything starts
    made_folder = not temp_dir.exists()
    env = auth_env(token_path)
    common = ["--node-ip-address", LOOPBACK, "--temp-dir", str(temp_dir), "--num-cpus", str(cpus_per_node)]
    local = LocalCluster(f"{LOOPBACK}:{port}", f"http://{LOOPBACK}:{dashboard_port}", {**env, **SINGLE_HOST}, temp_dir)
    try:
        _ray_start(
            ["--head", "--port", str(port), "--dashboard-host", LOOPBACK, "--dashboard-port", str(dashboard_port),
             "--ray-client-server-port", str(port + 1), *common, *_node_ports(ports_from)],
            env,
        )
        for i in range(1, worker_nodes + 1):
            _ray_start(["--address", local.address, *common, *_node_ports(ports_from + 1000 * i)], env)
        _wait_for_nodes(local, 1 + worker_nodes)
        _record_client_server(temp_dir, port + 1)
    except BaseException:
        stop_local_cluster(temp_dir)  # nothing left running (the folder held no process before: check_free)
        if made_folder:  # only what this start made: a folder that was there before is left as it was
            shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return local


def planned_ports(port: int, dashboard_port: int, ports_from: int, worker_nodes: int) -> list[tuple[int, str]]:
    """Every port `start_local_cluster` asks Ray to use, with what it is for."""
    ports = [(port, "the GCS"), (port + 1, "Ray's client server"), (dashboard_port, "the dashboard")]
    for i in range(worker_nodes + 1):
        base = ports_from + 1000 * i
        node = "the head" if i == 0 else f"worker node {i}"
        ports += [(p, f"{node}'s servers") for p in range(base, base + 6)]
        ports += [(p, f"{node}'s worker processes ({base + 100}-{base + 999})") for p in range(base + 100, base + 1000)]
    return ports


def check_free(temp_dir: Path, port: int, dashboard_port: int, ports_from: int, worker_nodes: int) -> None:
    """ClusterError (one line) when the plan gives a port two uses, a port the cluster would use is taken, or
    a process runs in its folder."""
    planned = planned_ports(port, dashboard_port, ports_from, worker_nodes)
    if twice := overlap(planned):
        number, first, second = twice
        raise ClusterError(f"port {number} would serve both {first} and {second} (--port {port}, --dashboard-port "
                           f"{dashboard_port}, --ports-from {ports_from}); {PORTS_HINT}, so that no two overlap")
    for number, what in planned:
        if taken := holder(number):
            raise ClusterError(f"port {number} ({what}) is held by {taken}; {PORTS_HINT}")
    if running_there := sorted(cluster_pids(temp_dir)):
        raise ClusterError(f"{temp_dir}: a cluster runs in this folder (pids {', '.join(map(str, running_there[:5]))}); "
                           f"`python -m cluster.local down --port {port}` stops it, or {PORTS_HINT}")


def _record_client_server(temp_dir: Path, port: int) -> None:
    """Write down the client server (it names no folder, and its parent has exited): `down` stops it by this."""
    pid = listener(port)
    record = {"client_server": {"pid": pid, "started_at": started_at(pid)} if pid else None}
    (temp_dir / CLUSTER_RECORD).write_text(json.dumps(record))


def _recorded_pids(temp_dir: Path) -> set[int]:
    """The recorded processes of the cluster still running as themselves (same PID, same start time)."""
    try:
        server = json.loads((temp_dir / CLUSTER_RECORD).read_text())["client_server"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return descendants({server["pid"]}) if server and same_process(server["pid"], server["started_at"]) else set()


def _node_ports(base: int) -> list[str]:
    return ["--node-manager-port", str(base), "--object-manager-port", str(base + 1),
            "--dashboard-agent-listen-port", str(base + 2), "--dashboard-agent-grpc-port", str(base + 3),
            "--metrics-export-port", str(base + 4), "--runtime-env-agent-port", str(base + 5),
            "--min-worker-port", str(base + 100), "--max-worker-port", str(base + 999)]


def _wait_for_nodes(local: LocalCluster, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = _ray(["status", "--address", local.address], {**os.environ, **local.env})
        active = done.stdout.split("Pending:")[0]
        if active.count(" node_") >= count:
            return
        time.sleep(1)
    raise ClusterStartFailed(f"the local cluster did not reach {count} nodes within {timeout:.0f} s")


def stop_local_cluster(temp_dir: Path, grace: float = 10.0) -> set[int]:
    """Stop the cluster kept in `temp_dir` by its PIDs (SIGTERM, then SIGKILL what is left after
    `grace` seconds), and wait until they are gone; other Ray processes on the machine are not touched.
    Returns the PIDs it stopped."""
    pids: set[int] = set()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids |= cluster_pids(temp_dir) | _recorded_pids(temp_dir)
        signal_all({pid for pid in pids if running(pid)}, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(running(pid) for pid in pids):
            time.sleep(0.1)
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description="a local multi-node Ray cluster on loopback")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--port", type=int, default=6390, help="the head's GCS port; names the cluster for `down`")
    parser.add_argument("--dashboard-port", type=int, default=8275, help="the dashboard and job server")
    parser.add_argument("--ports-from", type=int, default=20000, help="node i takes the 1000 ports from N+1000i")
    args = parser.parse_args()
    if args.action == "down":
        folder = default_temp_dir(args.port)
        stopped = stop_local_cluster(folder)
        print(f"cluster down: stopped {len(stopped)} processes of the cluster in {folder}" if stopped
              else f"cluster down: no cluster ran in {folder}; nothing stopped")
        return
    try:
        local = start_local_cluster(args.workers, args.cpus_per_node, port=args.port, dashboard_port=args.dashboard_port,
                                    ports_from=args.ports_from)
    except ClusterError as err:
        print(f"cluster.local up: {err}", file=sys.stderr)
        sys.exit(2)
    except ClusterStartFailed as err:
        print(f"cluster.local up: {str(err).rstrip('.')}; stopped what it had started", file=sys.stderr)
        sys.exit(1)
    exports = " ".join(f"{k}={v}" for k, v in local.env.items())
    print(f"cluster up: --address {local.address} (run), --address {local.dashboard_url} (submit)\nexport {exports}")


if __name__ == "__main__":
    main()
