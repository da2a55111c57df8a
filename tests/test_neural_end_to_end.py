"""Tiny nonlinear-tracking and EMNIST sweeps end to end through Ray Tune, into Parquet and tables."""

import math

import polars as pl
import pytest
import ray
import yaml

from sweeps.cli import main
from sweeps.store import Store
from tests.emnist_fixture import write_idx_dataset

NONLINEAR = {
    "name": "tiny-nonlinear",
    "task": "nonlinear_tracking",
    "task_settings": {"steps": 1200, "score_window": 400, "bin": 200, "period": 100, "slow_multiplier": 3},
    "seeds": 2,
    "optimizers": {
        "sgd": {"alpha": [5.0, 0.01]},  # 5.0 diverges
        "fade_sgd": {"alpha": 0.01, "theta_lambda": [0, 2], "gamma0": -4.6},
    },
}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a Ray another process started
    yield
    ray.shutdown()


def _run(root, sweep: dict, *extra):
    path = root / f"{sweep['name']}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert main(["run", str(path), "--storage", str(root / "store"), "--chunk-steps", "300", "--no-report", *extra]) == 0
    return root / "store" / sweep["name"]


def test_nonlinear_sweep_lands_in_the_store(local_ray, tmp_path, capsys):
    results_dir = _run(tmp_path, NONLINEAR)
    capsys.readouterr()
    scores = Store.open(results_dir).scan("scores").collect()
    curves = Store.open(results_dir).scan("curves").collect()
    assert scores.height == 4 * 2 and curves.height == 4 * 2 * 6
    diverged = scores.filter(pl.col("diverged"))
    assert set(diverged["alpha"]) == {5.0}
    fade = curves.filter(pl.col("optimizer") == "fade_sgd")
    assert fade["decay_fast"].is_not_null().all() and curves.filter(pl.col("optimizer") == "sgd")["decay_fast"].is_null().all()
    assert curves["output_mse"].dtype == pl.Array(pl.Float64, 20)
    one = scores.filter(pl.col("optimizer") == "fade_sgd").row(0, named=True)
    bins = curves.filter((pl.col("config_id") == one["config_id"]) & (pl.col("seed") == one["seed"])).sort("step")
    assert math.isclose(bins["mse"].tail(2).mean(), one["score"], rel_tol=1e-9), "score = MSE over the final 400 steps"
    # per-bin values: the MSE is the mean of the 20 outputs' MSEs, groups are 6/7/7 of them,
    # theta_lambda = 0 keeps every head decay at exp(gamma0), the norm adds the layers' squares
    per_output = bins["output_mse"].to_numpy()
    assert per_output.shape == (6, 20) and (per_output >= 0).all()
    assert bins["mse"].to_numpy() == pytest.approx(per_output.mean(axis=1), rel=1e-12)
    group_mean = (6 * bins["mse_stable"] + 7 * bins["mse_fast"] + 7 * bins["mse_slow"]) / 20
    assert group_mean.to_numpy() == pytest.approx(bins["mse"].to_numpy(), rel=1e-9)
    fixed = fade.join(scores.filter(pl.col("theta_lambda") == 0).select("config_id").unique(), on="config_id")
    for group in ("stable", "fast", "slow"):
        assert fixed[f"decay_{group}"].to_numpy() == pytest.approx(math.exp(-4.6), rel=1e-6)
    adapted = fade.join(scores.filter(pl.col("theta_lambda") == 2).select("config_id").unique(), on="config_id")
    assert (adapted["decay_fast"] != adapted["decay_stable"]).any(), "theta_lambda = 2 adapts the decays"
    norms = bins.select(pl.col("^weight_norm_layer.*$")).to_numpy()
    assert bins["weight_norm"].to_numpy() == pytest.approx(((norms**2).sum(axis=1)) ** 0.5, rel=1e-12)
    assert ((bins["dead_units_layer1"] >= 0) & (bins["dead_units_layer1"] <= 1)).all()
    assert main(["table", str(results_dir), "--format", "csv"]) == 0
    table = pl.read_csv(capsys.readouterr().out.encode())
    assert set(table["optimizer"]) == {"sgd", "fade_sgd"}
    assert table.filter(pl.col("optimizer") == "sgd")["alpha"][0] == 0.01
    assert main(["report", str(results_dir), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "Per-group MSE" in html and "Decay-rate evolution" in html


def test_emnist_sweep_lands_in_the_store(local_ray, tmp_path, capsys):
    data = write_idx_dataset(tmp_path / "emnist", images=300)
    sweep = {
        "name": "tiny-emnist",
        "task": "emnist_partial_permuted",
        "task_settings": {"steps": 600, "period": 150, "bin": 150, "data_dir": str(data)},
        "seeds": 2,
        "optimizers": {"sgd_wclip": {"alpha": 0.01, "kappa": 2}, "fade_sgd": {"alpha": 0.005, "theta_lambda": [0, 0.1], "gamma0": -6.9}},
    }
    results_dir = _run(tmp_path, sweep)
    capsys.readouterr()
    scores = Store.open(results_dir).scan("scores").collect()
    curves = Store.open(results_dir).scan("curves").collect()
    assert scores.height == 3 * 2 and curves.height == 3 * 2 * 4
    assert ((scores["score"] > 0) & (scores["score"] < 1)).all() and not scores["diverged"].any()
    assert set(scores["stable_classes"]) == {24}
    # the score is the online accuracy over all steps: the mean of the four equal bins
    per_run = curves.group_by("config_id", "seed").agg(pl.col("accuracy").mean().alias("from_bins"))
    joined = scores.join(per_run, on=["config_id", "seed"])
    assert joined["score"].to_numpy() == pytest.approx(joined["from_bins"].to_numpy(), rel=1e-12)
    assert curves["accuracy"].is_between(0, 1).all() and (curves["loss"] > 0).all()
    assert (curves["accuracy"] * 150).round(6).to_numpy() == pytest.approx((curves["accuracy"] * 150).round().to_numpy())
    fixed = curves.join(scores.filter(pl.col("theta_lambda") == 0).select("config_id").unique(), on="config_id")
    assert fixed["decay_head"].to_numpy() == pytest.approx(math.exp(-6.9), rel=1e-6)
    assert curves.filter(pl.col("optimizer") == "sgd_wclip")["decay_head"].is_null().all()
    for layer in (1, 2):
        assert curves[f"dead_units_layer{layer}"].is_between(0, 1).all()
    assert (curves["weight_norm_layer3"] > 0).all()
    assert main(["table", str(results_dir), "--format", "csv"]) == 0
    table = pl.read_csv(capsys.readouterr().out.encode())
    best_fade = scores.filter(pl.col("optimizer") == "fade_sgd").group_by("config_id").agg(pl.col("score").mean())
    assert table.filter(pl.col("optimizer") == "fade_sgd")["mean"][0] == pytest.approx(best_fade["score"].max(), rel=1e-12)
    assert main(["table", str(results_dir)]) == 0
    assert "average online accuracy over all steps, higher is better" in capsys.readouterr().out


def test_missing_emnist_is_refused_before_anything_runs(tmp_path, capsys):
    sweep = {"name": "no-data", "task": "emnist_label_permuted", "task_settings": {"steps": 100, "data_dir": str(tmp_path / "nowhere")},
             "seeds": 1, "optimizers": {"sgd": {"alpha": 0.01}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert main(["run", str(path), "--storage", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert "no emnist-balanced-train-images-idx3-ubyte[.gz]" in err and "nowhere" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "store").exists()
