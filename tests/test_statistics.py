"""Statistics of the tables (median, IQM, bootstrap CIs, outlier seeds, selection by --stat,
paired comparisons, tied cells, robustness, importance) against hand computation on a
small store with known per-seed scores, and against plain numpy written here."""

import itertools
import math
import subprocess
import sys
import warnings

import numpy as np
import polars as pl
import pytest

from sweeps.analysis import importance, kinds, queries, stats, summaries
from sweeps.analysis.queries import Analysis
from sweeps.cli import main
from sweeps.store import Store
from tests.helpers import write_known_store

SWEEP = {
    "name": "robust",
    "task": "linear_tracking",
    "task_settings": {"steps": 4, "bin": 2},
    "seeds": 5,
    "optimizers": {
        "sgd": {"alpha": [0.1, 0.01]},
        "sgd_wd": {"alpha": [0.1, 0.01], "lambda": [0.01, 0.05]},
        "fade": {"alpha": 0.1, "theta_lambda": [0.0, 0.5], "gamma0": [-1.0, -2.0]},
    },
}
# per-seed scores (seeds 0..4; lower is better)
SCORES = {
    # mean 2.78, median 1.2, IQM (1.1 + 1.2 + 1.6) / 3 = 1.3; seed 4 (9.0) is an outlier
    ("sgd", (0.1,)): [1.0, 1.1, 1.2, 1.6, 9.0],
    # mean 1.58, median 1.6, IQM (1.5 + 1.6 + 1.6) / 3: best by the mean, not by the median or IQM
    ("sgd", (0.01,)): [1.5, 1.6, 1.5, 1.7, 1.6],
    # a 2 x 2 full grid with cell means [[1, 3], [2, 6]] (rows alpha 0.1, 0.01; columns lambda 0.01, 0.05)
    ("sgd_wd", (0.1, 0.01)): [0.6, 0.7, 0.8, 1.1, 1.8],
    ("sgd_wd", (0.1, 0.05)): [2.9, 3.0, 3.1, 3.0, 3.0],
    ("sgd_wd", (0.01, 0.01)): [1.9, 2.0, 2.1, 2.0, 2.0],
    ("sgd_wd", (0.01, 0.05)): [5.9, 6.0, 6.1, 6.0, 6.0],
    # fade: (theta, gamma0)
    ("fade", (0.1, 0.0, -1.0)): [3.0, 3.0, 3.0, 3.0, 3.0],
    ("fade", (0.1, 0.5, -1.0)): [0.5, 0.6, 0.7, 0.8, 0.9],  # the best cell and method
    ("fade", (0.1, 0.0, -2.0)): [2.0, math.inf, 2.0, 2.0, 2.0],  # diverged
    ("fade", (0.1, 0.5, -2.0)): [0.6, 0.7, 0.8, 0.9, 1.0],  # CI overlaps the best's: tied
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_known_store(tmp_path_factory.mktemp("stats") / "robust", SWEEP, SCORES)


def _cell(frame: pl.DataFrame, optimizer: str, **hp) -> dict:
    rows = frame.filter(pl.col("optimizer") == optimizer, *(pl.col(k) == v for k, v in hp.items()))
    assert rows.height == 1
    return rows.row(0, named=True)


def _csv(capsys, *args) -> pl.DataFrame:
    capsys.readouterr()
    assert main(["table", *args, "--format", "csv"]) == 0
    return pl.read_csv(capsys.readouterr().out.encode())


# ---------------------------------------------------------------- aggregates


def test_median_iqm_min_max_hand_computed(store):
    cells = queries.cells(Store.open(store).scan("scores"), stat="iqm")
    a = _cell(cells, "sgd", alpha=0.1)
    assert a["mean"] == pytest.approx(2.78) and a["median"] == pytest.approx(1.2)
    assert a["iqm"] == pytest.approx((1.1 + 1.2 + 1.6) / 3) and a["stat"] == "iqm" and a["stat_value"] == a["iqm"]
    assert (a["min"], a["max"]) == (1.0, 9.0) and a["std"] == pytest.approx(np.std(SCORES[("sgd", (0.1,))], ddof=1))
    b = _cell(cells, "sgd", alpha=0.01)
    assert b["median"] == pytest.approx(1.6) and b["iqm"] == pytest.approx((1.5 + 1.6 + 1.6) / 3)
    assert b["sem"] == pytest.approx(np.std(SCORES[("sgd", (0.01,))], ddof=1) / math.sqrt(5))
    diverged = _cell(cells, "fade", theta_lambda=0.0, gamma0=-2.0)
    assert diverged["diverged_seeds"] == 1 and diverged["ci_low"] is None and diverged["median"] is None
    assert diverged["mean"] == math.inf


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 16])
def test_iqm_is_scipy_trim_mean_and_median_is_numpy(n):
    from scipy.stats import trim_mean

    x = np.random.default_rng(n).normal(size=(7, n))
    out = stats.block_statistics(x, "iqm")
    assert out["iqm"] == pytest.approx(trim_mean(x, 0.25, axis=1))
    assert out["median"] == pytest.approx(np.median(x, axis=1))
    # by hand for n = 10: drop 2 from each end, mean of the middle 6
    if n == 10:
        assert out["iqm"][0] == pytest.approx(np.sort(x[0])[2:8].mean())


def test_outlier_flags_hand_computed(store, capsys):
    cells = queries.cells(Store.open(store).scan("scores"))
    # sgd alpha=0.1: median 1.2, |x - 1.2| = .2 .1 0 .4 7.8, MAD .2, 5 * 1.4826 * .2 = 1.48: only seed 4 (9.0)
    assert _cell(cells, "sgd", alpha=0.1)["outlier_seeds"] == "4:9" and _cell(cells, "sgd", alpha=0.1)["outliers"] == 1
    flagged = cells.filter(pl.col("outliers") > 0)["config_id"].to_list()
    assert flagged == [_cell(cells, "sgd", alpha=0.1)["config_id"]]  # the diverged seed is not an outlier
    md = kinds.table_text(Analysis.of(Store.open(store), "median"), "best", "md")
    assert "| sgd | 1.2 † | 5 | [" in md and "sgd: outlier seed 4 (9)" in md
    csv = _csv(capsys, str(store), "--stat", "median")
    assert csv.filter(pl.col("optimizer") == "sgd")["outlier_seeds"].to_list() == ["4:9"]


def test_outlier_rule_and_mad_zero_fallback():
    rows = np.array([
        [1.0, 1.1, 1.2, 1.6, 9.0, 1.3, 1.2, 1.1, 1.0, 1.2],  # MAD > 0: 9.0 flagged
        [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 20.0],  # MAD = 0: mean AD = 1.8, 5 * 1.2533 * 1.8 = 11.3 < 18
        [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],  # all equal: nothing
        [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.5],  # MAD = 0: mean AD .25, limit 1.57 > 1.5: nothing
    ])
    mask = stats.outlier_mask(rows)
    assert mask.tolist() == [[j == 4 for j in range(10)], [j == 9 for j in range(10)], [False] * 10, [False] * 10]
    assert not stats.outlier_mask(np.array([[1.0, 100.0]])).any()  # two seeds: never


# ---------------------------------------------------------------- bootstrap


def _plain_bootstrap(x, statistic, resamples=20_000, seed=12345):
    rng = np.random.default_rng(seed)
    values = [statistic(x[rng.integers(0, len(x), len(x))]) for _ in range(resamples)]
    return np.percentile(values, [2.5, 97.5])


@pytest.mark.parametrize("stat,fn", [("mean", np.mean), ("median", np.median),
                                     ("iqm", lambda v: np.sort(v)[len(v) // 4 : len(v) - len(v) // 4].mean())])
def test_bootstrap_ci_matches_plain_numpy_bootstrap(stat, fn):
    rng = np.random.default_rng(7)
    x = rng.gamma(2.0, 1.0, size=(3, 10))
    out = stats.block_statistics(x, stat)
    for row in range(3):
        low, high = _plain_bootstrap(x[row], fn)
        spread = high - low
        assert out["ci_low"][row] == pytest.approx(low, abs=0.06 * spread)
        assert out["ci_high"][row] == pytest.approx(high, abs=0.06 * spread)
    # the same resample indices give exactly the plain computation (sorted rows, sorted indices)
    idx = np.sort(stats.resample_indices(10), axis=1)
    ordered = np.sort(x[0])
    exact = np.percentile([fn(ordered[i]) for i in idx], [2.5, 97.5])
    assert [out["ci_low"][0], out["ci_high"][0]] == pytest.approx(exact, rel=1e-6)  # float32 products


def test_bootstrap_ci_in_store_and_reproducible_across_processes(store):
    cells = queries.cells(Store.open(store).scan("scores"), stat="mean")
    cell = _cell(cells, "sgd_wd", alpha=0.1, **{"lambda": 0.01})
    low, high = _plain_bootstrap(np.array(SCORES[("sgd_wd", (0.1, 0.01))]), np.mean)
    assert cell["ci_low"] == pytest.approx(low, abs=0.03) and cell["ci_high"] == pytest.approx(high, abs=0.03)
    assert cell["ci_low"] < cell["mean"] < cell["ci_high"]
    command = [sys.executable, "-m", "sweeps.cli", "table", str(store), "--kind", "sensitivity", "--format", "csv"]
    first, second = (subprocess.run(command, capture_output=True, text=True, check=True).stdout for _ in range(2))
    assert first == second and "ci_low" in first
    again = queries.cells(Store.open(store).scan("scores"), stat="mean")
    assert again.sort("config_id").equals(cells.sort("config_id"))


# ---------------------------------------------------------------- selection by --stat


def test_stat_chooses_the_selected_configuration(store, capsys):
    by_mean = _csv(capsys, str(store))
    by_median = _csv(capsys, str(store), "--stat", "median")
    by_iqm = _csv(capsys, str(store), "--stat", "iqm")
    sgd = {name: t.filter(pl.col("optimizer") == "sgd").row(0, named=True) for name, t in
           (("mean", by_mean), ("median", by_median), ("iqm", by_iqm))}
    # hand: means 2.78 (alpha .1) vs 1.58 (alpha .01); medians 1.2 vs 1.6; IQMs 1.3 vs 1.567
    assert sgd["mean"]["alpha"] == 0.01 and sgd["median"]["alpha"] == 0.1 and sgd["iqm"]["alpha"] == 0.1
    assert sgd["median"]["stat"] == "median" and sgd["median"]["stat_value"] == pytest.approx(1.2)
    for column in ("mean", "std", "sem", "median", "iqm", "ci_low", "ci_high", "stat", "seeds", "outlier_seeds"):
        assert column in by_median.columns
    assert by_median.filter(pl.col("best_method"))["optimizer"].to_list() == ["fade"]
    # the API says the same
    best = queries.best_configs(queries.cells(Store.open(store).scan("scores"), stat="median"))
    assert best.filter(pl.col("optimizer") == "sgd")["alpha"].item() == 0.1


# ---------------------------------------------------------------- paired comparisons


def _prob_better_by_hand(a, r):  # lower is better
    return sum(1.0 if x < y else 0.5 if x == y else 0.0 for x in a for y in r) / (len(a) * len(r))


def test_paired_difference_and_probability_of_improvement(store, capsys):
    a = SCORES[("fade", (0.1, 0.5, -1.0))]
    r = SCORES[("sgd_wd", (0.1, 0.01))]
    table = summaries.compare_table(Analysis.of(Store.open(store), "mean"), reference="sgd_wd")
    fade = table.filter(pl.col("optimizer") == "fade").row(0, named=True)
    assert fade["reference"] == "sgd_wd" and fade["shared_seeds"] == 5 and fade["status"] == "ok"
    assert fade["difference"] == pytest.approx(0.7 - 1.0)
    assert fade["p_improvement"] == pytest.approx(_prob_better_by_hand(a, r)) == pytest.approx(17.5 / 25)
    # CIs against a plain paired bootstrap (resample seeds, the same for both methods)
    rng = np.random.default_rng(99)
    a_, r_ = np.array(a), np.array(r)
    diffs, probs = [], []
    for _ in range(20_000):
        i = rng.integers(0, 5, 5)
        diffs.append(a_[i].mean() - r_[i].mean())
        probs.append(_prob_better_by_hand(a_[i], r_[i]))
    assert [fade["diff_ci_low"], fade["diff_ci_high"]] == pytest.approx(np.percentile(diffs, [2.5, 97.5]), abs=0.03)
    assert [fade["p_ci_low"], fade["p_ci_high"]] == pytest.approx(np.percentile(probs, [2.5, 97.5]), abs=0.03)
    ref = table.filter(pl.col("optimizer") == "sgd_wd").row(0, named=True)
    assert ref["status"] == "reference" and ref["difference"] == 0 and ref["p_improvement"] == 0.5
    # by the median: 0.7 - 0.8; default reference: the best method (fade)
    by_median = _csv(capsys, str(store), "--kind", "compare", "--stat", "median", "--reference", "sgd_wd")
    assert by_median.filter(pl.col("optimizer") == "fade")["difference"].item() == pytest.approx(-0.1)
    default = summaries.compare_table(Analysis.of(Store.open(store), "mean"))
    assert set(default["reference"]) == {"fade"}
    sgd = default.filter(pl.col("optimizer") == "sgd").row(0, named=True)
    assert sgd["difference"] == pytest.approx(1.58 - 0.7) and sgd["p_improvement"] == 0.0
    md = kinds.table_text(Analysis.of(Store.open(store), "mean"), "compare", "md")
    assert "Seeds are paired" in md and "P(better than fade)" in md


def test_compare_unknown_reference_is_bad_input(store, capsys):
    assert main(["table", str(store), "--kind", "compare", "--reference", "adamw"]) == 2
    assert "unknown reference method 'adamw'" in capsys.readouterr().err


def test_one_seed_has_no_interval_so_nothing_is_tied_and_nothing_warns(tmp_path):
    """A one-seed sweep: no confidence interval, no ties, and no warning in the user's output."""
    document = {**SWEEP, "seeds": 1, "optimizers": {"fade": SWEEP["optimizers"]["fade"]}}
    scores = {("fade", (0.1, t, g)): [s] for (t, g), s in {(0.0, -1.0): 3.0, (0.5, -1.0): 0.7, (0.0, -2.0): 0.71,
                                                           (0.5, -2.0): 0.8}.items()}
    one = write_known_store(tmp_path / "one", document, scores)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (table,) = summaries.sensitivity_tables(Analysis.of(Store.open(one), "mean"))
    assert table.cells["best"].sum() == 1 and not table.cells["tied"].any()
    assert table.within == 2  # 0.71 is within 5% of 0.7


def test_paired_comparisons_vectorised_direction():
    a = np.array([[0.9, 0.8, 0.7], [0.9, 0.8, 0.7]])
    r = np.array([[0.5, 0.8, 1.0], [0.5, 0.8, 1.0]])
    out = stats.paired_comparisons(a, r, np.array([True, False]), "mean")
    higher = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a[0] for y in r[0]) / 9
    assert out["p_improvement"] == pytest.approx([higher, 1 - higher])
    assert out["difference"] == pytest.approx([0.8 - 2.3 / 3] * 2)


# ---------------------------------------------------------------- ties and robustness


def test_tied_cells_and_robustness(store):
    (table,) = summaries.sensitivity_tables(Analysis.of(Store.open(store), "mean"))
    cells = {(r["gamma0"], r["theta_lambda"]): r for r in table.cells.iter_rows(named=True)}
    best = cells[(-1.0, 0.5)]
    assert best["best"] and not best["tied"]
    assert cells[(-2.0, 0.5)]["tied"]  # [0.6 .. 1.0] against [0.5 .. 0.9]: CIs overlap
    assert cells[(-2.0, 0.5)]["ci_low"] <= best["ci_high"]
    assert not cells[(-1.0, 0.0)]["tied"]  # 3.0 on every seed: CI [3, 3]
    assert not cells[(-2.0, 0.0)]["tied"] and cells[(-2.0, 0.0)]["status"] == "diverged"
    # within 5% of 0.7: only the best itself, of 3 non-diverged cells
    assert (table.within, table.usable) == (1, 3) and table.robust == pytest.approx(1 / 3)
    md = kinds.table_text(Analysis.of(Store.open(store), "mean"), "sensitivity", "md")
    assert "*0.8 ± 0.16 ≈*" in md and "**0.7 ± 0.16**" in md and "1 of 3 non-diverged cells (33%)" in md
    latex = kinds.table_text(Analysis.of(Store.open(store), "mean"), "sensitivity", "latex")
    assert r"\textit{0.8 $\pm$ 0.16 $\approx$}" in latex
    csv = pl.read_csv(kinds.table_text(Analysis.of(Store.open(store), "mean"), "sensitivity", "csv").encode())
    assert csv["tied"].sum() == 1 and csv["robust_within_5pct"].unique().to_list() == pytest.approx([1 / 3])


def test_tied_cells_follow_the_ci_rule():
    """Tied = CI overlaps the best's, for every pair of non-diverged cells (the rule, not the example)."""
    low, high = np.array([0.5, 0.9, 1.2]), np.array([0.8, 1.0, 1.3])
    overlaps = [bool(lo <= high[0] and hi >= low[0]) for lo, hi in zip(low[1:], high[1:])]
    assert overlaps == [False, False]


# ---------------------------------------------------------------- importance


def test_importance_two_factor_hand_computed():
    # y = [[1, 3], [2, 6]]: grand mean 3; rows 2, 4 -> SS 4; columns 1.5, 4.5 -> SS 9; total 14
    codes = np.array(list(itertools.product(range(2), range(2))))
    shares, rest = stats.main_effect_shares(codes, np.array([1.0, 3.0, 2.0, 6.0]))
    assert shares == pytest.approx([4 / 14, 9 / 14]) and rest == pytest.approx(1 / 14)
    # additive: no interaction; a 3-factor random grid sums to 1
    assert stats.main_effect_shares(codes, np.array([1.0, 2.0, 3.0, 4.0]))[1] == pytest.approx(0, abs=1e-12)
    codes3 = np.array(list(itertools.product(range(3), range(2), range(4))))
    s3, r3 = stats.main_effect_shares(codes3, np.random.default_rng(0).normal(size=24))
    assert s3.sum() + r3 == pytest.approx(1.0) and (s3 >= 0).all()
    assert stats.main_effect_shares(codes[:3], np.array([1.0, 2.0, 3.0])) is None  # not a full grid


def test_importance_table_in_store(store, capsys):
    table = importance.importance_table(Analysis.of(Store.open(store), "mean"))
    wd = table.filter(pl.col("optimizer") == "sgd_wd")
    shares = dict(zip(wd["hyperparameter"], wd["share"]))
    assert shares == pytest.approx({"alpha": 4 / 14, "lambda": 9 / 14, "interactions": 1 / 14})
    assert sum(shares.values()) == pytest.approx(1.0)
    sgd = dict(zip(*table.filter(pl.col("optimizer") == "sgd").select("hyperparameter", "share")))
    assert sgd == pytest.approx({"alpha": 1.0, "interactions": 0.0})
    fade = table.filter(pl.col("optimizer") == "fade").row(0, named=True)
    assert fade["share"] is None and "grid not full (3 of 4 cells usable; 1 diverged, 0 missing)" in fade["status"]
    csv = _csv(capsys, str(store), "--kind", "importance")
    assert csv.height == table.height
    md = kinds.table_text(Analysis.of(Store.open(store), "mean"), "importance", "md")
    assert "64.3%" in md and "skipped: grid not full" in md
