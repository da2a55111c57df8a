"""Raced sweeps through the driver (`fade-sweep run --race`, embedded Ray): the held-out check against the
full grid computed in-process with every seed, and a race interrupted (Ctrl-C, then kill -9) and resumed
that decides exactly as the uninterrupted one, to byte-identical tables and race.json."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml

from sweeps.analysis import kinds, queries, summaries, tables
from sweeps.analysis.queries import Analysis
from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import parse_sweep
from sweeps.store import Store
from sweeps.store.dataset import run_keys
from sweeps.store.records import RACE_FILE
from sweeps.cli import main
from sweeps.tune.racing import RaceRounds
from tests.helpers import read_status_json

# 13 configurations on 5 seeds; with --race: rounds of 3, 4 and 5 seeds. Noise 1.0 keeps two sgd
# configurations in the race to the end, so every round runs packs.
SWEEP = {
    "name": "raced",
    "task": "linear_tracking",
    "task_settings": {"steps": 20_000, "bin": 2_000, "noise": 1.0},
    "seeds": 5,
    "optimizers": {"sgd": {"alpha": [0.5, 0.1, 0.05, 0.01, 0.001]},
                   "fade": {"alpha": [0.1, 0.05], "theta_lambda": [0.0, 0.01], "gamma0": [-1.2, -4.6]}},
}
# Short chunks and frequent checkpoints: a round's packs take about a second (scores do not depend on either), so
# an interrupt lands inside a round, not after a race that, in one Tune experiment, takes a fraction of that.
RUN_OPTIONS = ["--race", "--num-cpus", "2", "--runs-per-pack", "4", "--chunk-steps", "500", "--checkpoint-every", "1",
               "--dtype", "float64", "--no-report"]
# One method on one slot, a round in one pack: when its first pack ends, nothing else runs.
ALONE = {**SWEEP, "name": "alone", "optimizers": {"sgd": SWEEP["optimizers"]["sgd"]}}
ALONE_OPTIONS = ["--race", "--num-cpus", "1", "--runs-per-pack", "16", "--dtype", "float64", "--no-report"]
TABLES = [("best", "md"), ("best", "csv"), ("sensitivity", "md"), ("sensitivity", "csv"), ("compare", "csv")]


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "raced.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


def _cli(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen([sys.executable, "-m", "sweeps.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)


@pytest.fixture(scope="module")
def uninterrupted(sweep_file, tmp_path_factory) -> Path:
    storage = tmp_path_factory.mktemp("whole")
    run = _cli("run", str(sweep_file), "--storage", str(storage), *RUN_OPTIONS)
    out, _ = run.communicate(timeout=900)
    assert run.returncode == 0, out
    return storage / SWEEP["name"]


@pytest.fixture(scope="module")
def uninterrupted_alone(tmp_path_factory) -> tuple[Path, Path]:
    """ALONE's sweep file and its uninterrupted race's results."""
    folder = tmp_path_factory.mktemp("alone")
    (folder / "alone.yaml").write_text(yaml.safe_dump(ALONE))
    run = _cli("run", str(folder / "alone.yaml"), "--storage", str(folder), *ALONE_OPTIONS)
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    return folder / "alone.yaml", folder / ALONE["name"]


def _full_grid() -> pl.DataFrame:
    """Every configuration on every seed, in-process (float64, one pack per method): the full grid's answer."""
    sweep = parse_sweep(SWEEP, "full")
    frames = []
    for experiment in sweep.experiments:
        pack = Pack(experiment, experiment.cells, sweep.seeds)
        runner = make_runner(pack, 100_000, torch.float64)
        for _ in runner.run():
            pass
        outcome = runner.outcome()
        frames.append(run_keys(pack).with_columns(score=pl.Series(outcome.score), diverged=pl.Series(outcome.diverged)))
    return pl.concat(frames, how="diagonal_relaxed")


def _winners(best: pl.DataFrame) -> tuple[dict[str, str], str]:
    chosen = best.filter(~pl.col("all_diverged"))
    ranked = chosen.with_columns(_k=queries.ranking_key("stat_value")).sort("_k")
    return dict(chosen.select("optimizer", "config_id").iter_rows()), ranked["optimizer"][0]


def test_racing_selects_what_the_full_grid_selects_with_fewer_run_steps(uninterrupted):
    full = _full_grid()
    expected, expected_method = _winners(queries.best_configs(queries.cells(full.lazy())))
    best = summaries.best_table(Analysis.of(Store.open(uninterrupted), "mean"))
    assert _winners(best) == (expected, expected_method)
    assert set(best["seeds"]) == {5} and set(best["race_status"]) == {"survivor"}
    raced = Store.open(uninterrupted).scan("scores").collect()
    assert raced.height < 0.75 * full.height  # run-steps: every run is 20,000 steps long
    for row in raced.iter_rows(named=True):  # the raced runs are the full grid's, bit for bit (float64, pack-invariant)
        same = full.filter((pl.col("config_id") == row["config_id"]) & (pl.col("seed") == row["seed"]))
        assert same["score"][0] == row["score"] or (math.isnan(row["score"]) and math.isnan(same["score"][0]))
    store = Store.open(uninterrupted)
    assert store.race.finished and store.verify().clean and store.missing_runs().height == 0
    assert {d.round for d in store.race.decisions} == {1, 2, 3}


def _rounds_decided(results_dir: Path) -> tuple[int, int, bool]:
    """(the fewest rounds a method has decided, the most, whether the race is finished): methods race apart, and a
    method with one configuration left decides its remaining rounds at once."""
    try:
        record = json.loads((results_dir / RACE_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0, 0, False
    rounds = [m["rounds"] for m in record["methods"]] or [0]
    return min(rounds), max(rounds), record["finished"]


def _wait_for(predicate, timeout: float, what: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}:\n{process.communicate()[0][-3000:]}")
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"timed out waiting for {what}:\n{process.communicate()[0][-3000:]}")


def test_an_interrupted_race_resumes_to_the_same_decisions_and_identical_tables(sweep_file, uninterrupted, tmp_path):
    results_dir = tmp_path / SWEEP["name"]
    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), *RUN_OPTIONS)
    _wait_for(lambda: _rounds_decided(results_dir)[::2] == (1, False), 600, "round 1 decided", run)
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in round 2 (of a method still racing)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 130, out
    assert out.strip().splitlines()[-1].endswith("--dtype float64 --race --resume`"), out  # the hint keeps --race
    assert _rounds_decided(results_dir)[2] is False

    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), "--resume", *RUN_OPTIONS)
    _wait_for(lambda: _rounds_decided(results_dir)[1:] in ((2, False), (3, False)), 600, "round 2 decided", run)
    os.killpg(run.pid, signal.SIGKILL)  # kill -9 once a method is past round 2, the other still racing
    run.communicate()

    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), "--resume", *RUN_OPTIONS)
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    assert (results_dir / RACE_FILE).read_bytes() == (uninterrupted / RACE_FILE).read_bytes()
    for kind, fmt in TABLES:
        assert kinds.table_text(Analysis.of(Store.open(results_dir), "mean"), kind, fmt) == kinds.table_text(Analysis.of(Store.open(uninterrupted), "mean"), kind, fmt), (kind, fmt)
    assert Store.open(results_dir).verify().clean


def test_ctrl_c_as_a_round_is_decided_is_an_interrupt_and_resume_finishes_it(uninterrupted_alone, tmp_path, monkeypatch, capsys):
    """Ctrl-C lands as the first pack's trial ends, its method's next round decided but not handed to Tune yet, and
    nothing else running: Tune returns as if done, yet the race is not. Exit 130, the --resume hint, no Done line,
    status.json `interrupted`; `--resume` then finishes to the uninterrupted run's tables."""
    sweep_file, reference = uninterrupted_alone
    after = RaceRounds.after

    def interrupted(self, pack):
        packs = after(self, pack)
        if packs:
            os.kill(os.getpid(), signal.SIGINT)  # to Tune's handler (installed while it runs): stop the experiment
        return packs

    monkeypatch.setattr(RaceRounds, "after", interrupted)
    assert main(["run", str(sweep_file), "--storage", str(tmp_path), *ALONE_OPTIONS]) == 130
    out = capsys.readouterr()
    assert "Done:" not in out.out + out.err
    assert "interrupted in the race (sgd in round 2" in out.err and out.err.strip().endswith("--race --resume`"), out
    results_dir = tmp_path / ALONE["name"]
    assert read_status_json(results_dir)["state"] == "interrupted"
    assert _rounds_decided(results_dir) == (1, 1, False)

    run = _cli("run", str(sweep_file), "--storage", str(tmp_path), "--resume", *ALONE_OPTIONS)
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    assert read_status_json(results_dir)["state"] == "finished"
    assert (results_dir / RACE_FILE).read_bytes() == (reference / RACE_FILE).read_bytes()
    for kind, fmt in TABLES:
        assert kinds.table_text(Analysis.of(Store.open(results_dir), "mean"), kind, fmt) == kinds.table_text(Analysis.of(Store.open(reference), "mean"), kind, fmt), (kind, fmt)
