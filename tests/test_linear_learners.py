"""Every linear learner against a plain per-run float64 loop written here from algorithms.md §1."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fade_core.linear import LINEAR_LEARNERS, LinearLearner, get_linear_learner, initial_weights, run_linear


def reference(name: str, hp: dict[str, float], x: np.ndarray, y: np.ndarray, w0: np.ndarray, clamp=(-math.inf, math.inf)):
    """One run, one step at a time, float64, the rows of algorithms.md §1 verbatim."""
    d = x.shape[1]
    w = w0.astype(np.float64).copy()
    h = np.zeros(d)
    g = np.zeros(d)
    beta = np.full(d, hp.get("beta0", 0.0))
    gamma = np.full(d, hp.get("gamma0", 0.0))
    pos = lambda z: np.maximum(z, 0.0)  # noqa: E731  [z]+
    losses = []
    for xt, yt in zip(x, y):
        delta = yt - w @ xt
        losses.append(delta**2)
        w_old = w
        if name == "sgd":
            w = w + hp["alpha"] * delta * xt
        elif name == "sgd_wd":
            w = (1 - hp["lambda"]) * w + hp["alpha"] * delta * xt
        elif name == "idbd":
            beta = beta + hp["theta_alpha"] * delta * xt * h
            a = np.exp(beta)
            w = w + a * delta * xt
            h = h * pos(1 - a * xt**2) + a * delta * xt
        elif name == "idbd_wd":
            lam = hp["lambda"]
            beta = beta + hp["theta_alpha"] * delta * xt * h
            a = np.exp(beta)
            w = (1 - lam) * w + a * delta * xt
            h = h * pos(1 - lam - a * xt**2) + a * delta * xt
        elif name == "fade":
            alpha = hp["alpha"]
            gamma = np.clip(gamma + hp["theta_lambda"] * delta * xt * g, *clamp)
            l = np.exp(gamma)
            g = g * pos(1 - l - alpha * xt**2) - l * w_old
            w = (1 - l) * w_old + alpha * delta * xt
        elif name == "fade_idbd":
            th = hp["theta"]
            beta = beta + th * delta * xt * h
            a = np.exp(beta)
            gamma = np.clip(gamma + th * delta * xt * g, *clamp)
            l = np.exp(gamma)
            c = pos(1 - l - a * xt**2)
            h = h * c + a * delta * xt
            g = g * c - l * w_old
            w = (1 - l) * w_old + a * delta * xt
        elif name == "coupled":
            th = hp["theta"]
            beta = beta + th * delta * xt * h
            a = np.exp(beta)
            gamma = np.clip(gamma + th * delta * xt * g, *clamp)
            l = np.exp(gamma)
            c = pos(1 - a * l - a * xt**2)
            h = h * c + a * delta * xt - a * l * w_old
            g = g * c - a * l * w_old
            w = (1 - a * l) * w_old + a * delta * xt
        else:
            raise AssertionError(name)
    return np.array(losses), w


# Per-run hyperparameters: each learner gets three runs with different values.
VARIED = {
    "alpha": [0.05, 0.01, 0.003],
    "lambda": [0.01, 0.001, 0.05],
    "theta_alpha": [0.01, 0.005, 0.02],
    "beta0": [-3.0, -4.6, -2.3],
    "theta_lambda": [0.01, 0.05, 0.002],
    "gamma0": [-2.3, -4.6, -1.2],
    "theta": [0.01, 0.005, 0.02],
}


def _problem(steps: int = 3000, runs: int = 3, d: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((steps, runs, d))
    w_star = rng.choice([-1.0, 1.0], size=(runs, d)) * (np.arange(d) < 5)
    y = np.einsum("trd,rd->tr", x, w_star) + 0.5 * rng.standard_normal((steps, runs))
    w0 = initial_weights(range(runs), d, torch.float64).numpy()
    return x, y, w0


@pytest.mark.parametrize("name", list(LINEAR_LEARNERS))
@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-9), (torch.float32, 2e-3)])
def test_learner_matches_per_run_reference(name, dtype, rtol):
    spec = LINEAR_LEARNERS[name]
    x, y, w0 = _problem()
    hp = {n: VARIED[n] for n in spec.hyperparameters}
    out = run_linear(name, hp, torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(w0), dtype=dtype)
    assert out.losses.dtype == dtype and out.losses.shape == (x.shape[0], 3)
    for r in range(3):
        run_hp = {n: VARIED[n][r] for n in spec.hyperparameters}
        losses, w = reference(name, run_hp, x[:, r], y[:, r], w0[r])
        assert np.isfinite(losses).all()
        got = out.losses[:, r].double().numpy()
        if dtype == torch.float64:
            np.testing.assert_allclose(got, losses, rtol=rtol, atol=1e-12)
            np.testing.assert_allclose(out.state.w[r].numpy(), w, rtol=rtol, atol=1e-12)
        else:  # float32: compare the trajectory's windowed mean loss and the final weights
            np.testing.assert_allclose(got.reshape(30, -1).mean(1), losses.reshape(30, -1).mean(1), rtol=rtol, atol=1e-5)
            np.testing.assert_allclose(out.state.w[r].double().numpy(), w, rtol=rtol, atol=1e-4)


def test_learners_really_differ():
    """Guards the reference test against a learner silently running another's rule."""
    x, y, w0 = _problem(steps=500)
    finals = {}
    for name, spec in LINEAR_LEARNERS.items():
        hp = {n: VARIED[n][0] for n in spec.hyperparameters}
        finals[name] = run_linear(name, hp, torch.from_numpy(x), torch.from_numpy(y), dtype=torch.float64).losses.sum().item()
    assert len({round(v, 6) for v in finals.values()}) == len(finals)


def test_gamma_clamp_applied_after_update():
    x, y, w0 = _problem(steps=1000, runs=1)
    hp = {"alpha": 0.05, "theta_lambda": 0.5, "gamma0": -2.3}
    clamp = (-3.0, -2.0)
    out = run_linear("fade", hp, torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(w0), dtype=torch.float64, gamma_bounds=clamp)
    losses, _ = reference("fade", hp, x[:, 0], y[:, 0], w0[0], clamp)
    np.testing.assert_allclose(out.losses[:, 0].numpy(), losses, rtol=1e-9)
    assert out.state.gamma.min() >= -3.0 and out.state.gamma.max() <= -2.0
    assert (out.state.gamma == -2.0).any() or (out.state.gamma == -3.0).any()


def test_hand_computed_fade_step():
    """One FADE step worked out by hand: d = 1, x = 2, y* = 1, w0 = 0.5."""
    hp = {"alpha": 0.1, "theta_lambda": 0.2, "gamma0": math.log(0.1)}
    x = torch.tensor([[[2.0]], [[1.0]]], dtype=torch.float64)
    y = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    out = run_linear("fade", hp, x, y, torch.tensor([[0.5]], dtype=torch.float64), dtype=torch.float64)
    # step 1: delta = 1 - 1 = 0; g0 = 0 so gamma stays; l = 0.1
    #   g1 = 0 * [...]+ - 0.1 * 0.5 = -0.05 ; w1 = 0.9 * 0.5 + 0 = 0.45
    # step 2: delta = 0 - 0.45 = -0.45; gamma2 = log 0.1 + 0.2 * (-0.45) * 1 * (-0.05) = log 0.1 + 0.0045
    #   w2 = (1 - l2) * 0.45 + 0.1 * (-0.45)
    l2 = 0.1 * math.exp(0.0045)
    assert out.losses[:, 0].tolist() == pytest.approx([0.0, 0.45**2], abs=1e-15)
    assert out.state.w.item() == pytest.approx((1 - l2) * 0.45 - 0.045, rel=1e-12)
    assert out.state.g.item() == pytest.approx(-0.05 * max(1 - l2 - 0.1, 0) - l2 * 0.45, rel=1e-12)


def test_bad_hyperparameters_rejected():
    x = torch.zeros(2, 1, 3)
    y = torch.zeros(2, 1)
    with pytest.raises(ValueError, match="does not take theta"):
        run_linear("fade", {"alpha": 0.1, "theta_lambda": 0.1, "gamma0": -1.0, "theta": 1.0}, x, y)
    with pytest.raises(ValueError, match="unknown linear learner 'adam'"):
        run_linear("adam", {"alpha": 0.1}, x, y)


def test_no_steps_or_no_runs_leave_the_state_as_it_was():
    """T = 0 or R = 0 is an empty run, not an IndexError from the kernel's scheduling."""
    hp = {"alpha": 0.1, "theta_lambda": 0.1, "gamma0": -1.0}
    w0 = torch.full((2, 3), 0.5)
    empty = run_linear("fade", hp, torch.zeros(0, 2, 3), torch.zeros(0, 2), w0)
    assert empty.losses.shape == (0, 2) and torch.equal(empty.state.w, w0)
    assert run_linear("fade", hp, torch.zeros(4, 0, 3), torch.zeros(4, 0)).losses.shape == (4, 0)


def test_unknown_learner_is_a_value_error():
    with pytest.raises(ValueError, match="unknown linear learner 'fade_sgd'; choose one of sgd, sgd_wd, "):
        get_linear_learner("fade_sgd")


def test_hyperparameters_come_from_the_rule():
    """A rule's trailing parameters are the learner's hyperparameters, in order (`lam` is
    `lambda`); a name outside HYPERPARAMETERS is refused when the learner is registered."""
    assert {name: learner.hyperparameters for name, learner in LINEAR_LEARNERS.items()} == {
        "sgd": ("alpha",), "sgd_wd": ("alpha", "lambda"), "idbd": ("theta_alpha", "beta0"),
        "idbd_wd": ("theta_alpha", "beta0", "lambda"), "fade": ("alpha", "theta_lambda", "gamma0"),
        "fade_idbd": ("theta", "beta0", "gamma0"), "coupled": ("theta", "beta0", "gamma0"),
    }
    assert [n for n, s in LINEAR_LEARNERS.items() if s.adapts_step_size] == ["idbd", "idbd_wd", "fade_idbd", "coupled"]
    assert [n for n, s in LINEAR_LEARNERS.items() if s.adapts_decay] == ["fade", "fade_idbd", "coupled"]

    def misspelt(x, delta, w, beta, h, gamma, g, lo, hi, alpah):
        return w + alpah * delta * x, beta, h, gamma, g

    with pytest.raises(ValueError, match="alpah not in HYPERPARAMETERS"):
        LinearLearner("misspelt", misspelt, "a typo")


@pytest.mark.parametrize("dtype, max_ulp", [(np.float32, 1.0), (np.float64, 1.0)])
def test_vectorisable_exp_is_accurate_and_keeps_inf_nan(dtype, max_ulp):
    """The kernels' exp (vexp traced into vector code, as the kernels compile it) against exp
    in long double, over the whole finite range and its edges."""
    from fade_core.linear.kernel import LANES
    from fade_core.linear.simd import elementwise
    from fade_core.linear.vexp import exp_for

    traced = elementwise(exp_for(dtype), dtype, LANES)

    def apply(values, out):
        padded = np.resize(values, -(-len(values) // LANES) * LANES)
        result = np.empty_like(padded)
        traced(padded, result)
        out[:] = result[: len(values)]

    info = np.finfo(dtype)
    top, bottom = np.log(info.max), np.log(info.smallest_subnormal)
    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, 1.0, -1.0, top, np.nextafter(top, np.inf, dtype=dtype), bottom, bottom - 1, 1e-30, -1e-30]
    x = np.concatenate([rng.uniform(bottom - 5, top + 5, 300_000), rng.uniform(-1, 1, 100_000), edges]).astype(dtype)
    got = np.empty_like(x)
    apply(x, got)
    with np.errstate(over="ignore", under="ignore"):
        exact = np.exp(x.astype(np.longdouble))
        rounded = exact.astype(dtype)
    normal = np.isfinite(rounded) & (np.abs(rounded) >= info.tiny)
    ulps = np.abs(got[normal] - exact[normal]) / np.spacing(rounded[normal]).astype(np.longdouble)
    assert ulps.max() <= max_ulp, f"max error {float(ulps.max()):.3f} ulp"
    assert np.array_equal(got[~normal] == np.inf, rounded[~normal] == np.inf)  # overflow -> inf where libm's does
    tiny = ~normal & np.isfinite(rounded)  # subnormal or zero results: within one subnormal step or two
    assert np.all(np.abs(got[tiny] - rounded[tiny]) <= info.smallest_subnormal * 2)
    specials = np.array([np.inf, -np.inf, np.nan, 1000.0, -1000.0], dtype=dtype)
    out = np.empty_like(specials)
    apply(specials, out)
    assert out[0] == np.inf and out[1] == 0.0 and np.isnan(out[2]) and out[3] == np.inf and out[4] == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_diverging_run_becomes_non_finite_and_leaves_its_pack_alone(dtype):
    x, y, w0 = _problem(steps=400, runs=3)
    hp = {"alpha": [0.01, 5.0, 0.01], "theta_lambda": 0.01, "gamma0": -2.3}  # run 1 diverges
    out = run_linear("fade", hp, torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(w0), dtype=dtype)
    assert not np.isfinite(out.losses[:, 1].double().numpy()).all()
    assert np.isfinite(out.losses[:, [0, 2]].double().numpy()).all()


def test_registry_imports_neither_torch_nor_numba():
    """Reading the registry (fade_core and fade_core.linear) stays light: a fresh interpreter."""
    import subprocess
    import sys

    code = (
        "import sys, fade_core, fade_core.linear\n"
        "from fade_core import LINEAR_LEARNERS\n"
        "assert fade_core.linear.LINEAR_LEARNERS['fade'].hyperparameters == ('alpha', 'theta_lambda', 'gamma0')\n"
        "print(sorted(m for m in ('torch', 'numba') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name, dtype, stages", [("fade", np.float32, 2), ("fade", np.float64, 4), ("coupled", np.float32, 3),
                                                 ("coupled", np.float64, 3), ("idbd_wd", np.float32, 3)])
def test_a_pipelined_step_gives_the_bits_of_the_plain_one(name, dtype, stages):
    """The adaptive rules' loop over components runs software-pipelined (`kernel.PIPELINE_STAGES`):
    each component gets the rule's instructions in the rule's order, only interleaved with
    other components'. Losses, loss sums and every state row equal the unpipelined loop's to
    the bit, over 3 tiles, with runs of 6 seeds in blocks of one seed and of several, and
    d = 7 (fewer components than a block has lanes; the pipeline's first and last iterations
    run only some stages)."""
    from fade_core.linear import kernel

    learner, dtype = LINEAR_LEARNERS[name], np.dtype(dtype)
    seeds, d, steps = 6, 7, 120
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((steps, seeds, d)).astype(dtype), rng.standard_normal((steps, seeds)).astype(dtype)
    slots = np.repeat(np.arange(seeds), [16, 8, 6, 6, 3, 2])
    runs = len(slots)
    hp = np.stack([rng.uniform(0.005, 0.05, runs) if n not in ("beta0", "gamma0") else np.full(runs, -3.0)
                   for n in learner.hyperparameters], axis=1).astype(dtype)
    lane_run, lanes_used = kernel.lane_blocks(slots, kernel.lanes_for(learner, dtype))
    seeds_per_block = {len(set(slots[block])) for block in lane_run}
    assert 1 in seeds_per_block and len(seeds_per_block) > 1

    def run(stages: int) -> list[np.ndarray]:
        state = [row.copy() for row in start]
        losses, sums = np.zeros((runs, steps), dtype), np.zeros(runs)
        kernel.driver(learner, dtype, stages)(hp, dtype.type(-8.0), dtype.type(0.0), slots, lane_run, lanes_used, 0, 1,
                                              steps // 3, x, y, *state, losses, sums)
        return [losses, sums, *state]

    start = [rng.uniform(-0.5, 0.5, (runs, d)).astype(dtype) for _ in range(5)]
    start[1] = np.full((runs, d), -3.0, dtype)  # beta: log step sizes
    start[3] = np.full((runs, d), -3.0, dtype)  # gamma: log decay rates
    plain, pipelined = run(1), run(stages)
    assert np.isfinite(plain[0]).all() and not np.array_equal(plain[2], start[0])
    for got, want, what in zip(pipelined, plain, ("losses", "loss sums", "w", "beta", "h", "gamma", "g")):
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {dtype} {stages} stages: {what}")


def test_advance_rejects_inputs_the_compiled_driver_would_read_out_of_bounds():
    """A slot outside the streams, x of another width, y of other steps, another dtype or a
    losses buffer of the wrong length: one clear ValueError, before the compiled code runs."""
    from fade_core.linear import advance, hyperparameter_matrix, init_state

    learner = LINEAR_LEARNERS["fade"]
    hp = hyperparameter_matrix(learner, {"alpha": 0.01, "theta_lambda": 0.01, "gamma0": -2.0}, 4, torch.float32)
    x, y, slot = torch.zeros(5, 2, 20), torch.zeros(5, 2), torch.tensor([0, 1, 1, 0])
    good = dict(x=x, y=y, run_slot=slot, losses=torch.empty(4, 5))
    bad = {"slot": dict(run_slot=torch.tensor([0, 1, 2, 0])), "negative slot": dict(run_slot=torch.tensor([0, -1, 1, 0])),
           "width": dict(x=torch.zeros(5, 2, 19)), "steps of y": dict(y=torch.zeros(4, 2)),
           "dtype": dict(x=x.double(), y=y.double()), "losses": dict(losses=torch.empty(4, 3))}
    for what, change in bad.items():
        state = init_state(learner, hp, torch.zeros(4, 20))
        args = {**good, **change}
        with pytest.raises(ValueError, match="advance: "):
            advance(learner, hp, state, args["x"], args["y"], args["run_slot"], args["losses"])
        assert torch.equal(state.w, torch.zeros(4, 20)), what
    state = init_state(learner, hp, torch.zeros(4, 20))
    advance(learner, hp, state, x, y, slot, good["losses"])  # the good call runs


def test_the_rule_keeps_its_written_order_near_overflow():
    """numba gives every float operation of the compiled driver its fast-math flags (reassociation
    included) unless the operation has flags of its own, and the traced rule is inlined in the
    driver: it must keep its written order all the same. A coupled run found by a hostile-user
    pass: its third component has exp(beta) = 0 and exp(gamma) ~ 2e38, so a * l * w is
    (a * l) * w = 0, but the reassociated a * (l * w) is 0 * inf = NaN. The plain loop gave NaN
    for the second step's loss, the pipelined one 2989.42; both must give the written order's."""
    from fade_core.linear import kernel

    learner, f32 = LINEAR_LEARNERS["coupled"], np.float32
    start = ([-6.168050765991211, 10.761673927307129, 48.400943756103516],  # w
             [-270.9718322753906, -165.96731567382812, -2444.0615234375],  # beta
             [-19.886537551879883, 10.573614120483398, 45.548912048339844],  # h
             [-269.98291015625, -21.559633255004883, 88.24586486816406],  # gamma
             [-19.82404327392578, 1.3671698570251465, -1.6672133207321167])  # g
    x = np.array([[[0.6043933033943176, -0.8087853789329529, -0.1638939529657364]],
                  [[0.18245713412761688, 1.581250786781311, 0.783768892288208]]], f32)
    y = np.array([[0.5406731367111206], [-0.8489315509796143]], f32)
    hp = np.array([[0.0424937829375267, -5.362948894500732, -5.868654727935791]], f32)
    slots = np.zeros(1, np.int64)
    lane_run, lanes_used = kernel.lane_blocks(slots, kernel.lanes_for(learner, np.dtype(f32)))
    for stages in (1, 3):
        state, losses = [np.array([row], f32) for row in start], np.zeros((1, 2), f32)
        kernel.driver(learner, np.dtype(f32), stages)(hp, f32(-np.inf), f32(np.inf), slots, lane_run, lanes_used, 0, 1,
                                                      16, x, y, *state, losses, np.zeros(1))
        np.testing.assert_allclose(losses[0], [437.02356, 2989.4197], rtol=1e-6, err_msg=f"{stages} stages")
