"""The CPU engine of fade_core.neural: a whole segment of steps for R runs in one compiled call.

Batched tensor ops stream every run's weights through memory once per op and step; on
a CPU that is memory-bound (an EMNIST run has 287k parameters). Here each run instead
stays in one thread for the whole segment and its parameters stay in cache: forward,
loss, backward, every update of algorithms.md §2 and the metric sums, step after step.
Runs are spread over threads (prange); a run's arithmetic does not depend on which
other runs share the call, so pack invariance is exact.

The rules are those of fade_core.neural.torch_ops (the batched implementation used on
CUDA), per element; tests check both against the same plain PyTorch reference.

`run_segment` takes its arrays as named tuples (numba compiles them as structs), so a
caller cannot pass one run array where another belongs without naming it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from fade_core.neural.rules import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN, WD_COUPLED, WD_DECOUPLED, WD_NONE


class Setup(NamedTuple):
    """What a segment runs: the network's shape, the loss, the learner's parts."""

    sizes: np.ndarray  # (L+1,) int64 layer widths, input first
    starts: np.ndarray  # (2L+1,) int64 offsets of [W0, b0, W1, ...] in a run's flat parameters, then n
    negative_slope: float  # of the hidden activation (0: ReLU)
    classification: bool  # cross-entropy on labels (else half squared error on values)
    adam: bool  # base step Adam (else SGD)
    weight_decay: int  # rules.WD_NONE | WD_COUPLED | WD_DECOUPLED
    clip: bool
    fade_start: int  # first flat parameter FADE covers (n: none)
    adam_steps: int  # Adam steps taken before this segment


class RunHyperparameters(NamedTuple):
    """Per-run hyperparameters, each (R,) in the parameters' dtype (0 where unused)."""

    alpha: np.ndarray
    lam: np.ndarray  # lambda
    kappa: np.ndarray
    theta_lambda: np.ndarray


class RunState(NamedTuple):
    """Per-run state, updated in place."""

    params: np.ndarray  # (R, n) flat parameters
    adam_m: np.ndarray  # (R, n) first moments ((R, 0) without Adam)
    adam_v: np.ndarray  # (R, n) second moments ((R, 0) without Adam)
    gamma: np.ndarray  # (R, n - fade_start) FADE's log decay rates
    trace: np.ndarray  # (R, n - fade_start) FADE's trace g


class Stream(NamedTuple):
    """The segment's data; run r reads slot run_slot[r]."""

    run_slot: np.ndarray  # (R,) int64
    x: np.ndarray  # (T, S, in)
    y_values: np.ndarray  # (T, S, out) regression targets ((0, 0, 0) for classification)
    y_labels: np.ndarray  # (T, S) int64 labels ((0, 0) for regression)


class Sums(NamedTuple):
    """Per-run sums over the steps, accumulated in place (float64, in step order)."""

    loss: np.ndarray  # (R,)
    sq_error: np.ndarray  # (R, out) regression; (R, 0) otherwise
    correct: np.ndarray  # (R,) classification
    active: np.ndarray  # (R, hidden units) bool: positive pre-activation at least once


# As in fade_core.linear: reassociation and FMA let LLVM vectorise the inner loops;
# IEEE NaN/inf semantics stay (no 'nnan'/'ninf'), so a diverging run shows as NaN/inf.
_FASTMATH = {"nsz", "arcp", "contract", "reassoc"}
# error_model="numpy": a float division by zero gives inf/NaN as in torch instead of raising
# ZeroDivisionError. Python's model puts a test and a branch before every division, and a
# loop with one does not vectorise (Adam's rows, two divisions per weight, ran 4.5x slower).
# No divisor here can be 0 except through a NaN/inf run, so no number changes.
_ERRORS = "numpy"


# Per-parameter rules are pure scalar functions; LLVM inlines them into the row loops
# and vectorises those. (numba's IR-level inline="always" defeated vectorisation: 4x slower.)
_scalar = numba.njit(fastmath=_FASTMATH, error_model=_ERRORS, cache=True)


@_scalar
def _exp_of_gamma(gamma):
    """exp(gamma) for gamma in FADE's clamp range [-15, 0], as a vectorisable polynomial:
    exp(gamma) = exp(gamma / 32) ** 32 with a degree-13 Taylor series of exp(gamma / 32)
    (|gamma / 32| <= 0.47: relative error below 1e-13). libm's exp is a scalar call that
    LLVM cannot vectorise, and it dominated the head update."""
    y = gamma * (1.0 / 32.0)
    e = 1.0 + y * (1.0 + y * (1.0 / 2 + y * (1.0 / 6 + y * (1.0 / 24 + y * (1.0 / 120 + y * (1.0 / 720 + y * (
        1.0 / 5040 + y * (1.0 / 40320 + y * (1.0 / 362880 + y * (1.0 / 3628800 + y * (1.0 / 39916800 + y * (
            1.0 / 479001600 + y * (1.0 / 6227020800)))))))))))))
    for _ in range(5):
        e = e * e
    return e


@_scalar
def _fade(gamma, trace, w, grad, q, alpha_eff, theta):
    """FADE on one parameter before its base step -> (gamma, trace, decayed w)."""
    gamma = min(max(gamma - theta * grad * trace, GAMMA_MIN), GAMMA_MAX)
    decay = _exp_of_gamma(gamma)
    return gamma, trace * max(1.0 - decay - alpha_eff * q, 0.0) - decay * w, w * (1.0 - decay)


@_scalar
def _adam_constants(alpha, k, out):
    """Adam's per-step scalars for step k (1-based), computed in float64 as torch.optim.Adam does
    on the host, into `out` (the parameters' dtype, so the element loops stay in that precision):
    alpha / (1 - beta1^k), sqrt(1 - beta2^k), 1 / (1 - beta2^(k-1)) (for FADE's v_hat before the
    update), 1 - beta1, beta2, 1 - beta2, eps."""
    out[0] = alpha / (1.0 - BETA1**k)
    out[1] = math.sqrt(1.0 - BETA2**k)
    out[2] = 1.0 / (1.0 - BETA2 ** (k - 1)) if k > 1 else 0.0
    out[3], out[4], out[5], out[6] = 1.0 - BETA1, BETA2, 1.0 - BETA2, EPS
    return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])



@_scalar
def _null_adam(out):
    """Constants for which `_adam` with gradient 0 leaves m, v and the parameter exactly as they
    are (1 - beta1 = 0, beta2 = 1, 1 - beta2 = 0, step 0), in `out`'s dtype."""
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0
    return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])


@_scalar
def _adam_alpha_eff(v, alpha, first_step, ac):
    """alpha / (sqrt(v_hat) + eps) with v_hat before this step's update; alpha on the first step."""
    return alpha if first_step else alpha / (np.sqrt(v * ac[2]) + ac[6])


# Adam's element rule as torch.optim.Adam writes it: sqrt(v) / sqrt(bias correction 2) is a
# division, not a product with a reciprocal, so no 'arcp' (which lets LLVM make it one) and
# no 'reassoc' here.
@numba.njit(fastmath={"nsz", "contract"}, error_model=_ERRORS, cache=True)
def _adam(m, v, w, grad, ac):
    """torch.optim.Adam on one parameter -> (m, v, w); ac from `_adam_constants`."""
    m = m + ac[3] * (grad - m)  # torch's lerp_
    v = ac[4] * v + ac[5] * grad * grad
    return m, v, w - ac[0] * m / (np.sqrt(v) / ac[1] + ac[6])  # torch's addcdiv_(m, sqrt(v)/sqrt(bc2) + eps)


# The loops below are separate (not inlined) functions over slices that start at 0:
# LLVM vectorises those; with offsets computed at run time inside the big parallel
# body it does not (measured: 5x slower).
_dense = numba.njit(fastmath=_FASTMATH, error_model=_ERRORS, cache=True)


@_dense
def _affine(p, w0, b0, fan_in, fan_out, inp, z, zero):
    """z[j] = b[j] + sum_i W[j, i] * inp[i], for the layer whose W starts at p[w0]; sums
    start from `zero`, a 0 of the parameters' dtype (so float32 runs add in float32, as
    torch does)."""
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        acc = zero
        for i in range(fan_in):
            acc += w[i] * inp[i]
        z[j] = acc + p[b0 + j]


@_dense
def _back(p, w0, fan_in, fan_out, delta_out, delta_in):
    """delta_in[i] = sum_j W[j, i] * delta_out[j]."""
    delta_in[:] = 0
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        dj = delta_out[j]
        for i in range(fan_in):
            delta_in[i] += w[i] * dj


@_dense
def _sgd_rank_one(p, w0, fan_in, fan_out, inp, delta, alpha):
    """W <- W - alpha * delta inp^T."""
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        c = delta[j] * -alpha
        for i in range(fan_in):
            w[i] = w[i] + c * inp[i]


# No 'reassoc' here: with it LLVM factors W - alpha*lam*W into W * (1 - alpha*lam) again.
@numba.njit(fastmath={"nsz", "contract"}, error_model=_ERRORS, cache=True)
def _sgd_l2_rank_one(p, w0, fan_in, fan_out, inp, delta, alpha, lam):
    """W <- W - alpha * (delta inp^T + lam * W), per element as torch.optim.SGD(weight_decay)
    computes it (d = G + lam * W; W -= alpha * d). Not a shrink factor 1 - alpha * lam: in
    float32 that rounds to a multiple of 2^-24, so small decays vanish (alpha * lam < 3e-8) or
    come out up to 19% too large (1e-7)."""
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        dj = delta[j]
        for i in range(fan_in):
            w[i] = w[i] - alpha * (dj * inp[i] + lam * w[i])


# Weight rows (gradient dj * inp[i], FADE curvature inp[i]^2 * factor), one kernel per
# combination the learners use: each stores to few arrays, so LLVM vectorises it (a
# generic row with every branch and five stored arrays ran 4x slower).
@_dense
def _sgd_rank_one_then_affine(p, w0, fan_in, fan_out, inp, delta, alpha, next_inp, z, zero):
    """The SGD step of `_sgd_rank_one` fused with the next step's W @ next_inp (bias not
    added): one pass over W instead of two, for the first layer, whose W dominates the
    memory traffic. With delta = 0 it is the forward pass alone, so every W @ x of the
    first layer comes from this one loop (identical rounding whatever the segmenting)."""
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        c = delta[j] * -alpha
        acc = zero
        for i in range(fan_in):
            wi = w[i] + c * inp[i]
            w[i] = wi
            acc += wi * next_inp[i]
        z[j] = acc


# Whole layers per call (rows sliced inside, as in _sgd_rank_one): a call per row cost an
# NRT incref/decref of each of its array arguments (atomics on the pack-wide arrays' shared
# refcounts, which the threads then pass back and forth) and the call itself.
@_dense
def _fade_sgd_rank_one(p, gm, tr, w0, e0, fan_in, fan_out, inp, delta, factor, alpha, theta):
    """FADE then SGD on the layer whose W starts at p[w0] (its gamma and trace at gm[e0], tr[e0])."""
    for j in range(fan_out):
        row, e = w0 + j * fan_in, e0 + j * fan_in
        pr, gr, tr_ = p[row : row + fan_in], gm[e : e + fan_in], tr[e : e + fan_in]
        dj, fj = delta[j], factor[j]
        for i in range(fan_in):
            xi = inp[i]
            grad = dj * xi
            gr[i], tr_[i], w = _fade(gr[i], tr_[i], pr[i], grad, xi * xi * fj, alpha, theta)
            pr[i] = w - alpha * grad


@_dense
def _fade_adam_rank_one(p, m, v, gm, tr, w0, e0, fan_in, fan_out, inp, delta, factor, alpha, theta, first_step, ac):
    """FADE then Adam on the layer whose W starts at p[w0] (its gamma and trace at gm[e0], tr[e0])."""
    for j in range(fan_out):
        row, e = w0 + j * fan_in, e0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]
        gr, tr_ = gm[e : e + fan_in], tr[e : e + fan_in]
        dj, fj = delta[j], factor[j]
        for i in range(fan_in):
            xi = inp[i]
            grad = dj * xi
            alpha_eff = _adam_alpha_eff(vr[i], alpha, first_step, ac)
            gr[i], tr_[i], w = _fade(gr[i], tr_[i], pr[i], grad, xi * xi * fj, alpha_eff, theta)
            mr[i], vr[i], pr[i] = _adam(mr[i], vr[i], w, grad, ac)


@_dense
def _adam_rank_one(p, m, v, w0, fan_in, fan_out, inp, delta, shrink, ac, bound):
    """Adam (AdamW's decoupled decay as `shrink`) on the layer whose W starts at p[w0], then
    clipping to +-bound (inf: none)."""
    for j in range(fan_out):
        row = w0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]
        dj = delta[j]
        for i in range(fan_in):
            mr[i], vr[i], w = _adam(mr[i], vr[i], pr[i] * shrink, dj * inp[i], ac)
            pr[i] = min(max(w, -bound), bound)


@_dense
def _adam_rank_one_then_affine(p, m, v, w0, fan_in, fan_out, inp, delta, shrink, ac, bound, next_inp, z, zero):
    """`_adam_rank_one` fused with the next step's W @ next_inp (bias not added), as
    `_sgd_rank_one_then_affine`: the first layer's weights are read once per step, and the
    product's multiply-adds run beside Adam's divisions and square roots (which bound the
    loop). With delta = 0, shrink = 1, bound = inf and `_NULL_ADAM` constants the step leaves
    W, m and v as they are, so that call is the forward pass alone and every W @ x of the first
    layer comes from this one loop (identical rounding whatever the segmenting)."""
    for j in range(fan_out):
        row = w0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]
        dj = delta[j]
        acc = zero
        for i in range(fan_in):
            mr[i], vr[i], w = _adam(mr[i], vr[i], pr[i] * shrink, dj * inp[i], ac)
            w = min(max(w, -bound), bound)
            pr[i] = w
            acc += w * next_inp[i]
        z[j] = acc


@_dense
def _clip(p, bound):
    for i in range(p.shape[0]):
        p[i] = min(max(p[i], -bound), bound)


@_dense
def _update_bias(p, m, v, gm, tr, delta, factor, alpha, lam, shrink, theta, wd_mode, adam, clip, bound, fade,
                 first_step, ac):
    """Any learner on a bias (gradient delta[j], FADE curvature factor[j]): FADE decay (if on),
    weight decay (decoupled: times `shrink`, the run's 1 - alpha * lambda), base step, clipping;
    in the parameters' dtype (the decayed FADE value is stored before the base step: a float64
    value here would make numba type w, and with it the whole step, float64 in float32 runs).
    One loop with the rule inline: a call per element cost an NRT incref/decref of each array."""
    for j in range(p.shape[0]):
        grad = delta[j]
        if fade:
            alpha_eff = _adam_alpha_eff(v[j], alpha, first_step, ac) if adam else alpha
            gm[j], tr[j], p[j] = _fade(gm[j], tr[j], p[j], grad, factor[j], alpha_eff, theta)
        w = p[j]
        if wd_mode == WD_COUPLED:
            grad = grad + lam * w
        elif wd_mode == WD_DECOUPLED:
            w = w * shrink
        if adam:
            m[j], v[j], w = _adam(m[j], v[j], w, grad, ac)
        else:
            w = w - alpha * grad
        if clip:
            w = min(max(w, -bound), bound)
        p[j] = w


@numba.njit(fastmath=_FASTMATH, error_model=_ERRORS, parallel=True, cache=True)
def run_segment(setup, hp, state, data, sums):
    """Advance R runs by data.x.shape[0] steps: `Setup`, `RunHyperparameters`,
    `RunState` (updated in place), `Stream`, `Sums` (accumulated in place)."""
    sizes, starts, classification = setup.sizes, setup.starts, setup.classification
    adam, wd_mode, clip, fade_start, adam_steps = setup.adam, setup.weight_decay, setup.clip, setup.fade_start, setup.adam_steps
    alpha, lam, kappa, theta = hp.alpha, hp.lam, hp.kappa, hp.theta_lambda
    params, adam_m, adam_v, gamma, trace = state.params, state.adam_m, state.adam_v, state.gamma, state.trace
    typed = np.empty(1, dtype=params.dtype)
    typed[0] = setup.negative_slope
    slope = typed[0]  # in the parameters' dtype, as torch's leaky_relu (float32 runs: 0.0099999998)
    run_slot, x, y_values, y_labels = data.run_slot, data.x, data.y_values, data.y_labels
    loss_sum, sq_error, correct, active = sums.loss, sums.sq_error, sums.correct, sums.active
    layers = sizes.shape[0] - 1
    units = sizes[1:].sum()
    n_in = sizes[0]
    n_out = sizes[layers]
    steps = x.shape[0]
    for r in numba.prange(params.shape[0]):
        s = run_slot[r]
        p, m, v, gm, tr = params[r], adam_m[r], adam_v[r], gamma[r], trace[r]
        a, la, th = alpha[r], lam[r], theta[r]
        acts = np.empty(n_in + units - n_out, dtype=params.dtype)  # each layer's input, concatenated
        z = np.empty(units, dtype=params.dtype)  # pre-activations of every layer
        delta = np.empty(units, dtype=params.dtype)
        ones = np.ones(units, dtype=params.dtype)
        adam_scalars = np.empty(7, dtype=params.dtype)
        one = ones[0]  # 1 in the parameters' dtype (numba makes float32 op int a float64)
        head_factor = np.ones(n_out, dtype=params.dtype)
        shrink = one - a * la if wd_mode == WD_DECOUPLED else one  # AdamW's decay factor
        # A plain-SGD or any Adam first layer (not under FADE) fuses its update with the next
        # step's forward (see _sgd_rank_one_then_affine, _adam_rank_one_then_affine);
        # z[:sizes[1]] then holds W0 @ x_t when step t starts. (Not SGD with L2: its row loop
        # must not reassociate, and the fused loop's sum needs to.)
        fused_sgd = not (fade_start == 0 or adam or clip or wd_mode != WD_NONE)
        fused_adam = adam and fade_start > 0
        fused = fused_sgd or fused_adam
        zero_in = np.zeros(n_in, dtype=params.dtype)
        # (starts[0], not a literal 0: a literal would compile a differently-vectorised copy)
        if fused_sgd:
            _sgd_rank_one_then_affine(p, starts[0], n_in, sizes[1], zero_in, ones, one - one, x[0, s], z, one - one)
        elif fused_adam:
            null = _null_adam(adam_scalars)
            adam_scalars[0] = np.inf
            _adam_rank_one_then_affine(p, m, v, starts[0], n_in, sizes[1], zero_in, ones - ones, one, null,
                                       adam_scalars[0], x[0, s], z, one - one)
        for t in range(steps):
            k = adam_steps + t + 1  # this step's Adam step number
            ac = _adam_constants(a, k, adam_scalars)  # a tuple: adam_scalars is free for reuse
            acts[:n_in] = x[t, s]
            # forward
            a_off, z_off = 0, 0
            for layer in range(layers):
                fan_in, fan_out = sizes[layer], sizes[layer + 1]
                if layer == 0 and fused:
                    for j in range(fan_out):
                        z[j] = z[j] + p[starts[1] + j]
                else:
                    _affine(p, starts[2 * layer], starts[2 * layer + 1], fan_in, fan_out, acts[a_off : a_off + fan_in],
                            z[z_off : z_off + fan_out], one - one)
                if layer < layers - 1:
                    for j in range(fan_out):
                        zj = z[z_off + j]
                        if zj > 0:
                            acts[a_off + fan_in + j] = zj
                            active[r, z_off + j] = True
                        else:
                            acts[a_off + fan_in + j] = zj * slope
                a_off += fan_in
                z_off += fan_out
            # loss and the head's delta
            out = z_off - n_out
            if classification:
                label = y_labels[t, s]
                top = 0
                for c in range(1, n_out):
                    if z[out + c] > z[out + top]:
                        top = c
                mx = z[out + top]
                total = 0.0
                for c in range(n_out):
                    total += math.exp(z[out + c] - mx)
                log_total = math.log(total)
                for c in range(n_out):
                    pc = math.exp(z[out + c] - mx - log_total)
                    head_factor[c] = pc * (1.0 - pc)
                    delta[out + c] = pc - (1.0 if c == label else 0.0)
                loss_sum[r] += log_total + mx - z[out + label]
                if top == label:
                    correct[r] += 1.0
            else:
                half = 0.0
                for c in range(n_out):
                    d = z[out + c] - y_values[t, s, c]
                    delta[out + c] = d
                    sq_error[r, c] += d * d
                    half += d * d
                loss_sum[r] += 0.5 * half
            # backward, through the weights before this step's update
            z_off = out
            for layer in range(layers - 1, 0, -1):
                fan_in, fan_out = sizes[layer], sizes[layer + 1]
                below = z_off - fan_in
                _back(p, starts[2 * layer], fan_in, fan_out, delta[z_off : z_off + fan_out], delta[below:z_off])
                for i in range(fan_in):
                    if z[below + i] <= 0:
                        delta[below + i] *= slope
                z_off = below
            # updates, layer by layer
            a_off, z_off = 0, 0
            for layer in range(layers):
                fan_in, fan_out = sizes[layer], sizes[layer + 1]
                w0, b0 = starts[2 * layer], starts[2 * layer + 1]
                inp, d_layer = acts[a_off : a_off + fan_in], delta[z_off : z_off + fan_out]
                fade = w0 >= fade_start
                factor = head_factor if layer == layers - 1 and classification else ones[:fan_out]
                bound = kappa[r] / math.sqrt(fan_in)
                first = k == 1
                if fade and not adam:
                    _fade_sgd_rank_one(p, gm, tr, w0, w0 - fade_start, fan_in, fan_out, inp, d_layer, factor, a, th)
                elif fade:
                    _fade_adam_rank_one(p, m, v, gm, tr, w0, w0 - fade_start, fan_in, fan_out, inp, d_layer, factor, a, th,
                                        first, ac)
                elif adam:
                    adam_scalars[0] = bound if clip else np.inf  # in the parameters' dtype
                    if layer == 0 and fused:
                        _adam_rank_one_then_affine(p, m, v, w0, fan_in, fan_out, inp, d_layer, shrink, ac, adam_scalars[0],
                                                   x[t + 1, s] if t + 1 < steps else zero_in, z, one - one)
                    else:
                        _adam_rank_one(p, m, v, w0, fan_in, fan_out, inp, d_layer, shrink, ac, adam_scalars[0])
                else:  # SGD (L2 coupled into the gradient), and clipping after the step
                    if layer == 0 and fused:
                        _sgd_rank_one_then_affine(p, w0, fan_in, fan_out, inp, d_layer, a,
                                                  x[t + 1, s] if t + 1 < steps else zero_in, z, one - one)
                    elif wd_mode == WD_COUPLED:
                        _sgd_l2_rank_one(p, w0, fan_in, fan_out, inp, d_layer, a, la)
                    else:
                        _sgd_rank_one(p, w0, fan_in, fan_out, inp, d_layer, a)
                    if clip:
                        _clip(p[w0 : w0 + fan_in * fan_out], bound)
                _update_bias(p[b0 : b0 + fan_out], m[b0 : b0 + fan_out] if adam else m, v[b0 : b0 + fan_out] if adam else v,
                             gm[b0 - fade_start : b0 - fade_start + fan_out] if fade else gm,
                             tr[b0 - fade_start : b0 - fade_start + fan_out] if fade else tr,
                             d_layer, factor, a, la, shrink, th, wd_mode, adam, clip, bound, fade, first, ac)
                a_off += fan_in
                z_off += fan_out
