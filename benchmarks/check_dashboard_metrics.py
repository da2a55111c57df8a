"""Check that a sweep's gauges reach Ray's Prometheus export (what the dashboard's Metrics page and
Grafana read): runs a tiny sweep on an embedded Ray, then reads the node's metrics port until the
`ray_fade_sweep_*` series appear (Ray exports every few seconds), and prints them.

    python benchmarks/check_dashboard_metrics.py
"""

from __future__ import annotations

import tempfile
import time
import urllib.request

import ray

from sweeps.spec import parse_sweep
from sweeps.tune.stages import ExecutionOptions, run_sweep

TINY = {"name": "tiny", "task": "linear_tracking", "task_settings": {"steps": 2000, "bin": 1000}, "seeds": 2,
        "optimizers": {"sgd": {"alpha": [0.1, 0.01]}, "fade": {"alpha": 0.1, "theta_lambda": [0, 0.01], "gamma0": -2.3}}}


def main() -> None:
    with tempfile.TemporaryDirectory() as storage:
        run_sweep(parse_sweep(TINY, "tiny"), storage, options=ExecutionOptions(num_cpus=2))
    port = next(n for n in ray.nodes() if n["Alive"])["MetricsExportPort"]
    for _ in range(12):
        time.sleep(5)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        series = [line for line in text.splitlines() if line.startswith("ray_fade_sweep_")]
        if series:
            print("\n".join(series))
            return
    raise SystemExit("no ray_fade_sweep_* series in the node's metrics export after 60 s")


if __name__ == "__main__":
    main()
