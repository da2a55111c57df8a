"""Start an embedded local Ray, or attach to a running cluster, with a clear error if unreachable.

Embedded means embedded: with no address the service starts its own local Ray
(`address="local"`), even when another Ray runs on the machine. It attaches only when
asked: `--address`, or `RAY_ADDRESS` set in the environment (which `fade-sweep run` and
`confirm` say on their first line). An embedded Ray is recorded (`cluster/embedded.py`), and
every connect first stops what is left of a recorded one whose driver was killed.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import ray

from cluster import embedded
from cluster.errors import ClusterError

RAY_ADDRESS = "RAY_ADDRESS"
LOOPBACK = "127.0.0.1"  # where the embedded Ray listens
# Ray's processes on one host: take 127.0.0.1 as the local address (Ray calls this switch "clusters on Windows or OSX")
SINGLE_HOST = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
DEFAULT_PORTS = {"ray": 10001, "http": 80, "https": 443}


def address_from_environment() -> str | None:
    """The cluster address set in $RAY_ADDRESS (None when unset or empty)."""
    return os.environ.get(RAY_ADDRESS) or None


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT, ray://HOST[:PORT] or http(s)://HOST[:PORT]; None for "auto"."""
    if address == "auto":
        return None
    if "://" in address:
        parsed = urlparse(address)
        try:
            port = parsed.port or DEFAULT_PORTS.get(parsed.scheme)
        except ValueError:
            port = None
        if not parsed.hostname or port is None:
            raise ClusterError(f"bad Ray address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:6379) or ray://HOST:10001")
        return parsed.hostname, port
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"bad Ray address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:6379) or ray://HOST:10001")
    return host.strip("[]"), int(port)


ATTACH_FIX = ("check the address, start one with `ray start --head`, or omit --address (and unset RAY_ADDRESS) to run "
              "on an embedded local Ray")


def check_reachable(address: str, timeout: float = 5.0, what: str = "Ray cluster", fix: str = ATTACH_FIX) -> None:
    """Fail fast (seconds, not minutes of retries) when an address does not answer; `fix` says what to do.

    Takes HOST:PORT, ray://HOST:PORT and http(s)://HOST:PORT; "auto" checks $RAY_ADDRESS
    when that is set (Ray would use it), else nothing (Ray looks for a local cluster).
    """
    if address == "auto":
        address = address_from_environment() or "auto"
    target = _host_port(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as err:
        raise ClusterError(f"cannot reach a {what} at {host}:{port} ({err.strerror or err}); {fix}") from None


def connect(address: str | None = None, num_cpus: int | None = None, py_modules: tuple[str, ...] = ()) -> str | None:
    """Attach to the cluster at `address`, or start an embedded local Ray when it is None.

    With `address` None and RAY_ADDRESS set, attaches to $RAY_ADDRESS and says so (callers
    that print their own first line resolve it first with `address_from_environment`).
    Otherwise the embedded Ray is always a new local one (`address="local"`): a Ray
    already running on the machine is left alone.

    Returns the dashboard's URL when Ray reports one.

    `py_modules`: module files every worker imports (a researcher's rules beside the sweep file), shipped
    in the job's runtime environment, so they reach a cluster's workers too.

    The embedded Ray listens on loopback only: its node IP stays 127.0.0.1 (`loopback_node_ip`),
    so Ray binds its servers (GCS, raylet, object manager, workers, agents) there instead of
    every interface, and the dashboard is on 127.0.0.1; token authentication stays on (Ray's default).
    """
    if ray.is_initialized():
        return None
    embedded.reap_orphans()  # what is left of an embedded Ray whose driver was killed (-9): only those recorded
    source = "--address"
    if address is None and address_from_environment():
        address, source = address_from_environment(), "RAY_ADDRESS"
    if address is not None:
        if urlparse(address).scheme in ("http", "https"):
            raise ClusterError(
                f"{source} {address} is a dashboard / job server (for `fade-sweep submit`); a run attaches to the "
                "cluster itself: HOST:6379 (the GCS), ray://HOST:10001 or auto"
            )
        check_reachable(address)
        try:
            with loopback_node_ip():  # 127.0.0.1:PORT stays loopback (a cluster listening there only)
                context = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                                   runtime_env=_runtime_env(py_modules))
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ClusterError(f"cannot attach to the Ray cluster at {address}: {err}") from None
        _node_deaths_in_one_line()
        return _dashboard_url(context)
    with loopback_node_ip():
        context = ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=True,
            dashboard_host=LOOPBACK,
            _node_ip_address=LOOPBACK,
            logging_level=logging.WARNING,
            log_to_driver=False,
            runtime_env=_runtime_env(py_modules),
        )
    embedded.record(context.address_info["session_dir"])  # for the next command, should this driver be killed
    atexit.register(embedded.forget)
    _node_deaths_in_one_line()
    return _dashboard_url(context)


SHIPPED_MODULES = "FADE_SWEEP_SHIPPED_MODULES"  # set by `fade-sweep submit`: the job's runtime environment has them


def _runtime_env(py_modules: tuple[str, ...]) -> dict | None:
    """The driver's runtime environment: none inside a submitted job, whose own carries the modules (Ray
    merges the two per key, and refuses two `py_modules`)."""
    return {"py_modules": list(py_modules)} if py_modules and not os.environ.get(SHIPPED_MODULES) else None


_RAYLET_LOG_TAIL = re.compile(r"\s*Last \d+ lines of the Raylet logs:.*", re.DOTALL)


def _node_deaths_in_one_line() -> None:
    """Print a node's death as one line, without the tail of its raylet log.

    When a raylet dies, Ray sends every driver its last 20 log lines (mostly the periodic
    `[state-dump]` tables) and the driver prints them whatever `log_to_driver` says
    (`ray._private.worker.listen_error_messages`): a sweep on a cluster losing nodes had 448
    of its 856 output lines from them. The tail stays in raylet.out on that node."""
    from ray._private import worker

    if hasattr(worker.print_to_stdstream, "__wrapped__"):
        return
    print_lines = worker.print_to_stdstream

    @functools.wraps(print_lines)
    def print_condensed(data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            data = {**data, "lines": [_RAYLET_LOG_TAIL.sub(" (its last log lines are in raylet.out on that node)", line)
                                      for line in data.get("lines", [])]}
        print_lines(data, ignore_prefix)

    worker.print_to_stdstream = print_condensed


@contextmanager
def loopback_node_ip() -> Iterator[None]:
    """Keep 127.0.0.1 as it is in this block: a Ray node started here keeps it as its node IP,
    and a cluster address 127.0.0.1:PORT is dialled there.

    Ray (2.60) swaps a loopback node IP or address for the machine's LAN address
    (`services.resolve_ip_for_localhost`) and then binds its gRPC servers to every interface.
    Here that swap is off in this process, and off in the processes it starts (SINGLE_HOST in
    their environment: Ray's own switch, which makes them take 127.0.0.1 as the local address,
    so the dashboard's job agent still reaches its GCS): every server and agent binds to loopback
    only (tests/test_cluster.py checks each listening socket)."""
    from ray._private import services

    resolve, saved = services.resolve_ip_for_localhost, {key: os.environ.get(key) for key in SINGLE_HOST}
    services.resolve_ip_for_localhost = lambda host: host
    os.environ.update(SINGLE_HOST)
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = resolve
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _dashboard_url(context) -> str | None:
    url = getattr(context, "dashboard_url", None)
    return f"http://{url}" if url else None
