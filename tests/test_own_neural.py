"""A neural learner of the researcher's own (`learners:` block, a base step in parts.py's form): run on
the embedded Ray equal to a plain per-run loop written here, read back without its module, resumed and
confirmed only with the base step the store recorded, and a bad base step refused before anything runs."""

import math
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from fade_core.mlp import Architecture
from sweeps.cli import main
from sweeps.store import Store
from tasks import make_stream
from tasks.nonlinear_tracking import STUDENT
from tests.own_sweeps import finished_sweep, read_without_the_module, resume_and_confirm, write_sweep

MODULE = "rms_parts_for_test"
PART = (Path(__file__).resolve().parents[1] / "benchmarks" / "own_parts.py").read_text()  # docs/own-learners.md's example
SETTINGS = {"steps": 240, "score_window": 80, "bin": 80, "period": 40, "slow_multiplier": 3}
SEEDS = 2
GRID = {"alpha": 0.002, "rho": [0.9, 0.99], "eps": 1e-6, "theta_lambda": 1.0, "gamma0": -4.6}
SWEEP = {"name": "rms", "task": "nonlinear_tracking", "task_settings": SETTINGS, "seeds": SEEDS,
         "learners": {"rmsprop_fade": {"base": f"{MODULE}:rmsprop", "fade": "head"}},
         "optimizers": {"sgd": {"alpha": 0.01}, "rmsprop_fade": GRID}}


def _plain_score(seed: int, alpha: float, rho: float, eps: float, theta_lambda: float, gamma0: float,
                 wd: float = 0.0, kappa: float = math.inf, arch: Architecture = STUDENT, data=None, fade: bool = True,
                 decoupled: bool = False) -> float:
    """One run, step by step in float64: autograd gradients, FADE on the head as algorithms.md §2 writes it
    (`fade`), then RMSprop (v = rho v + (1 - rho) g^2; w -= alpha g / (sqrt(v) + eps)), L2 in the gradient (wd;
    `decoupled`: w *= 1 - alpha wd before the step, as AdamW) and clipping to kappa / sqrt(fan_in); the score is
    the mean squared error of the last score_window steps."""
    steps = SETTINGS["steps"]
    if data is None:
        chunk = make_stream("nonlinear_tracking", SETTINGS, seed).chunk(0, steps)
        data = torch.as_tensor(chunk.x, dtype=torch.float64), torch.as_tensor(chunk.y, dtype=torch.float64)
    torch.manual_seed(seed)
    net = arch.module().to(torch.float64)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    params = [p for lin in linears for p in (lin.weight, lin.bias)]
    head = {id(p) for p in params[-2:]}
    gamma = {id(p): torch.full_like(p, gamma0) for p in params[-2:]}
    trace = {id(p): torch.zeros_like(p) for p in params[-2:]}
    square = {id(p): torch.zeros_like(p) for p in params}
    errors = []
    for x, y in zip(*data):
        inputs, h = [], x
        for module in net:
            if isinstance(module, nn.Linear):
                inputs.append(h.detach())
            h = module(h)
        loss = 0.5 * ((h - y) ** 2).sum()
        errors.append(((h.detach() - y) ** 2).mean().item())
        net.zero_grad()
        loss.backward()
        with torch.no_grad():
            for index, param in enumerate(params):
                grad = param.grad
                if id(param) in head and fade:
                    q = torch.ones_like(param) if index % 2 else (inputs[-1] ** 2).expand_as(param)
                    g = trace[id(param)]
                    gamma[id(param)] = (gamma[id(param)] - theta_lambda * grad * g).clamp(-15, 0)
                    decay = gamma[id(param)].exp()
                    trace[id(param)] = g * (1 - decay - alpha * q).clamp(min=0) - decay * param
                    param.mul_(1 - decay)
                if decoupled:
                    param.mul_(1 - alpha * wd)
                else:
                    grad = grad + wd * param
                square[id(param)] = rho * square[id(param)] + (1 - rho) * grad * grad
                param.sub_(alpha * grad / (square[id(param)].sqrt() + eps))
                bound = kappa / math.sqrt(linears[index // 2].in_features)
                param.clamp_(-bound, bound)
    return sum(errors[-SETTINGS["score_window"]:]) / SETTINGS["score_window"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    yield from finished_sweep(tmp_path_factory, MODULE, PART, SWEEP)


def test_own_base_step_equals_a_plain_per_run_loop(finished):
    _, _, results = finished
    scores = Store.open(results).scan("scores").collect()
    own = scores.filter(optimizer="rmsprop_fade")
    assert own.height == len(GRID["rho"]) * SEEDS and own["rho"].dtype.is_float() and own["eps"].dtype.is_float()
    for row in own.iter_rows(named=True):
        expected = _plain_score(row["seed"], 0.002, row["rho"], 1e-6, 1.0, -4.6)
        assert row["score"] == pytest.approx(expected, rel=1e-9)
    assert scores.filter(optimizer="sgd")["rho"].is_null().all()


def test_readers_never_import_the_base_step(finished, capsys):
    root, sweep, results = finished
    assert "rho=" in read_without_the_module(root, sweep, results, MODULE, capsys)


def test_resume_and_confirm_take_the_recorded_base_step(finished, capsys):
    root, sweep, results = finished
    changed = PART.replace("(1 - rho) * grad * grad", "(1 - rho) * (grad * grad)")
    resume_and_confirm(root, sweep, results, MODULE, PART, changed, capsys, SWEEP)


@pytest.mark.parametrize("parts", [{"weight_decay": "coupled", "clip": True, "fade": "head"},
                                   {"weight_decay": "decoupled", "clip": True, "fade": "none"}])
def test_engines_run_the_base_step_with_every_built_in_part(parts, tmp_path, monkeypatch):
    """The CPU kernel and the torch ops against the plain loop: FADE, L2 in the gradient and clipping around
    the researcher's RMSprop (the CPU kernel's general row), or decoupled decay and clipping (its own-step rows),
    two configurations sharing a pack, float64."""
    from fade_core.neural import StepSums, make_runs, own_learner

    (tmp_path / "engine_parts_for_test.py").write_text(PART)
    monkeypatch.syspath_prepend(str(tmp_path))
    rule = __import__("engine_parts_for_test").rmsprop
    learner = own_learner("rms_all", rule, **parts)  # (one name, other parts: another learner)
    arch, steps, window = Architecture((6, 16, 3)), 120, SETTINGS["score_window"]
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(steps, 1, 6, generator=gen, dtype=torch.float64)
    y = torch.randn(steps, 1, 3, generator=gen, dtype=torch.float64)
    configs = [dict(alpha=0.01, rho=0.9, eps=1e-3, theta_lambda=1.0, gamma0=-3.0, wd=0.01, kappa=0.5),
               dict(alpha=0.003, rho=0.5, eps=1e-6, theta_lambda=0.5, gamma0=-4.6, wd=0.1, kappa=2.0)]
    hp = {name: [c["wd" if name == "lambda" else name] for c in configs] for name in learner.hyperparameters}
    plain = [_plain_score(seed, **c, arch=arch, data=(x[:, 0], y[:, 0]), fade=parts["fade"] == "head",
                          decoupled=parts["weight_decay"] == "decoupled") for seed, c in zip((1, 2), configs)]
    for engine in ("cpu", "torch"):
        runs = make_runs(learner, arch, [1, 2], hp, "squared_error", dtype=torch.float64, engine=engine)
        sums = StepSums.zeros(2, arch, "squared_error", "cpu")
        runs.advance(x[:-window], y[:-window], torch.zeros(2, dtype=torch.int64), sums)
        sums.reset()
        runs.advance(x[-window:], y[-window:], torch.zeros(2, dtype=torch.int64), sums)
        got = (sums.sq_error.sum(dim=1) / (arch.sizes[-1] * window)).tolist()
        assert got == pytest.approx(plain, rel=1e-9), engine


_BASE = SWEEP["learners"]["rmsprop_fade"]
BAD = {
    "no module": ({"base": "nowhere_parts:rmsprop"}, PART, "no module nowhere_parts"),
    "no function": ({"base": f"{MODULE}:missing"}, PART, "has no function missing"),
    "signature": ({}, PART.replace("(w, grad, v, alpha", "(grad, w, v, alpha"), "not in the documented form"),
    "state named as a hyperparameter": ({}, PART.replace("v", "kappa").replace("sqrt(kappa)", "sqrt(kappa)"),
                                        "not in the documented form"),
    "branch": ({}, PART.replace("    return", "    if v > 1:\n        v = 1\n    return"), "a Python branch on a value"),
    "python max": ({}, PART.replace("sqrt(v) + eps", "max(sqrt(v), eps)"), "unknown function max"),
    "unknown function": ({}, PART.replace("sqrt(v)", "abs(v)"), "unknown function abs"),
    "return": ({}, PART.replace("+ eps), v", "+ eps)"), "must end with `return w, v`"),
    "column clash": ({}, PART.replace("rho", "seed"), "clashes with a column of the store"),
    "learner clash": ({}, PART.replace("rho", "adam"), "clashes with a built-in learner's name"),
    "part clash": ({"clip": True}, PART.replace("rho", "kappa"), "one of the learner's other parts'"),
    "unknown key": ({"momentum": 0.9}, PART, "unknown key; a neural learner takes base, weight_decay, clip, fade"),
    "unknown part": ({"fade": "some"}, PART, "must be one of none, head, all"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_base_step_is_one_line_exit_2_nothing_written(case, tmp_path, capsys):
    change, part, message = BAD[case]
    rename = {"column clash": "seed", "learner clash": "adam", "part clash": "kappa"}.get(case, "rho")
    grid = {rename if k == "rho" else k: v for k, v in GRID.items()}
    if case == "part clash":
        grid["kappa"] = 1.0
    sweep = {**SWEEP, "learners": {"rmsprop_fade": {**_BASE, **change}}, "optimizers": {"rmsprop_fade": grid}}
    path = write_sweep(tmp_path, MODULE, part, sweep)
    assert main(["run", str(path), "--storage", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err
    assert not (tmp_path / "store").exists()
    if case in ("signature", "branch", "python max", "unknown function", "return"):
        assert f"{MODULE}.py:" in err  # names the line


def test_a_comparison_is_a_value_in_where(tmp_path, monkeypatch):
    """where(grad > 0, ...) and maximum are the parts' choices: the CPU kernel and the torch ops agree on a
    sign-dependent step (float64, bit for bit up to the products' order)."""
    from fade_core.neural import StepSums, make_runs, own_learner

    (tmp_path / "sign_parts_for_test.py").write_text(textwrap.dedent('''
        from fade_core.neural import maximum, where

        def signed(w, grad, alpha, up):
            return w - where(grad > 0, alpha * up, alpha) * grad / maximum(up, 1)
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    learner = own_learner("signed", __import__("sign_parts_for_test").signed)
    assert learner.hyperparameters == ("alpha", "up") and learner.state_slots == 0
    arch = Architecture((4, 8, 2))
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(50, 1, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(50, 1, 2, generator=gen, dtype=torch.float64)
    losses = {}
    for engine in ("cpu", "torch"):
        runs = make_runs(learner, arch, [4, 5], {"alpha": [0.02, 0.01], "up": [0.5, 3.0]}, "squared_error",
                         dtype=torch.float64, engine=engine)
        sums = StepSums.zeros(2, arch, "squared_error", "cpu")
        runs.advance(x, y, torch.zeros(2, dtype=torch.int64), sums)
        losses[engine] = sums.loss
    torch.testing.assert_close(losses["cpu"], losses["torch"], rtol=1e-12, atol=0)
    assert losses["cpu"][0] != losses["cpu"][1]


def test_an_entry_point_offers_a_neural_learner(tmp_path, monkeypatch):
    """An installed package's entry point names a dict of the `learners:` block's keys: the sweep uses the learner
    without declaring it, and the store will record its base step as an importable module (no file beside the sweep)."""
    from importlib import metadata

    from sweeps.spec import load_sweep, own

    package = tmp_path / "site"
    package.mkdir()
    offered = 'RMSPROP_FADE = {"base": "plugin_parts_for_test:rmsprop", "fade": "head", "clip": True}\n'
    (package / "plugin_parts_for_test.py").write_text(PART + offered)
    monkeypatch.syspath_prepend(str(package))
    entry = metadata.EntryPoint("rmsprop_fade", "plugin_parts_for_test:RMSPROP_FADE", own.ENTRY_POINTS)
    monkeypatch.setattr(own.metadata, "entry_points", lambda group: [entry] if group == own.ENTRY_POINTS else [])
    sweep = {k: v for k, v in SWEEP.items() if k != "learners"}
    loaded = load_sweep(write_sweep(tmp_path, "unused_module_for_test", "", {**sweep, "optimizers": {
        **sweep["optimizers"], "rmsprop_fade": {**GRID, "kappa": 1.0}}}))
    (learner,) = loaded.learners
    assert (learner.family, learner.reference, learner.module_file) == ("neural", "plugin_parts_for_test:rmsprop", "")
    assert dict(learner.parts) == {"fade": "head", "clip": True} and "def rmsprop" in learner.source
    assert learner.hyperparameters == ("alpha", "rho", "eps", "kappa", "theta_lambda", "gamma0")
    assert {e.optimizer: e.learner for e in loaded.experiments} == {"sgd": None, "rmsprop_fade": learner}
