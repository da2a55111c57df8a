"""The engine as an explicit choice: the engines of fade_core.engines, the sweeps' defaults per
(task, device), the sweep file's `engine:`, `fade-sweep run --engine`, and the engine each pack's
manifest records."""

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
from fade_core.engines import ENGINE_NAMES, ENGINES, EngineError, get_engine, reference_engine
from fade_core.neural.runs import engine_class
from sweeps.cli import main
from sweeps.packs import make_runner
from sweeps.plan import Pack
from sweeps.spec import SweepError, make_config, parse_sweep
from sweeps.spec.engines import DEFAULTS, choose_engine, default_engine, engine_problem, engines_for
from sweeps.store import Store
from tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
LINEAR = {"name": "eng", "task": "linear_tracking", "task_settings": {"steps": 300, "bin": 100}, "seeds": 2,
          "optimizers": {"sgd": {"alpha": [0.1, 0.01]}}}


# ---------------------------------------------------------------- the engines and the table
@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_has_one_default_per_device_it_runs_on(task):
    spec = TASKS[task]
    devices = ("cpu", "cuda") if spec.runs_on_gpu else ("cpu",)
    assert {d for t, d in DEFAULTS if t == task} == set(devices)
    for device in devices:
        assert default_engine(task, device) == DEFAULTS[task, device].engine == engines_for(task, device)[0]
        assert DEFAULTS[task, device].pack_runs > 0
        assert all(get_engine(e, spec.family, device) for e in engines_for(task, device))  # each of its family, there
    if not spec.runs_on_gpu:
        assert engines_for(task, "cuda") == ()
    assert reference_engine(spec.family).name in engines_for(task, "cpu")  # the reference runs where tests run


def test_which_engines_run_a_task_follows_from_the_engines():
    """The one-hidden-layer regression engines run the nonlinear task on CUDA only, and the cuda engine
    EMNIST's network too; none of the linear engines runs a neural task, nor the neural ones a linear task."""
    assert engines_for("linear_tracking", "cpu") == ("cpu", "reference")
    assert engines_for("nonlinear_tracking", "cpu") == ("cpu", "torch")
    assert engines_for("nonlinear_tracking", "cuda") == ("cuda", "torch", "triton", "triton_step", "persistent")
    assert engines_for("emnist_label_permuted", "cuda") == ("triton", "torch", "triton_step", "cuda")
    assert engines_for("emnist_label_permuted") == ("cpu", "triton", "torch", "triton_step", "cuda")


def test_the_engines_are_explicit_objects_each_with_its_code():
    assert ENGINE_NAMES == ("reference", "cpu", "torch", "triton", "triton_step", "persistent", "cuda")
    assert len({(e.family, e.name) for e in ENGINES}) == len(ENGINES)
    for engine in ENGINES:
        assert engine.family in ("linear", "neural") and set(engine.devices) <= set(engines.DEVICES) and engine.summary
    assert [reference_engine(f).name for f in ("linear", "neural")] == ["reference", "torch"]
    from fade_core.linear.kernel import advance_compiled
    from fade_core.neural.torch_ops import TorchOps

    assert get_engine("cpu", "linear").load() is advance_compiled
    triton = engine_class("triton_step", torch.device("cpu"))  # Triton's interpreter runs it on CPU tensors
    assert triton.func is TorchOps and triton.keywords == {"fused": True, "whole_step": True}
    with pytest.raises(EngineError, match=r"^engine 'triton' does not run linear learners; choose one of reference, cpu$"):
        get_engine("triton", "linear")
    with pytest.raises(EngineError, match=r"^engine 'cpu' runs on CPUs only, not cuda; choose torch, triton, "):
        engine_class("cpu", torch.device("cuda"))


@pytest.mark.parametrize("engine, task, device, words", [
    ("nope", "linear_tracking", "cpu", "engine 'nope' is unknown; engines are reference, cpu, torch, triton, triton_step, persistent, cuda"),
    ("triton", "linear_tracking", "cpu", "engine 'triton' does not run linear_tracking on cpu; choose one of cpu, reference"),
    ("cpu", "nonlinear_tracking", "cuda", "engine 'cpu' does not run nonlinear_tracking on cuda; choose one of cuda, torch"),
    ("persistent", "emnist_label_permuted", None, "engine 'persistent' does not run emnist_label_permuted; choose one of"),
])
def test_an_engine_that_cannot_run_is_one_line_naming_the_choices(engine, task, device, words):
    problem = engine_problem(engine, task, device)
    assert problem.startswith(words) and "\n" not in problem


def test_the_engine_table_loads_neither_torch_nor_numba():
    code = ("import sys, fade_core.engines, sweeps.spec.engines; "
            "print(sorted(m for m in ('torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"


def test_no_environment_variable_chooses_the_code_that_runs():
    """Which engine runs is an argument, never the environment (Triton's own TRITON_INTERPRET
    aside: it runs the same kernels in its interpreter; the dry run reads numba's NUMBA_CACHE_DIR only to
    find which kernels are already compiled)."""
    for folder in ("fade_core", "sweeps/packs"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            assert "FADE_TRITON" not in text and "FADE_TORCH_COMPILE" not in text, path
            assert "os.environ" not in text or path.name in ("triton_rule.py", "dryrun.py"), path


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
    assert choose_engine(plain.experiment, "cpu") == "cpu" and choose_engine(chosen.experiment, "cpu") == "reference"


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
