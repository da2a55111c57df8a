"""The engine as an explicit choice: the table of fade_core.engines, the sweep file's `engine:`,
`fade-sweep run --engine`, and the engine each pack's manifest records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fade_core import engines
from fade_core.engines import ENGINE_NAMES, ENGINES, EngineError, check_engine, default_engine, engines_for
from sweeps.cli import main
from sweeps.packs import make_runner
from sweeps.spec import Pack, SweepError, make_config, parse_sweep
from sweeps.store import Store
from tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
LINEAR = {"name": "eng", "task": "linear_tracking", "task_settings": {"steps": 300, "bin": 100}, "seeds": 2,
          "optimizers": {"sgd": {"alpha": [0.1, 0.01]}}}


# ---------------------------------------------------------------- the table
@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_has_one_default_per_device_it_runs_on(task):
    spec = TASKS[task]
    for device in ("cpu", "cuda") if spec.runs_on_gpu else ("cpu",):
        rows = [r for r in engines.rows_for(task, device) if r.default]
        assert len(rows) == 1, (task, device, rows)
        assert default_engine(task, device) == rows[0].engine == engines_for(task, device)[0]
    if not spec.runs_on_gpu:
        assert not engines.rows_for(task, "cuda")
    assert {r.family for r in engines.rows_for(task)} == {spec.family}
    assert engines.FAMILY_REFERENCE[spec.family] in engines_for(task, "cpu")  # the reference runs where tests run


def test_the_table_names_known_tasks_engines_and_where_each_rate_was_measured():
    assert {r.task for r in ENGINES} == set(TASKS)
    for row in ENGINES:
        assert row.engine in ENGINE_NAMES and row.device in engines.DEVICES and row.pack_runs > 0
        assert row.measured and (row.rate is None or row.rate > 0), row
    keys = [(r.task, r.device, r.engine) for r in ENGINES]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("engine, task, device, words", [
    ("nope", "linear_tracking", "cpu", "engine 'nope' is unknown; engines are reference, cpu, torch, triton, triton_step, persistent, cuda"),
    ("triton", "linear_tracking", "cpu", "engine 'triton' does not run linear_tracking on cpu; choose one of cpu, reference"),
    ("cpu", "nonlinear_tracking", "cuda", "engine 'cpu' does not run nonlinear_tracking on cuda; choose one of triton, torch"),
    ("persistent", "emnist_label_permuted", None, "engine 'persistent' does not run emnist_label_permuted; choose one of"),
])
def test_an_engine_that_cannot_run_is_one_line_naming_the_choices(engine, task, device, words):
    with pytest.raises(EngineError) as caught:
        check_engine(engine, task, device)
    assert str(caught.value).startswith(words) and "\n" not in str(caught.value)


def test_the_engine_table_loads_neither_torch_nor_numba():
    code = "import sys, fade_core.engines; print(sorted(m for m in ('torch', 'numba') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"


def test_no_environment_variable_chooses_the_code_that_runs():
    """Which engine runs is an argument, never the environment (Triton's own TRITON_INTERPRET
    aside: it runs the same kernels in its interpreter)."""
    for folder in ("fade_core", "sweeps/packs"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            assert "FADE_TRITON" not in text and "FADE_TORCH_COMPILE" not in text, path
            assert "os.environ" not in text or path.name == "triton_rule.py", path


# ---------------------------------------------------------------- the sweep file and the pack
def test_the_sweep_files_engine_is_checked_and_given_to_its_experiments():
    doc = {**LINEAR, "variants": [{"task_settings": {"noise": 0.0}}, {"task_settings": {"noise": 0.5}, "engine": "reference"}]}
    sweep = parse_sweep({**doc, "engine": "cpu"}, "test")
    assert [e.engine for e in sweep.experiments] == ["cpu", "reference"]
    assert [e.engine for e in parse_sweep(LINEAR, "test").experiments] == [None]
    with pytest.raises(SweepError, match=r"^test: variants\[1\]\.engine: engine 'triton' does not run linear_tracking; "
                                         r"choose one of cpu, reference$"):
        parse_sweep({**doc, "variants": [doc["variants"][0], {**doc["variants"][1], "engine": "triton"}]}, "test")
    with pytest.raises(SweepError, match=r"^test: engine: must be an engine name, got 3$"):
        parse_sweep({**LINEAR, "engine": 3}, "test")


def _pack(document: dict) -> Pack:
    experiment = parse_sweep(document, "test").experiments[0]
    return Pack(experiment, tuple(make_config(experiment, c) for c in experiment.configs()), (0, 1))


def test_a_pack_runs_on_the_command_lines_engine_else_the_sweep_files_else_the_default(tmp_path):
    plain, chosen = _pack(LINEAR), _pack({**LINEAR, "engine": "reference"})
    assert make_runner(plain).engine == "cpu"
    assert make_runner(chosen).engine == "reference"
    assert make_runner(chosen, engine="cpu").engine == "cpu"
    with pytest.raises(EngineError, match="engine 'torch' does not run linear_tracking on cpu"):
        make_runner(plain, engine="torch")


def test_the_manifest_records_the_engine_that_computed_the_pack(tmp_path):
    """Both engines' packs committed side by side: each manifest names its own, and the two
    engines' scores agree (the same rule)."""
    store = Store.open(tmp_path / "store")
    scores = {}
    for engine in ("reference", "cpu"):
        runner = make_runner(_pack(LINEAR), 128, torch.float64, engine=engine)
        for _ in runner.run():
            pass
        outcome = runner.outcome()
        scores[engine] = outcome.score
        store.write_pack(runner.pack, outcome)
    manifests = [json.loads(p.read_text()) for p in sorted((tmp_path / "store" / "manifests").glob("*.json"))]
    assert sorted(m["engine"] for m in manifests) == ["cpu", "reference"]
    torch.testing.assert_close(torch.from_numpy(scores["cpu"]), torch.from_numpy(scores["reference"]), rtol=1e-12, atol=0)


# ---------------------------------------------------------------- the command line
@pytest.mark.parametrize("engine, words", [
    ("nope", "engine 'nope' is unknown; engines are reference, cpu, torch, triton, triton_step, persistent, cuda"),
    ("triton", "--engine: engine 'triton' does not run linear_tracking on cpu; choose one of cpu, reference"),
    ("", "--engine: engine '' is unknown"),  # an unset shell variable: refused, not taken for the default
])
def test_run_with_an_engine_that_cannot_run_is_one_line_exit_2_before_ray(engine, words, tmp_path, capsys):
    sweep = tmp_path / "eng.yaml"
    sweep.write_text(yaml.safe_dump(LINEAR))
    for extra in ([], ["--dry-run"]):
        code = main(["run", str(sweep), "--storage", str(tmp_path / "store"), "--engine", engine, *extra])
        err = capsys.readouterr().err
        assert code == 2 and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "store").exists()  # refused before the store (and Ray, which starts after it)


def test_run_engine_reaches_every_pack_and_status_shows_it(tmp_path):
    """`--engine reference` overrides the sweep file's `engine: cpu` in every trial (through Ray
    Tune), the manifests record it, and `fade-sweep status` says which engines computed the store."""
    sweep = tmp_path / "eng.yaml"
    sweep.write_text(yaml.safe_dump({**LINEAR, "engine": "cpu"}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "sweeps.cli", "run", str(sweep), "--storage", str(tmp_path / "store"), "--num-cpus", "1",
           "--no-report", "--runs-per-pack", "2", "--engine", "reference"]
    done = subprocess.run(run, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    results = tmp_path / "store" / "eng"
    manifests = [json.loads(p.read_text()) for p in (results / "manifests").glob("*.json")]
    assert len(manifests) == 2 and {m["engine"] for m in manifests} == {"reference"}
    status = subprocess.run([sys.executable, "-m", "sweeps.cli", "status", str(results)], capture_output=True, text=True,
                            env=env, timeout=120, cwd=ROOT)
    assert "engines: reference (2 packs)" in status.stdout, status.stdout + status.stderr
