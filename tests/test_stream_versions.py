"""A store records the version of each task's stream its runs were drawn from (store.json's
`stream_versions`); a resume or a confirmation that would add runs of this code's version to runs of
another is refused, exit 2, nothing written, but only where the sweep's streams reach past the steps
every version draws the same (tasks' `shared_steps`): a store of shorter streams (most) resumes.

Stores are written without running (fake outcomes) and their store.json edited to what older code wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sweeps.cli import main
from sweeps.packs import PackOutcome
from sweeps.plan import Pack
from sweeps.spec import SweepError, make_config, parse_sweep
from sweeps.store import Store, StoreLocation
from sweeps.store.sweep_record import check_and_record, check_streams
from sweeps.store.records import StoreRecord
from tasks import get_task

PAST = 21_000_000  # linear_tracking at period 20 is the same in every version for 20,971,540 steps
LONG = {
    "name": "long",
    "task": "linear_tracking",
    "task_settings": {"steps": PAST, "bin": 1_000_000},
    "seeds": 2,
    "optimizers": {"sgd": {"alpha": [0.1, 0.01]}, "idbd": {"theta_alpha": 0.005, "beta0": -4.6}},
}
SHORT = {**LONG, "name": "short", "task_settings": {"steps": 4, "bin": 2}}


def _outcome(pack: Pack) -> PackOutcome:
    score = np.arange(pack.runs, dtype=float)
    curves = {"mse": np.stack([score, score]).T, "decay_relevant": None, "decay_irrelevant": None,
              "step_size_relevant": None, "step_size_irrelevant": None}
    return PackOutcome(score, np.zeros(pack.runs, bool), np.array([2, 4]), curves, 1.0)


def _older_store(tmp_path: Path, document: dict, recorded: dict | None, optimizers=("sgd", "idbd")) -> tuple[Path, Path]:
    """(results dir, sweep file) of a store of `document` whose runs of `optimizers` are in, as older code
    wrote it: store.json's stream_versions set to `recorded` (None: absent, as before versions were recorded)."""
    results_dir, sweep = tmp_path / "results" / document["name"], parse_sweep(document, "test")
    check_and_record(StoreLocation.parse(results_dir), sweep, "float32")
    store = Store.open(results_dir)
    for e in sweep.experiments:
        if e.optimizer in optimizers:
            pack = Pack(e, tuple(make_config(e, v) for v in e.configs()), sweep.seeds)
            store.write_pack(pack, _outcome(pack))
    record = json.loads((results_dir / "store.json").read_text())
    assert record["stream_versions"] == {"linear_tracking": 2}  # a new store records this code's version
    if recorded is None:
        del record["stream_versions"]
    else:
        record["stream_versions"] = recorded
    (results_dir / "store.json").write_text(json.dumps(record))
    sweep_file = tmp_path / f"{document['name']}.yaml"
    sweep_file.write_text(yaml.safe_dump(document))
    return results_dir, sweep_file


def _files(results_dir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()}


@pytest.fixture
def no_ray(monkeypatch):
    """A refusal comes before Ray: connecting is a failure of the test."""
    from sweeps.tune import driver

    def connect(*args, **kwargs):
        raise AssertionError("connected to Ray before refusing")

    monkeypatch.setattr(driver, "connect", connect)


@pytest.mark.parametrize("recorded", [None, {"linear_tracking": 1}])
def test_a_resume_of_older_streams_past_the_shared_steps_is_refused_in_one_line(tmp_path, capsys, no_ray, recorded):
    results_dir, sweep_file = _older_store(tmp_path, LONG, recorded, optimizers=("sgd",))  # idbd's runs still to run
    before = _files(results_dir)
    assert main(["run", str(sweep_file), "--storage", str(results_dir.parent), "--resume", "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert (f"{results_dir}: linear_tracking: the store's runs were drawn from version 1 of its stream and this code "
            "draws version 2, which differs past step 20,971,540 (steps is 21,000,000)") in err
    assert "run it under another sweep name or --storage, or with the code that made the store (fade-sweep " in err
    assert _files(results_dir) == before  # nothing written: no lock left, store.json as it was


@pytest.mark.parametrize("recorded", [None, {"linear_tracking": 1}])
def test_a_confirmation_of_older_streams_past_the_shared_steps_is_refused_in_one_line(tmp_path, capsys, no_ray, recorded):
    results_dir, _ = _older_store(tmp_path, LONG, recorded)  # the grid finished
    before = _files(results_dir)
    assert main(["confirm", str(results_dir), "--seeds", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "linear_tracking: the store's runs were drawn from version 1 of its stream" in err, err
    assert _files(results_dir) == before and not (results_dir / "confirmation.json").exists()


def test_streams_of_this_code_s_version_or_within_the_shared_steps_pass_the_check(tmp_path):
    for name, document, recorded in (("current", LONG, {"linear_tracking": 2}), ("short", SHORT, None),
                                     ("short1", SHORT, {"linear_tracking": 1})):
        results_dir, _ = _older_store(tmp_path / name, document, recorded, optimizers=("sgd",))
        sweep = parse_sweep(document, "test")
        with Store.open(results_dir).writing(sweep, "float32", resume=True):  # no refusal
            pass
    # a store holding no runs of the task has nothing to mix with: its record is made anew
    empty, _ = _older_store(tmp_path / "empty", LONG, None, optimizers=())
    with Store.open(empty).writing(parse_sweep(LONG, "test"), "float32", resume=True):
        pass


def test_the_check_reads_the_recorded_sweep_and_each_task_s_own_version():
    neural = {**LONG, "task": "nonlinear_tracking", "optimizers": {"sgd": {"alpha": 0.01}}}
    long = parse_sweep({**neural, "task_settings": {"steps": 4_500_000, "score_window": 500_000}}, "test")
    short = parse_sweep({**neural, "task_settings": {"steps": 200_000, "score_window": 50_000}}, "test")
    old = StoreRecord(dtype="float32", package_version="0.1.0", created_at=0.0, updated_at=0.0,
                      stream_versions={"linear_tracking": 2})
    with pytest.raises(SweepError, match=r"nonlinear_tracking: .* version 1 .* differs past step 4,096,500 "
                                         r"\(steps is 4,500,000\).*\(fade-sweep 0\.1\.0\)$"):
        check_streams(StoreLocation.parse("/nowhere"), old, (short, long), {"nonlinear_tracking"})  # long: the recorded sweep
    check_streams(StoreLocation.parse("/nowhere"), old, (short, long), {"linear_tracking"})  # no nonlinear runs stored
    current = old.model_copy(update={"stream_versions": {"nonlinear_tracking": get_task("nonlinear_tracking").stream_version}})
    check_streams(StoreLocation.parse("/nowhere"), current, (short, long), {"nonlinear_tracking"})


def test_a_resume_of_an_older_paper_length_store_runs_and_records_the_version(tmp_path, capsys):
    """Most stores: made before versions were recorded, of streams every version draws the same."""
    results_dir, sweep_file = _older_store(tmp_path, {**SHORT, "task_settings": {"steps": 4000, "bin": 2000}},
                                           {"emnist_label_permuted": 1}, optimizers=("sgd",))
    code = main(["run", str(sweep_file), "--storage", str(results_dir.parent), "--resume", "--no-report",
                 "--num-cpus", "1"])
    assert code == 0, capsys.readouterr().err
    assert Store.open(results_dir).missing_runs().height == 0  # idbd's runs ran
    record = json.loads((results_dir / "store.json").read_text())
    assert record["stream_versions"] == {"emnist_label_permuted": 1, "linear_tracking": 2}  # another task's kept
