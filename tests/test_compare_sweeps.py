"""Sweeps compared: `table A B` and `report A B` over sweeps of the same task settings, a method in both
labelled by its sweep, the CSV naming each row's sweep; sweeps of different settings refused (exit 2)."""

from __future__ import annotations

import io
import re

import polars as pl
import pytest

from sweeps.analysis import summaries
from sweeps.analysis.across import combined_analysis
from sweeps.analysis.queries import Analysis
from sweeps.cli import main
from sweeps.store import Store
from tests.helpers import write_known_store
from tests.test_analysis import _chromium, _console, _figures_in

BASE = {"task": "linear_tracking", "task_settings": {"steps": 4, "bin": 2}, "seeds": 3}
BASELINES = {**BASE, "name": "baselines",
             "optimizers": {"sgd": {"alpha": [0.1, 0.01]}, "fade": {"alpha": 0.1, "theta_lambda": [0.0, 0.5], "gamma0": [-1.0]}}}
NEW = {**BASE, "name": "new", "optimizers": {"sgd": {"alpha": [0.05]}, "idbd": {"theta_alpha": [0.01], "beta0": [-4.6, -3.0]}}}
BASELINE_SCORES = {("sgd", (0.1,)): [2.0, 4.0, 6.0], ("sgd", (0.01,)): [1.0, 1.5, 2.0],
                   ("fade", (0.1, 0.0, -1.0)): [3.0, 3.0, 3.0], ("fade", (0.1, 0.5, -1.0)): [0.5, 0.7, 0.9]}
NEW_SCORES = {("sgd", (0.05,)): [1.2, 1.4, 1.6], ("idbd", (0.01, -4.6)): [0.4, 0.5, 0.6], ("idbd", (0.01, -3.0)): [0.8, 0.9, 1.0]}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    storage = tmp_path_factory.mktemp("storage")
    return (write_known_store(storage / "baselines", BASELINES, BASELINE_SCORES),
            write_known_store(storage / "new", NEW, NEW_SCORES))


def test_the_best_table_over_two_sweeps_is_the_union_of_theirs(sweeps):
    stores = [Store.open(p) for p in sweeps]
    both = summaries.best_table(combined_analysis(stores))
    by_hand = []
    for store in stores:
        alone = summaries.best_table(Analysis.of(store))
        name = store.location.name
        by_hand.append(alone.with_columns(  # sgd is in both sweeps: labelled by sweep, its config ids too
            optimizer=pl.when(pl.col("optimizer") == "sgd").then(pl.col("optimizer") + f" [{name}]").otherwise("optimizer"),
            config_id=pl.when(pl.col("optimizer") == "sgd").then(pl.lit(f"{name}/") + pl.col("config_id")).otherwise("config_id"),
            sweep=pl.lit(name)))
    union = pl.concat(by_hand, how="diagonal_relaxed")
    keys = ["optimizer", "config_id", "sweep", "mean", "std", "seeds", "configs", "missing_runs"]
    assert both.select(keys).sort("optimizer").to_dicts() == union.select(keys).sort("optimizer").to_dicts()
    assert both.sort("optimizer")["optimizer"].to_list() == ["fade", "idbd", "sgd [baselines]", "sgd [new]"]
    # the best method is chosen across both sweeps: idbd (0.5) of the new sweep, over fade (0.7) of the baselines
    assert both.filter(pl.col("best_method"))["optimizer"].to_list() == ["idbd"]


def test_table_of_two_sweeps_names_each_rows_sweep(sweeps, capsys):
    assert main(["table", *map(str, sweeps), "--format", "csv"]) == 0
    csv = pl.read_csv(io.StringIO(capsys.readouterr().out))
    assert dict(zip(csv["optimizer"], csv["sweep"])) == {
        "fade": "baselines", "idbd": "new", "sgd [baselines]": "baselines", "sgd [new]": "new"}
    assert main(["table", *map(str, sweeps), "--kind", "sensitivity", "--format", "csv"]) == 0
    grid = pl.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(grid["optimizer"]) == {"fade"} and set(grid["sweep"]) == {"baselines"} and grid.height == 2
    assert main(["table", *map(str, sweeps), "--kind", "compare"]) == 0
    assert "sgd [new]" in capsys.readouterr().out


def test_sweeps_of_other_task_settings_are_refused(sweeps, tmp_path, capsys):
    other = write_known_store(tmp_path / "noisy", {**NEW, "name": "noisy", "task_settings": {"steps": 4, "bin": 2, "noise": 2.0}},
                              NEW_SCORES)
    for command in ("table", "report"):
        assert main([command, str(sweeps[0]), str(other)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "noisy and baselines differ in task setting noise (2.0 against " in err[0], err


def test_report_of_two_sweeps_beside_the_first(sweeps, tmp_path):
    assert main(["report", *map(str, sweeps)]) == 0
    out = sweeps[0].parent / "report-baselines+new.html"
    page = out.read_text()
    assert "FADE sweeps compared: baselines, new" in page and "<h3>baselines</h3>" in page and "<h3>new</h3>" in page
    assert "sgd [new]" in page and "sgd [baselines]" in page
    dom = _chromium(tmp_path, f"file://{out}", "--dump-dom")
    assert dom.returncode == 0 and not _console(dom.stderr), _console(dom.stderr)
    figures = _figures_in(dom.stdout)
    assert len(figures) == len(re.findall(r"data-kind='", page)) > 0
    assert all('class="main-svg"' in f or "<svg" in f for f in figures)
