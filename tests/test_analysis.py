"""Aggregation, best and sensitivity tables, exports and the HTML report, on a store
written with known per-seed scores."""

import math
import re
import statistics

import polars as pl
import pytest

from sweeps import results
from sweeps.analysis import tables
from sweeps.analysis.queries import Analysis
from sweeps.store import Store
from tests.helpers import write_known_store

SWEEP = {
    "name": "known",
    "task": "linear_tracking",
    "task_settings": {"steps": 4, "bin": 2},
    "seeds": 3,
    "optimizers": {
        "sgd": {"alpha": [0.1, 0.01]},
        "fade": {"alpha": 0.1, "theta_lambda": [0.0, 0.5], "gamma0": [-1.0, -2.0]},
    },
}
# Known per-seed scores (lower is better). fade (gamma0=-2, theta=0.5) is never written: missing.
SCORES = {
    ("sgd", (0.1,)): [2.0, 4.0, 6.0],
    ("sgd", (0.01,)): [1.0, 1.5, 2.0],
    ("fade", (0.1, 0.0, -1.0)): [3.0, 3.0, 3.0],
    ("fade", (0.1, 0.5, -1.0)): [0.5, 0.7, 0.9],
    ("fade", (0.1, 0.0, -2.0)): [0.1, math.inf, 0.2],  # one diverged seed: never selected
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_known_store(tmp_path_factory.mktemp("store") / "known", SWEEP, SCORES)


@pytest.fixture(scope="module")
def analysis(store) -> Analysis:
    return Analysis.of(Store.open(store))


def test_cells_hand_computed(store):
    cells = results.cells(results.scores(store))
    sgd = cells.filter((pl.col("optimizer") == "sgd") & (pl.col("alpha") == 0.1)).row(0, named=True)
    assert sgd["mean"] == 4.0 and sgd["std"] == pytest.approx(2.0) and sgd["seeds"] == 3
    assert sgd["sem"] == pytest.approx(2.0 / math.sqrt(3)) and sgd["diverged_seeds"] == 0
    bad = cells.filter(pl.col("gamma0") == -2.0).row(0, named=True)
    assert bad["diverged_seeds"] == 1 and bad["any_diverged"] and not sgd["any_diverged"]


def test_config_curves(store):
    opened = Store.open(store)
    config_id = opened.scan("scores").filter(pl.col("optimizer") == "sgd", pl.col("alpha") == 0.1).collect()["config_id"][0]
    curve = results.config_curves(opened.scan("curves"), config_id).collect()
    assert curve.select("seed", "step").rows() == [(0, 2), (0, 4), (1, 2), (1, 4), (2, 2), (2, 4)]
    assert curve["mse"].to_list() == [2.0, 2.0, 4.0, 4.0, 6.0, 6.0]


def test_best_table_hand_computed(analysis):
    best = tables.best_table(analysis)
    by_method = {r["optimizer"]: r for r in best.iter_rows(named=True)}
    assert by_method["sgd"]["alpha"] == 0.01 and by_method["sgd"]["mean"] == pytest.approx(1.5)
    assert by_method["sgd"]["std"] == pytest.approx(statistics.stdev([1.0, 1.5, 2.0]))
    # the diverged cell (mean inf) is skipped even though a seed scored 0.1
    assert by_method["fade"]["theta_lambda"] == 0.5 and by_method["fade"]["gamma0"] == -1.0
    assert by_method["fade"]["mean"] == pytest.approx(0.7) and by_method["fade"]["diverged_configs"] == 1
    assert by_method["fade"]["missing_runs"] == 3 and by_method["sgd"]["missing_runs"] == 0
    assert by_method["fade"]["best_method"] and not by_method["sgd"]["best_method"]


def test_sensitivity_grid_with_missing_and_diverged_cells(analysis):
    (table,) = tables.sensitivity_tables(analysis)
    assert table.optimizer == "fade" and table.alpha == 0.1
    cells = {(r["gamma0"], r["theta_lambda"]): r for r in table.cells.iter_rows(named=True)}
    assert set(cells) == {(-1.0, 0.0), (-1.0, 0.5), (-2.0, 0.0), (-2.0, 0.5)}
    assert cells[(-2.0, 0.5)]["status"] == "missing"
    assert cells[(-2.0, 0.0)]["status"] == "diverged"
    assert cells[(-1.0, 0.0)]["mean"] == 3.0 and cells[(-1.0, 0.0)]["std"] == 0.0
    assert [k for k, r in cells.items() if r["best"]] == [(-1.0, 0.5)]
    assert cells[(-1.0, 0.5)]["lambda0"] == pytest.approx(math.exp(-1.0))


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(-?\d+(?:\.\d+)?(?:e-?\d+)?) ± (-?\d+(?:\.\d+)?(?:e-?\d+)?)", text) for x in x]


def test_exports_parse_back(analysis):
    md = tables.table_text(analysis, "sensitivity", "md")
    latex = tables.table_text(analysis, "sensitivity", "latex")
    csv = pl.read_csv(tables.table_text(analysis, "sensitivity", "csv").encode())
    assert "missing" in md and "diverged (1/3)" in md and "**0.7 ± 0.2**" in md
    assert r"\toprule" in latex and r"\textbf{0.7 $\pm$ 0.2}" in latex and "missing" in latex
    ok = csv.filter(pl.col("status") == "ok").sort("gamma0", "theta_lambda", descending=[True, False])
    from_md = _numbers(md)
    assert from_md == pytest.approx([v for r in ok.iter_rows(named=True) for v in (r["mean"], r["std"])], rel=1e-3)
    assert _numbers(latex.replace(r" $\pm$ ", " ± ")) == pytest.approx(from_md)
    best_csv = pl.read_csv(tables.table_text(analysis, "best", "csv").encode())
    assert best_csv.sort("optimizer")["mean"].to_list() == pytest.approx([0.7, 1.5])
    best_md = tables.table_text(analysis, "best", "md")
    assert _numbers(best_md) == pytest.approx([0.7, 0.2, 1.5, 0.5])


def test_curves_summary_downsamples_and_bands(store, analysis):
    from sweeps.analysis.report import summarise_curves

    best = tables.best_table(analysis)
    fade_id = best.filter(pl.col("optimizer") == "fade")["config_id"][0]
    summary = summarise_curves(Store.open(store).scan("curves"), [fade_id], ["mse", "decay_relevant"])
    assert summary["step"].to_list() == [2, 4]
    assert summary["mse_mean"].to_list() == pytest.approx([0.7, 0.7])
    assert summary["mse_std"].to_list() == pytest.approx([0.2, 0.2])
    assert summary["decay_relevant_mean"].to_list() == pytest.approx([0.1, 0.1])


CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
]


def _chromium(tmp_path, *args):
    import shutil
    import subprocess

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "headless Chromium is needed: apt-get install chromium (bash .ci/run installs it)"
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    """The page's console messages, less the software-WebGL driver's performance notes (parallel
    coordinates draw with WebGL; "GPU stall due to ReadPixels" is SwiftShader's, not the page's)."""
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line and "GL Driver Message (OpenGL, Performance" not in line]


def test_report_renders_offline_in_headless_chromium(store, tmp_path):
    from pathlib import Path

    from sweeps.cli import main

    out = tmp_path / "report.html"
    assert main(["report", str(store), "--out", str(out)]) == 0
    html = out.read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)  # nothing loaded from elsewhere: plotly.js is inline
    kinds = re.findall(r"data-kind='([a-z-]+)'", html)
    assert kinds == ["curves", "decay", "parallel", "slices", "slices", "importance", "heatmap"]
    # a table of contents linking every figure and table section
    anchors = re.findall(r"<li><a href='#([a-z0-9-]+)'>", html)
    assert anchors == ["figures", *(f"figure-{i}" for i in range(len(kinds))), "best", "compare", "sensitivity", "importance"]
    assert all(f"id='{a}'" in html for a in anchors)
    dom = _chromium(tmp_path, f"file://{out}", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not _console(dom.stderr), _console(dom.stderr)
    drawn = re.findall(r'<div class="figure" id="figure-\d+" data-kind="[a-z-]+"><div [^>]*>\s*<div id="[^"]+" class="plotly-graph-div js-plotly-plot"[^>]*><div class="plot-container plotly"', dom.stdout)
    assert len(drawn) == len(kinds)  # plotly took over every container...
    assert dom.stdout.count('class="main-svg"') >= 2 * len(kinds)  # ...and drew an SVG in each
    figures = {i: part for i, part in enumerate(re.split(r'<div class="figure" id="figure-\d+"', dom.stdout)[1:])}
    by_kind = {kind: figures[i] for i, kind in reversed(list(enumerate(kinds)))}  # first figure of each kind
    assert 'class="parcoords"' in by_kind["parallel"] and by_kind["parallel"].count('class="y-axis"') >= 3  # 2 hp + score
    assert 'class="errorbar"' in by_kind["slices"] and "selected configuration" in by_kind["slices"]
    assert by_kind["importance"].count('class="point"') >= 2  # bars: sgd's alpha and interactions
    assert "fade: each seed" in by_kind["curves"] and "with per-seed curves" in by_kind["curves"]  # legend group, toggle
    assert "theta_lambda=0.5, gamma0=-1" in by_kind["curves"]  # legends name the selected hyperparameters
    assert "mean MSE," in by_kind["heatmap"] and "lower is better" in by_kind["heatmap"]  # colorbar title with direction
    assert by_kind["heatmap"].count('stroke: rgb(228, 26, 28)') >= 1  # the best cell outlined
    assert "diverged (1/3)" in dom.stdout and "missing" in dom.stdout
    assert "Paired comparisons" in dom.stdout and "Seeds are paired" in dom.stdout
    artifacts = Path(__file__).resolve().parents[1] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = _chromium(tmp_path, f"--screenshot={artifacts / 'report.png'}", "--window-size=1280,5200", f"file://{out}")
    assert shot.returncode == 0 and (artifacts / "report.png").stat().st_size > 10_000


def test_static_image_export_needs_kaleido(store, tmp_path, monkeypatch, capsys):
    import sys

    from sweeps.cli import main

    monkeypatch.setitem(sys.modules, "kaleido", None)  # as if not installed
    assert main(["report", str(store), "--out", str(tmp_path / "r.html"), "--images", str(tmp_path / "png")]) == 1
    assert "static image export needs kaleido: pip install 'fade-sweep[images]'" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
