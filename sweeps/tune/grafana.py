"""The Grafana dashboard of a sweep's gauges (metrics.py), shipped with the package: load it beside
Ray's own dashboards (docs/clusters.md, "The dashboard"). Plain data; no Ray."""

from __future__ import annotations

from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent / "dashboards" / "fade_sweep.json"
RAY_DASHBOARDS = "/tmp/ray/session_latest/metrics/grafana/dashboards"  # where Ray provisions its session's own


def dashboard_hint() -> str:
    """One line: how to put the sweep's dashboard beside Ray's in Grafana."""
    return (f"  Grafana: the sweep's own dashboard is {DASHBOARD}; copy it into {RAY_DASHBOARDS}/ before starting "
            "Grafana (or import it there), and start the run with RAY_GRAFANA_HOST and RAY_PROMETHEUS_HOST set")
