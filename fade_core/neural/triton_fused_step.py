"""The whole step of a neural pack on CUDA with the fewest passes over the weights: Triton kernels
that read each weight once per pass and do every part of algorithms.md §2 that needs it there.

At batch size 1 a step of R runs is memory-bound: an EMNIST run (784-300-150-47) has 287,747
float32 parameters (1.15 MB; 3.45 MB with Adam's moments), far over what an SM keeps, so every
pass over a layer's weights streams them through HBM. Two kernels, as the CPU kernel's passes
(cpu_kernel.py):

  layer 0      `_update_forward_kernel`: the step's update of W0, b0 (any learner: its rule
               printed by triton_rule) and, from the updated weights, the NEXT step's W0 x' + b0,
               whose input x' is known: one read and one write of W0 per step.
  layers >= 1  `_backward_update_kernel`: delta_in = W^T delta read from the weights before the
               step (as the torch ops' backward, then the update) in the same pass that updates
               W and b, with the activation's derivative below applied; then the next step's
               forward product W h + b is a second read (torch's bmm: the layer's input needs
               the layer below updated, which needs this layer's delta_in first).

Reads (R) and writes (W) of each array per step and run, EMNIST, before (torch ops' forward and
backward products, plus triton_update's per-parameter kernel, or baddbmm for plain SGD) and after:

  | array                 | elements | before        | after         |
  |-----------------------|---------:|---------------|---------------|
  | W0, b0                |  235,500 | 2 R, 1 W      | 1 R, 1 W      |
  | W1, b1                |   45,150 | 3 R, 1 W      | 2 R, 1 W      |
  | W2, b2 (head)         |    7,097 | 3 R, 1 W      | 2 R, 1 W      |
  | Adam m, v (each)      |  287,747 | 1 R, 1 W      | 1 R, 1 W      |
  | FADE gamma, trace     | head / all | 1 R, 1 W    | 1 R, 1 W      |
  (sgd_wclip's clamp and sgd_wd's three-op chain added 1-3 passes over all weights before.)

Bytes per run-step and the bound they give at ~3.0 TB/s (the H100's measured device copy):

  | learner        | before MB | bound before | after MB | bound after |
  |----------------|----------:|-------------:|---------:|------------:|
  | sgd            |      3.66 |         820K |     2.51 |       1.19M |
  | fade_sgd       |      3.78 |         795K |     2.62 |       1.14M |
  | adam, adamw    |      8.27 |         363K |     7.11 |        422K |
  | fade_adam      |      8.38 |         358K |     7.23 |        415K |
  | fade_sgd_all   |      8.27 |         363K |     7.11 |        422K |

(run-steps/s; the layer inputs, deltas and per-run scalars are under 0.1% of it.) A pack whose
state fits the L2 cache (50 MB on an H100: ~40 SGD runs) reads it from there instead; see
benchmarks/bench_neural.py --streams.

A segment of T steps makes one forward-only pass over W0 at its start (the same kernel with the
update off, so W0 x comes from the same loop whatever the segmenting: a run's numbers do not
depend on the chunking). Everything stays on the device: a segment can be captured in a CUDA graph.
The arithmetic of each element's update is the learner's rule (`parts.update`) printed by
triton_rule, as in triton_update's kernel; only the sums' order differs from torch's products.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from fade_core.neural.triton_rule import rule_for

# torch_ops.TorchOps and state.StepSums (torch_ops imports this module on first use): named, not imported.
Ops = Any
Sums = Any

MAX_TILE = 2048  # weight elements per program and loop iteration: 16 per thread at 4 warps


@triton.jit
def _load_state(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, at, fade_at, mask, ADAM: tl.constexpr, FADE: tl.constexpr):
    """Elements `at` of the parameters (and moments) and `fade_at` of FADE's arrays, each row a run's."""
    p = tl.load(p_ptr + at, mask=mask, other=0.0)
    m, v, g, t = p, p, p, p  # read only where a part uses them
    if ADAM:
        m = tl.load(m_ptr + at, mask=mask, other=0.0)
        v = tl.load(v_ptr + at, mask=mask, other=0.0)
    if FADE:
        g = tl.load(g_ptr + fade_at, mask=mask, other=0.0)
        t = tl.load(t_ptr + fade_at, mask=mask, other=0.0)
    return p, m, v, g, t


@triton.jit
def _store_state(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, at, fade_at, mask, p, m, v, g, t,
                 ADAM: tl.constexpr, FADE: tl.constexpr):
    tl.store(p_ptr + at, p, mask=mask)
    if ADAM:
        tl.store(m_ptr + at, m, mask=mask)
        tl.store(v_ptr + at, v, mask=mask)
    if FADE:
        tl.store(g_ptr + fade_at, g, mask=mask)
        tl.store(t_ptr + fade_at, t, mask=mask)


@triton.jit
def _update(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, at, fade_at, mask, grad, q, hp_ptr, scalars_ptr, run, runs,
            RULE: tl.constexpr, ADAM: tl.constexpr, FADE: tl.constexpr):
    """Load, RULE (the learner's update printed by triton_rule), store: one step on the elements
    `at` given their gradient and curvature.
    hp_ptr: [5, R] alpha, lambda, theta_lambda, clip bound, Adam's step; scalars_ptr: [2] Adam's
    sqrt(1 - beta2^k) and 1 / (1 - beta2^(k-1)). Returns the weights before the step."""
    p, m, v, g, t = _load_state(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, at, fade_at, mask, ADAM, FADE)
    new_p, m, v, g, t = RULE(p, grad, q, tl.load(hp_ptr + run), tl.load(hp_ptr + runs + run),
                             tl.load(hp_ptr + 2 * runs + run), tl.load(hp_ptr + 3 * runs + run), m, v, g, t,
                             tl.load(hp_ptr + 4 * runs + run), tl.load(scalars_ptr), tl.load(scalars_ptr + 1), True)
    _store_state(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, at, fade_at, mask, new_p, m, v, g, t, ADAM, FADE)
    return p, new_p


@triton.jit
def _update_forward_kernel(
    p_ptr, m_ptr, v_ptr, g_ptr, t_ptr,  # flat state: parameters and moments [R, n], FADE's [R, n - fade_start]
    delta_ptr, x_ptr, hf_ptr, next_ptr, z_ptr,  # delta [R, out], input [R, in], p(1-p) [R, out], next input, z out
    hp_ptr, scalars_ptr,
    w0, b0, fw0, fb0, p_row, f_row, in_row, out_row, runs, fan_in, fan_out,
    UPDATE: tl.constexpr, FORWARD: tl.constexpr, HEAD_FACTOR: tl.constexpr,
    RULE: tl.constexpr, ADAM: tl.constexpr, FADE: tl.constexpr,
    BJ: tl.constexpr, BI: tl.constexpr,
):
    """Program (run, block of BJ output rows): the rows' update, then z = W x' + b from the
    updated rows (FORWARD). Row-major weights: a tile's columns are contiguous."""
    run = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BJ + tl.arange(0, BJ)
    row_ok = rows < fan_out
    p_base, f_base, in_base, out_base = run * p_row, run * f_row, run * in_row, run * out_row
    d = tl.load(delta_ptr + out_base + rows, mask=row_ok, other=0.0)  # (a dummy without UPDATE)
    hf = tl.full([BJ], 1.0, p_ptr.dtype.element_ty)
    if HEAD_FACTOR:
        hf = tl.load(hf_ptr + out_base + rows, mask=row_ok, other=1.0)
    acc = tl.zeros([BJ], dtype=p_ptr.dtype.element_ty)
    for i0 in range(0, fan_in, BI):
        cols = i0 + tl.arange(0, BI)
        col_ok = cols < fan_in
        mask = row_ok[:, None] & col_ok[None, :]
        at = rows[:, None] * fan_in + cols[None, :]
        if UPDATE:
            x = tl.load(x_ptr + in_base + cols, mask=col_ok, other=0.0)[None, :]
            q = x * x
            if HEAD_FACTOR:
                q = q * hf[:, None]
            _, w = _update(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, p_base + w0 + at, f_base + fw0 + at, mask,
                           d[:, None] * x, q, hp_ptr, scalars_ptr, run, runs, RULE, ADAM, FADE)
        else:
            w = tl.load(p_ptr + p_base + w0 + at, mask=mask, other=0.0)
        if FORWARD:
            x_next = tl.load(next_ptr + in_base + cols, mask=col_ok, other=0.0)
            acc += tl.sum(w * x_next[None, :], axis=1)
    if UPDATE:
        _, b = _update(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, p_base + b0 + rows, f_base + fb0 + rows, row_ok, d,
                       hf, hp_ptr, scalars_ptr, run, runs, RULE, ADAM, FADE)
    else:
        b = tl.load(p_ptr + p_base + b0 + rows, mask=row_ok)
    if FORWARD:
        tl.store(z_ptr + out_base + rows, acc + b, mask=row_ok)


@triton.jit
def _backward_update_kernel(
    p_ptr, m_ptr, v_ptr, g_ptr, t_ptr,
    delta_ptr, x_ptr, hf_ptr, pre_ptr, below_ptr, slope_ptr,  # pre: the pre-activation below, below: delta_in out
    hp_ptr, scalars_ptr,
    w0, b0, fw0, fb0, p_row, f_row, delta_row, in_row, runs, fan_in, fan_out,
    HEAD_FACTOR: tl.constexpr,
    RULE: tl.constexpr, ADAM: tl.constexpr, FADE: tl.constexpr,
    BJ: tl.constexpr, BI: tl.constexpr,
):
    """Program (run, block of BI input columns): for every output row, W^T delta on the columns
    from the weights before the step, and the step; the biases by column block 0; then the
    activation's derivative: delta_in = back where pre > 0, else back * slope (torch's order)."""
    run = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    cols = block * BI + tl.arange(0, BI)
    col_ok = cols < fan_in
    p_base, f_base = run * p_row, run * f_row
    x = tl.load(x_ptr + run * in_row + cols, mask=col_ok, other=0.0)[None, :]
    back = tl.zeros([BI], dtype=p_ptr.dtype.element_ty)
    for j0 in range(0, fan_out, BJ):
        rows = j0 + tl.arange(0, BJ)
        row_ok = rows < fan_out
        d = tl.load(delta_ptr + run * delta_row + rows, mask=row_ok, other=0.0)
        hf = tl.full([BJ], 1.0, p_ptr.dtype.element_ty)
        q = x * x
        if HEAD_FACTOR:
            hf = tl.load(hf_ptr + run * delta_row + rows, mask=row_ok, other=1.0)
            q = q * hf[:, None]
        at = rows[:, None] * fan_in + cols[None, :]
        w, _ = _update(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, p_base + w0 + at, f_base + fw0 + at,
                       row_ok[:, None] & col_ok[None, :], d[:, None] * x, q, hp_ptr, scalars_ptr, run, runs,
                       RULE, ADAM, FADE)
        back += tl.sum(w * d[:, None], axis=0)
        _update(p_ptr, m_ptr, v_ptr, g_ptr, t_ptr, p_base + b0 + rows, f_base + fb0 + rows, row_ok & (block == 0), d,
                hf, hp_ptr, scalars_ptr, run, runs, RULE, ADAM, FADE)
    pre = tl.load(pre_ptr + run * in_row + cols, mask=col_ok, other=0.0)
    below = tl.where(pre > 0, back, back * tl.load(slope_ptr))
    tl.store(below_ptr + run * in_row + cols, below, mask=col_ok)


def _blocks(fan_in: int, fan_out: int, widest: int) -> tuple[int, int]:
    """(BJ rows, BI columns) of a tile: BI up to `widest` contiguous columns, MAX_TILE elements at most."""
    bi = min(widest, triton.next_power_of_2(fan_in))
    return min(triton.next_power_of_2(fan_out), max(1, MAX_TILE // bi)), bi


class _Launcher:
    """One segment's fixed arguments: the state buffers, the per-layer hyperparameter tables
    ([layers, 5, R]: alpha, lambda, theta_lambda, clip bound, Adam's step) and the learner's flags."""

    def __init__(self, ops: Ops):
        runs = ops.runs
        learner, net, hp = runs.learner, runs.net, runs.hp
        flat = net.flat
        self.ops, self.runs, self.net, self.sizes = ops, runs, net, net.arch.sizes
        self.starts = net.arch.offsets()
        self.adam = learner.base == "adam"
        zeros = torch.zeros_like(hp["alpha"])
        rows = [hp["alpha"], hp.get("lambda", zeros), hp.get("theta_lambda", zeros), zeros, zeros]
        self.tables = torch.stack([torch.stack(rows)] * net.arch.layers).contiguous()
        if learner.clip:
            for layer in range(net.arch.layers):
                self.tables[layer, 3] = ops.clip_bound(layer)
        self.scalars = flat.new_zeros(2)  # Adam's sqrt(1 - beta2^k), 1 / (1 - beta2^(k-1))
        # A fill, not a host copy (none may run while a CUDA graph is captured); in the run's dtype, as torch's backward
        self.slope = flat.new_full((), net.arch.negative_slope)
        self.learner = learner
        for t in (flat, runs.adam_m_flat, runs.adam_v_flat, runs.gamma_flat, runs.trace_flat):
            if t.numel() and not t.is_contiguous():
                raise ValueError(f"fused step: state buffers must be contiguous, strides {t.stride()}")

    def new_step(self) -> None:
        """This step's Adam scalars (torch_ops' adam_scalars, in float64 then the run's dtype)."""
        if self.adam:
            step, sqrt_bc2, inv_bc2_before, _ = self.ops.adam_scalars(self.runs.adam_steps)
            self.tables[:, 4] = step
            self.scalars[0] = sqrt_bc2
            self.scalars[1] = inv_bc2_before

    def state(self, layer: int) -> tuple[list, list, dict]:
        """Pointers, offsets and strides of a layer's state, and its rule and flags."""
        runs, flat = self.runs, self.net.flat
        fade = 2 * layer in runs.fade_index
        moments = [runs.adam_m_flat, runs.adam_v_flat] if self.adam else [flat, flat]
        traces = [runs.gamma_flat, runs.trace_flat] if fade else [flat, flat]
        w0, b0 = self.starts[2 * layer], self.starts[2 * layer + 1]
        shift = runs.fade_start if fade else w0
        offsets = [w0, b0, w0 - shift, b0 - shift, flat.stride(0), traces[0].stride(0)]
        return [flat, *moments, *traces], offsets, {"RULE": rule_for(self.learner, fade), "ADAM": self.adam, "FADE": fade}

    def update_forward(self, delta: torch.Tensor | None, x: torch.Tensor, head_factor: torch.Tensor | None,
                       x_next: torch.Tensor | None) -> torch.Tensor | None:
        """Layer 0: the step's update (unless `delta` is None), then W0 x_next + b0 (if x_next)."""
        fan_in, fan_out = self.sizes[0], self.sizes[1]
        runs = self.net.runs
        z = x.new_empty(runs, fan_out) if x_next is not None else None
        buffers, offsets, flags = self.state(0)
        some = x.new_empty(runs, fan_out) if delta is None else delta  # read, unused, without an update
        bj, bi = _blocks(fan_in, fan_out, 128)
        _update_forward_kernel[(runs, triton.cdiv(fan_out, bj))](
            *buffers, some, x, some if head_factor is None else head_factor, x if x_next is None else x_next,
            some if z is None else z, self.tables[0], self.scalars, *offsets, fan_in, fan_out, runs, fan_in, fan_out,
            UPDATE=delta is not None, FORWARD=x_next is not None,
            HEAD_FACTOR=head_factor is not None and flags["FADE"] and self.net.arch.layers == 1,
            **flags, BJ=bj, BI=bi, enable_fp_fusion=False,
        )
        return z

    def backward_update(self, layer: int, delta: torch.Tensor, x: torch.Tensor, pre: torch.Tensor,
                        head_factor: torch.Tensor | None) -> torch.Tensor:
        """Layer >= 1: delta of the layer below (through the activation) and this layer's step."""
        fan_in, fan_out = self.sizes[layer], self.sizes[layer + 1]
        runs = self.net.runs
        below = x.new_empty(runs, fan_in)
        buffers, offsets, flags = self.state(layer)
        head = head_factor is not None and flags["FADE"] and layer == self.net.arch.layers - 1
        bj, bi = _blocks(fan_in, fan_out, 64)
        _backward_update_kernel[(runs, triton.cdiv(fan_in, bi))](
            *buffers, delta, x, head_factor if head else delta, pre, below, self.slope, self.tables[layer],
            self.scalars, *offsets, fan_out, fan_in, runs, fan_in, fan_out,
            HEAD_FACTOR=head, **flags, BJ=bj, BI=bi, enable_fp_fusion=False,
        )
        return below


def advance(ops: Ops, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: Sums) -> None:
    """The "triton_step" engine's segment (torch_ops.TorchOps with whole_step: its runs' state, its
    score and Adam scalars): x.shape[0] steps, run r reading slot run_slot[r]."""
    runs = ops.runs
    launch = _Launcher(ops)
    steps = x.shape[0]

    def sample(t: int) -> torch.Tensor:
        return x[t].index_select(0, run_slot).contiguous()

    x_now = sample(0)
    z0 = launch.update_forward(None, x_now, None, x_now)  # the segment's one forward-only pass over W0
    for t in range(steps):
        cache = runs.net.forward(x_now, first=z0)
        result, delta, head_factor = ops.score(cache, target[t].index_select(0, run_slot))
        sums.add(result)
        launch.new_step()
        delta = delta.contiguous()
        for layer in range(runs.net.arch.layers - 1, 0, -1):
            delta = launch.backward_update(layer, delta, cache.inputs[layer].contiguous(),
                                           cache.preactivations[layer - 1].contiguous(), head_factor)
        x_next = sample(t + 1) if t + 1 < steps else None
        z0 = launch.update_forward(delta, x_now, head_factor, x_next)
        if launch.adam:
            runs.adam_steps += 1
        x_now = x_next
