"""Make sure every node of a multi-node cluster can write the results directory.

Since Ray 2.7 nothing is synced to the head node: trials write straight to the storage
path, so on several machines it must be a shared filesystem mounted at the same path.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.errors import ClusterError


@ray.remote(num_cpus=0)
def _sees(marker: str) -> bool:
    return Path(marker).is_file()


def check_storage(results_dir: Path) -> None:
    """Fail with the fix if the results directory is not writable here or not visible on every node."""
    if "://" in str(results_dir):
        raise ClusterError(
            f"storage {results_dir}: URIs are not supported by the results store; mount the bucket or shared "
            "filesystem (NFS, EFS, GCS FUSE, s3fs) at the same path on every node and give that path"
        )
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        marker = results_dir / f".reachable-{uuid.uuid4().hex}"
        marker.write_text("fade-sweep")
    except OSError as err:
        raise ClusterError(f"storage {results_dir} is not writable ({err.strerror}); choose another --storage") from None
    try:
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        if len(nodes) > 1:
            checks = [
                _sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(str(marker))
                for node in nodes
            ]
            blind = [node for node, seen in zip(nodes, ray.get(checks, timeout=60)) if not seen]
            if blind:
                raise ClusterError(
                    f"storage {results_dir} is a local path that {len(blind)} of {len(nodes)} nodes cannot see "
                    "(Ray no longer syncs results to the head); use a shared filesystem mounted at the same path "
                    "on every node (NFS, EFS, GCS FUSE)"
                )
    finally:
        os.unlink(marker)
