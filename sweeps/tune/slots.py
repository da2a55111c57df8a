"""Check a pack's resource request against the cluster before any trial is queued.

Tune would otherwise wait forever for a node that cannot exist; we say so at once.
"""

from __future__ import annotations

import ray

from cluster.errors import ClusterError
from sweeps.spec import PackResources


def parallel_slots(resources: PackResources) -> int:
    """How many packs the alive nodes can run at once; ClusterError if none can run one."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    slots = 0
    for node in nodes:
        by_cpu = int(node.get("CPU", 0) // resources.cpus) if resources.cpus else 10**6
        by_gpu = int(node.get("GPU", 0) // resources.gpus) if resources.gpus else 10**6
        slots += min(by_cpu, by_gpu)
    if slots == 0:
        largest = ", ".join(f"{n.get('CPU', 0):g} CPU / {n.get('GPU', 0):g} GPU" for n in nodes) or "none"
        raise ClusterError(
            f"no node can run a pack asking for {resources.cpus:g} CPU and {resources.gpus:g} GPU "
            f"(nodes: {largest}); lower --cpus-per-pack / --gpus-per-pack or add such nodes"
        )
    return slots
