"""What the tests of learners of one's own (linear and neural) share: the module and its sweep file written
to a folder, the sweep run on the embedded Ray, the readers run with the module gone, and resume / confirm
refused once its source changed."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import ray
import yaml

from sweeps.cli import main


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
