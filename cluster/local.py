"""Start and stop a local multi-node Ray cluster on one machine (loopback only).

A head node plus worker nodes, each a separate raylet with its own ports, all on
127.0.0.1, with token authentication on: what the tests (and anyone trying the
cluster path on a laptop) need. `python -m cluster.local up|down`.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class LocalCluster:
    address: str  # the GCS address, for `fade-sweep run --address`
    dashboard_url: str  # the job server, for `fade-sweep submit --address`
    env: dict[str, str]  # what a client process needs in its environment (token auth)


def auth_env(token_path: Path) -> dict[str, str]:
    """Environment that makes Ray's servers and clients use the token in `token_path`."""
    if not token_path.is_file():
        token_path.parent.mkdir(parents=True, exist_ok=True)
        token_path.write_text(secrets.token_hex(32))
        token_path.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def _ray_start(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(["ray", "start", "--disable-usage-stats", *args], env={**os.environ, **env}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def start_local_cluster(
    worker_nodes: int = 1,
    cpus_per_node: int = 1,
    port: int = 6390,
    dashboard_port: int = 8275,
    token_path: Path = Path.home() / ".ray" / "auth_token",
) -> LocalCluster:
    """Start a head and `worker_nodes` workers on loopback with distinct ports."""
    env = auth_env(token_path)
    _ray_start(
        ["--head", "--node-ip-address", LOOPBACK, "--port", str(port), "--dashboard-host", LOOPBACK,
         "--dashboard-port", str(dashboard_port), "--num-cpus", str(cpus_per_node)],
        env,
    )
    for i in range(worker_nodes):
        base = 20000 + 1000 * i  # each worker node gets its own block of ports
        _ray_start(
            ["--address", f"{LOOPBACK}:{port}", "--node-ip-address", LOOPBACK, "--num-cpus", str(cpus_per_node),
             "--node-manager-port", str(base), "--object-manager-port", str(base + 1),
             "--dashboard-agent-listen-port", str(base + 2), "--dashboard-agent-grpc-port", str(base + 3),
             "--metrics-export-port", str(base + 4), "--runtime-env-agent-port", str(base + 5),
             "--min-worker-port", str(base + 100), "--max-worker-port", str(base + 999)],
            env,
        )
    local = LocalCluster(f"{LOOPBACK}:{port}", f"http://{LOOPBACK}:{dashboard_port}", env)
    _wait_for_nodes(local, 1 + worker_nodes)
    return local


def _wait_for_nodes(local: LocalCluster, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(["ray", "status", "--address", local.address], env={**os.environ, **local.env},
                              capture_output=True, text=True)
        active = done.stdout.split("Pending:")[0]
        if active.count(" node_") >= count:
            return
        time.sleep(1)
    raise RuntimeError(f"the local cluster did not reach {count} nodes within {timeout:.0f} s")


def stop_local_cluster() -> None:
    """Stop every Ray process of this machine (`ray stop`)."""
    subprocess.run(["ray", "stop", "--force"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="a local multi-node Ray cluster on loopback")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cpus-per-node", type=int, default=1)
    args = parser.parse_args()
    if args.action == "down":
        stop_local_cluster()
        return
    local = start_local_cluster(args.workers, args.cpus_per_node)
    exports = " ".join(f"{k}={v}" for k, v in local.env.items())
    print(f"cluster up: --address {local.address} (run), --address {local.dashboard_url} (submit)\nexport {exports}")


if __name__ == "__main__":
    main()
