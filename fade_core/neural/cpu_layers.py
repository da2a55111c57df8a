"""A layer's passes over its weights in the CPU kernel (`cpu_kernel.run_segment` calls them):
the forward product, each learner's update of the weight rows fused with a product, the
bias update and the activation.

The update of a weight row is one function per combination of learner parts the registered
learners use (sgd, sgd with coupled decay, FADE under sgd or Adam, Adam), each storing to
few arrays so that LLVM vectorises it, and `any_rank_one` for every other combination (FADE
with weight decay or clipping, ...); the per-parameter rules are `cpu_elements`' (printed
from `parts`), the dot products `cpu_arith`'s.
Compiled like the kernel, with no fast-math flag.
"""

from __future__ import annotations

import numba

from fade_core.neural.cpu_arith import axpy_dot, dot, fma
from fade_core.neural.cpu_elements import (ERRORS, FASTMATH, adam, adam_alpha_eff, clip_to, coupled_decay, decoupled_decay, fade,
                                           fade_apply, fade_decay, sgd)
from fade_core.neural.rules import WD_COUPLED, WD_DECOUPLED

# The loops below are separate (not inlined) functions over slices that start at 0:
# LLVM vectorises those; with offsets computed at run time inside the big parallel
# body it does not (measured: 5x slower). Whole layers per call (rows sliced inside): a
# call per row cost an NRT incref/decref of each of its array arguments (atomics on the
# pack-wide arrays' shared refcounts, which the threads then pass back and forth).
_dense = numba.njit(fastmath=FASTMATH, error_model=ERRORS, cache=True)

# Passes over the weights per step: the first layer's update is fused with the next step's
# forward product (`*_then_affine`); every other layer's update is fused with its backward
# product delta_in = W^T delta (`back`: each weight is loaded once, used at its value before
# the step as algorithms.md §2 asks, then updated), and its forward product is a second
# pass. (Fusing a layer's update with the next step's forward as well would need that
# layer's input, which needs the layer below updated, which needs this layer's backward
# product: one of the two fusions per layer.) `delta_in` accumulates row after row, as a
# separate W^T delta pass does, so the sums are those of the unfused order, bit for bit.


@_dense
def affine(p, w0, b0, fan_in, fan_out, inp, z):
    """z[j] = b[j] + sum_i W[j, i] * inp[i], for the layer whose W starts at p[w0]; sums in
    the parameters' dtype (float32 runs add in float32, as torch does), in cpu_dot's order."""
    for j in range(fan_out):
        z[j] = dot(p[w0 + j * fan_in : w0 + (j + 1) * fan_in], inp, fan_in) + p[b0 + j]


@_dense
def sgd_rank_one(p, w0, fan_in, fan_out, inp, delta, alpha, bound, back, delta_in):
    """W <- W - alpha * delta inp^T, clipped to +-bound (inf: none, `parts.clip`); with `back`,
    also delta_in = W^T delta in the same pass. The step is `parts.sgd` in its rank-one form,
    w + (delta_j * -alpha) * inp_i as one FMA (the torch engine's baddbmm_ has the same form):
    the rule's w - alpha * (delta_j * inp_i) rounds three times and would cost a product per weight."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        dj = delta[j]
        c = dj * -alpha
        if back:
            for i in range(fan_in):
                wi = w[i]
                delta_in[i] = fma(wi, dj, delta_in[i])
                w[i] = clip_to(fma(c, inp[i], wi), bound)
        else:
            for i in range(fan_in):
                w[i] = clip_to(fma(c, inp[i], w[i]), bound)


# (Not a shrink factor, which FASTMATH's absence of 'reassoc' keeps LLVM from making of it.)
@_dense
def sgd_l2_rank_one(p, w0, fan_in, fan_out, inp, delta, alpha, lam, back, delta_in):
    """W <- W - alpha * (delta inp^T + lam * W), per element as torch.optim.SGD(weight_decay)
    computes it (d = G + lam * W; W -= alpha * d: `parts.coupled_decay`, then `parts.sgd`). Not a shrink factor 1 - alpha * lam: in
    float32 that rounds to a multiple of 2^-24, so small decays vanish (alpha * lam < 3e-8) or
    come out up to 19% too large (1e-7). `back` as in `sgd_rank_one`."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        dj = delta[j]
        if back:
            for i in range(fan_in):
                wi = w[i]
                delta_in[i] = fma(wi, dj, delta_in[i])
                w[i] = sgd(wi, coupled_decay(dj * inp[i], wi, lam), alpha)
        else:
            for i in range(fan_in):
                w[i] = sgd(w[i], coupled_decay(dj * inp[i], w[i], lam), alpha)


# Whether the rows' base step is `own_step`: a compile-time constant, False here, True in cpu_own's
# copies of the rows (rebound with own_step). As a run-time flag, the built-in kernel kept the
# untaken call in update_bias's loop, and the built-in SGD ran 11% slower (benchmarks/ab_neural.py).
OWN_STEP = False


@_dense
def own_step(w, grad, m, v, j, alpha, oh, fc):
    """A researcher's base step on parameter j -> its new w, its state written to m[j] (and v[j]);
    oh: its hyperparameters, then its constants. A placeholder here, never called: cpu_own
    rebinds the name to the printed rule in its copies of the functions that call it."""
    return w


# Weight rows (gradient dj * inp[i], FADE curvature inp[i]^2 * factor), one kernel per
# combination the learners use: each stores to few arrays, so LLVM vectorises it (a
# generic row with every branch and five stored arrays ran 4x slower).
@_dense
def sgd_rank_one_then_affine(p, w0, fan_in, fan_out, inp, delta, alpha, next_inp, z):
    """The SGD step of `sgd_rank_one` fused with the next step's W @ next_inp (bias not added,
    cpu_arith.axpy_dot): one pass over W instead of two, for the first layer, whose W dominates
    the memory traffic. With delta = 0 it is the forward pass
    alone, so every W @ x of the first layer comes from this one function (identical rounding
    whatever the segmenting)."""
    for j in range(fan_out):
        w = p[w0 + j * fan_in : w0 + (j + 1) * fan_in]
        z[j] = axpy_dot(w, delta[j] * -alpha, inp, next_inp, fan_in)


@_dense
def fade_sgd_rank_one(p, m, v, gm, tr, w0, e0, fan_in, fan_out, inp, delta, factor, alpha, theta, fc, oh, back, delta_in,
                      decay):
    """FADE then SGD on the layer whose W starts at p[w0] (its gamma and trace at gm[e0],
    tr[e0]); `back` as in `sgd_rank_one`. With OWN_STEP (cpu_own's copies) the base step is
    `own_step` instead, with FADE's step size alpha as under SGD (its state at m[w0], v[w0]; oh
    as in `own_step`). A row in two passes, `fade_decay` then the rest
    (decay: a row's buffer): one loop over both had each weight's whole dependency chain
    (meta-update, clamp, exp, decay) in one iteration, longer than the out-of-order core
    could overlap across iterations; the same arithmetic, so the same bits."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        row, e = w0 + j * fan_in, e0 + j * fan_in
        pr, gr, tr_ = p[row : row + fan_in], gm[e : e + fan_in], tr[e : e + fan_in]
        mr, vr = (m[row : row + fan_in], v[row : row + fan_in]) if OWN_STEP else (m, v)  # (the base step's state)
        dj, fj = delta[j], factor[j]
        for i in range(fan_in):
            gr[i], decay[i] = fade_decay(gr[i], tr_[i], dj * inp[i], theta, fc)
        if back:
            for i in range(fan_in):
                delta_in[i] = fma(pr[i], dj, delta_in[i])
        for i in range(fan_in):
            xi = inp[i]
            tr_[i], w = fade_apply(decay[i], tr_[i], pr[i], xi * xi * fj, alpha, fc)
            pr[i] = own_step(w, dj * xi, mr, vr, i, alpha, oh, fc) if OWN_STEP else sgd(w, dj * xi, alpha)


@_dense
def fade_adam_rank_one(p, m, v, gm, tr, w0, e0, fan_in, fan_out, inp, delta, factor, alpha, theta, fc, first_step, ac,
                       back, delta_in, decay):
    """FADE then Adam on the layer whose W starts at p[w0] (its gamma and trace at gm[e0],
    tr[e0]); `back` as in `sgd_rank_one`; a row's passes as in `fade_sgd_rank_one`."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        row, e = w0 + j * fan_in, e0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]
        gr, tr_ = gm[e : e + fan_in], tr[e : e + fan_in]
        dj, fj = delta[j], factor[j]
        if back:
            for i in range(fan_in):
                delta_in[i] = fma(pr[i], dj, delta_in[i])
        for i in range(fan_in):
            gr[i], decay[i] = fade_decay(gr[i], tr_[i], dj * inp[i], theta, fc)
        for i in range(fan_in):
            xi = inp[i]
            alpha_eff = adam_alpha_eff(vr[i], alpha, first_step, ac)
            tr_[i], w = fade_apply(decay[i], tr_[i], pr[i], xi * xi * fj, alpha_eff, fc)
            mr[i], vr[i], pr[i] = adam(mr[i], vr[i], w, dj * xi, ac)


@_dense
def adam_rank_one(p, m, v, w0, fan_in, fan_out, inp, delta, shrink, ac, bound, back, delta_in):
    """Adam (AdamW's decoupled decay as `shrink`) on the layer whose W starts at p[w0], then
    clipping to +-bound (inf: none); `back` as in `sgd_rank_one`."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        row = w0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]
        dj = delta[j]
        if back:
            for i in range(fan_in):
                delta_in[i] = fma(pr[i], dj, delta_in[i])
        for i in range(fan_in):  # (a second loop over the row in L1: Adam's divisions bound it, not the loads)
            mr[i], vr[i], w = adam(mr[i], vr[i], decoupled_decay(pr[i], shrink), dj * inp[i], ac)
            pr[i] = clip_to(w, bound)


@_dense
def adam_rank_one_then_affine(p, m, v, w0, fan_in, fan_out, inp, delta, shrink, ac, bound, next_inp, z):
    """`adam_rank_one` and the next step's W @ next_inp (bias not added) a row at a time, as
    `sgd_rank_one_then_affine`. With delta = 0, shrink = 1, bound = inf and `null_adam`
    constants the step leaves W, m and v as they are, so that call is the forward pass alone
    and every W @ x of the first layer comes from this one function (identical rounding
    whatever the segmenting)."""
    for j in range(fan_out):
        row = w0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]
        dj = delta[j]
        for i in range(fan_in):
            mr[i], vr[i], w = adam(mr[i], vr[i], decoupled_decay(pr[i], shrink), dj * inp[i], ac)
            pr[i] = clip_to(w, bound)
        z[j] = dot(pr, next_inp, fan_in)


# A researcher's base step (`own_step`) in rows of its own, as the built-in steps have them
# (under FADE: `fade_sgd_rank_one`'s OWN_STEP copy): each slices the run's arrays to the row
# (own_step reads and writes its state at the row's index i), so LLVM vectorises it like the rows above.
@_dense
def own_rank_one(p, m, v, w0, fan_in, fan_out, inp, delta, alpha, shrink, bound, oh, fc, back, delta_in):
    """The base step `own_step` on the layer whose W starts at p[w0] (its state at m[w0], v[w0]
    when it keeps any), after AdamW's decoupled decay `shrink` (1: none) and before clipping to
    +-bound (inf: none), `parts.update`'s order; `back` as in `sgd_rank_one`."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        row = w0 + j * fan_in
        pr, mr, vr = p[row : row + fan_in], m[row : row + fan_in], v[row : row + fan_in]  # (m, v empty without state)
        dj = delta[j]
        if back:
            for i in range(fan_in):
                delta_in[i] = fma(pr[i], dj, delta_in[i])
        for i in range(fan_in):
            w = own_step(decoupled_decay(pr[i], shrink), dj * inp[i], mr, vr, i, alpha, oh, fc)
            pr[i] = clip_to(w, bound)


@_dense
def any_rank_one(p, m, v, gm, tr, w0, e0, fan_in, fan_out, inp, delta, factor, alpha, lam, shrink, theta, bound, fc,
                 first_step, ac, wd_mode, adam_base, clip_on, fade_on, back, delta_in, oh):
    """Any learner's parts on the layer whose W starts at p[w0] (`parts.update`'s order: FADE's
    decay, weight decay, base step, clipping), the parts chosen per call; `back` as in
    `sgd_rank_one`; with OWN_STEP, the base step is `own_step` (oh: its hyperparameters and constants).
    m, v: the base step's state, or None where it keeps none (the kernel's `stateful`: numba then
    compiles the loop without Adam's stores, whose run-time alias checks empty arrays could fail).
    The rows above are the faster special cases of the registered learners and of an own base step."""
    if back:
        delta_in[:] = 0
    for j in range(fan_out):
        row, e = w0 + j * fan_in, e0 + j * fan_in
        dj, fj = delta[j], factor[j]
        if back:
            for i in range(fan_in):
                delta_in[i] = fma(p[row + i], dj, delta_in[i])
        for i in range(fan_in):
            xi = inp[i]
            grad, w = dj * xi, p[row + i]
            if fade_on:
                alpha_eff = adam_alpha_eff(v[row + i], alpha, first_step, ac) if v is not None and adam_base else alpha
                gm[e + i], tr[e + i], w = fade(gm[e + i], tr[e + i], w, grad, xi * xi * fj, alpha_eff, theta, fc)
            if wd_mode == WD_COUPLED:
                grad = coupled_decay(grad, w, lam)
            elif wd_mode == WD_DECOUPLED:
                w = decoupled_decay(w, shrink)
            if OWN_STEP:
                w = own_step(w, grad, m, v, row + i, alpha, oh, fc)
            elif m is not None and adam_base:
                m[row + i], v[row + i], w = adam(m[row + i], v[row + i], w, grad, ac)
            else:
                w = sgd(w, grad, alpha)
            if clip_on:
                w = clip_to(w, bound)
            p[row + i] = w


@_dense
def update_bias(p, m, v, gm, tr, delta, factor, alpha, lam, shrink, theta, fc, wd_mode, adam_base, clip, bound, fade_on,
                first_step, ac, oh):
    """Any learner on a bias (gradient delta[j], FADE curvature factor[j]): FADE decay (if on),
    weight decay (decoupled: times `shrink`, the run's 1 - alpha * lambda), base step (OWN_STEP: as
    in `any_rank_one`), clipping; m, v as in `any_rank_one` (None: no state);
    in the parameters' dtype (the decayed FADE value is stored before the base step: a float64
    value here would make numba type w, and with it the whole step, float64 in float32 runs).
    One loop with the rule inline: a call per element cost an NRT incref/decref of each array."""
    for j in range(p.shape[0]):
        grad = delta[j]
        if fade_on:
            alpha_eff = adam_alpha_eff(v[j], alpha, first_step, ac) if v is not None and adam_base else alpha
            gm[j], tr[j], p[j] = fade(gm[j], tr[j], p[j], grad, factor[j], alpha_eff, theta, fc)
        w = p[j]
        if wd_mode == WD_COUPLED:
            grad = coupled_decay(grad, w, lam)
        elif wd_mode == WD_DECOUPLED:
            w = decoupled_decay(w, shrink)
        if OWN_STEP:
            w = own_step(w, grad, m, v, j, alpha, oh, fc)
        elif m is not None and adam_base:
            m[j], v[j], w = adam(m[j], v[j], w, grad, ac)
        else:
            w = sgd(w, grad, alpha)
        if clip:
            w = clip_to(w, bound)
        p[j] = w


# The activation and its derivative without a branch per unit: a ReLU's sign is a coin flip
# per unit and step, and the branches' mispredictions were a fifth of a nonlinear step's kernel time.
@_dense
def activate(z, out, active, slope):
    """out = leaky_relu(z); active |= z > 0."""
    for j in range(z.shape[0]):
        zj = z[j]
        positive = zj > 0
        out[j] = zj if positive else zj * slope
        active[j] = active[j] or positive


@_dense
def activation_backward(z, delta, slope):
    """delta *= leaky_relu'(z) (slope where z <= 0)."""
    for i in range(z.shape[0]):
        d = delta[i]
        delta[i] = d * slope if z[i] <= 0 else d
