"""Racing sweeps (sweeps.spec.race, sweeps.analysis.race, store/race.py): the decisions as a function of
scores, the sweep file's `race:` block, and a raced store's tables, missing runs and verify. No Ray is
started here (the runs through the driver: tests/test_race_runs.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.stats

from sweeps.analysis import kinds, queries
from sweeps.analysis.queries import Analysis
from sweeps.analysis.race import (
    DIVERGED,
    ELIMINATED,
    REVIVED,
    SURVIVOR,
    WORSE,
    decide,
    holm,
    race_record,
    replay,
    replay_stored,
    student_t_sf,
)
from sweeps.analysis.raced import race_status
from sweeps.analysis.summaries import best_table, sensitivity_tables
from sweeps.plan import plan_round
from sweeps.spec import SweepError, parse_sweep, with_race
from sweeps.store import Store
from sweeps.store.race import raced_pairs
from sweeps.store.sweep_record import check_and_record
from sweeps.store.records import RACE_FILE, record_json
from sweeps.tune.stages import confirmation_record
from tests.helpers import write_known_store


def _frame(rows: dict[str, list[float]], optimizer: str = "sgd", task: str = "linear_tracking",
           diverged: dict[str, int] | None = None) -> pl.DataFrame:
    """Per-seed scores: rows[config] is one score per seed (seeds 0..n-1)."""
    out = []
    for config, scores in rows.items():
        for seed, score in enumerate(scores):
            out.append({"task": task, "optimizer": optimizer, "config_id": config, "seed": seed, "score": float(score),
                        "diverged": (diverged or {}).get(config) == seed})
    return pl.DataFrame(out)


def _status(decisions: pl.DataFrame) -> dict[str, str]:
    return dict(decisions.select("config_id", "race_status").iter_rows())


# ---------------------------------------------------------------- the test's parts


@pytest.mark.parametrize("df", range(1, 12))
def test_the_t_tail_is_the_exact_student_t(df):
    t = np.array([-np.inf, -7.0, -1.3, 0.0, 0.2, 1.0, 2.5, 7.0, 40.0, np.inf])
    np.testing.assert_allclose(student_t_sf(t, df), scipy.stats.t.sf(t, df), rtol=1e-10, atol=1e-15)


def test_holm_adjusts_step_down_and_keeps_the_order():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, 1*0.04 -> running max 0.02, 0.03, 0.06, 0.06
    np.testing.assert_allclose(holm(p), [0.03, 0.06, 0.06, 0.02])
    assert holm(np.array([0.6, 0.9]))[1] == 1.0  # capped at 1


def test_a_consistently_worse_configuration_is_out_and_a_noisy_one_stays():
    scores = _frame({
        "best": [1.00, 1.10, 0.95],
        "worse": [1.30, 1.41, 1.24],  # +0.30 on every seed, same stream: a sharp paired difference
        "noisy": [0.90, 1.40, 1.00],  # better on two seeds, worse on one: no confidence
    })
    decisions = decide(scores, alpha=0.05)
    assert _status(decisions) == {"best": SURVIVOR, "worse": ELIMINATED, "noisy": SURVIVOR}
    row = decisions.filter(pl.col("config_id") == "worse").row(0, named=True)
    d = np.log(np.array([1.30, 1.41, 1.24]) / np.array([1.00, 1.10, 0.95]))  # errors: tested on their log ratios
    t = d.mean() / (d.std(ddof=1) / np.sqrt(3))
    assert row["reason"] == WORSE and row["best"] == "best" and row["seeds"] == 3
    assert row["difference"] == pytest.approx(0.30) and row["p_value"] == pytest.approx(scipy.stats.t.sf(t, 2))
    assert row["p_adjusted"] == pytest.approx(2 * row["p_value"])  # Holm over the two compared with the best


def test_a_diverged_seed_puts_a_configuration_out_even_if_its_mean_is_the_best():
    scores = _frame({"a": [1.0, 1.1, 1.0], "b": [0.5, 0.6, 0.5]}, diverged={"b": 2})
    decisions = decide(scores, alpha=0.05)
    assert _status(decisions) == {"a": SURVIVOR, "b": ELIMINATED}
    assert decisions.filter(pl.col("config_id") == "b")["reason"][0] == DIVERGED
    assert decisions["best"].to_list() == ["a", "a"]


def test_methods_are_not_raced_against_each_other_and_accuracy_is_higher_is_better():
    scores = pl.concat([
        _frame({"s1": [3.0, 3.1, 3.0], "s2": [3.5, 3.6, 3.5]}, optimizer="sgd"),
        _frame({"f1": [1.0, 1.1, 1.0]}, optimizer="fade"),  # far better than sgd: sgd's best still survives
    ])
    assert _status(decide(scores, 0.05)) == {"s1": SURVIVOR, "s2": ELIMINATED, "f1": SURVIVOR}
    accuracy = _frame({"hi": [0.80, 0.82, 0.81], "lo": [0.70, 0.72, 0.71]}, task="emnist_label_permuted")
    assert _status(decide(accuracy, 0.05)) == {"hi": SURVIVOR, "lo": ELIMINATED}


def test_a_configuration_that_blows_up_but_stays_finite_is_out_at_once():
    # the hostile case: sgd at a large step size, 1e11 to 1e15 times the best's error on every seed, never
    # non-finite. Raw differences spread over orders of magnitude (raw one-sided t p ~ 0.2): on log errors
    # the ratios are consistently huge, so it is out after the first round.
    scores = _frame({
        "best": [3.54, 3.75, 3.43],
        "blown": [2.37e11, 1.49e15, 2.43e12],
        "close": [3.91, 3.89, 3.88],
    })
    decisions = decide(scores, alpha=0.05)
    blown = decisions.filter(pl.col("config_id") == "blown").row(0, named=True)
    assert blown["race_status"] == ELIMINATED and blown["reason"] == WORSE
    log_ratio = np.log([2.37e11 / 3.54, 1.49e15 / 3.75, 2.43e12 / 3.43])
    t = log_ratio.mean() / (log_ratio.std(ddof=1) / np.sqrt(3))
    assert blown["p_value"] == pytest.approx(scipy.stats.t.sf(t, 2))  # the test on log ratios
    raw = np.array([2.37e11 - 3.54, 1.49e15 - 3.75, 2.43e12 - 3.43])
    assert blown["difference"] == pytest.approx(raw.mean())  # in score units
    assert scipy.stats.t.sf(raw.mean() / (raw.std(ddof=1) / np.sqrt(3)), 2) > 0.15  # what the raw test could not see


def test_errors_at_or_below_zero_and_accuracies_are_tested_as_they_are():
    exact = _frame({"zero": [0.0, 0.1, 0.2], "worse": [0.3, 0.41, 0.49]})  # log(0): this round tests raw errors
    d = np.array([0.3, 0.31, 0.29])
    row = decide(exact, 0.05).filter(pl.col("config_id") == "worse").row(0, named=True)
    assert row["p_value"] == pytest.approx(scipy.stats.t.sf(d.mean() / (d.std(ddof=1) / np.sqrt(3)), 2))
    accuracy = _frame({"hi": [0.80, 0.60, 0.81], "lo": [0.70, 0.52, 0.69]}, task="emnist_label_permuted")
    d = np.array([0.10, 0.08, 0.12])
    row = decide(accuracy, 0.05).filter(pl.col("config_id") == "lo").row(0, named=True)
    assert row["p_value"] == pytest.approx(scipy.stats.t.sf(d.mean() / (d.std(ddof=1) / np.sqrt(3)), 2))


def test_equal_configurations_are_never_out():
    scores = _frame({"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0, 3.0]})
    decisions = decide(scores, 0.05)
    assert _status(decisions) == {"a": SURVIVOR, "b": SURVIVOR}  # the tie goes to the smaller id, b is not worse
    assert decisions.filter(pl.col("config_id") == "b")["p_value"][0] == 1.0


# ---------------------------------------------------------------- a whole race


ROUNDS = [(0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 3, 4)]


def test_replay_stops_where_the_scores_stop_and_a_prefix_decides_as_the_whole():
    full = _frame({
        "best": [1.0, 1.1, 0.9, 1.0, 1.05],
        "far": [2.0, 2.1, 1.9, 2.0, 2.05],
        "near": [0.99, 1.13, 0.91, 1.0, 1.06],  # as good, within the noise
    })
    whole = replay(full, ["best", "far", "near"], ROUNDS, 0.05)
    assert whole.finished and whole.decided == 3 and whole.alive == ("best", "near")
    first = replay(full.filter(pl.col("seed") < 3), ["best", "far", "near"], ROUNDS, 0.05)  # as after round 1
    assert not first.finished and first.decided == 1 and first.next_seeds == ROUNDS[1] and first.alive == ("best", "near")
    assert first.decisions.equals(whole.decisions.filter(pl.col("round") == 1))  # a resumed race decides the same
    nothing = replay(None, ["best", "far"], ROUNDS, 0.05)
    assert nothing.decided == 0 and nothing.next_seeds == ROUNDS[0] and nothing.alive == ("best", "far")


def test_a_configuration_out_against_a_best_that_later_diverges_is_back():
    scores = _frame({
        "steady": [1.20, 1.21, 1.19, 1.20, 1.20],
        "shaky": [1.00, 1.01, 0.99, 1.00, 1.00],  # the best on 3 seeds, then diverges on seed 3
        "bad": [3.00, 3.10, 2.90, 3.00, 3.00],
    }, diverged={"shaky": 3})
    played = replay(scores, ["bad", "shaky", "steady"], ROUNDS, 0.05)
    decisions = played.decisions
    assert decisions.filter((pl.col("round") == 1) & (pl.col("config_id") == "steady"))["race_status"][0] == ELIMINATED
    back = decisions.filter((pl.col("round") == 2) & (pl.col("config_id") == "steady")).row(0, named=True)
    assert back["race_status"] == SURVIVOR and back["reason"] == REVIVED and back["seeds"] == 3
    status = dict(race_status(decisions).select("config_id", "race_status").iter_rows())
    assert status == {"steady": SURVIVOR, "shaky": ELIMINATED, "bad": ELIMINATED}
    assert played.finished and played.alive == ("steady",)
    # "bad" lost to "shaky" too, but "steady" (clean) beats it on its seeds: it stays out, re-tested
    bad = decisions.filter(pl.col("config_id") == "bad").sort("round")
    assert bad["race_status"].to_list() == [ELIMINATED, ELIMINATED] and bad["best"][-1] == "steady"


# ---------------------------------------------------------------- the sweep file


BASE = {"name": "r", "task": "linear_tracking", "task_settings": {"steps": 1000, "bin": 500}, "seeds": 10,
        "optimizers": {"sgd": {"alpha": [0.1, 0.01]}}}


def test_the_race_block_and_its_schedule():
    sweep = parse_sweep({**BASE, "race": {"min_seeds": 3, "max_seeds": 8, "seeds_per_round": 2}}, "t")
    assert sweep.race.schedule(sweep.seeds) == (3, 5, 7, 8) and sweep.race.seeds(sweep.seeds) == tuple(range(8))
    assert parse_sweep({**BASE, "race": {}}, "t").race.schedule(tuple(range(10))) == (3, 4, 5, 6, 7, 8, 9, 10)
    assert parse_sweep(BASE, "t").race is None
    raced = with_race(parse_sweep(BASE, "t"))  # --race: the defaults, written out in the recorded document
    assert raced.document["race"] == {"min_seeds": 3, "max_seeds": 10, "alpha": 0.05, "seeds_per_round": 1}
    assert parse_sweep(raced.document, "again").race.schedule(raced.seeds) == raced.race.schedule(raced.seeds)


@pytest.mark.parametrize("race, key", [
    ({"min_seeds": 1}, "race.min_seeds"), ({"max_seeds": 11}, "race.max_seeds"), ({"alpha": 1.5}, "race.alpha"),
    ({"min_seeds": 6, "max_seeds": 5}, "race.min_seeds"), ({"rounds": 3}, "race.rounds"), ([3, 10], "race"),
])
def test_a_bad_race_block_is_one_line_naming_the_key(race, key):
    with pytest.raises(SweepError, match=rf"^t: {key}: "):
        parse_sweep({**BASE, "race": race}, "t")
    with pytest.raises(SweepError, match="--race: a race needs at least 2 seeds"):
        with_race(parse_sweep({**BASE, "seeds": 1}, "t"))


# ---------------------------------------------------------------- a raced store


RACED = {**BASE, "name": "raced", "seeds": 6, "race": {"min_seeds": 3},
         "optimizers": {"sgd": {"alpha": [0.1, 0.01]}, "fade": {"alpha": [0.1], "theta_lambda": [0.0, 0.01],
                                                                  "gamma0": [-2.3]}}}
# sgd alpha=0.1 was out after round 1 on seeds 0-2 (worse than 0.01 on them, paired), with a 3-seed mean
# (1.0) better than the survivor's 6-seed mean (1.1: its later seeds were harder). Its later seeds never ran.
SCORES = {("sgd", (0.1,)): [1.0, 1.0, 1.0], ("sgd", (0.01,)): [0.9, 0.9, 0.9, 1.3, 1.3, 1.3],
          ("fade", (0.1, 0.0, -2.3)): [2.0, 2.1, 2.0], ("fade", (0.1, 0.01, -2.3)): [1.5, 1.6, 1.5, 1.5, 1.6, 1.5]}


@pytest.fixture()
def raced_store(tmp_path) -> Path:
    results_dir = write_known_store(tmp_path / "raced", RACED, SCORES)
    sweep = parse_sweep(RACED, "t")
    check_and_record(Store.open(results_dir).location, sweep, "float64")  # store.json, as the driver writes it
    frame = Store.open(results_dir).scan("scores", all_runs=True).collect()
    rounds = [tuple(range(n)) for n in sweep.race.schedule(sweep.seeds)]
    played = replay(frame, [c.config_id for e in sweep.experiments for c in e.cells], rounds, 0.05)
    assert played.finished and played.decided == 4
    standing = replay_stored(sweep, frame.lazy())  # each method on its own: the same decisions
    assert standing.decisions.sort("round", "config_id").equals(played.decisions.sort("round", "config_id"))
    (results_dir / RACE_FILE).write_bytes(record_json(race_record(sweep, standing)))
    return results_dir


def test_a_raced_store_counts_only_the_runs_the_race_asked_for(raced_store):
    store = Store.open(raced_store)
    assert store.missing_runs().height == 0  # sgd 0.1's seeds 3-5 were never asked for
    verification = store.verify()
    assert verification.clean and verification.missing == 0, verification.problems
    assert len(raced_pairs(store.sweep, store.race)) == 3 + 6 + 3 + 6
    # before any decision every configuration is asked its first-round seeds, no more
    assert raced_pairs(store.sweep, None) == {(c.config_id, s) for e in store.sweep.experiments for c in e.cells for s in range(3)}


def test_the_best_table_selects_among_survivors_only(raced_store):
    analysis = Analysis.of(Store.open(raced_store))
    best = best_table(analysis).filter(pl.col("optimizer") == "sgd").row(0, named=True)
    assert best["alpha"] == 0.01 and best["seeds"] == 6 and best["race_status"] == SURVIVOR  # not the 3-seed 1.0
    assert best["mean"] == pytest.approx(1.1)
    cells = analysis.cells.filter(pl.col("optimizer") == "sgd").sort("alpha", descending=True)
    assert cells["race_status"].to_list() == [ELIMINATED, SURVIVOR] and cells["eliminated_round"].to_list() == [1, None]
    assert cells.schema["eliminated_round"] == pl.UInt32 and cells["seeds"].to_list() == [3, 6]
    assert confirmation_record(Store.open(raced_store), 2).selected[1].config_id == best["config_id"]  # confirm: the winners
    text = kinds.table_text(Analysis.of(Store.open(raced_store), "mean"), "best", "md")
    assert "2 of 4 configurations eliminated" in text and "Run-steps: 1.800e+04 of the full grid's 2.400e+04 (25% saved)" in text


def test_the_sensitivity_table_keeps_eliminated_cells_marked_never_best_nor_tied(raced_store):
    (table,) = sensitivity_tables(Analysis.of(Store.open(raced_store)))
    cells = table.cells.sort("theta_lambda")
    assert cells["race_status"].to_list() == [ELIMINATED, SURVIVOR] and cells["seeds"].to_list() == [3, 6]
    assert cells["best"].to_list() == [False, True] and not cells["tied"].any()
    text = kinds.table_text(Analysis.of(Store.open(raced_store), "mean"), "sensitivity", "md")
    assert "(out after round 1, 3 seeds)" in text
    csv = kinds.table_text(Analysis.of(Store.open(raced_store), "mean"), "sensitivity", "csv").splitlines()[0].split(",")
    assert "race_status" in csv and "eliminated_round" in csv


def test_a_sweep_that_is_not_raced_has_no_race_columns(tmp_path):
    document = {**RACED, "name": "plain"}
    del document["race"]
    full = {key: (scores * 2)[:6] for key, scores in SCORES.items()}
    results_dir = write_known_store(tmp_path / "plain", document, full)
    assert not set(queries.RACE_COLUMNS) & set(Analysis.of(Store.open(results_dir)).cells.columns)


def test_an_unfinished_race_asks_its_survivors_for_the_next_round_and_a_stale_record_is_not_read(raced_store):
    store = Store.open(raced_store)
    first = store.race.model_copy(update={"decisions": tuple(d for d in store.race.decisions if d.round == 1),
                                          "finished": False})
    assert len(raced_pairs(store.sweep, first)) == 3 + 4 + 3 + 4  # out after round 1: 3 seeds; the others: round 2's 4
    (raced_store / RACE_FILE).write_bytes(record_json(first))
    unfinished = Store.open(raced_store)
    assert unfinished.missing_runs().height == 0  # the survivors hold all 6 seeds already: nothing is missing
    (raced_store / RACE_FILE).write_bytes(record_json(first.model_copy(update={"alpha": 0.01})))
    assert Store.open(raced_store).race is None  # a record of another race setting: before any decision


def test_a_round_plans_only_the_configurations_in_the_race_on_the_seeds_they_lack():
    sweep = parse_sweep(RACED, "t")
    ids = [c.config_id for e in sweep.experiments for c in e.cells]
    done = {(ids[0], s) for s in range(3)}  # held after round 1; ids[2] comes back with none of round 2's seeds
    packs = plan_round(sweep, {ids[0], ids[2]}, (0, 1, 2, 3), cpus=1, done=done)
    assert {pair for pack in packs for pair in pack.pairs()} == {(ids[0], 3), *((ids[2], s) for s in range(4))}
    assert all(pack.stage == "tuning" for pack in packs)
