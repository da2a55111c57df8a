"""Start an embedded local Ray, or attach to a running cluster, with a clear error if unreachable."""

from __future__ import annotations

import logging
import socket
from urllib.parse import urlparse

import ray

from cluster.errors import ClusterError


def check_reachable(address: str, timeout: float = 5.0, what: str = "Ray cluster") -> None:
    """Fail fast (seconds, not minutes of retries) when a host:port address does not answer."""
    if address == "auto" or address.startswith("ray://"):
        target = urlparse(address).netloc if address.startswith("ray://") else None
    else:
        target = address
    if not target:
        return
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"bad Ray address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:6379) or ray://HOST:10001")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ClusterError(
            f"cannot reach a {what} at {address} ({err.strerror or err}); check the address, start one with "
            "`ray start --head`, or omit --address to run on an embedded local Ray"
        ) from None


def connect(address: str | None = None, num_cpus: int | None = None) -> str | None:
    """Attach to the cluster at `address`, or start an embedded local Ray when it is None.

    Returns the dashboard's URL when Ray reports one.

    The embedded Ray keeps Ray's defaults for security: token authentication on, and
    the dashboard listening on loopback only.
    """
    if ray.is_initialized():
        return None
    if address is not None:
        check_reachable(address)
        try:
            context = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError) as err:
            raise ClusterError(f"cannot attach to the Ray cluster at {address}: {err}") from None
        return _dashboard_url(context)
    context = ray.init(
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
