"""The layering of docs/architecture.md, enforced: each layer imports only the layers below
it, there is no import cycle between modules, and the commands that need no cluster
(`--help`, `presets`, validation, `table`, `status`, `verify`, `report`) import neither Ray
nor torch, numba or pandas."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Lowest first: a module may import its own layer and the layers before it.
LAYERS = ("fade_core", "tasks", "sweeps.spec", "sweeps.packs", "sweeps.store", "sweeps.analysis", "sweeps.results", "cluster", "sweeps.tune", "sweeps.cli")
RAY_FREE = ("fade_core", "tasks", "sweeps.spec", "sweeps.packs", "sweeps.store", "sweeps.analysis", "sweeps.results")
PROJECT = ("fade_core", "tasks", "sweeps", "cluster")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PROJECT:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> int | None:
    for rank, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return rank
    return None  # the bare `sweeps` package: a docstring only


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported name, line) of every import in the file, top level or not; `from X import Y`
    counts as importing the module X.Y when that is a module."""
    names = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.append((sub if sub in MODULES else base, node.lineno))
    return names


def _project_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for name, _ in _imports(module, path):
            target = next((m for m in sorted(MODULES, key=len, reverse=True) if name == m or name.startswith(m + ".")), None)
            if target is not None and target != module:
                edges[module].add(target)
    return edges


def test_every_module_imports_only_its_layer_and_below():
    wrong = []
    for module, path in MODULES.items():
        rank = _layer(module)
        for name, line in _imports(module, path):
            if name.split(".")[0] not in PROJECT:
                continue
            target = _layer(name)
            if rank is None or (target is not None and target > rank):
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({LAYERS[rank] if rank is not None else module}) imports {name}")
    assert not wrong, "layering broken:\n" + "\n".join(wrong)


def test_ray_is_imported_only_by_the_cluster_and_tune_layers():
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for module, path in MODULES.items()
        if module.startswith(RAY_FREE)
        for name, line in _imports(module, path)
        if name == "ray" or name.startswith("ray.")
    ]
    assert not wrong, "Ray imported below the tune/cluster layers: " + ", ".join(wrong)


def test_no_import_cycles():
    edges = _project_edges()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


MAX_LINES = 400


def test_no_source_file_is_over_400_lines():
    """A file that grows past 400 lines holds more than one job: split it by job."""
    long = {str(path.relative_to(ROOT)): n for path in MODULES.values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_the_checker_sees_a_violation(tmp_path):
    """The checks above are not vacuous: they parse imports where they are, inside functions too."""
    source = tmp_path / "fake.py"
    source.write_text("def f():\n    from sweeps.tune import driver\n    import ray\n")
    names = [n for n, _ in _imports("fade_core.fake", source)]
    assert "sweeps.tune.driver" in names and "ray" in names
    assert _layer("sweeps.tune.driver") > _layer("fade_core.fake")


# ---------------------------------------------------------------- light commands stay light
HEAVY = ("ray", "torch", "numba", "pandas")
# Lighter still where a command has no use for them: no frames outside table and report, no Parquet
# outside verify (a local store; an object store's URI loads pyarrow.fs).
UNNEEDED = {"help": ("polars", "pyarrow"), "presets": ("polars", "pyarrow"), "validation": ("polars", "pyarrow"),
            "status": ("polars", "pyarrow"), "verify": ("polars",), "table": ("pyarrow",), "report": ()}
_PROBE = """
import contextlib, io, json, sys
from sweeps.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            codes.append(main(argv))
        except SystemExit as done:  # --help
            codes.append(done.code)
heavy = json.loads(sys.argv[2])
print(json.dumps({"codes": codes, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in heavy)}))
"""


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    """A real store of a tiny linear sweep, written without Ray (packs + results layers)."""
    from sweeps.packs import make_runner
    from sweeps.spec import parse_sweep, plan_packs
    from sweeps.store import Store
    from sweeps.store.record import check_and_record
    from sweeps.store.records import SweepStatus

    document = {"name": "tiny", "task": "linear_tracking", "task_settings": {"steps": 400, "bin": 100}, "seeds": 2,
                "optimizers": {"sgd": {"alpha": [0.01, 0.05]},
                               "fade": {"alpha": 0.05, "theta_lambda": [0.0, 0.01], "gamma0": [-2.3, -4.6]}}}
    results_dir = tmp_path_factory.mktemp("store") / "tiny"
    store = Store.open(results_dir)
    sweep = parse_sweep(document, "test")
    check_and_record(store.location, sweep, "float32")  # sweep.yaml and store.json: `verify` finds it clean
    for pack in plan_packs(sweep, cpus=1):
        runner = make_runner(pack)
        for _ in runner.run():
            pass
        store.write_pack(pack, runner.outcome())
    SweepStatus("tiny", "finished", 0.0, 1.0, 1600).write(store.location)
    return results_dir


@pytest.mark.parametrize("what", ["help", "presets", "validation", "table", "status", "verify", "report"])
def test_commands_without_a_cluster_import_no_heavy_stack(what, small_store, tmp_path):
    """Ray, torch, numba and pandas stay out of the commands that read or check (a fresh interpreter), and
    polars and pyarrow out of those that need no frames or Parquet."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntask: linear_tracking\noptimizers: {sgd: {alpha: -1}}\n")
    argv = {
        "help": [["--help"], ["table", "--help"]],
        "presets": [["presets"]],
        "validation": [["run", str(bad)]],
        "table": [["table", str(small_store)], ["table", str(small_store), "--kind", "sensitivity", "--format", "csv"]],
        "status": [["status", str(small_store)]],
        "verify": [["verify", str(small_store)]],
        "report": [["report", str(small_store), "--out", str(tmp_path / "r.html")]],
    }[what]
    expected = [2] if what == "validation" else [0] * len(argv)
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps([*HEAVY, *UNNEEDED[what]])],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["codes"] == expected, done.stderr
    assert probe["heavy"] == [], f"`fade-sweep {argv[0][0]}` imported {probe['heavy'][:5]}"


_DRIVER_PROBE = """
import json, sys
import sweeps.tune.driver
from sweeps.spec import check_task_data, parse_sweep
document = {"name": "e", "task": "emnist_label_permuted", "seeds": 1, "optimizers": {"sgd": {"alpha": 0.01}},
            "task_settings": {"steps": 100, "period": 50, "bin": 50, "data_dir": sys.argv[1]}}
check_task_data(parse_sweep(document, "probe"))  # an EMNIST sweep's data, checked before Ray starts
print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))
"""


def test_the_driver_of_a_run_leaves_the_pack_engine_to_the_workers(tmp_path):
    """`fade-sweep run` imports the Tune driver (sweeps.tune.driver, which names the trainable
    and reads checkpoints' names to resume) and checks the tasks' data, never torch or numba:
    the workers run the packs."""
    from tests.emnist_fixture import write_idx_dataset

    data = write_idx_dataset(tmp_path, images=100)
    done = subprocess.run([sys.executable, "-c", _DRIVER_PROBE, str(data)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ray" in loaded, done.stderr  # the probe saw the driver's imports
    assert [m for m in ("torch", "numba") if m in loaded] == []


def test_the_store_of_the_probe_is_real(small_store):
    import polars as pl

    scores = pl.read_parquet(small_store / "scores" / "**" / "*.parquet")
    assert scores.height == 2 * 2 + 4 * 2 and np.isfinite(scores["score"].to_numpy()).all()


def test_a_run_without_a_report_never_imports_plotly(tmp_path):
    """`fade-sweep run --no-report` draws nothing, so plotly stays out of its processes (the GPU image has
    none): the driver's imports and a worker's packs, as tests/run_path_probe.py replays them."""
    from tests.emnist_fixture import write_idx_dataset

    data = write_idx_dataset(tmp_path / "emnist", images=100)
    done = subprocess.run([sys.executable, "-m", "tests.run_path_probe", str(data), str(tmp_path / "store")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])["modules"]
    assert {"ray", "polars", "torch"} <= set(loaded)  # the probe ran the driver's and a worker's code
    assert [m for m in loaded if m in ("plotly", "_plotly_utils", "kaleido")] == []
