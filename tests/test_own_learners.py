"""A researcher's own linear rule (`learners:` block): checked before Ray, run on the embedded Ray equal to
a plain per-run loop written here, read back without its module, and resumed / confirmed only with the
rule the store recorded."""

import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fade_core.linear import initial_weights
from sweeps.cli import main
from sweeps.spec.own import RESERVED_COLUMNS
from sweeps.store import Store
from tasks import make_stream
from tests.own_sweeps import finished_sweep, read_without_the_module, resume_and_confirm, write_sweep

MODULE = "leaky_rules_for_test"
RULE = (Path(__file__).resolve().parents[1] / "benchmarks" / "own_rules.py").read_text()  # docs/own-learners.md's example
STEPS, BIN, SEEDS = 1500, 500, 2
GRID = {"alpha": 0.02, "theta_lambda": 0.01, "gamma0": -3.0, "rho": [0.5, 0.9]}
SWEEP = {"name": "leaky", "task": "linear_tracking", "task_settings": {"steps": STEPS, "bin": BIN, "noise": 1.0},
         "seeds": SEEDS, "learners": {"fade_leaky": f"{MODULE}:fade_leaky"},
         "optimizers": {"fade": {"alpha": 0.02, "theta_lambda": 0.01, "gamma0": -3.0}, "fade_leaky": GRID}}


def _plain_score(seed: int, alpha: float, theta_lambda: float, gamma0: float, rho: float) -> float:
    """algorithms.md's FADE with the decay trace leaking by rho, one run, step by step in float64."""
    chunk = make_stream("linear_tracking", {"steps": STEPS, "bin": BIN, "noise": 1.0}, seed).chunk(0, STEPS)
    x, y = np.asarray(chunk.x, np.float64), np.asarray(chunk.y, np.float64)
    w = initial_weights([seed], x.shape[1], dtype=__import__("torch").float64)[0].numpy().copy()
    gamma, g = np.full_like(w, gamma0), np.zeros_like(w)
    total = 0.0
    for t in range(STEPS):
        delta = y[t] - sum(w[i] * x[t, i] for i in range(len(w)))
        total += delta * delta
        for i in range(len(w)):
            gamma[i] = gamma[i] + theta_lambda * delta * x[t, i] * g[i]
            lam = math.exp(gamma[i])
            g[i] = rho * g[i] * max(1 - lam - alpha * x[t, i] ** 2, 0) - lam * w[i]
            w[i] = (1 - lam) * w[i] + alpha * delta * x[t, i]
    return total / STEPS


def _write(folder, rule: str = RULE, sweep: dict = SWEEP):
    return write_sweep(folder, MODULE, rule, sweep)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    yield from finished_sweep(tmp_path_factory, MODULE, RULE, SWEEP)


def test_own_rule_equals_a_plain_per_run_loop(finished):
    _, _, results = finished
    scores = Store.open(results).scan("scores").collect()
    leaky = scores.filter(optimizer="fade_leaky")
    assert leaky.height == len(GRID["rho"]) * SEEDS and leaky["rho"].dtype.is_float()
    for row in leaky.iter_rows(named=True):
        expected = _plain_score(row["seed"], 0.02, 0.01, -3.0, row["rho"])
        assert row["score"] == pytest.approx(expected, rel=1e-9)
    assert scores.filter(optimizer="fade")["rho"].is_null().all()


def test_readers_never_import_the_rule(finished, capsys):
    root, sweep, results = finished
    sensitivity = ["table", str(results), "--kind", "sensitivity"]  # one gamma0 x theta_lambda grid per rho
    out = read_without_the_module(root, sweep, results, MODULE, capsys, sensitivity)
    assert "rho=" in out
    titles = [line for line in out.splitlines() if line.startswith("### ")]
    assert sum("fade_leaky, alpha=0.02, rho=" in t for t in titles) == len(GRID["rho"])


def test_the_resume_command_does_not_name_the_recorded_copy_away_from_the_module(finished):
    """The store's sweep.yaml has no my_rules.py beside it, so `run` of it could not find the rule: `status`
    (and an interrupt's hint from it) names SWEEP, the researcher's file, instead."""
    root, sweep, results = finished
    command = Store.open(results).resume_command()
    assert command.startswith("fade-sweep run SWEEP --storage ") and command.endswith(" --resume"), command


def test_resume_and_confirm_take_the_recorded_rule(finished, capsys):
    root, sweep, results = finished
    changed = RULE.replace("rho * g *", "rho * (g *").replace("max(1 - l - alpha * x * x, 0) -",
                                                              "max(1 - l - alpha * x * x, 0)) -")
    resume_and_confirm(root, sweep, results, MODULE, RULE, changed, capsys, SWEEP)


BAD = {
    "no module": ({"learners": {"fade_leaky": "nowhere_rules:fade_leaky"}}, RULE, "no module nowhere_rules"),
    "no function": ({"learners": {"fade_leaky": f"{MODULE}:missing"}}, RULE, "has no function missing"),
    "signature": ({}, RULE.replace("lo, hi, alpha", "hi, lo, alpha"), "not in the documented form"),
    "branch": ({}, RULE.replace("    l = exp(gamma)", "    l = exp(gamma)\n    if l > 1:\n        l = 1"),
               "a Python branch on a value"),
    "loop": ({}, RULE.replace("    l = exp(gamma)", "    l = exp(gamma)\n    for _ in range(2):\n        l = l * 1"),
             "a loop (for) in rule fade_leaky; the kernel traces straight-line code: write the steps out"),
    "non-ASCII name": ({"learners": {"ünï": f"{MODULE}:fade_leaky"}}, RULE,
                       "'ünï' is not a name of ASCII letters, digits and _ (not starting with a digit)"),
    "unknown function": ({}, RULE.replace("l = exp(gamma)", "l = abs(gamma)"), "unknown function abs"),
    "column clash": ({}, RULE.replace("rho", "seed"), "clashes with a column of the store"),
    "learner clash": ({}, RULE.replace("rho", "adam"), "clashes with a built-in learner's name"),
    "built-in name": ({"learners": {"fade": f"{MODULE}:fade_leaky"}}, RULE, "the name of a built-in learner"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_rule_is_one_line_exit_2_nothing_written(case, tmp_path, capsys):
    change, rule, message = BAD[case]
    grid = {k.replace("rho", "seed" if case == "column clash" else "adam" if case == "learner clash" else "rho"): v
            for k, v in GRID.items()}
    sweep = {**SWEEP, **change, "optimizers": {"fade_leaky": grid}}
    path = _write(tmp_path, rule, sweep)
    assert main(["run", str(path), "--storage", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err
    assert not (tmp_path / "store").exists()
    if case in ("signature", "branch", "loop", "unknown function"):
        assert f"{MODULE}.py:" in err  # names the line


def test_reserved_columns_cover_the_store_and_the_tables():
    from sweeps.analysis.queries import CELL_STATS, PER_RUN
    from sweeps.store.verify import EXPECTED_TYPES
    from fade_core.hyperparameters import HYPERPARAMETERS

    columns = {c for kind in EXPECTED_TYPES.values() for c in kind} - set(HYPERPARAMETERS)
    assert columns | set(CELL_STATS) | set(PER_RUN) <= RESERVED_COLUMNS


def test_the_schema_has_the_learners_block():
    from sweeps.spec.document import sweep_schema

    assert "learners" in sweep_schema()["properties"]


def test_an_own_rule_with_a_range_refuses_a_value_outside_it(tmp_path, capsys):
    sweep = {**SWEEP, "optimizers": {"fade_leaky": {**GRID, "rho": 1.5}}}
    assert main(["run", str(_write(tmp_path, RULE, sweep)), "--storage", str(tmp_path / "store")]) == 2
    assert "rho" in capsys.readouterr().err and not (tmp_path / "store").exists()
    free = {**SWEEP, "optimizers": {"fade_leaky": {**GRID, "rho": 1.5}}}
    unranged = RULE.replace('@hyperparameter("rho", "leak of the decay trace", low=0.0, high=1.0)\n', "")
    assert main(["run", str(_write(tmp_path, unranged, free)), "--storage", str(tmp_path / "store"), "--dry-run"]) == 0


def test_submit_ships_the_module_to_the_workers_and_beside_the_sweep(tmp_path, monkeypatch):
    from sweeps.cli import jobs
    from sweeps.spec import load_sweep

    sent = {}

    class FakeClient:
        def submit_job(self, **kw):
            sent.update(kw, staged=sorted(p.name for p in Path(kw["runtime_env"]["working_dir"]).iterdir()))
            return "raysubmit_1"

    monkeypatch.setattr(jobs, "client", lambda address: FakeClient())
    sweep = load_sweep(_write(tmp_path))
    assert jobs.submit(sweep, "http://127.0.0.1:8265", str(tmp_path / "storage"), []) == "raysubmit_1"
    module = str((tmp_path / f"{MODULE}.py").resolve())
    assert module in sent["runtime_env"]["py_modules"] and f"{MODULE}.py" in sent["staged"]


def test_an_own_rule_of_five_hyperparameters_agrees_across_engines(tmp_path):
    """More hyperparameters than any built-in rule (the lane buffer's rows grow), unary minus and
    division: the vector kernel against the reference engine, float64."""
    import torch

    from fade_core.linear import own_learner
    from fade_core.linear.runs import advance, hyperparameter_matrix, init_state

    (tmp_path / "wide_rules.py").write_text(textwrap.dedent('''
        from fade_core.linear import exp

        def wide(x, delta, w, beta, h, gamma, g, lo, hi, alpha, a1, a2, a3, a4):
            step = alpha / (1 + a1 * x * x)
            w = w + step * delta * x - a2 * w + (-a3) * w * a4
            return w, beta, h, gamma, g
        '''))
    sys.path.insert(0, str(tmp_path))
    try:
        learner = own_learner("wide", __import__("wide_rules").wide)
    finally:
        sys.path.remove(str(tmp_path))
    steps, runs, d = 400, 11, 5
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(steps, runs, d, generator=gen, dtype=torch.float64)
    y = torch.randn(steps, runs, generator=gen, dtype=torch.float64)
    hp = hyperparameter_matrix(learner, {"alpha": 0.05, "a1": 0.3, "a2": torch.linspace(0, 0.01, runs), "a3": 0.002,
                                         "a4": 0.5}, runs, torch.float64)
    out = {}
    for engine in ("cpu", "reference"):
        state = init_state(learner, hp, torch.full((runs, d), 0.1, dtype=torch.float64))
        losses = torch.empty(runs, steps, dtype=torch.float64)
        advance(learner, hp, state, x, y, torch.arange(runs), losses, engine=engine)
        out[engine] = (losses, state.w)
    for fast, plain in zip(out["cpu"], out["reference"]):
        torch.testing.assert_close(fast, plain, rtol=1e-11, atol=0)


def test_an_entry_point_offers_a_learner_the_sweep_does_not_declare(tmp_path, monkeypatch):
    from importlib import metadata

    from sweeps.spec import load_sweep, own

    package = tmp_path / "site"
    package.mkdir()
    (package / "plugin_rules_for_test.py").write_text(RULE)
    monkeypatch.syspath_prepend(str(package))
    entry = metadata.EntryPoint("fade_leaky", "plugin_rules_for_test:fade_leaky", own.ENTRY_POINTS)
    monkeypatch.setattr(own.metadata, "entry_points", lambda group: [entry] if group == own.ENTRY_POINTS else [])
    sweep = {k: v for k, v in SWEEP.items() if k != "learners"}
    loaded = load_sweep(_write(tmp_path, RULE, sweep))
    (learner,) = loaded.learners
    assert learner.reference == "plugin_rules_for_test:fade_leaky" and learner.module_file == ""
    assert [e.learner for e in loaded.experiments] == [None, learner]
