"""Run options travel as one frozen object: built once from `fade-sweep run`'s flags, read by the driver,
handed whole to every trial; the results location travels as a `StoreLocation`."""

from __future__ import annotations

import dataclasses

import pytest

from sweeps.cli.parser import build_parser
from sweeps.cli.running import _execution_options
from sweeps.spec import PackResources, resolve_sweep
from sweeps.store import StoreLocation
from sweeps.tune.options import ExecutionOptions

# Flags of `run` that are not how packs run: what to run, where the results go, what to print after.
NOT_OPTIONS = {"command", "sweep", "storage", "resume", "dry_run", "calibrate", "race", "table_format", "no_report",
               "cpus_per_pack", "gpus_per_pack"}  # the last two make `resources`, over the sweep file's

GIVEN = ["--address", "auto", "--num-cpus", "3", "--chunk-steps", "700", "--checkpoint-every", "2",
         "--max-failures", "5", "--runs-per-pack", "9", "--engine", "reference", "--tf32", "--dtype", "float64",
         "--cpus-per-pack", "2"]


def test_every_flag_of_run_fills_its_field_of_the_options():
    """Each flag reaches the one options object under its own name; a new flag without a field fails here."""
    parser = build_parser()
    dests = set(vars(parser.parse_args(["run", "linear-demo"])))  # every flag of run, with its default
    fields = {f.name for f in dataclasses.fields(ExecutionOptions)}
    assert dests - NOT_OPTIONS <= fields, dests - NOT_OPTIONS - fields
    options = _execution_options(parser.parse_args(["run", "linear-demo", *GIVEN]), resolve_sweep("linear-demo"))
    assert (options.address, options.num_cpus, options.chunk_steps, options.checkpoint_every, options.max_failures,
            options.runs_per_pack, options.engine, options.tf32, options.dtype) == (
        "auto", 3, 700, 2, 5, 9, "reference", True, "float64")
    assert options.resources == PackResources(2.0, 0.0)  # --cpus-per-pack over the sweep file's, its GPUs kept
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.dtype = "float32"


def test_confirm_keeps_the_defaults_of_flags_it_lacks():
    args = build_parser().parse_args(["confirm", "results/x", "--chunk-steps", "50"])
    options = _execution_options(args, resolve_sweep("linear-demo"))
    assert options.chunk_steps == 50 and options.dtype == "float32"  # the driver uses the store's dtype


def test_every_trial_gets_the_options_whole(monkeypatch, tmp_path):
    """The Tune wiring hands the trainable one options object (with the sweep's configurations by id, the store's
    URI, the writer, where interrupted packs continue and the nodes' stream boards), never options copied field by
    field."""
    from sweeps.tune import wiring

    handed = {}
    monkeypatch.setattr(wiring.tune, "with_parameters", lambda trainable, **kwargs: handed.update(kwargs) or trainable)
    options = ExecutionOptions(chunk_steps=123, engine="reference")
    location = StoreLocation.parse(tmp_path / "store")
    wiring._trainable({}, location, "token", options, PackResources(), {"p": "tune-x/ckpt"}, "boards-1")
    assert handed == {"index": {}, "store_uri": location.uri, "writer": "token", "resume_from": {"p": "tune-x/ckpt"},
                      "options": options, "boards": "boards-1"}
    assert handed["options"] is options


def test_an_unreadable_checkpoint_is_a_logged_notice_not_a_print(tmp_path, capsys, caplog):
    """The worker says it through the library's logger (the CLI's text layer shows the `sweeps` logger), never print."""
    from sweeps.tune.trainable import _load_earlier_checkpoint

    class Runner:
        def load_checkpoint(self, data):
            raise AssertionError("never reached: the file is missing")

    location = StoreLocation.parse(tmp_path)
    with caplog.at_level("WARNING", logger="sweeps"):
        assert not _load_earlier_checkpoint(Runner(), location, "tune-x/ckpt")
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1 and "unreadable" in notices[0] and "the pack starts over" in notices[0]
    assert capsys.readouterr().out == ""


def test_a_run_returns_its_results_as_a_store_location(tmp_path, monkeypatch):
    """`SweepRun.results_dir` (and so the `Results:` line) is the store's location, local or not, never a Path."""
    from sweeps.tune import driver, stages, wiring

    monkeypatch.setattr(driver, "connect", lambda *a, **k: None)  # no Ray needed: the packs are not run
    monkeypatch.setattr(driver, "parallel_slots", lambda resources: 1)
    monkeypatch.setattr(driver, "check_storage", lambda location: None)
    monkeypatch.setattr(driver, "run_packs",
                        lambda sweep, packs, *a, **k: wiring.Phase(len(packs), 0, 0.0, frozenset(), frozenset()))
    document = {"name": "tiny", "task": "linear_tracking", "task_settings": {"steps": 100, "bin": 50},
                "optimizers": {"sgd": {"alpha": 0.1}}}
    from sweeps.spec import parse_sweep

    outcome = stages.run_sweep(parse_sweep(document, "test"), str(tmp_path), options=ExecutionOptions())
    assert isinstance(outcome.results_dir, StoreLocation) and outcome.results_dir.local_path == tmp_path / "tiny"
    assert str(outcome.results_dir / "report.html") == str(tmp_path / "tiny" / "report.html")
