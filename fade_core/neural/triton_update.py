"""Fused Triton kernels for the neural learners' parameter updates: one pass over a parameter
and its optimizer state per step instead of torch_ops' chain of about ten batched ops, each of
which reads and writes every run's state (the update is memory-bound: Adam on EMNIST ran at a
sixth of SGD's rate on an H200).

One kernel covers every parameter whose update is more than a rank-one SGD step: Adam's
(adam, adamw, adam_wclip, fade_adam: both moments, decoupled decay, clipping) and FADE's with an
SGD base (fade_sgd's head, fade_sgd_all's layers). The gradient delta x^T and FADE's curvature
x^2 (times p(1-p) on a classification head) are formed in registers and never stored.

The arithmetic is torch_ops' op for op, in the run's dtype: IEEE division and square root, exp
from libdevice (what torch's CUDA exp calls), FMA only where torch's own kernels use one (lerp,
addcmul) and no other contraction. tests/test_triton.py holds it to the torch ops in Triton's
interpreter (TRITON_INTERPRET=1, on CPUs) and, compiled, on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from fade_core.neural.rules import BETA1, BETA2, EPS, GAMMA_MAX, GAMMA_MIN

# Read when the kernels are defined, as triton.jit does: the interpreter runs them with numpy.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
MAX_BLOCK = 1024  # elements per program: 8 per thread at 4 warps
# Constants as Triton reads globals (torch rounds the same Python floats to the run's dtype).
_GAMMA_MIN, _GAMMA_MAX = tl.constexpr(GAMMA_MIN), tl.constexpr(GAMMA_MAX)
_EPS, _BETA2 = tl.constexpr(EPS), tl.constexpr(BETA2)
_M_WEIGHT, _V_WEIGHT = tl.constexpr(1 - BETA1), tl.constexpr(1 - BETA2)  # lerp weight, addcmul value

if INTERPRET:  # numpy has no libdevice and rounds a*b+c twice

    @triton.jit
    def _exp(x):
        return tl.exp(x)

    @triton.jit
    def _fma(a, b, c):
        if c.dtype == tl.float32:  # exact product in float64, one rounding (up to a double rounding)
            return (a.to(tl.float64) * b.to(tl.float64) + c.to(tl.float64)).to(tl.float32)
        else:
            return tl.fma(a, b, c)

else:
    from triton.language.extra.cuda import libdevice

    @triton.jit
    def _exp(x):
        return libdevice.exp(x)

    @triton.jit
    def _fma(a, b, c):
        return tl.fma(a, b, c)


@triton.jit
def _div(a, b):
    """a / b rounded once (Triton's float32 `/` is approximate)."""
    if a.dtype == tl.float32:
        return tl.div_rn(a, b)
    else:
        return a / b


@triton.jit
def _sqrt(a):
    if a.dtype == tl.float32:
        return tl.sqrt_rn(a)
    else:
        return tl.sqrt(a)


@triton.jit
def _clamp(x, lo, hi):
    """torch.clamp: NaN stays NaN (a diverged run keeps showing it)."""
    x = tl.maximum(x, lo, propagate_nan=tl.PropagateNan.ALL)
    return tl.minimum(x, hi, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def rule(p, m, v, gamma, trace, grad, q, alpha, lam, theta, bound, step, sqrt_bc2, inv_bc2,
         ADAM: tl.constexpr, COUPLED: tl.constexpr, DECOUPLED: tl.constexpr, CLIP: tl.constexpr, FADE: tl.constexpr):
    """One step of algorithms.md §2 on elements `p` (with Adam's m, v and FADE's gamma, trace where
    the flags say; other arguments of an unused part are not read), given their gradient `grad`
    and FADE's curvature `q`: FADE (decay first), coupled (L2 in the gradient) or decoupled
    decay, the Adam or SGD step, clipping to +-bound. Returns (p, m, v, gamma, trace). Shared by
    this module's kernel and triton_fused_step's, so the rule is written once for CUDA."""
    one = tl.full([], 1.0, p.dtype)
    if FADE:
        # alpha_eff: alpha, or Adam's alpha / (sqrt(v_hat) + eps) with v_hat before this step's
        # update (inv_bc2 = 1 / (1 - beta2^k) is 0 before the first Adam step: alpha then).
        alpha_eff = alpha
        if ADAM:
            eps = tl.full([], _EPS, p.dtype)
            alpha_eff = tl.where(inv_bc2 > 0, _div(alpha, _sqrt(v * inv_bc2) + eps), alpha)
        gamma = _clamp(gamma - theta * grad * trace, _GAMMA_MIN, _GAMMA_MAX)
        decay = _exp(gamma)
        c = tl.maximum(one - decay - alpha_eff * q, 0.0, propagate_nan=tl.PropagateNan.ALL)
        trace = trace * c - decay * p
        p = p * (one - decay)  # decay first; the base step follows
    if COUPLED:  # torch.optim.SGD(weight_decay): the gradient plus lambda * P
        grad = grad + lam * p
    if DECOUPLED:
        p = p * (one - alpha * lam)
    if ADAM:
        # torch.optim.Adam: m.lerp_(grad, 1 - beta1); v.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
        m = _fma(tl.full([], _M_WEIGHT, p.dtype), grad - m, m)
        v = _fma(tl.full([], _V_WEIGHT, p.dtype) * grad, grad, v * tl.full([], _BETA2, p.dtype))
        denom = _div(_sqrt(v), sqrt_bc2) + tl.full([], _EPS, p.dtype)
        p = p - _div(step * m, denom)
    else:
        p = p - alpha * grad
    if CLIP:
        p = _clamp(p, -bound, bound)
    return p, m, v, gamma, trace


@triton.jit
def _update_kernel(
    p_ptr, m_ptr, v_ptr, gamma_ptr, trace_ptr,  # per-run rows of this parameter's state
    delta_ptr, x_ptr, hf_ptr,  # the gradient's factors: delta [R, out], layer input [R, in], p(1-p) [R, out]
    alpha_ptr, lam_ptr, theta_ptr, bound_ptr,  # per run [R]
    step_ptr, sqrt_bc2_ptr, inv_bc2_ptr,  # Adam's scalars for this step: [R], [], []
    p_row, state_row, fade_row, delta_row, x_row, hf_row,  # row (run) strides
    n_in, numel, blocks,
    ADAM: tl.constexpr, DECOUPLED: tl.constexpr, CLIP: tl.constexpr, FADE: tl.constexpr,
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
    p, m, v, gamma, trace = rule(
        p, m, v, gamma, trace, grad, q, tl.load(alpha_ptr + run),
        tl.load(lam_ptr + run) if DECOUPLED else 0.0, tl.load(theta_ptr + run) if FADE else 0.0,
        tl.load(bound_ptr + run) if CLIP else 0.0, tl.load(step_ptr + run) if ADAM else 0.0,
        tl.load(sqrt_bc2_ptr) if ADAM else 0.0, tl.load(inv_bc2_ptr) if ADAM and FADE else 0.0,
        ADAM, False, DECOUPLED, CLIP, FADE)
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


def update(param: torch.Tensor, delta: torch.Tensor, x: torch.Tensor | None, alpha: torch.Tensor, *,
           adam: AdamStep | None = None, fade: FadeState | None = None, lam: torch.Tensor | None = None,
           bound: torch.Tensor | None = None, head_factor: torch.Tensor | None = None) -> None:
    """One step of algorithms.md §2 on `param` ([R, out, in] weight or [R, out] bias) in place, in
    one kernel launch: FADE (if `fade`), decoupled decay (if `lam`), an Adam (if `adam`) or SGD
    step with gradient delta x^T (delta for a bias), then clipping to +-bound (if `bound`).
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
        ADAM=adam is not None, DECOUPLED=lam is not None, CLIP=bound is not None, FADE=fade is not None,
        WEIGHT=weight, HEAD_FACTOR=head_factor is not None, BLOCK=block,
        enable_fp_fusion=False,
    )
