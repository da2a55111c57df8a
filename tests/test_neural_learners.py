"""Every neural learner against a plain single-run PyTorch reference written here.

The reference is one `nn.Sequential` per run, autograd gradients and `torch.optim`
for the base steps (SGD, SGD(weight_decay), Adam, AdamW), with clipping and the FADE
rule of algorithms.md §2 written out per parameter. It steps one run at a time in
float64 on real streams (flips / permutations happen inside the window); the batched
learners run all configurations x seeds at once and must give every run the same numbers.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from fade_core.mlp import Architecture, BatchedMLP, default_init
from fade_core.neural import NEURAL_LEARNERS, NeuralLearner, StepSums, get_neural_learner, make_runs
from tasks.emnist import EmnistSettings, LabelPermutedStream, PartialEmnistSettings, pixels_to_inputs
from tasks.nonlinear_tracking import STUDENT as NONLINEAR
from tasks.nonlinear_tracking import NonlinearTrackingSettings, NonlinearTrackingStream
from tests.emnist_fixture import write_idx_dataset

STEPS = 300
GRIDS = {  # two configurations each, so runs with different hyperparameters share a batch
    "sgd": [{"alpha": 0.01}, {"alpha": 0.05}],
    "sgd_wd": [{"alpha": 0.01, "lambda": 0.01}, {"alpha": 0.05, "lambda": 0.1}],
    "adam": [{"alpha": 0.001}, {"alpha": 0.003}],
    "adamw": [{"alpha": 0.001, "lambda": 0.1}, {"alpha": 0.003, "lambda": 1.0}],
    "sgd_wclip": [{"alpha": 0.05, "kappa": 1.0}, {"alpha": 0.01, "kappa": 2.0}],
    "adam_wclip": [{"alpha": 0.003, "kappa": 1.0}, {"alpha": 0.001, "kappa": 2.0}],
    "fade_sgd": [{"alpha": 0.01, "theta_lambda": 2.0, "gamma0": -4.6}, {"alpha": 0.05, "theta_lambda": 0.0, "gamma0": -2.3}],
    "fade_adam": [{"alpha": 0.001, "theta_lambda": 1.0, "gamma0": -4.6}, {"alpha": 0.003, "theta_lambda": 0.0, "gamma0": -2.3}],
    "fade_sgd_all": [{"alpha": 0.01, "theta_lambda": 2.0, "gamma0": -6.9}, {"alpha": 0.05, "theta_lambda": 0.5, "gamma0": -4.6}],
}
SEEDS = (3, 8)
# Learners no preset names, combining FADE with weight decay and clipping (parts.update's order:
# FADE's decay, weight decay, base step, clipping), run from their records.
COMBINED = {
    "fade_sgd_wd_clip": NeuralLearner("fade_sgd_wd_clip", "sgd", weight_decay="coupled", clip=True, fade="head"),
    "fade_adamw_clip_all": NeuralLearner("fade_adamw_clip_all", "adam", weight_decay="decoupled", clip=True, fade="all"),
}
GRIDS["fade_sgd_wd_clip"] = [{"alpha": 0.05, "lambda": 0.01, "kappa": 1.0, "theta_lambda": 2.0, "gamma0": -4.6},
                             {"alpha": 0.01, "lambda": 0.1, "kappa": 0.5, "theta_lambda": 0.5, "gamma0": -2.3}]
GRIDS["fade_adamw_clip_all"] = [{"alpha": 0.003, "lambda": 0.1, "kappa": 1.0, "theta_lambda": 1.0, "gamma0": -4.6},
                                {"alpha": 0.001, "lambda": 1.0, "kappa": 0.5, "theta_lambda": 0.5, "gamma0": -6.9}]
LEARNERS = sorted(NEURAL_LEARNERS) + sorted(COMBINED)


def learner_of(optimizer: str) -> NeuralLearner:
    return COMBINED.get(optimizer) or get_neural_learner(optimizer)


# ---------------------------------------------------------------- the plain reference
def reference(optimizer: str, hp: dict, arch: Architecture, seed: int, xs: torch.Tensor, targets: torch.Tensor,
              dtype: torch.dtype = torch.float64):
    """One run, step by step (float64 unless told): per-step losses and the final state dict."""
    torch.manual_seed(seed)
    net = arch.module().to(dtype)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    params = [p for lin in linears for p in (lin.weight, lin.bias)]
    alpha = hp["alpha"]
    learner = learner_of(optimizer)
    base = learner.base
    if learner.weight_decay == "decoupled":
        opt = torch.optim.AdamW(params, lr=alpha, weight_decay=hp["lambda"])
    elif base == "adam":
        opt = torch.optim.Adam(params, lr=alpha, weight_decay=hp.get("lambda", 0.0))
    else:
        opt = torch.optim.SGD(params, lr=alpha, weight_decay=hp.get("lambda", 0.0))
    fade_on = {"none": [], "head": params[-2:], "all": params}[learner.fade]
    gamma = {id(p): torch.full_like(p, hp.get("gamma0", 0.0)) for p in fade_on}
    trace = {id(p): torch.zeros_like(p) for p in fade_on}
    classification = targets.dtype == torch.int64
    losses = []
    for x, y in zip(xs.to(dtype), targets):
        inputs = []  # input of each Linear, for FADE's curvature
        h = x
        for module in net:
            if isinstance(module, nn.Linear):
                inputs.append(h.detach())
            h = module(h)
        if classification:
            loss = nn.functional.cross_entropy(h.unsqueeze(0), y.unsqueeze(0))
            p = torch.softmax(h.detach(), 0)
            head_factor = p * (1 - p)
        else:
            loss = 0.5 * ((h - y.to(dtype)) ** 2).sum()
            head_factor = None
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        with torch.no_grad():
            for layer, lin in enumerate(linears):
                for is_bias, param in enumerate((lin.weight, lin.bias)):
                    if id(param) not in gamma:
                        continue
                    head = layer == len(linears) - 1
                    q = torch.ones_like(param) if is_bias else (inputs[layer] ** 2).expand_as(param)
                    if head and head_factor is not None:
                        q = q * (head_factor if is_bias else head_factor.unsqueeze(1))
                    if base == "sgd":
                        alpha_eff = alpha
                    else:
                        state = opt.state.get(param)
                        if not state:
                            alpha_eff = alpha
                        else:
                            k = float(state["step"])
                            alpha_eff = alpha / ((state["exp_avg_sq"] / (1 - 0.999**k)).sqrt() + 1e-8)
                    g = trace[id(param)]
                    gamma[id(param)] = (gamma[id(param)] - hp["theta_lambda"] * param.grad * g).clamp(-15, 0)
                    decay = gamma[id(param)].exp()
                    c = (1 - decay - alpha_eff * q).clamp(min=0)
                    trace[id(param)] = g * c - decay * param
                    param.mul_(1 - decay)
        opt.step()
        if learner.clip:
            with torch.no_grad():
                for lin in linears:
                    bound = hp["kappa"] / math.sqrt(lin.in_features)
                    lin.weight.clamp_(-bound, bound)
                    lin.bias.clamp_(-bound, bound)
    return torch.tensor(losses, dtype=torch.float64), net.state_dict(), gamma


# ---------------------------------------------------------------- streams for the tests
def nonlinear_data(seed: int):
    """300 steps with the fast outputs flipping every 40 steps, the slow ones every 120."""
    settings = NonlinearTrackingSettings(steps=STEPS, score_window=100, period=40, slow_multiplier=3, bin=100)
    return NonlinearTrackingStream(settings, seed).chunk(0, STEPS)


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory):
    return write_idx_dataset(tmp_path_factory.mktemp("emnist"), images=600)


def emnist_data(data_dir, seed: int, partial: bool = False):
    """300 steps with a new label permutation every 70."""
    kind = PartialEmnistSettings if partial else EmnistSettings
    settings = kind(steps=STEPS, period=70, data_dir=str(data_dir), split="balanced", train=True, bin=100)
    stream = LabelPermutedStream(settings, seed)
    index, labels = stream.chunk(0, STEPS)
    return stream.inputs(index, torch.device("cpu"), torch.float64), labels


def batched(optimizer: str, arch, data, dtype, compiled: str, device: str = "cpu"):
    """All configurations x seeds of GRIDS[optimizer] in one batch on engine `compiled`, one
    `advance` call per step, over the steps of `data`: per-step losses [T, R] and the runs."""
    grid = GRIDS[optimizer]
    seeds = [s for _ in grid for s in SEEDS]
    hp = {k: [c[k] for c in grid for _ in SEEDS] for k in grid[0]}
    loss = "cross_entropy" if data[SEEDS[0]][1].dtype == torch.int64 else "squared_error"
    runs = make_runs(learner_of(optimizer), arch, seeds, hp, loss, device, dtype=dtype, engine=compiled)
    xs = torch.stack([data[s][0] for s in seeds], dim=1).to(device, dtype)
    ys = torch.stack([data[s][1] for s in seeds], dim=1).to(device)
    ys = ys if ys.dtype == torch.int64 else ys.to(dtype)
    sums = StepSums.zeros(len(seeds), arch, loss, device)
    losses = []
    for t in range(xs.shape[0]):
        sums.reset()
        runs.advance(xs[t : t + 1], ys[t : t + 1], torch.arange(len(seeds), device=device), sums)
        losses.append(sums.loss.clone().cpu())
    return torch.stack(losses), runs, grid, seeds


_REFERENCES: dict[tuple, tuple] = {}


def _digest(t: torch.Tensor) -> tuple:
    return t.dtype, tuple(t.shape), hashlib.sha1(t.contiguous().numpy().tobytes()).hexdigest()


def float64_reference(optimizer: str, hp: dict, arch: Architecture, seed: int, xs: torch.Tensor, targets: torch.Tensor):
    """`reference` in float64, computed once per process for the same run and stream: every engine and both
    dtypes compare with the same plain runs, and the plain loop is most of a test's time. (Callers only read it.)"""
    key = (optimizer, tuple(sorted(hp.items())), arch, seed, _digest(xs), _digest(targets))
    if key not in _REFERENCES:
        _REFERENCES[key] = reference(optimizer, hp, arch, seed, xs, targets)
    return _REFERENCES[key]


def check_against_reference(optimizer, arch, data, dtype, rtol, atol, compiled="cpu", device="cpu"):
    losses, runs, grid, seeds = batched(optimizer, arch, data, dtype, compiled, device)
    for r, seed in enumerate(seeds):
        hp = grid[r // len(SEEDS)]
        ref_losses, ref_state, ref_gamma = float64_reference(optimizer, hp, arch, seed, *data[seed])
        torch.testing.assert_close(losses[:, r].double(), ref_losses, rtol=rtol, atol=atol)
        for name, value in runs.net.run_state_dict(r).items():
            torch.testing.assert_close(value.double().cpu(), ref_state[name], rtol=rtol, atol=atol, msg=lambda m, n=name, r=r: f"{optimizer} run {r} {n}: {m}")
        if ref_gamma:
            head = list(ref_gamma.values())[-2]
            torch.testing.assert_close(runs.head_decay()[0][r].double().cpu(), head.exp(), rtol=rtol, atol=atol)


ENGINES = {"compiled-cpu": "cpu", "torch-ops": "torch"}  # test id -> engine name


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("optimizer", LEARNERS)
def test_nonlinear_float64_matches_reference(optimizer, engine):
    data = {s: nonlinear_data(s) for s in SEEDS}
    check_against_reference(optimizer, NONLINEAR, data, torch.float64, rtol=1e-7, atol=1e-8, compiled=ENGINES[engine])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("optimizer", LEARNERS)
def test_emnist_float64_matches_reference(optimizer, engine, emnist_dir):
    arch = Architecture((784, 30, 20, 47), negative_slope=0.01)  # narrow hidden layers: same code, quicker reference
    data = {s: emnist_data(emnist_dir, s, partial=learner_of(optimizer).adapts_decay) for s in SEEDS}
    check_against_reference(optimizer, arch, data, torch.float64, rtol=1e-7, atol=1e-8, compiled=ENGINES[engine])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("optimizer", LEARNERS)
def test_float32_matches_reference_to_float32_tolerance(optimizer, engine):
    data = {s: nonlinear_data(s) for s in SEEDS}
    check_against_reference(optimizer, NONLINEAR, data, torch.float32, rtol=2e-4, atol=2e-5, compiled=ENGINES[engine])


# ---------------------------------------------------------------- float32/float64 details vs torch itself
def one_run(optimizer, hp, arch, x, y, dtype, compiled, state=None):
    """One run (seed 3, or starting from `state`) of the batched learner over x ([T, in]) and y:
    its final state dict."""
    loss = "cross_entropy" if y.dtype == torch.int64 else "squared_error"
    runs = make_runs(optimizer, arch, [3], {k: [v] for k, v in hp.items()}, loss, dtype=dtype, engine=compiled)
    if state is not None:
        runs.net.load_run_state_dict(0, state)
    y = y if y.dtype == torch.int64 else y.to(dtype)
    runs.advance(x.to(dtype).unsqueeze(1), y.unsqueeze(1), torch.zeros(1, dtype=torch.int64), StepSums.zeros(1, arch, loss, "cpu"))
    return runs.net.run_state_dict(0)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("alpha, lam", [(1e-4, 1e-4), (1e-3, 1e-4), (1e-3, 3e-4)])
def test_sgd_wd_float32_small_decay_as_torch_optim_sgd(alpha, lam, engine):
    """sgd_wd is torch.optim.SGD(weight_decay=lambda): P <- P - alpha * (G + lambda * P) per element.
    A shrink factor 1 - alpha * lambda rounds in float32 to a multiple of 2^-24: at
    alpha * lambda = 1e-8 the decay vanished, at 1e-7 it was 19% too large. Over 50 float32 steps
    the learner must match torch.optim, show the decay (differ from lambda = 0), and on W0's
    columns whose input is always 0 (no gradient: the decay alone moves them) agree bit for bit."""
    x, y = nonlinear_data(3)
    x, y = x[:50].float().clone(), y[:50].float()
    x[:, :8] = 0
    compiled = ENGINES[engine]
    got = one_run("sgd_wd", {"alpha": alpha, "lambda": lam}, NONLINEAR, x, y, torch.float32, compiled)
    without = one_run("sgd_wd", {"alpha": alpha, "lambda": 0.0}, NONLINEAR, x, y, torch.float32, compiled)
    _, ref, _ = reference("sgd_wd", {"alpha": alpha, "lambda": lam}, NONLINEAR, 3, x, y, dtype=torch.float32)
    for name, value in got.items():
        torch.testing.assert_close(value, ref[name], rtol=2e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
        assert not torch.equal(value, without[name]), f"{name}: lambda * alpha = {alpha * lam:g} left no trace"
    assert torch.equal(got["0.weight"][:, :8], ref["0.weight"][:, :8])
    if alpha * lam >= 1e-7:
        assert not torch.equal(got["0.weight"][:, :8], without["0.weight"][:, :8])


@pytest.mark.parametrize("engine", ENGINES)
def test_leaky_relu_slope_follows_the_dtype(engine):
    """A float64 run's LeakyReLU backward uses the float64 0.01 (not float32's 0.0099999998, a
    relative 2e-9 off): one SGD step with alpha = 1 on a LeakyReLU network moves every weight
    by autograd's float64 gradient to 1e-12."""
    arch = Architecture((20, 16, 12, 5), negative_slope=0.01)
    gen = torch.Generator().manual_seed(4)
    x, y = torch.randn(1, 20, generator=gen, dtype=torch.float64) * 3, torch.tensor([2])
    torch.manual_seed(3)
    module = arch.module().double()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    nn.functional.cross_entropy(module(x), y).backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    negative = [(module[0](x) <= 0).sum().item(), (module[2](module[1](module[0](x))) <= 0).sum().item()]
    assert min(negative) > 0, "both hidden layers need units on the negative slope"
    got = one_run("sgd", {"alpha": 1.0}, arch, x, y, torch.float64, ENGINES[engine])
    for name, grad in grads.items():
        step = before[name] - got[name]
        torch.testing.assert_close(step, grad, rtol=1e-12, atol=1e-12 * grad.abs().max().item(), msg=lambda m, n=name: f"{n}: {m}")


def adam_first_step(param: torch.Tensor, grad: torch.Tensor, lr: float, sqrt) -> torch.Tensor:
    """torch.optim.Adam's first step on `param` (its single-tensor code, line by line), taking
    the square root with `sqrt`."""
    m = torch.zeros_like(param).lerp_(grad, 1 - 0.9)
    v = torch.zeros_like(param).mul_(0.999).addcmul_(grad, grad, value=1 - 0.999)
    denom = (sqrt(v) / (1 - 0.999) ** 0.5).add_(1e-8)
    return param.clone().addcdiv_(m, denom, value=-(lr / (1 - 0.9)))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("alpha", [1.0, 0.1, 1e-3])
def test_adam_float32_first_step_as_torch_optim_adam(alpha, engine):
    """Step 1 of Adam in float32 against torch.optim.Adam to 1e-7 relative: the bias corrections
    are computed in float64 and sqrt(v) is divided by sqrt(1 - beta2^k), as torch does (float32
    bias corrections are 1.3e-5 (1 - 0.999) and 2.4e-7 (1 - 0.9) off; multiplying by a rounded
    reciprocal differs by an ulp in a third of the weights).

    Weights, inputs and targets are small dyadic numbers, so forward and backward are exact
    whatever the summation order and every side steps with the same gradient: what is compared
    is the Adam step alone (alpha = 1 dominates the weights). The reference's lr is the run's
    float32 alpha. torch's float32 sqrt on CPUs (MKL's vector sqrt) is not correctly rounded
    (an ulp off for about 1 value in 6); the compiled kernel's is, as CUDA's: it is compared with
    torch.optim.Adam's step written out with a correctly rounded sqrt, itself checked against
    torch.optim.Adam with torch's sqrt."""
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(3)
    module = NONLINEAR.module()
    state = {k: torch.randint(-8, 9, v.shape, generator=gen).float() / 16 for k, v in module.state_dict().items()}
    module.load_state_dict(state)
    x = torch.randint(-2, 3, (1, NONLINEAR.sizes[0]), generator=gen).float()
    y = torch.randint(-512, 513, (1, NONLINEAR.sizes[-1]), generator=gen).float() / 256
    lr = float(torch.tensor(alpha, dtype=torch.float32))
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    (0.5 * ((module(x[0]) - y[0]) ** 2).sum()).backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    assert all(g.abs().max() > 0 for g in grads.values())
    opt.step()
    want = module.state_dict()
    for name, grad in grads.items():
        assert torch.equal(adam_first_step(state[name], grad, lr, torch.sqrt), want[name]), name
        if ENGINES[engine] == "cpu":
            want[name] = adam_first_step(state[name], grad, lr, lambda v: v.double().sqrt().float())
    got = one_run("adam", {"alpha": alpha}, NONLINEAR, x, y, torch.float32, ENGINES[engine], state)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-7, atol=0.0, msg=lambda m, n=name: f"{n}: {m}")


# ---------------------------------------------------------------- FADE head specifics
def one_step_runs(optimizer, hp, loss, x, y, arch):
    runs = make_runs(optimizer, arch, [0], {k: [v] for k, v in hp.items()}, loss, dtype=torch.float64)
    before = [p.clone() for p in runs.net.parameters()]
    cache = runs.net.forward(x)
    return runs, before, cache


def test_fade_head_curvature_and_trace_regression_and_classification():
    """After one step from g = 0: g = -l * P_old everywhere. After a second step the trace
    holds the curvature: g2 = g1 * [1 - l - alpha q]_+ - l * P1, with q = h^2 (regression
    weight), 1 (bias), times p(1-p) on a classification head."""
    arch = Architecture((5, 4, 3))
    torch.manual_seed(0)
    x = torch.randn(2, 1, 5, dtype=torch.float64)
    for loss, y in (("squared_error", torch.randn(2, 1, 3, dtype=torch.float64)), ("cross_entropy", torch.tensor([[2], [0]]))):
        hp = {"alpha": 0.3, "theta_lambda": 0.0, "gamma0": -1.0}
        runs = make_runs("fade_sgd", arch, [0], {k: [v] for k, v in hp.items()}, loss, dtype=torch.float64, engine="torch")
        w_head0 = runs.net.weights[-1].clone()
        runs.engine.step(x[0], y[0])
        decay = math.exp(-1.0)
        torch.testing.assert_close(runs.trace[2], -decay * w_head0)
        g1, w1, b1 = runs.trace[2].clone(), runs.net.weights[-1].clone(), runs.net.biases[-1].clone()
        gb1 = runs.trace[3].clone()
        cache = runs.net.forward(x[1])
        h = cache.inputs[-1]
        if loss == "squared_error":
            factor = torch.ones(1, 3, dtype=torch.float64)
        else:
            p = torch.softmax(cache.output, 1)
            factor = p * (1 - p)
        q_w = factor.unsqueeze(2) * (h**2).unsqueeze(1)
        runs.engine.step(x[1], y[1])
        torch.testing.assert_close(runs.trace[2], g1 * (1 - decay - 0.3 * q_w).clamp(min=0) - decay * w1)
        torch.testing.assert_close(runs.trace[3], gb1 * (1 - decay - 0.3 * factor).clamp(min=0) - decay * b1)


@pytest.mark.parametrize("engine", ENGINES)
def test_gamma_is_clamped_to_minus_15_and_0(engine):
    arch = Architecture((5, 4, 3))
    torch.manual_seed(1)
    hp = {"alpha": [0.1, 0.1], "theta_lambda": [1e4, 1e4], "gamma0": [-14.9, -0.1]}
    runs = make_runs("fade_sgd", arch, [0, 0], hp, "squared_error", dtype=torch.float64, engine=ENGINES[engine])
    x, y = torch.randn(20, 2, 5, dtype=torch.float64), torch.randn(20, 2, 3, dtype=torch.float64)
    runs.advance(x, y, torch.arange(2), StepSums.zeros(2, arch, "squared_error", "cpu"))
    gamma = runs.gamma[2]
    assert gamma.min() >= -15.0 and gamma.max() <= 0.0
    assert (gamma == -15.0).any() and (gamma == 0.0).any(), "a huge meta step must drive some rates onto both bounds"


def test_fade_adam_uses_v_hat_from_before_the_adam_update():
    """With theta_lambda > 0 the gamma update of step 3 reads g of step 2, whose c used
    alpha / (sqrt(v_hat_1) + eps): v_hat before step 2's Adam update. Using v after it
    (or alpha on every step) changes the numbers: the reference above encodes the
    former; here the two wrong variants must disagree with the learner."""
    arch = Architecture((5, 4, 3))
    torch.manual_seed(2)
    xs, ys = torch.randn(3, 1, 5, dtype=torch.float64), torch.randn(3, 1, 3, dtype=torch.float64)
    hp = {"alpha": [0.05], "theta_lambda": [0.0], "gamma0": [-1.0]}
    runs = make_runs("fade_adam", arch, [0], hp, "squared_error", dtype=torch.float64, engine="torch")
    runs.engine.step(xs[0], ys[0])
    g1 = runs.trace[2].clone()
    v_before = runs.adam_v[2].clone() / (1 - 0.999)
    cache = runs.net.forward(xs[1])
    q = (cache.inputs[-1] ** 2).unsqueeze(1)
    w1 = runs.net.weights[-1].clone()
    runs.engine.step(xs[1], ys[1])
    decay = math.exp(-1.0)
    right = g1 * (1 - decay - 0.05 / (v_before.sqrt() + 1e-8) * q).clamp(min=0) - decay * w1
    torch.testing.assert_close(runs.trace[2], right)
    v_after = runs.adam_v[2] / (1 - 0.999**2)
    wrong = g1 * (1 - decay - 0.05 / (v_after.sqrt() + 1e-8) * q).clamp(min=0) - decay * w1
    assert not torch.allclose(wrong, right)


def test_theta_lambda_zero_is_fixed_head_decay():
    """theta_lambda = 0 keeps gamma at gamma0: the head decays by exp(gamma0) every step,
    the hidden layers not at all (plain SGD)."""
    data = {s: nonlinear_data(s) for s in SEEDS}
    hp = {"alpha": 0.01, "theta_lambda": 0.0, "gamma0": -3.0}
    runs = make_runs("fade_sgd", NONLINEAR, [3], {k: [v] for k, v in hp.items()}, "squared_error", dtype=torch.float64,
                     engine="torch")
    sgd = make_runs("sgd", NONLINEAR, [3], {"alpha": [0.01]}, "squared_error", dtype=torch.float64, engine="torch")
    x, y = data[3]
    runs.engine.step(x[:1].double(), y[:1].double())
    sgd.engine.step(x[:1].double(), y[:1].double())
    assert torch.all(runs.gamma[2] == -3.0)
    torch.testing.assert_close(runs.net.weights[0], sgd.net.weights[0])
    grad_step = sgd.net.weights[1] - default_init(NONLINEAR, 3)[1][0].double()
    torch.testing.assert_close(runs.net.weights[1], (1 - math.exp(-3.0)) * default_init(NONLINEAR, 3)[1][0].double() + grad_step)


# ---------------------------------------------------------------- networks
def test_default_init_and_state_dict_round_trip():
    arch = Architecture((784, 300, 150, 47), negative_slope=0.01)
    net = BatchedMLP.from_seeds(arch, [5, 7, 5])
    torch.manual_seed(7)
    module = arch.module()
    for name, value in module.state_dict().items():
        assert torch.equal(net.run_state_dict(1)[name], value), name
    assert torch.equal(net.weights[0][0], net.weights[0][2]) and not torch.equal(net.weights[0][0], net.weights[0][1])
    x = torch.randn(3, 784)
    torch.testing.assert_close(net.forward(x).output[1], module(x[1]))
    edited = {k: v * 2 for k, v in module.state_dict().items()}
    net.load_run_state_dict(0, edited)
    module.load_state_dict(edited)
    torch.testing.assert_close(net.forward(x).output[0], module(x[0]))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_diverging_run_does_not_touch_its_neighbours(engine):
    """Run 0 diverges to inf/NaN; run 1, sharing its batch and stream, stays bit-identical
    to the same run alone (losses and final weights)."""
    arch = NONLINEAR
    x, y = (t[:50].unsqueeze(1).float() for t in nonlinear_data(3))  # [T, 1 slot, ...]
    compiled = ENGINES[engine]
    runs = make_runs("sgd", arch, [3, 3], {"alpha": [1e4, 0.01]}, "squared_error", engine=compiled)
    alone = make_runs("sgd", arch, [3], {"alpha": [0.01]}, "squared_error", engine=compiled)
    sums, sums_alone = StepSums.zeros(2, arch, "squared_error", "cpu"), StepSums.zeros(1, arch, "squared_error", "cpu")
    runs.advance(x, y, torch.zeros(2, dtype=torch.int64), sums)
    alone.advance(x, y, torch.zeros(1, dtype=torch.int64), sums_alone)
    assert not torch.isfinite(sums.loss[0]) and not torch.isfinite(runs.net.flat[0]).all()
    for got, want in zip(sums.tensors(), sums_alone.tensors()):
        assert torch.equal(got[1:], want)
    assert torch.equal(runs.net.flat[1:], alone.net.flat)


@pytest.mark.parametrize("optimizer", list(GRIDS))
def test_every_learner_is_chunk_and_pack_invariant_bit_for_bit(optimizer):
    """The compiled kernel fuses each layer's update with a forward or backward product; a
    run's numbers must still not depend on how its steps are segmented nor on which runs
    share its pack: one 60-step call alone vs segments of 1, 22 and 37 steps beside another
    configuration, float32, a two-hidden-layer LeakyReLU classifier."""
    arch = Architecture((12, 10, 8, 5), negative_slope=0.01)
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(60, 1, 12, generator=gen), torch.randint(0, 5, (60, 1), generator=gen)
    grid = GRIDS[optimizer]
    alone = make_runs(learner_of(optimizer), arch, [3], {k: [v] for k, v in grid[0].items()}, "cross_entropy")
    pair = make_runs(learner_of(optimizer), arch, [8, 3], {k: [grid[1][k], grid[0][k]] for k in grid[0]}, "cross_entropy")
    sums, pair_sums = StepSums.zeros(1, arch, "cross_entropy", "cpu"), StepSums.zeros(2, arch, "cross_entropy", "cpu")
    alone.advance(x, y, torch.zeros(1, dtype=torch.int64), sums)
    for lo, hi in ((0, 1), (1, 23), (23, 60)):
        pair.advance(x[lo:hi], y[lo:hi], torch.zeros(2, dtype=torch.int64), pair_sums)
    for name, tensor in alone.state_dict().items():
        if tensor.dim() > 0 and tensor.shape[0] == 1:
            assert torch.equal(pair.state_dict()[name][1:], tensor), name
    assert torch.equal(pair.net.flat[1:], alone.net.flat) and torch.isfinite(alone.net.flat).all()
    for got, want in zip(pair_sums.tensors(), sums.tensors()):
        assert torch.equal(got[1:], want)


# ---------------------------------------------------------------- the registry
LIGHT_IMPORT = """
import sys, types
package = types.ModuleType("fade_core")  # fade_core/__init__ itself is not under test here
package.__path__ = [sys.argv[1]]
sys.modules["fade_core"] = package
from fade_core.neural import NEURAL_LEARNERS
assert "fade_sgd" in NEURAL_LEARNERS
print(sorted(m for m in sys.modules if m in ("torch", "numba") or m.startswith("fade_core.")))
import fade_core.neural
print(fade_core.neural.make_runs.__module__, "torch" in sys.modules, "numba" in sys.modules)  # numba: with the cpu engine
"""


def test_registry_import_loads_neither_torch_nor_numba():
    """`from fade_core.neural import NEURAL_LEARNERS` (a sweep's validation, the command line)
    loads rules.py, the plain parts it takes its constants from (parts.py, rulebind.py) and the
    learner model it reads hyperparameters with (learner.py, hyperparameters.py) only;
    the torch/numba exports load when first asked for. A fresh
    interpreter, so no other test's imports count."""
    package = Path(__file__).resolve().parents[1] / "fade_core"
    out = subprocess.run([sys.executable, "-c", LIGHT_IMPORT, str(package)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["['fade_core.hyperparameters', 'fade_core.learner', 'fade_core.neural', "
                                       "'fade_core.neural.parts', 'fade_core.neural.rules', 'fade_core.rulebind']",
                                     "fade_core.neural.runs True False"]


def test_unknown_attribute_of_the_lazy_package_is_an_attribute_error():
    import fade_core.neural

    with pytest.raises(AttributeError, match="has no attribute 'NeuralRun'"):
        fade_core.neural.NeuralRun  # noqa: B018
    assert {"make_runs", "NeuralRuns", "NEURAL_LEARNERS"} <= set(dir(fade_core.neural))


@pytest.mark.parametrize("parts", [{"weight_decay": "coupled"}, {"weight_decay": "decoupled"}, {"clip": True}])
@pytest.mark.parametrize("fade", ["head", "all"])
def test_registry_takes_fade_with_weight_decay_or_clipping(fade, parts):
    """Every engine applies every part on FADE's parameters (parts.update), so such a learner
    exists, with the hyperparameters of all its parts (COMBINED runs two of them)."""
    learner = NeuralLearner("fade_mixed", "sgd", fade=fade, **parts)
    assert learner.hyperparameters == ("alpha",) + ("lambda",) * ("weight_decay" in parts) + ("kappa",) * ("clip" in parts) + (
        "theta_lambda", "gamma0")


def test_registry_refuses_unknown_parts_and_names():
    with pytest.raises(ValueError, match="base must be one of sgd, adam, not 'rmsprop'"):
        NeuralLearner("rmsprop", "rmsprop")
    with pytest.raises(ValueError, match="fade must be one of"):
        NeuralLearner("fade_body", "sgd", fade="body")
    with pytest.raises(ValueError, match="unknown neural optimizer 'fade'; choose one of sgd, "):
        get_neural_learner("fade")
    with pytest.raises(ValueError, match="unknown neural optimizer 'idbd'"):
        make_runs("idbd", Architecture((5, 4, 3)), [0], {"alpha": [0.1]}, "squared_error")


def test_hyperparameters_follow_from_the_parts():
    assert {name: learner.hyperparameters for name, learner in NEURAL_LEARNERS.items()} == {
        "sgd": ("alpha",), "sgd_wd": ("alpha", "lambda"), "adam": ("alpha",), "adamw": ("alpha", "lambda"),
        "sgd_wclip": ("alpha", "kappa"), "adam_wclip": ("alpha", "kappa"),
        "fade_sgd": ("alpha", "theta_lambda", "gamma0"), "fade_adam": ("alpha", "theta_lambda", "gamma0"),
        "fade_sgd_all": ("alpha", "theta_lambda", "gamma0"),
    }


def test_pixels_are_normalised_to_minus_one_one():
    torch.testing.assert_close(pixels_to_inputs(torch.tensor([0, 255], dtype=torch.uint8)), torch.tensor([-1.0, 1.0]))
