"""What the tests of learners of one's own (linear and neural) share: the module and its sweep file written
to a folder, the sweep run on the embedded Ray, the readers run with the module gone, and resume / confirm
refused once its source changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ray
import yaml

from sweeps.analysis.queries import HYPERPARAMETER_COLUMNS
from sweeps.cli import main

ROOT = Path(__file__).resolve().parents[1]


def write_sweep(folder: Path, module: str, source: str, sweep: dict) -> Path:
    """`module`.py holding `source` and the sweep file `<name>.yaml` beside it (the module forgotten by sys.modules)."""
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    path = folder / f"{sweep['name']}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    sys.modules.pop(module, None)
    return path


def finished_sweep(tmp_path_factory, module: str, source: str, sweep: dict):
    """A module fixture's body: the sweep run to its end in float64 on the embedded Ray -> (folder, sweep file,
    results)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    root = tmp_path_factory.mktemp(sweep["name"])
    path = write_sweep(root, module, source, sweep)
    assert main(["run", str(path), "--storage", str(root / "store"), "--dtype", "float64", "--no-report"]) == 0
    yield root, path, root / "store" / sweep["name"]
    ray.shutdown()


def read_without_the_module(root: Path, path: Path, results: Path, module: str, capsys, *more: list[str]) -> str:
    """table, status, verify, report (and the commands `more`) succeed with the module gone, never importing
    it, and `run --resume` is refused in one line (no module): their output."""
    (root / f"{module}.py").rename(root / "gone.py")
    sys.modules.pop(module, None)
    try:
        for command in (["table", str(results)], ["status", str(results)], ["verify", str(results)],
                        ["report", str(results), "--out", str(root / "report.html")], *more):
            assert main(command) == 0, command
        out = capsys.readouterr().out
        assert module not in sys.modules
        assert main(["run", str(path), "--storage", str(root / "store"), "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert "no module" in err and "\n" not in err
        return out
    finally:
        (root / "gone.py").rename(root / f"{module}.py")


def resume_and_confirm(root: Path, path: Path, results: Path, module: str, source: str, changed: str, capsys,
                       sweep: dict) -> None:
    """`run --resume` and `confirm` take the recorded source back, and refuse `changed` in one line."""
    assert main(["run", str(path), "--storage", str(root / "store"), "--dtype", "float64", "--resume",
                 "--no-report"]) == 0
    assert main(["confirm", str(results), "--seeds", "1"]) == 0
    _confirm_table_has_the_own_columns(results, sweep)
    write_sweep(root, module, changed, sweep)
    try:
        capsys.readouterr()
        for command in (["run", str(path), "--storage", str(root / "store"), "--dtype", "float64", "--resume"],
                        ["confirm", str(results), "--seeds", "1"]):
            assert main(command) == 2
            err = capsys.readouterr().err.strip()
            assert "changed since the store recorded it" in err and "\n" not in err
    finally:
        write_sweep(root, module, source, sweep)


def _confirm_table_has_the_own_columns(results: Path, sweep: dict) -> None:
    """`table --kind confirm` in a fresh process (no table read before it) names the own learners'
    hyperparameters: the confirmed configuration's columns in the CSV."""
    own = {h for name in sweep["learners"] for h in sweep["optimizers"][name]} - set(HYPERPARAMETER_COLUMNS)
    command = [sys.executable, "-m", "sweeps.cli", "table", str(results), "--kind", "confirm", "--format", "csv"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split(",")
    assert own and own <= set(header), (own, header)
