"""The CPU engine of fade_core.neural: a whole segment of steps for R runs in one compiled call.

Batched tensor ops stream every run's weights through memory once per op and step; on
a CPU that is memory-bound (an EMNIST run has 287k parameters). Here each run instead
stays in one thread for the whole segment and its parameters stay in cache: forward,
loss, backward, every update of algorithms.md §2 and the metric sums, step after step.
Runs are spread over threads (prange); a run's arithmetic does not depend on which
other runs share the call, so pack invariance is exact.

The rules are those of fade_core.neural.torch_ops (the "torch" engine, the reference), per
element; tests check both against the same plain PyTorch reference. Compiled with no
fast-math flag (cpu_elements.FASTMATH), its dot products and hot multiply-adds written out
(cpu_arith), so a process that loads the kernel from numba's cache computes what one that
compiled it does.

`run_segment` takes its arrays as named tuples (numba compiles them as structs), so a
caller cannot pass one run array where another belongs without naming it. It walks a run's
steps (forward, loss, backward) and picks each layer's pass over its weights; those passes
(one per combination of learner parts, each fused with a product) are `cpu_layers`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from fade_core.neural.cpu_elements import ERRORS, FASTMATH, adam_constants, clip_bound, fade_constants, null_adam
from fade_core.neural.cpu_elements import shrink as shrink_factor
from fade_core.neural.cpu_layers import (
    OWN_STEP,
    activate,
    activation_backward,
    adam_rank_one,
    adam_rank_one_then_affine,
    affine,
    any_rank_one,
    fade_adam_rank_one,
    fade_sgd_rank_one,
    own_rank_one,
    sgd_l2_rank_one,
    sgd_rank_one,
    sgd_rank_one_then_affine,
    update_bias,
)
from fade_core.neural.rules import WD_COUPLED, WD_DECOUPLED, WD_NONE


class Setup(NamedTuple):
    """What a segment runs: the network's shape, the loss, the learner's parts."""

    sizes: np.ndarray  # (L+1,) int64 layer widths, input first
    starts: np.ndarray  # (2L+1,) int64 offsets of [W0, b0, W1, ...] in a run's flat parameters, then n
    negative_slope: float  # of the hidden activation (0: ReLU)
    classification: bool  # cross-entropy on labels (else half squared error on values)
    adam: bool  # base step Adam (else SGD)
    own: bool  # base step a researcher's (`cpu_layers.own_step`, as cpu_own rebinds it), whatever `adam` says
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
    own: np.ndarray  # (R, K): an own base step's hyperparameters, then its constants ((R, 0) for sgd, adam)


class RunState(NamedTuple):
    """Per-run state, updated in place."""

    params: np.ndarray  # (R, n) flat parameters
    adam_m: np.ndarray  # (R, n) first moments, or an own base step's first state ((R, 0) without)
    adam_v: np.ndarray  # (R, n) second moments, or an own base step's second state ((R, 0) without)
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


@numba.njit(fastmath=FASTMATH, error_model=ERRORS, parallel=True, cache=True)
def run_segment(setup, hp, state, data, sums):
    """Advance R runs by data.x.shape[0] steps: `Setup`, `RunHyperparameters`,
    `RunState` (updated in place), `Stream`, `Sums` (accumulated in place)."""
    sizes, starts, classification = setup.sizes, setup.starts, setup.classification
    adam_base, wd_mode, clip, fade_start, adam_steps = setup.adam, setup.weight_decay, setup.clip, setup.fade_start, setup.adam_steps
    own = setup.own
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
        a, la, th, oh = alpha[r], lam[r], theta[r], hp.own[r]
        # A base step without state (m, v empty) gets none for them in the loops that store to them
        # under a run-time flag (update_bias, any_rank_one): numba then compiles those loops without
        # the stores. With empty arrays LLVM's vectorised loop checked at run time that the stores'
        # ranges [m, m + n) and [v, v + n) overlap nothing, and two empty arrays' pointers are wherever
        # the allocator put them: 224 bytes apart, every bias of the pack took the scalar loop
        # (fade_sgd_all 6% slower; a layout of the process, not of the code). In cpu_own's copy (OWN_STEP)
        # always the arrays: the none branches are pruned before typing, where an own step's state would not type.
        stateful = m.shape[0] > 0
        acts = np.empty(n_in + units - n_out, dtype=params.dtype)  # each layer's input, concatenated
        z = np.empty(units, dtype=params.dtype)  # pre-activations of every layer
        delta = np.empty(units, dtype=params.dtype)
        row_buffer = np.empty(sizes[:-1].max(), dtype=params.dtype)  # a weight row's decay rates
        ones = np.ones(units, dtype=params.dtype)
        adam_scalars = np.empty(7, dtype=params.dtype)
        bounds = np.empty(layers, dtype=params.dtype)  # each layer's clipping bound (inf: none)
        for layer in range(layers):
            bounds[layer] = clip_bound(kappa[r], sizes[layer]) if clip else np.inf
        fc = fade_constants(params)
        one = ones[0]  # 1 in the parameters' dtype (numba makes float32 op int a float64)
        head_factor = np.ones(n_out, dtype=params.dtype)
        shrink = shrink_factor(a, la, fc) if wd_mode == WD_DECOUPLED else one  # AdamW's decay factor
        # A plain-SGD or any Adam first layer (not under FADE) fuses its update with the next
        # step's forward (see sgd_rank_one_then_affine, adam_rank_one_then_affine);
        # z[:sizes[1]] then holds W0 @ x_t when step t starts.
        fused_sgd = not (fade_start == 0 or adam_base or clip or wd_mode != WD_NONE or own)
        fused_adam = adam_base and fade_start > 0 and wd_mode != WD_COUPLED and not own
        # Parts no special row below combines (FADE with weight decay or clipping, SGD with
        # decoupled decay or clipped coupled decay, Adam or an own base step with coupled decay):
        # `any_rank_one`.
        general = (wd_mode == WD_COUPLED and (adam_base or clip or own)) or (wd_mode == WD_DECOUPLED and not (adam_base or own))
        general_fade = general or wd_mode != WD_NONE or clip
        fused = fused_sgd or fused_adam
        zero_in = np.zeros(n_in, dtype=params.dtype)
        # (starts[0], not a literal 0: a literal would compile a differently-vectorised copy)
        if fused_sgd:
            sgd_rank_one_then_affine(p, starts[0], n_in, sizes[1], zero_in, ones, one - one, x[0, s], z)
        elif fused_adam:
            null = null_adam(adam_scalars)
            adam_scalars[0] = np.inf
            adam_rank_one_then_affine(p, m, v, starts[0], n_in, sizes[1], zero_in, ones - ones, one, null,
                                      adam_scalars[0], x[0, s], z)
        for t in range(steps):
            k = adam_steps + t + 1  # this step's Adam step number
            ac = adam_constants(a, k, adam_scalars)  # a tuple: adam_scalars is free for reuse
            acts[:n_in] = x[t, s]
            # forward
            a_off, z_off = 0, 0
            for layer in range(layers):
                fan_in, fan_out = sizes[layer], sizes[layer + 1]
                if layer == 0 and fused:
                    for j in range(fan_out):
                        z[j] = z[j] + p[starts[1] + j]
                else:
                    affine(p, starts[2 * layer], starts[2 * layer + 1], fan_in, fan_out, acts[a_off : a_off + fan_in],
                           z[z_off : z_off + fan_out])
                if layer < layers - 1:
                    activate(z[z_off : z_off + fan_out], acts[a_off + fan_in : a_off + fan_in + fan_out],
                             active[r, z_off : z_off + fan_out], slope)
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
            # backward and updates, head first: a layer's update pass also carries delta down
            # through its weights before the step (the layers' updates are independent)
            z_off, a_off = out, acts.shape[0]
            first = k == 1
            for layer in range(layers - 1, -1, -1):
                fan_in, fan_out = sizes[layer], sizes[layer + 1]
                w0, b0 = starts[2 * layer], starts[2 * layer + 1]
                below, a_off = z_off - fan_in, a_off - fan_in
                inp, d_layer = acts[a_off : a_off + fan_in], delta[z_off : z_off + fan_out]
                back = layer > 0
                d_in = delta[below:z_off] if back else delta[:0]
                fade_on = w0 >= fade_start
                factor = head_factor if layer == layers - 1 and classification else ones[:fan_out]
                if general_fade if fade_on else general:
                    layer_args = (gm, tr, w0, w0 - fade_start, fan_in, fan_out, inp, d_layer, factor, a, la, shrink, th,
                                  bounds[layer], fc, first, ac, wd_mode, adam_base, clip, fade_on, back, d_in, oh)
                    if stateful or OWN_STEP:
                        any_rank_one(p, m, v, *layer_args)
                    else:
                        any_rank_one(p, None, None, *layer_args)
                elif fade_on and (own or not adam_base):  # (own: cpu_own's copy, whose base step is own_step)
                    fade_sgd_rank_one(p, m, v, gm, tr, w0, w0 - fade_start, fan_in, fan_out, inp, d_layer, factor, a, th, fc,
                                      oh, back, d_in, row_buffer)
                elif own:
                    own_rank_one(p, m, v, w0, fan_in, fan_out, inp, d_layer, a, shrink, bounds[layer], oh, fc, back, d_in)
                elif fade_on:
                    fade_adam_rank_one(p, m, v, gm, tr, w0, w0 - fade_start, fan_in, fan_out, inp, d_layer, factor, a, th,
                                       fc, first, ac, back, d_in, row_buffer)
                elif layer == 0 and fused_adam:
                    adam_rank_one_then_affine(p, m, v, w0, fan_in, fan_out, inp, d_layer, shrink, ac, bounds[0],
                                              x[t + 1, s] if t + 1 < steps else zero_in, z)
                elif adam_base:
                    adam_rank_one(p, m, v, w0, fan_in, fan_out, inp, d_layer, shrink, ac, bounds[layer], back, d_in)
                elif layer == 0 and fused_sgd:
                    sgd_rank_one_then_affine(p, w0, fan_in, fan_out, inp, d_layer, a,
                                             x[t + 1, s] if t + 1 < steps else zero_in, z)
                elif wd_mode == WD_COUPLED:
                    sgd_l2_rank_one(p, w0, fan_in, fan_out, inp, d_layer, a, la, back, d_in)
                else:  # SGD, clipped after the step (+-inf without clipping)
                    sgd_rank_one(p, w0, fan_in, fan_out, inp, d_layer, a, bounds[layer], back, d_in)
                if back:  # through the activation below
                    activation_backward(z[below:z_off], d_in, slope)
                bias = (gm[b0 - fade_start : b0 - fade_start + fan_out] if fade_on else gm,
                        tr[b0 - fade_start : b0 - fade_start + fan_out] if fade_on else tr, d_layer, factor, a, la,
                        shrink, th, fc, wd_mode, adam_base, clip, bounds[layer], fade_on, first, ac, oh)
                if stateful or OWN_STEP:
                    update_bias(p[b0 : b0 + fan_out], m[b0 : b0 + fan_out], v[b0 : b0 + fan_out] if v.shape[0] else v,
                                *bias)
                else:
                    update_bias(p[b0 : b0 + fan_out], None, None, *bias)
                z_off = below
