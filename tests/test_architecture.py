"""The layering of docs/architecture.md, enforced: the top-level packages in the order
fade_core < tasks < cluster < sweeps, each layer importing only itself and the layers below it,
no import cycle between modules (imports inside functions and names a package exports lazily
counted), and the commands that need no cluster (`--help`, `presets`, validation, `table`,
`status`, `verify`, `report`, `run --dry-run` without `--address`) import neither Ray nor torch,
numba or pandas (`--dry-run --calibrate` runs packs here: torch and numba are its own)."""

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
PACKAGES = ("fade_core", "tasks", "cluster", "sweeps")  # the top-level packages
LAYERS = ("fade_core", "tasks", "cluster", "sweeps.spec", "sweeps.plan", "sweeps.packs", "sweeps.store",
          "sweeps.analysis", "sweeps.tune", "sweeps.cli")
RAY_FREE = ("fade_core", "tasks", "sweeps.spec", "sweeps.plan", "sweeps.packs", "sweeps.store", "sweeps.analysis")


def _modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> int | None:
    for rank, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return rank
    return None  # the bare `sweeps` package: a docstring only


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    """name -> module of a package that exports names on first access (`_EXPORTS = {"Name": "pkg.mod",
    **dict.fromkeys([...], "pkg.mod")}`, fade_core/_lazy.py): `from pkg import Name` imports pkg.mod."""
    exports: dict[str, str] = {}

    def read(node: ast.expr) -> None:
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if key is None:
                    read(value)
                elif isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                    exports[key.value] = value.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fromkeys":
            names, module = node.args
            for name in names.elts:
                exports[name.value] = module.value

    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            read(node.value)
    return exports


def _imports(module: str, path: Path, modules: dict[str, Path] = MODULES) -> list[tuple[str, int, bool]]:
    """(imported name, line, inside a function) of every import in the file, top level or not;
    `from X import Y` counts as importing the module X.Y when that is a module, and the module
    that X exports Y from when X exports it lazily."""
    names = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    local = {id(inner) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             for inner in ast.walk(node) if inner is not node}
    for node in ast.walk(tree):
        inside = id(node) in local
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno, inside) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            lazy = _lazy_exports(ast.parse(modules[base].read_text())) if base in modules else {}
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.append((sub if sub in modules else lazy.get(alias.name, base), node.lineno, inside))
    return names


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lies in (the longest module name it starts with)."""
    return next((m for m in sorted(modules, key=len, reverse=True) if name == m or name.startswith(m + ".")), None)


def _project_edges(modules: dict[str, Path] = MODULES) -> dict[str, dict[str, bool]]:
    """module -> {imported project module: whether every import of it is inside a function}."""
    edges: dict[str, dict[str, bool]] = {m: {} for m in modules}
    for module, path in modules.items():
        for name, _, inside in _imports(module, path, modules):
            target = _owner(name, modules)
            if target is not None and target != module:
                edges[module][target] = edges[module].get(target, True) and inside
    return edges


def _layering_errors(modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    wrong = []
    for module, path in modules.items():
        rank = _layer(module)
        for name, line, _ in _imports(module, path, modules):
            if name.split(".")[0] not in PACKAGES:
                continue
            target = _layer(name)
            if rank is None or (target is not None and target > rank):
                wrong.append(f"{path.relative_to(root)}:{line} ({LAYERS[rank] if rank is not None else module}) imports {name}")
    return wrong


def _packages_back_up(modules: dict[str, Path]) -> list[str]:
    """Imports from a top-level package into one above it (`import sweeps` included, which `_layer` leaves unranked)."""
    return [f"{module}:{line} imports {name}"
            for module, path in modules.items()
            for name, line, _ in _imports(module, path, modules)
            if name.split(".")[0] in PACKAGES
            and PACKAGES.index(name.split(".")[0]) > PACKAGES.index(module.split(".")[0])]


def _cycle(edges: dict[str, dict[str, bool]]) -> list[str] | None:
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
            return cycle
    return None


def test_every_module_imports_only_its_layer_and_below():
    wrong = _layering_errors(MODULES)
    assert not wrong, "layering broken:\n" + "\n".join(sorted(set(wrong)))


def test_no_top_level_package_imports_one_above_it():
    """fade_core and tasks import nothing from cluster or sweeps; cluster (bringing up and reaching Ray)
    imports nothing from sweeps."""
    wrong = _packages_back_up(MODULES)
    assert not wrong, "an import back up:\n" + "\n".join(sorted(set(wrong)))


def test_the_rules_fail_on_the_tree_before_cluster_was_cut_loose(tmp_path):
    """Before this layout cluster/ imported sweeps (jobs.py: Sweep, StoreLocation; placement.py:
    PackResources; storage.py: StoreLocation): the checks above see such an arrow, in a copy of cluster/."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "__init__.py").write_text("")
    (tmp_path / "cluster" / "placement.py").write_text("from sweeps.spec import PackResources\n")
    (tmp_path / "cluster" / "jobs.py").write_text("def submit():\n    import sweeps\n")
    for package in ("fade_core", "tasks", "sweeps"):
        (tmp_path / package).symlink_to(ROOT / package)
    modules = _modules(tmp_path)
    assert [e.split(" (")[0] for e in _layering_errors(modules, tmp_path)] == ["cluster/placement.py:1"]
    assert sorted(_packages_back_up(modules)) == ["cluster.jobs:2 imports sweeps", "cluster.placement:1 imports sweeps.spec"]


def test_ray_is_imported_only_above_the_ray_free_layers():
    """Directly, or through a project module: a Ray-free layer importing cluster.connect would load Ray too."""
    edges = _project_edges()
    imports_ray = {module for module, path in MODULES.items()
                   if any(name == "ray" or name.startswith("ray.") for name, _, _ in _imports(module, path))}
    loads_ray = set(imports_ray)
    while more := {m for m, targets in edges.items() if m not in loads_ray and loads_ray & targets.keys()}:
        loads_ray |= more

    def causes(module: str) -> set[str]:  # Ray itself, or a module above the Ray-free layers that loads it
        return ({"ray"} if module in imports_ray else set()) | {
            target for target in loads_ray & edges[module].keys() if not target.startswith(RAY_FREE)}

    wrong = sorted(f"{m} -> {', '.join(sorted(c))}" for m in loads_ray if m.startswith(RAY_FREE) and (c := causes(m)))
    assert not wrong, "Ray imported by a Ray-free layer: " + "; ".join(wrong)


def test_no_import_cycles():
    """Over the import graph of the production packages, imports inside functions counted (a cycle
    closed by one still means the two modules cannot be understood, or split, apart)."""
    edges = _project_edges()
    in_functions = sum(inside for targets in edges.values() for inside in targets.values())
    assert sum(map(len, edges.values())) > 300 and in_functions > 20  # the graph is the whole project's
    assert edges["sweeps.cli.running"]["sweeps.tune.stages"]  # an import inside a function, seen
    assert "sweeps.packs.runners" in edges["sweeps.tune.trainable"]  # `from sweeps.packs import make_runner`: lazy
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_a_cycle_closed_inside_a_function(tmp_path):
    (tmp_path / "sweeps" / "spec").mkdir(parents=True)
    for package in ("fade_core", "tasks", "cluster"):
        (tmp_path / package).symlink_to(ROOT / package)
    (tmp_path / "sweeps" / "__init__.py").write_text("")
    (tmp_path / "sweeps" / "spec" / "__init__.py").write_text("_EXPORTS = {'B': 'sweeps.spec.b'}\n")
    (tmp_path / "sweeps" / "spec" / "a.py").write_text("from sweeps.spec import B\n")
    (tmp_path / "sweeps" / "spec" / "b.py").write_text("def f():\n    from sweeps.spec.a import A\n")
    assert _cycle(_project_edges(_modules(tmp_path))) == ["sweeps.spec.a", "sweeps.spec.b", "sweeps.spec.a"]


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
    names = [n for n, _, _ in _imports("fade_core.fake", source)]
    assert "sweeps.tune.driver" in names and "ray" in names
    assert _layer("sweeps.tune.driver") > _layer("fade_core.fake")


# ---------------------------------------------------------------- light commands stay light
HEAVY = ("ray", "torch", "numba", "pandas")
# Lighter still where a command has no use for them: no frames outside table and report, no Parquet
# outside verify (a local store; an object store's URI loads pyarrow.fs).
UNNEEDED = {"help": ("polars", "pyarrow"), "presets": ("polars", "pyarrow"), "validation": ("polars", "pyarrow"),
            "status": ("polars", "pyarrow"), "verify": ("polars",), "table": ("pyarrow",), "report": (),
            "dry-run": ("polars", "pyarrow"), "dry-run --calibrate": ("polars", "pyarrow"), "schema": ("polars", "pyarrow")}
NEEDED = {"dry-run --calibrate": ("torch", "numba")}  # --calibrate times a few packs here; Ray stays out
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
    from sweeps.plan import plan_packs
    from sweeps.spec import parse_sweep
    from sweeps.store import Store
    from sweeps.store.sweep_record import check_and_record
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


@pytest.mark.parametrize("what", ["help", "presets", "validation", "table", "status", "verify", "report", "dry-run",
                                  "dry-run --calibrate", "schema"])
def test_commands_without_a_cluster_import_no_heavy_stack(what, small_store, tmp_path):
    """Ray, torch, numba and pandas stay out of the commands that read or check (a fresh interpreter), and
    polars and pyarrow out of those that need no frames or Parquet; a dry run without --address loads no Ray."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntask: linear_tracking\noptimizers: {sgd: {alpha: -1}}\n")
    small = tmp_path / "small.yaml"
    small.write_text("name: small\ntask: linear_tracking\ntask_settings: {steps: 2000, bin: 1000}\nseeds: 2\n"
                     "optimizers: {sgd: {alpha: [0.01, 0.02]}}\n")
    argv = {
        "help": [["--help"], ["table", "--help"]],
        "presets": [["presets"]],
        "validation": [["run", str(bad)]],
        "table": [["table", str(small_store)], ["table", str(small_store), "--kind", "sensitivity", "--format", "csv"]],
        "status": [["status", str(small_store)]],
        "verify": [["verify", str(small_store)]],
        "report": [["report", str(small_store), "--out", str(tmp_path / "r.html")]],
        "dry-run": [["run", str(small), "--dry-run", "--num-cpus", "1", "--storage", str(tmp_path / "dry")],
                    ["run", str(small), "--dry-run", "--race", "--num-cpus", "1", "--storage", str(tmp_path / "dry")],
                    ["run", "nonlinear-demo", "--dry-run", "--storage", str(tmp_path / "dry")]],
        "dry-run --calibrate": [["run", str(small), "--dry-run", "--calibrate", "--num-cpus", "1", "--storage",
                                 str(tmp_path / "dry")]],
        "schema": [["schema"]],
    }[what]
    expected = [2] if what == "validation" else [0] * len(argv)
    heavy = [m for m in (*HEAVY, *UNNEEDED[what]) if m not in NEEDED.get(what, ())]
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(heavy)],
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


# ---------------------------------------------------------------- one place talks to people
# Modules whose prints another branch turns into notices (cluster/ is the layout branch's); each entry must still print.
PRINTS_LEFT: dict[str, str] = {}  # path: why it still prints (none left)


def _prints(path: Path) -> list[int]:
    """Lines of `path` that print or write to stdout/stderr, outside the `main()` of a module run as a command
    (`python -m cluster.local up`: a command line of its own)."""
    tree = ast.parse(path.read_text())
    command = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)
    allowed = {id(n) for f in ast.walk(tree) if command and isinstance(f, ast.FunctionDef) and f.name == "main"
               for n in ast.walk(f)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in allowed:
            continue
        name = ast.unparse(node.func)
        if name == "print" or name in ("sys.stdout.write", "sys.stderr.write"):
            lines.append(node.lineno)
    return lines


def test_only_the_command_line_prints():
    """The library returns data and notices (or logs them: the `sweeps` logger, which the CLI shows); only
    sweeps/cli/ words and prints them for people (benchmarks are scripts: not modules here)."""
    printing = {str(path.relative_to(ROOT)): lines for module, path in MODULES.items()
                if not module.startswith("sweeps.cli") and (lines := _prints(path))}
    assert all(printing.get(path) for path in PRINTS_LEFT), "an exemption that no longer prints: drop it"
    wrong = {path: lines for path, lines in printing.items() if path not in PRINTS_LEFT}
    assert not wrong, f"prints outside sweeps/cli (return a notice, or log to the `sweeps` logger): {wrong}"
