"""Tiny nonlinear-tracking and EMNIST sweeps end to end through Ray Tune, into Parquet and tables."""

import math

import polars as pl
import pytest
import ray
import yaml

from sweeps import results
from sweeps.cli import main
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
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
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
    scores = results.scores(results_dir).collect()
    curves = results.curves(results_dir).collect()
    assert scores.height == 4 * 2 and curves.height == 4 * 2 * 6
    diverged = scores.filter(pl.col("diverged"))
    assert set(diverged["alpha"]) == {5.0}
    fade = curves.filter(pl.col("optimizer") == "fade_sgd")
    assert fade["decay_fast"].is_not_null().all() and curves.filter(pl.col("optimizer") == "sgd")["decay_fast"].is_null().all()
    assert curves["output_mse"].dtype == pl.Array(pl.Float64, 20)
    one = scores.filter(pl.col("optimizer") == "fade_sgd").row(0, named=True)
    bins = curves.filter((pl.col("config_id") == one["config_id"]) & (pl.col("seed") == one["seed"])).sort("step")
    assert math.isclose(bins["mse"].tail(2).mean(), one["score"], rel_tol=1e-9), "score = MSE over the final 400 steps"
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
    scores = results.scores(results_dir).collect()
    curves = results.curves(results_dir).collect()
    assert scores.height == 3 * 2 and curves.height == 3 * 2 * 4
    assert ((scores["score"] > 0) & (scores["score"] < 1)).all() and not scores["diverged"].any()
    assert set(scores["stable_classes"]) == {24}
    for column in ("accuracy", "dead_units_layer1", "dead_units_layer2", "weight_norm_layer3", "decay_head"):
        assert column in curves.columns
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
