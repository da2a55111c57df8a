"""Fused Triton kernels for the neural learners' parameter updates: one pass over a parameter
and its optimizer state per step instead of torch_ops' chain of about ten batched ops, each of
which reads and writes every run's state (the update is memory-bound: Adam on EMNIST ran at a
sixth of SGD's rate on an H200).

One kernel covers every parameter whose update is more than a rank-one SGD step: Adam's
(adam, adamw, adam_wclip, fade_adam: both moments, decoupled decay, clipping) and FADE's with an
SGD base (fade_sgd's head, fade_sgd_all's layers). The gradient delta x^T and FADE's curvature
x^2 (times p(1-p) on a classification head) are formed in registers and never stored.

The arithmetic is the rule's (`parts.update`, printed by triton_rule and passed to the kernel
as RULE), op for op in the run's dtype: IEEE division and square root, exp from libdevice, FMA
only where the rule writes one (launched with fp_fusion off: no other contraction). The kernel
itself is the memory pass: which state it loads and stores, the gradient's factors.
tests/test_triton.py holds it to the torch ops and tests/test_triton_oracle.py to the plain
one-run loop, in Triton's interpreter (TRITON_INTERPRET=1, on CPUs) and, compiled, on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from fade_core.neural import triton_rule
from fade_core.neural.rules import NeuralLearner

MAX_BLOCK = 1024  # elements per program: 8 per thread at 4 warps


@triton.jit
def _update_kernel(
    p_ptr, m_ptr, v_ptr, gamma_ptr, trace_ptr,  # per-run rows of this parameter's state
    delta_ptr, x_ptr, hf_ptr,  # the gradient's factors: delta [R, out], layer input [R, in], p(1-p) [R, out]
    alpha_ptr, lam_ptr, theta_ptr, bound_ptr,  # per run [R]
    step_ptr, sqrt_bc2_ptr, inv_bc2_ptr,  # Adam's scalars for this step: [R], [], []
    p_row, state_row, fade_row, delta_row, x_row, hf_row,  # row (run) strides
    n_in, numel, blocks,
    RULE: tl.constexpr,  # triton_rule.rule_for(learner, FADE)
    ADAM: tl.constexpr, FADE: tl.constexpr,  # which state the rule reads and writes
    WEIGHT: tl.constexpr, HEAD_FACTOR: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    run = (pid // blocks).to(tl.int64)
    offs = (pid % blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    p = tl.load(p_ptr + run * p_row + offs, mask=mask)
    out = offs // n_in if WEIGHT else offs
    delta = tl.load(delta_ptr + run * delta_row + out, mask=mask)
    q = tl.full([], 1.0, p.dtype)
    if WEIGHT:
        x = tl.load(x_ptr + run * x_row + offs % n_in, mask=mask)
        grad = delta * x
        q = x * x
    else:
        grad = delta
    if HEAD_FACTOR:
        q = q * tl.load(hf_ptr + run * hf_row + out, mask=mask)
    m, v, gamma, trace = p, p, p, p  # read only where a part uses them
    if ADAM:
        m = tl.load(m_ptr + run * state_row + offs, mask=mask)
        v = tl.load(v_ptr + run * state_row + offs, mask=mask)
    if FADE:
        gamma = tl.load(gamma_ptr + run * fade_row + offs, mask=mask)
        trace = tl.load(trace_ptr + run * fade_row + offs, mask=mask)
    p, m, v, gamma, trace = RULE(  # (a per-run scalar the rule does not read: a pointer that stands in)
        p, grad, q, tl.load(alpha_ptr + run), tl.load(lam_ptr + run), tl.load(theta_ptr + run),
        tl.load(bound_ptr + run), m, v, gamma, trace, tl.load(step_ptr + run), tl.load(sqrt_bc2_ptr),
        tl.load(inv_bc2_ptr), True)
    if FADE:
        tl.store(gamma_ptr + run * fade_row + offs, gamma, mask=mask)
        tl.store(trace_ptr + run * fade_row + offs, trace, mask=mask)
    if ADAM:
        tl.store(m_ptr + run * state_row + offs, m, mask=mask)
        tl.store(v_ptr + run * state_row + offs, v, mask=mask)
    tl.store(p_ptr + run * p_row + offs, p, mask=mask)


@dataclass
class AdamStep:
    """Adam's state for one parameter and this step's scalars (TorchOps.adam_scalars)."""

    m: torch.Tensor  # shaped like the parameter
    v: torch.Tensor
    step: torch.Tensor  # [R] alpha / (1 - beta1^(k+1))
    sqrt_bc2: torch.Tensor  # [] sqrt(1 - beta2^(k+1))
    inv_bc2_before: torch.Tensor  # [] 1 / (1 - beta2^k), 0 when k = 0


@dataclass
class FadeState:
    """FADE's per-element log decay and trace for one parameter, and the runs' meta step size."""

    gamma: torch.Tensor  # shaped like the parameter
    trace: torch.Tensor
    theta_lambda: torch.Tensor  # [R]


def _rows(a: torch.Tensor, b: torch.Tensor, like: torch.Tensor) -> int:
    """The shared run stride of two state tensors laid out like the parameter `like` within a run."""
    for t in (a, b):
        if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device or not t[0].is_contiguous():
            raise ValueError(f"fused update: state {tuple(t.shape)} {t.dtype} does not match the parameter's "
                             f"{tuple(like.shape)} {like.dtype}")
    if a.stride(0) != b.stride(0):
        raise ValueError(f"fused update: state rows differ in stride ({a.stride(0)} vs {b.stride(0)})")
    return a.stride(0)


def update(learner: NeuralLearner, param: torch.Tensor, delta: torch.Tensor, x: torch.Tensor | None,
           alpha: torch.Tensor, *, adam: AdamStep | None = None, fade: FadeState | None = None,
           lam: torch.Tensor | None = None, bound: torch.Tensor | None = None,
           head_factor: torch.Tensor | None = None) -> None:
    """One step of `learner`'s rule (algorithms.md §2) on `param` ([R, out, in] weight or [R, out]
    bias) in place, in one kernel launch, with gradient delta x^T (delta for a bias): Adam's state
    and scalars in `adam`, FADE's (FADE's part on this parameter) in `fade`, lambda and the clip
    bound per run where the learner reads them.
    `head_factor` [R, out] multiplies FADE's curvature (p(1-p) on a classification head).
    Every tensor stays on the device: the launch can be captured in a CUDA graph."""
    weight = x is not None
    runs = param.shape[0]
    numel = param[0].numel()
    n_in = param.shape[2] if weight else 1
    if param.shape[1:] != ((delta.shape[1], n_in) if weight else (delta.shape[1],)):
        raise ValueError(f"fused update: parameter {tuple(param.shape)} does not match delta {tuple(delta.shape)}")
    delta = delta.contiguous()
    x = x.contiguous() if weight else delta
    hf = head_factor.contiguous() if head_factor is not None else delta
    if not param[0].is_contiguous():
        raise ValueError(f"fused update: each run's parameter must be contiguous, strides {param.stride()}")
    block = min(MAX_BLOCK, max(16, triton.next_power_of_2(numel)))
    blocks = triton.cdiv(numel, block)
    unused = alpha  # pointer arguments a variant does not read
    _update_kernel[(runs * blocks,)](
        param, adam.m if adam else param, adam.v if adam else param,
        fade.gamma if fade else param, fade.trace if fade else param,
        delta, x, hf,
        alpha, unused if lam is None else lam, fade.theta_lambda if fade else unused,
        unused if bound is None else bound,
        adam.step if adam else unused, adam.sqrt_bc2 if adam else unused, adam.inv_bc2_before if adam else unused,
        param.stride(0), _rows(adam.m, adam.v, param) if adam else 0,
        _rows(fade.gamma, fade.trace, param) if fade else 0,
        delta.stride(0), x.stride(0), hf.stride(0),
        n_in, numel, blocks,
        RULE=triton_rule.rule_for(learner, fade is not None), ADAM=adam is not None, FADE=fade is not None,
        WEIGHT=weight, HEAD_FACTOR=head_factor is not None, BLOCK=block,
        enable_fp_fusion=False,
    )
