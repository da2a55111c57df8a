"""Aggregation, best and sensitivity tables, exports and the HTML report, on a store
written with known per-seed scores."""

import math
import re
import statistics

import polars as pl
import pytest

from sweeps.analysis import importance, kinds, queries, summaries, tables
from sweeps.analysis.queries import Analysis
from sweeps.store import Store, StoreLocation
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
    cells = queries.cells(Store.open(store).scan("scores"))
    sgd = cells.filter((pl.col("optimizer") == "sgd") & (pl.col("alpha") == 0.1)).row(0, named=True)
    assert sgd["mean"] == 4.0 and sgd["std"] == pytest.approx(2.0) and sgd["seeds"] == 3
    assert sgd["sem"] == pytest.approx(2.0 / math.sqrt(3)) and sgd["diverged_seeds"] == 0
    bad = cells.filter(pl.col("gamma0") == -2.0).row(0, named=True)
    assert bad["diverged_seeds"] == 1 and bad["any_diverged"] and not sgd["any_diverged"]


def test_config_curves(store):
    opened = Store.open(store)
    config_id = opened.scan("scores").filter(pl.col("optimizer") == "sgd", pl.col("alpha") == 0.1).collect()["config_id"][0]
    curve = queries.config_curves(opened.scan("curves"), config_id).collect()
    assert curve.select("seed", "step").rows() == [(0, 2), (0, 4), (1, 2), (1, 4), (2, 2), (2, 4)]
    assert curve["mse"].to_list() == [2.0, 2.0, 4.0, 4.0, 6.0, 6.0]


def test_best_table_hand_computed(analysis):
    best = summaries.best_table(analysis)
    by_method = {r["optimizer"]: r for r in best.iter_rows(named=True)}
    assert by_method["sgd"]["alpha"] == 0.01 and by_method["sgd"]["mean"] == pytest.approx(1.5)
    assert by_method["sgd"]["std"] == pytest.approx(statistics.stdev([1.0, 1.5, 2.0]))
    # the diverged cell (mean inf) is skipped even though a seed scored 0.1
    assert by_method["fade"]["theta_lambda"] == 0.5 and by_method["fade"]["gamma0"] == -1.0
    assert by_method["fade"]["mean"] == pytest.approx(0.7) and by_method["fade"]["diverged_configs"] == 1
    assert by_method["fade"]["missing_runs"] == 3 and by_method["sgd"]["missing_runs"] == 0
    assert by_method["fade"]["best_method"] and not by_method["sgd"]["best_method"]


def test_sensitivity_grid_with_missing_and_diverged_cells(analysis):
    (table,) = summaries.sensitivity_tables(analysis)
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
    md = kinds.table_text(analysis, "sensitivity", "md")
    latex = kinds.table_text(analysis, "sensitivity", "latex")
    csv = pl.read_csv(kinds.table_text(analysis, "sensitivity", "csv").encode())
    assert "missing" in md and "diverged (1/3)" in md and "**0.7 ± 0.2**" in md
    assert r"\toprule" in latex and r"\textbf{0.7 $\pm$ 0.2}" in latex and "missing" in latex
    ok = csv.filter(pl.col("status") == "ok").sort("gamma0", "theta_lambda", descending=[True, False])
    from_md = _numbers(md)
    assert from_md == pytest.approx([v for r in ok.iter_rows(named=True) for v in (r["mean"], r["std"])], rel=1e-3)
    assert _numbers(latex.replace(r" $\pm$ ", " ± ")) == pytest.approx(from_md)
    best_csv = pl.read_csv(kinds.table_text(analysis, "best", "csv").encode())
    assert best_csv.sort("optimizer")["mean"].to_list() == pytest.approx([0.7, 1.5])
    best_md = kinds.table_text(analysis, "best", "md")
    assert _numbers(best_md) == pytest.approx([0.7, 0.2, 1.5, 0.5])


def test_curves_summary_downsamples_and_bands(store, analysis):
    from sweeps.analysis.report import summarise_curves

    best = summaries.best_table(analysis)
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


def _figures_in(dom: str) -> list[str]:
    return re.split(r'<div class="figure" id="figure-\d+"', dom)[1:]


def test_report_renders_offline_in_headless_chromium(store, tmp_path):
    from pathlib import Path

    from sweeps.cli import main

    out = tmp_path / "report.html"
    assert main(["report", str(store), "--out", str(out)]) == 0
    html = out.read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)  # nothing loaded from elsewhere: plotly.js is inline
    kinds = re.findall(r"data-kind='([a-z-]+)'", html)
    assert kinds == ["curves", "decay", "parallel", "slices", "slices", "importance", "heatmap", "profile"]
    # the answer first: contents, the sentence, the best table and provenance, then figures, then the tables
    anchors = re.findall(r"<li><a href='#([a-z0-9-]+)'>", html)
    assert anchors == ["completeness", "answer", "best", "how-sure", "provenance", "figures", "compare", "sensitivity",
                       "importance", "configurations", *(f"figure-{i}" for i in range(len(kinds)))]  # a run missing: what is in
    assert all(f"id='{a}'" in html for a in anchors)
    assert html.index("id='answer'") < html.index("id='best'") < html.index("id='figures'") < html.index("id='compare'")
    answer = html[html.index("id='answer'"):html.index("id='best'")]
    assert "fade (alpha=0.1, theta_lambda=0.5, gamma0=-1)</b> has the best mean MSE, 0.7 ± 0.2 over 3 seeds" in answer
    assert "next is" in answer and "sgd (alpha=0.01) at 1.5 ± 0.5 (114.3% higher)" in answer
    assert "Adapted vs fixed decay: fade 0.7 ± 0.2 against 3 ± 0 with fixed decay (theta_lambda = 0)" in answer
    provenance = html[html.index("id='provenance'"):html.index("id='figures'")]
    assert "dtype" in provenance and "fade-sweep " in provenance and "name: known" in provenance  # the sweep itself
    dom = _chromium(tmp_path, f"file://{out}", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not _console(dom.stderr), _console(dom.stderr)
    figures = _figures_in(dom.stdout)
    assert len(figures) == len(kinds) and all('class="main-svg"' in f for f in figures)  # plotly drew each one
    by_kind = {kind: figures[i] for i, kind in reversed(list(enumerate(kinds)))}  # first figure of each kind
    assert "<canvas" not in dom.stdout  # no WebGL anywhere: nothing a browser's context cap can blank
    assert by_kind["parallel"].count('class="js-line"') >= 1 and "(log)" not in by_kind["parallel"]
    assert 'class="errorbar"' in by_kind["slices"] and "selected configuration" in by_kind["slices"]
    assert by_kind["importance"].count('class="point"') >= 2  # bars: sgd's alpha and interactions
    assert "with per-seed curves" in by_kind["curves"]  # the per-seed toggle
    assert "theta_lambda=0.5, gamma0=-1" in by_kind["curves"]  # legends name the selected hyperparameters
    assert "fade, fixed decay (theta_lambda=0)" in by_kind["curves"]  # FADE's fixed-decay counterpart beside it
    assert "mean MSE," in by_kind["heatmap"] and "lower is better" in by_kind["heatmap"]  # colorbar title with direction
    assert by_kind["heatmap"].count('stroke: rgb(228, 26, 28)') >= 1  # the best cell outlined
    assert "diverged (1/3)" in dom.stdout and "missing" in dom.stdout
    assert "Paired comparisons" in dom.stdout and "Seeds are paired" in dom.stdout
    assert "No confirmation stage" in dom.stdout and "fraction of runs (seeds)" in by_kind["profile"]  # How sure are we?
    artifacts = Path(__file__).resolve().parents[1] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = _chromium(tmp_path, f"--screenshot={artifacts / 'report.png'}", "--window-size=1280,5200", f"file://{out}")
    assert shot.returncode == 0 and (artifacts / "report.png").stat().st_size > 10_000


def test_configurations_table_sorts_in_the_page(store, tmp_path):
    """The table of every configuration sorts on a click, by number, with the page's own script."""
    from sweeps.analysis.report import write_report

    out = tmp_path / "report.html"
    write_report(Store.open(store), StoreLocation.parse(out))
    html = out.read_text().replace("</body>", """<script>
var th = document.querySelector('#configurations + p + table th:nth-child(5)'); th.click(); th.click();
document.body.setAttribute('data-order', Array.from(document.querySelectorAll('#configurations + p + table tbody tr'))
  .map(function (r) { return r.cells[4].dataset.value; }).join(','));
</script></body>""")
    out.write_text(html)
    dom = _chromium(tmp_path, f"file://{out}", "--dump-dom")
    header = re.search(r"id=\"configurations\".*?<thead><tr>(.*?)</tr>", dom.stdout, re.S).group(1)
    assert re.findall(r">([^<]+)</th>", header)[4] == "mean"
    order = re.search(r'data-order="([^"]*)"', dom.stdout).group(1).split(",")
    values = [float(v) for v in order if v]
    assert values == sorted(values, reverse=True) and len(values) == 4  # descending after two clicks; blanks last


# 11 task settings x 2 methods with two varied hyperparameters: 22 parallel-coordinates plots (more than
# the live WebGL contexts a browser keeps), and one fade cell that blows up in one seed.
MANY = {
    "name": "many",
    "task": "linear_tracking",
    "task_settings": {"steps": 4, "bin": 2},
    "seeds": 3,
    "variants": [{"task_settings": {"noise": round(0.1 * i, 1)}} for i in range(11)],
    "optimizers": {
        "sgd_wd": {"alpha": [0.1, 0.01], "lambda": [0.01, 0.05]},
        "fade": {"alpha": 0.1, "theta_lambda": [0.0, 0.5], "gamma0": [-1.0, -2.0]},
    },
}
MANY_SCORES = {
    ("sgd_wd", (0.1, 0.01)): [1.0, 1.1, 1.2], ("sgd_wd", (0.1, 0.05)): [2.0, 2.1, 2.2],
    ("sgd_wd", (0.01, 0.01)): [1.5, 1.6, 1.7], ("sgd_wd", (0.01, 0.05)): [3.0, 3.1, 3.2],
    ("fade", (0.1, 0.0, -1.0)): [0.9, 1.0, 1.1], ("fade", (0.1, 0.5, -1.0)): [0.5, 0.6, 0.7],
    ("fade", (0.1, 0.0, -2.0)): [0.6, 0.62, 5000.0],  # unstable: worst seed > 100 x the median
    ("fade", (0.1, 0.5, -2.0)): [0.8, 0.85, 0.9],
}


def test_report_with_many_parallel_plots_draws_every_figure(tmp_path):
    from sweeps.analysis.report import write_report
    from tests.helpers import write_known_store

    store = write_known_store(tmp_path / "many", MANY, MANY_SCORES)
    out = tmp_path / "report.html"
    built = write_report(Store.open(store), StoreLocation.parse(out))
    kinds = [kind for kind, _ in built]
    assert kinds.count("parallel") == 22
    dom = _chromium(tmp_path, f"file://{out}", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not _console(dom.stderr), _console(dom.stderr)  # no "Too many active WebGL contexts"
    figures = _figures_in(dom.stdout)
    assert len(figures) == len(kinds)
    for kind, drawn in zip(kinds, figures):
        if kind == "heatmap":
            assert 'class="hm"' in drawn
        elif kind == "importance":
            assert 'class="point"' in drawn
        else:  # every line figure has drawn paths with data (profiles are steps: H/V segments)
            assert re.search(r'class="js-line" d="M[\d.]+,[\d.]+[LHV]', drawn), kind
    # the blown-up cell is clipped at the colour range's end; the other cells span the scale
    heat = next(fig for kind, fig in built if kind == "heatmap")
    z = [v for row in heat.data[0].z for v in row if v is not None]
    assert heat.data[0].zmax < max(z)  # the blow-up lies beyond the range...
    others = sorted(v for v in z if v < heat.data[0].zmax)
    assert others[0] == heat.data[0].zmin and (others[-1] - others[0]) > 0.25 * (heat.data[0].zmax - heat.data[0].zmin)
    assert "beyond median + 3 x |median - best|" in heat.data[0].colorbar.title.text  # ...and the colorbar says so
    assert "unstable" in out.read_text() and any("<br>unstable" in t for row in heat.data[0].text for t in row)
    shares = importance.importance_table(Analysis.of(Store.open(store), "mean"))
    fade = shares.filter(pl.col("optimizer") == "fade")
    assert fade["share"].is_null().all() and fade["status"].str.contains("1 unstable").all()


def test_colour_range_is_robust_and_never_exaggerates_ties():
    import numpy as np

    from sweeps.analysis.style import colour_range, log_ticks

    scale = colour_range(np.array([0.0137, 0.0139, 0.0142, 0.0150, 0.0161, 0.0188, 1977.0]), higher_is_better=False)
    assert scale.log and scale.clipped == 1
    assert scale.cmin == pytest.approx(np.log10(0.0137)) and scale.cmax < np.log10(1.0)  # the others spread over the scale
    tied = colour_range(np.array([0.01776, 0.01771]), higher_is_better=False)
    assert not tied.log and tied.cmax - tied.cmin == pytest.approx(0.05 * 0.01771)  # 0.3% apart: one end of a 5% range
    accuracy = colour_range(np.array([0.8, 0.81, 0.82, 0.83, 0.05]), higher_is_better=True)
    assert accuracy.clipped == 1 and accuracy.cmax == 0.83 and accuracy.cmin > 0.05
    ticks = log_ticks(0.012, 0.2)
    assert ticks["ticktext"] == ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5"]  # full labels, not bare "2" .. "9"
    assert log_ticks(1.65, 4.5)["ticktext"] == [f"{m}" for m in range(1, 10)] + ["10", "20", "30", "40", "50", "60", "70", "80", "90"]


def test_outliers_need_five_seeds_and_a_real_effect():
    import numpy as np

    from sweeps.analysis import stats

    # the false alarm: 3 seeds within 0.3% of each other
    assert not stats.outlier_mask(np.array([[0.01375, 0.01377, 0.01381]])).any()
    # tight seeds and one 0.4% away: beyond 5 x MAD, but under the 10% minimum effect
    assert not stats.outlier_mask(np.array([[1.0, 1.0001, 0.9999, 1.0002, 1.004]])).any()
    assert stats.outlier_mask(np.array([[1.0, 1.0001, 0.9999, 1.0002, 1.5]])).tolist() == [[False] * 4 + [True]]
    assert not stats.outlier_mask(np.array([[1.0, 1.0001, 1.5, 0.9999]])).any()  # four seeds: never
    typical = np.full(4, 0.6)
    assert stats.unstable(np.array([0.6, 0.6, 0.6, 582.0]), np.array([5000.0, 59.0, np.inf, 6744.0]),
                          typical).tolist() == [True, False, False, True]  # spread; no; diverged; the grid's blow-up


def test_static_image_export_needs_kaleido(store, tmp_path, monkeypatch, capsys):
    import sys

    from sweeps.cli import main

    monkeypatch.setitem(sys.modules, "kaleido", None)  # as if not installed
    assert main(["report", str(store), "--out", str(tmp_path / "r.html"), "--images", str(tmp_path / "png")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fade-sweep: no images written: static image export needs kaleido; install it with "
                   "`pip install -e \".[images]\"` in the fade-sweep checkout (or `pip install kaleido`)"]
    assert (tmp_path / "r.html").stat().st_size > 100_000  # the report itself is written
    assert not (tmp_path / "png").exists()


def test_headings_name_only_the_tasks_own_settings():
    # a store of EMNIST and its partial variant has a stable_classes column; the plain task has no such setting
    title = tables.variant_title({"task": "emnist_label_permuted", "steps": 100, "stable_classes": None, "data_dir": "/x"})
    assert title == "emnist_label_permuted (steps=100)"
    assert tables.variant_title({"task": "linear_tracking", "noise": 1.0, "stable_classes": 0}) == "linear_tracking (noise=1.0)"


@pytest.mark.parametrize("stat", ["median", "iqm"])
def test_robustness_refuses_a_statistic_it_does_not_offer(store, capsys, stat):
    """`--stat` is never ignored in silence: the robustness table tunes on the mean only, and says so."""
    from sweeps.cli import main

    assert main(["table", str(store), "--kind", "robustness", "--stat", stat]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().splitlines() == [
        f"fade-sweep: error: --stat {stat}: the robustness table tunes on the mean of normalised scores (Adkins et al. "
        "2024) and offers no other statistic; drop --stat for --kind robustness"]
    assert main(["table", str(store), "--kind", "robustness"]) == 0


DIVERGING_SWEEP = {
    "name": "diverging",
    "task": "linear_tracking",
    "task_settings": {"steps": 4, "bin": 2},
    "seeds": 10,
    "optimizers": {"sgd": {"alpha": 0.1}, "coupled": {"theta": 0.01, "beta0": -4.6, "gamma0": -2.3},
                   "idbd": {"theta_alpha": [0.01, 0.005], "beta0": -4.6}},
}
DIVERGING_SCORES = {
    ("sgd", (0.1,)): [1.0] * 10,
    ("coupled", (0.01, -4.6, -2.3)): [0.5] * 9 + [math.inf],  # nine finite seeds, one blew up
    ("idbd", (0.01, -4.6)): [0.4] * 7 + [math.nan] * 3,
    ("idbd", (0.005, -4.6)): [0.3] * 8 + [math.inf] * 2,  # diverged on the fewest seeds of its method
}


def test_best_table_counts_diverged_seeds(tmp_path):
    """One diverged seed of ten reads "diverged on 1/10 seeds" (not "all diverged") in Markdown, CSV
    and the report; such a configuration is still never selected, and the rule is stated."""
    store = Store.open(write_known_store(tmp_path / "diverging", DIVERGING_SWEEP, DIVERGING_SCORES))
    analysis = Analysis.of(store)
    csv = pl.read_csv(kinds.table_text(analysis, "best", "csv").encode())
    by_method = {r["optimizer"]: r for r in csv.iter_rows(named=True)}
    assert by_method["coupled"]["status"] == "diverged on 1/10 seeds"
    assert (by_method["coupled"]["seeds"], by_method["coupled"]["diverged_seeds"]) == (10, 1)
    assert by_method["idbd"]["status"] == "diverged on 2/10 seeds" and by_method["idbd"]["theta_alpha"] == 0.005
    assert by_method["coupled"]["mean"] is None and not by_method["coupled"]["best_method"]  # never selected
    assert by_method["sgd"]["status"] == "ok" and by_method["sgd"]["best_method"]
    md = kinds.table_text(analysis, "best", "md")
    assert "| coupled | diverged on 1/10 seeds | 10 |" in md and "all diverged" not in md
    assert "never selected" in md and "fewest seeds" in md
    from sweeps.analysis.report import write_report

    write_report(store, store.location / "report.html")
    page = (tmp_path / "diverging" / "report.html").read_text()
    assert "diverged on 1/10 seeds" in page and "diverged on 2/10 seeds" in page
