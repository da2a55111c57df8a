"""Make sure every node of a multi-node cluster can write the results store.

Since Ray 2.7 nothing is synced to the head node: trials write straight to the storage
path, so on several machines it must be a shared filesystem mounted at the same path, or an
object store (s3://, gs://) that every node can read and write with its own credentials
(instance role / workload identity).

The check writes a marker on the driver; on more than one node a Ray task pinned to each
node reads it (and, for an object store, writes a reply object back, which the driver reads).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.errors import ClusterError
from sweeps.store.location import StorageError, StoreLocation, redact

MARKER_PREFIX = ".reachable-"


@ray.remote(num_cpus=0)
def _sees(marker: str) -> bool:
    return Path(marker).is_file()


@ray.remote(num_cpus=0)
def _round_trip(uri: str, marker: str, reply: str) -> str:
    """On one node: read the driver's marker and write a reply beside it. '' on success, else why."""
    try:
        location = StoreLocation.parse(uri)
        if location.read_bytes(marker) != b"fade-sweep":
            return "the marker object reads back different content"
        location.write_bytes(reply, b"fade-sweep")
        return ""
    except Exception as err:  # noqa: BLE001 - reported to the driver as one line
        return redact(f"{type(err).__name__}: {err}".splitlines()[0])[:300]


def check_storage(results_dir: StoreLocation) -> None:
    """Fail with the fix if the results store is not writable here or not usable on every node."""
    location = StoreLocation.parse(results_dir)
    results_dir = location.local_path
    if results_dir is None:  # an object store: every node reaches it with its own credentials
        _check_object_store(location)
        return
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        marker = results_dir / f"{MARKER_PREFIX}{uuid.uuid4().hex}"
        marker.write_text("fade-sweep")
    except OSError as err:
        raise ClusterError(f"storage {results_dir} is not writable ({err.strerror}); choose another --storage") from None
    try:
        nodes = _alive_nodes()
        if len(nodes) > 1:
            checks = [_pinned(_sees, node).remote(str(marker)) for node in nodes]
            blind = [node for node, seen in zip(nodes, ray.get(checks, timeout=60)) if not seen]
            if blind:
                raise ClusterError(
                    f"storage {results_dir} is a local path that {len(blind)} of {len(nodes)} nodes cannot see "
                    "(Ray no longer syncs results to the head); use a shared filesystem mounted at the same path "
                    "on every node (NFS, EFS, GCS FUSE) or an object store (--storage s3://BUCKET/PREFIX)"
                )
    finally:
        marker.unlink(missing_ok=True)


def _alive_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]


def _pinned(task, node: str):
    return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))


def _check_object_store(location: StoreLocation) -> None:
    """The driver writes, reads back and deletes a marker; with several nodes each node reads it and writes a reply."""
    marker = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    written: list[str] = []
    try:
        try:
            location.check()
            location.write_bytes(marker, b"fade-sweep")
            written.append(marker)
            if location.read_bytes(marker) != b"fade-sweep":
                raise ClusterError(f"storage {location}: a marker object read back different content")
        except (StorageError, OSError) as err:
            raise ClusterError(f"storage {location} is not writable from this machine: {redact(str(err))}") from None
        nodes = _alive_nodes()
        if len(nodes) > 1:
            replies = {node: f"{marker}-{node[:12]}" for node in nodes}
            written.extend(replies.values())
            checks = [_pinned(_round_trip, node).remote(location.uri, marker, replies[node]) for node in nodes]
            results = ray.get(checks, timeout=120)
            failed = [(node, why) for node, why in zip(nodes, results) if why]
            unseen = [node for node, why in zip(nodes, results) if not why and not location.is_file(replies[node])]
            if failed or unseen:
                node, why = failed[0] if failed else (unseen[0], "its reply object is not visible to the driver")
                raise ClusterError(
                    f"storage {location}: {len(failed) + len(unseen)} of {len(nodes)} nodes cannot read and write it "
                    f"(node {node[:12]}: {why}); give every node access (an IAM role / instance profile, or workload "
                    "identity on Kubernetes) and, for an S3-compatible store, the same AWS_ENDPOINT_URL"
                )
    finally:
        for name in written:
            try:
                location.delete(name)
            except (StorageError, OSError):
                pass
