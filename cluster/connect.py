"""Start an embedded local Ray, or attach to a running cluster, with a clear error if unreachable.

Embedded means embedded: with no address the service starts its own local Ray
(`address="local"`), even when another Ray runs on the machine. It attaches only when
asked: `--address`, or `RAY_ADDRESS` set in the environment (announced on the
first line of the run, see `announce_environment_address`).
"""

from __future__ import annotations

import logging
import os
import socket
from urllib.parse import urlparse

import ray

from cluster.errors import ClusterError

RAY_ADDRESS = "RAY_ADDRESS"
DEFAULT_PORTS = {"ray": 10001, "http": 80, "https": 443}


def address_from_environment() -> str | None:
    """The cluster address set in $RAY_ADDRESS (None when unset or empty)."""
    return os.environ.get(RAY_ADDRESS) or None


_announced: set[str] = set()


def announce_environment_address() -> str | None:
    """Print, once per process, that a run attaches to $RAY_ADDRESS; returns that address (None if unset).

    `fade-sweep run` calls it first thing, so the line is the first of its output."""
    address = address_from_environment()
    if address and address not in _announced:
        print(f"Attaching to the Ray cluster at {address} (RAY_ADDRESS is set)", flush=True)
        _announced.add(address)
    return address


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


def check_reachable(address: str, timeout: float = 5.0, what: str = "Ray cluster") -> None:
    """Fail fast (seconds, not minutes of retries) when an address does not answer.

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
        raise ClusterError(
            f"cannot reach a {what} at {host}:{port} ({err.strerror or err}); check the address, start one with "
            "`ray start --head`, or omit --address (and unset RAY_ADDRESS) to run on an embedded local Ray"
        ) from None


def connect(address: str | None = None, num_cpus: int | None = None) -> str | None:
    """Attach to the cluster at `address`, or start an embedded local Ray when it is None.

    With `address` None and RAY_ADDRESS set, attaches to $RAY_ADDRESS and says so (callers
    that print their own first line resolve it first with `address_from_environment`).
    Otherwise the embedded Ray is always a new local one (`address="local"`): a Ray
    already running on the machine is left alone.

    Returns the dashboard's URL when Ray reports one.

    The embedded Ray keeps Ray's defaults for security: token authentication on, and
    the dashboard listening on loopback only.
    """
    if ray.is_initialized():
        return None
    source = "--address"
    if address is None and address_from_environment():
        address, source = announce_environment_address(), "RAY_ADDRESS"
    if address is not None:
        if urlparse(address).scheme in ("http", "https"):
            raise ClusterError(
                f"{source} {address} is a dashboard / job server (for `fade-sweep submit`); a run attaches to the "
                "cluster itself: HOST:6379 (the GCS), ray://HOST:10001 or auto"
            )
        check_reachable(address)
        try:
            context = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ClusterError(f"cannot attach to the Ray cluster at {address}: {err}") from None
        return _dashboard_url(context)
    context = ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    return _dashboard_url(context)


def _dashboard_url(context) -> str | None:
    url = getattr(context, "dashboard_url", None)
    return f"http://{url}" if url else None
