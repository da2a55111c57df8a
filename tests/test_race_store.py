"""A raced store as its readers and a resume see it (no Ray): `status`'s count of missing runs, a damaged
race.json (readers replay, `--resume` sets it aside and records it anew), the round named in an interrupt and
a dry run, a `--resume` that forgot `--race`, and the robustness and importance tables of a race."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
import yaml

from sweeps.analysis import kinds
from sweeps.analysis.queries import Analysis
from sweeps.analysis.race import race_record, replay_stored, stored_race
from sweeps.analysis.robustness import normalised
from sweeps.cli import main
from sweeps.cli.running import _first_round, race_plan_line
from sweeps.spec import parse_sweep
from sweeps.store import Store
from sweeps.store.race import DAMAGED_RACE, race_round, recorded_race
from sweeps.store.sweep_record import check_and_record
from sweeps.store.records import RACE_FILE, record_json
from sweeps.tune.options import SweepInterrupted
from sweeps.tune.racing import RaceRounds, RoundInterrupted
from tests.helpers import write_known_store
from tests.test_race import RACED, SCORES

DAMAGED = b'{"format": 1, "test'


def _table(results_dir: Path, kind: str, fmt: str) -> str:
    return kinds.table_text(Analysis.of(Store.open(results_dir)), kind, fmt)


def _raced(tmp_path: Path, scores: dict = SCORES) -> Path:
    """A raced store as the driver leaves it: its runs, store.json and race.json (replayed on its scores)."""
    results_dir = write_known_store(tmp_path / "raced", RACED, scores)
    sweep = parse_sweep(RACED, "t")
    check_and_record(Store.open(results_dir).location, sweep, "float64")
    played = replay_stored(sweep, Store.open(results_dir).scan("scores", all_runs=True))
    (results_dir / RACE_FILE).write_bytes(record_json(race_record(sweep, played)))
    return results_dir


def test_status_without_status_json_counts_only_the_runs_the_race_asked_for(tmp_path, capsys):
    results_dir = _raced(tmp_path)  # sgd alpha=0.1 and a fade cell out after round 1: their seeds 3-5 never ran
    assert not (results_dir / "status.json").exists()
    assert main(["status", str(results_dir)]) == 0
    assert "0 runs of its sweep missing" in capsys.readouterr().out  # was 6: the eliminated cells' unrun seeds


def test_a_damaged_race_json_is_replayed_by_readers_and_named_once(tmp_path, capsys):
    results_dir = _raced(tmp_path)
    whole = {kind: _table(results_dir, kind, "md") for kind in ("best", "sensitivity")}
    recorded = (results_dir / RACE_FILE).read_bytes()
    (results_dir / RACE_FILE).write_bytes(DAMAGED)
    assert record_json(stored_race(Store.open(results_dir))) == recorded  # the replay rebuilds it exactly
    for kind in ("best", "sensitivity"):
        assert main(["table", str(results_dir), "--kind", kind]) == 0
        out, err = capsys.readouterr()
        assert out.rstrip("\n") == whole[kind].rstrip("\n")
        (line,) = err.strip().splitlines()
        assert "race.json" in line and "replayed from the stored scores" in line and "--race --resume" in line
    assert main(["status", str(results_dir)]) == 0
    assert "0 runs of its sweep missing" in capsys.readouterr().out


def test_resume_sets_a_damaged_race_json_aside_and_records_it_anew(tmp_path):
    results_dir = _raced(tmp_path)
    recorded = (results_dir / RACE_FILE).read_bytes()
    (results_dir / RACE_FILE).write_bytes(DAMAGED)
    notices: list[str] = []
    store = Store.open(results_dir)
    start = RaceRounds(store.sweep, store, {"cpus": 1}).start(True, "float64", notices.append)
    assert start.packs == []  # nothing left to run in this store
    assert (results_dir / DAMAGED_RACE).read_bytes() == DAMAGED
    assert (results_dir / RACE_FILE).read_bytes() == recorded
    (notice,) = notices
    assert "damaged" in notice and DAMAGED_RACE in notice


def test_an_interrupted_race_names_each_method_s_round(tmp_path):
    unfinished = {**SCORES, ("sgd", (0.01,)): [0.9, 0.9, 0.9], ("fade", (0.1, 0.01, -2.3)): [1.5, 1.6, 1.5]}
    results_dir = _raced(tmp_path, unfinished)  # round 1 decided; round 2 lacks its runs
    store = Store.open(results_dir)
    assert race_round(store.sweep, store.race) == (2, 4, False)
    rounds = RaceRounds(store.sweep, store, {"cpus": 1})
    start = rounds.start(True, "float64")
    survivors = sorted(c for c in store.race.held() if c not in store.race.eliminated())  # one per method
    assert sorted(p.pairs() for p in start.packs) == [[(c, s) for s in (3, 4, 5)] for c in survivors]  # alone: every seed left
    err = RoundInterrupted(SweepInterrupted(1, 3, results_dir), rounds)
    assert str(err) == "interrupted in the race (sgd in round 2, fade in round 2; at most 4 rounds): 1 of 3 packs done"


def test_a_dry_run_of_a_race_plans_its_first_round():
    sweep = parse_sweep(RACED, "t")  # 4 configurations, 6 seeds, rounds of 3, 4, 5, 6
    first = _first_round(sweep)
    assert first.seeds == (0, 1, 2) and first.race is None and first.runs == 4 * 3
    line = race_plan_line(sweep)
    assert "round 1's of at most 4" in line and "12 runs, 1.200e+04 run-steps" in line and "at most 2.400e+04" in line


def _reader(results_dir: Path):
    store = Store.open(results_dir)
    return store.location, lambda: store.sweep


def test_a_resume_without_race_of_a_raced_store_keeps_racing_and_hints_say_race(tmp_path, capsys):
    results_dir = _raced(tmp_path)
    plain = {k: v for k, v in RACED.items() if k != "race"}
    sweep_file = tmp_path / "plain.yaml"
    sweep_file.write_text(yaml.safe_dump(plain))
    assert recorded_race(*_reader(results_dir)) == parse_sweep(RACED, "t").race
    code = main(["run", str(sweep_file), "--storage", str(tmp_path), "--resume", "--dry-run", "--num-cpus", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "was raced: --resume keeps racing" in out and "Dry run of a race" in out
    (results_dir / "sweep.yaml").write_text("name: [")  # damaged: the repair hint must race again
    assert "--race --resume" in Store.open(results_dir).resume_command()
    assert recorded_race(*_reader(results_dir)) == dataclasses.replace(parse_sweep(RACED, "t").race, max_seeds=6)


def test_the_importance_table_compares_a_race_s_cells_on_the_seeds_they_all_hold(tmp_path):
    results_dir = _raced(tmp_path)
    text = _table(results_dir, "importance", "md")
    assert "Raced: every cell's statistic over the seeds every configuration holds" in text
    assert "Raced" not in _table(write_known_store(tmp_path / "plain", {**RACED, "name": "p", "race": None},
                                                               {k: (v * 2)[:6] for k, v in SCORES.items()}),
                                             "importance", "md")


def test_robustness_normalises_on_the_seeds_every_configuration_holds():
    rows = []
    for noise in (0.0, 1.0):
        for seed in range(6):  # a survivor on 6 seeds, an eliminated configuration on 3; seeds 3-5 far harder
            rows.append({"task": "linear_tracking", "noise": noise, "optimizer": "sgd", "config_id": f"a{noise}",
                         "alpha": 0.1, "seed": seed, "score": 1.0 + seed + (100.0 if seed >= 3 else 0.0)})
            if seed < 3:
                rows.append({"task": "linear_tracking", "noise": noise, "optimizer": "sgd", "config_id": f"b{noise}",
                             "alpha": 0.01, "seed": seed, "score": 2.0 + seed})
    frame = normalised(pl.DataFrame(rows))
    bounds = frame.select("p_lo", "p_hi").unique()
    expected = pl.Series([1.0, 2.0, 3.0, 2.0, 3.0, 4.0]).quantile(0.05, "linear"), \
        pl.Series([1.0, 2.0, 3.0, 2.0, 3.0, 4.0]).quantile(0.95, "linear")
    assert bounds.height == 1 and bounds.row(0) == pytest.approx(expected)  # seeds 0-2 only: the full grid's population
