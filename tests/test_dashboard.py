"""The Grafana dashboard shipped for a sweep's gauges: every panel charts a metric the driver exports
(ray_fade_sweep_<gauge> for each gauge of sweeps/tune/metrics.py), filtered by the sweep chosen; the
file is package data; `run`'s dashboard line and docs/clusters.md say how to load it beside Ray's own."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from sweeps.tune import metrics
from sweeps.tune.driver import dashboard_notice
from sweeps.tune.grafana import DASHBOARD
from tests.test_progress_metrics import gauges, _Recorded  # noqa: F401  (the fixture records the gauges made)

ROOT = Path(__file__).resolve().parents[1]
SERIES = re.compile(r"\bray_(fade_sweep_[a-z_]+)\b")


def test_every_panel_charts_a_gauge_the_sweep_exports(gauges):  # noqa: F811
    board = json.loads(DASHBOARD.read_text())
    exported = set(_Recorded.made)  # the gauges SweepGauges makes
    assert exported and all(name.startswith("fade_sweep_") for name in exported)
    charted = set()
    assert len(board["panels"]) >= 5
    for panel in board["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = SERIES.findall(target["expr"])
            assert names and set(names) <= exported, (panel["title"], target["expr"])
            assert 'sweep=~"$sweep"' in target["expr"]  # the sweep chosen at the top
            charted.update(names)
    assert charted == exported  # and every gauge has a panel
    (choice,) = [v for v in board["templating"]["list"] if v["name"] == "sweep"]
    assert set(SERIES.findall(choice["definition"])) <= exported


def test_the_dashboard_is_package_data_and_the_run_names_it():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(DASHBOARD.match(f"sweeps/tune/{pattern}") for pattern in data["sweeps.tune"])
    text = "\n".join(dashboard_notice("http://127.0.0.1:8265"))
    assert str(DASHBOARD) in text and "RAY_GRAFANA_HOST" in text and "RAY_PROMETHEUS_HOST" in text
    assert "fade_sweep.json" in (ROOT / "docs" / "clusters.md").read_text()
