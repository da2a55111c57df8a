"""The persistent engine: a whole segment of steps of a one-hidden-layer regression network
(the nonlinear task's 32-256-20 student) in ONE Triton launch, each run's weights kept on chip.

Why: the batched path (torch_ops, triton_update) streams every run's weights and optimizer
state through device memory several times per step; for the nonlinear student that is
~150 KB per run-step, which caps it near 2e7 run-steps/s on an H100 whatever the kernels
do. Here program r owns run r for the whole segment: its weights (and, where they fit, its
optimizer state) are loaded once into tensors that the step loop carries, so a step moves
only the run's input (I floats) and target (O floats) from memory, plus the Adam moments
the program streams (below). The per-bin metric sums (half squared error, squared error
per output, which hidden units fired) start from their stored values and stay on chip in
float64 until the segment ends (the runner splits chunks at bin ends, so a segment never
spans two bins). State and sums are written once, at the segment's end.

Register budget (Hopper: 64K 32-bit registers = 256 KB per SM, at most 255 per thread).
One run's tiles, padded to powers of two: W0 [H, I] = 256 x 32 and the head, held
transposed as W1^T [H, O] = 256 x 32 (20 outputs padded to 32), 8,192 floats each.
  sgd, sgd_wd, sgd_wclip   2 tiles = 16K floats: 32 registers per thread at 16 warps (512
                           threads), 64 at 8 warps; with a few tile-sized temporaries
                           (W * x, W1^T * h, the gradients) ~100 at 8 warps: no spills
                           expected, two programs per SM at 8 warps.
  fade_sgd                 + gamma, trace of the head: 4 tiles = 32K floats, 64 registers
                           per thread at 16 warps: fits, one program per SM.
  fade_sgd_all             + gamma, trace of W0 too: 6 tiles, 96 at 16 warps: tight;
                           spills likely (they go to local memory, i.e. L1/L2).
  adam family              W0, W1^T and the moments m, v of both: 6 tiles (fade_adam 8);
                           the moments do not fit beside the weights, so `stream` (2, the
                           default) loads and stores both layers' moments from global memory
                           every step (32 KB read + 32 KB written per layer per step: L2 for
                           small packs, HBM for large ones); 1 streams only W0's; 0 keeps
                           them all in registers and leaves the spilling to the compiler.
What ptxas says (benchmarks/persistent_regs.py, sm_90a, no GPU needed; measured 2026-11-28): the
plan above is optimistic. Triton lays the [H, 32] tiles out with the warps along H, so every
32-long vector (x, its prefetch, y, the error, b1 and its state, the float64 squared-error sums)
is replicated in 16 registers of every thread. sgd: 128 registers and ~400 B of spills per thread
at 16 warps, 255 and ~430 B at 8; fade_sgd 128 + ~1.7 KB at 16 warps; adam (stream 2) 128 +
~1.8 KB (with the rule printed `fused`: see triton_rule; ~2.1 KB without); fade_adam 64 + ~3.9 KB
at 16 warps (stream 2). Spills go to local memory (L1, then L2):
whether they are inside the step loop, and what they cost, only the GPU check's timings tell;
holding W1 transposed the other way ([O, H]) gave the same counts.
Knobs (`KernelConfig`): num_warps (4, 8, 16) and stream (0, 1, 2). Runs per program is one:
one run's tile already spreads over every thread of the program, and more runs per program
would multiply the registers above; more programs per SM (the hardware's choice, by the
registers a program takes) play that role. Packs larger than the chip run in waves: the
grid is one program per run.

Each parameter's update is the learner's rule (`parts.update`) printed by triton_rule, one
function per layer (RULE0, RULE1: FADE's part on the head's parameters or on all), called on
the tiles (exp from libdevice, IEEE division and square root unless `exact` is off, Adam's
bias corrections in float64 as torch_ops computes them, here per step on the device before
the launch); the kernel itself is layout, the step loop and the state it keeps or streams.
`fp_fusion` (on by default, for the products) has the rule printed with its multiply-adds as
fmas (triton_rule's `fused`: the contraction the compiler would do, in the printed order, for
fewer spills), and the forward and backward products are sums in a different order than torch's bmm,
so the two agree to float32 rounding, not bitwise.
Every run's arithmetic reads only its own program's data: a run's numbers do not depend on
its pack size, position, wave or segment length (bitwise), and a run whose numbers overflow
becomes inf/NaN alone (maxima and clamps propagate NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import triton
import triton.language as tl

from fade_core.architecture import Architecture
from fade_core.neural import parts
from fade_core.neural.rules import NeuralLearner
from fade_core.neural.state import adam_table
from fade_core.neural.triton_rule import rule_for
from fade_core.rulebind import bind

_FADE_MODES = {"none": 0, "head": 1, "all": 2}
_clip_bound = bind(parts.clip_bound, {"sqrt": math.sqrt})  # per run, on the host: kappa [R] / sqrt(fan_in)


@dataclass(frozen=True)
class KernelConfig:
    """How the kernel is launched: warps per program, and which layers' Adam moments it
    streams from global memory each step (0 none, 1 the first layer's, 2 both)."""

    num_warps: int = 8
    stream: int = 2
    fp_fusion: bool = True  # contract a*b+c into FMAs (the products' speed); the rule is then printed fused (triton_rule)
    exact: bool = True  # Adam's divisions and square roots rounded as torch's (False: the fast approximate ones)
    maxnreg: int | None = None  # registers per thread ptxas may use (None: its choice; it took 64 for adam at 16 warps)

    def __post_init__(self) -> None:
        if self.num_warps not in (1, 2, 4, 8, 16, 32) or self.stream not in (0, 1, 2):
            raise ValueError(f"persistent kernel: num_warps must be a power of two up to 32 and stream 0, 1 or 2, got {self}")


def default_config(learner: NeuralLearner) -> KernelConfig:
    """The launch the register budget above suggests (the GPU check measures the others)."""
    if learner.base == "adam":
        return KernelConfig(num_warps=16, stream=2)
    return KernelConfig(num_warps=8 if learner.fade == "none" else 16, stream=0)


def unsupported(learner: NeuralLearner, arch: Architecture, loss: str) -> str | None:
    """Why this engine cannot run a pack of these (None: it can)."""
    if arch.layers != 2:
        return f"the persistent engine runs networks with one hidden layer, not {arch.layers - 1}"
    if loss != "squared_error":
        return f"the persistent engine runs the regression loss (squared_error), not {loss}"
    return None


def kernel_flags(learner: NeuralLearner, config: KernelConfig, sizes: Sequence[int]) -> dict[str, object]:
    """The kernel's compile-time arguments for `learner` on a network of `sizes` (in, hidden, out):
    the rule of each layer (FADE's part on the head's parameters, or on all) and the layout."""
    fade = _FADE_MODES[learner.fade]
    return dict(RULE0=rule_for(learner, fade == 2, config.fp_fusion), RULE1=rule_for(learner, fade >= 1, config.fp_fusion), ADAM=learner.base == "adam",
                FADE=fade, STREAM=config.stream if learner.base == "adam" else 0, EXACT=config.exact,
                BI=triton.next_power_of_2(sizes[0]), BH=triton.next_power_of_2(sizes[1]),
                BO=triton.next_power_of_2(sizes[2]))


@triton.jit(do_not_specialize=["steps"])  # segment lengths vary (bin pieces, chunk tails): one compile
def _segment_kernel(
    p_ptr, m_ptr, v_ptr, gamma_ptr, trace_ptr,  # run state rows: [R, n], [R, n], [R, n], [R, nf], [R, nf]
    x_ptr, y_ptr, slot_ptr,  # the segment's stream [T, S, I], [T, S, O]; run r reads slot slot[r]
    alpha_ptr, lam_ptr, theta_ptr, bound0_ptr, bound1_ptr,  # per run [R]
    bc1_ptr, sqrt_bc2_ptr, inv_bc2_ptr,  # Adam, per step [T]: 1 - beta1^k (float64), sqrt(1 - beta2^k), 1/(1 - beta2^(k-1))
    loss_ptr, sq_ptr, active_ptr,  # the bin's sums: [R] float64, [R, O] float64, [R, H] uint8
    steps, x_t, x_s, y_t, y_s,  # steps, and the streams' strides (step, slot)
    p_row, state_row, fade_row, fade_start, n_in, n_hidden, n_out,
    RULE0: tl.constexpr, RULE1: tl.constexpr,  # each layer's update, printed from the rule (triton_rule)
    ADAM: tl.constexpr, FADE: tl.constexpr, STREAM: tl.constexpr,  # which state is kept, loaded, streamed
    SLOPE: tl.constexpr,  # the hidden activation's negative slope, rounded to the run's dtype as torch does
    EXACT: tl.constexpr,  # KernelConfig.exact
    BI: tl.constexpr, BH: tl.constexpr, BO: tl.constexpr,
):
    run = tl.program_id(0).to(tl.int64)
    dtype = p_ptr.dtype.element_ty
    hi, ii, oi = tl.arange(0, BH), tl.arange(0, BI), tl.arange(0, BO)
    hm, im, om = hi < n_hidden, ii < n_in, oi < n_out
    # Offsets of W0 [H, I], b0 [H], W1 [O, H] (held transposed: [H, O]) and b1 [O] in a run's row.
    w0 = hi[:, None] * n_in + ii[None, :]
    b0 = n_in * n_hidden + hi
    w1 = n_in * n_hidden + n_hidden + oi[None, :] * n_hidden + hi[:, None]
    b1 = n_in * n_hidden + n_hidden + n_out * n_hidden + oi
    w0m, w1m = hm[:, None] & im[None, :], hm[:, None] & om[None, :]
    p, m_row, v_row = p_ptr + run * p_row, m_ptr + run * state_row, v_ptr + run * state_row
    g_row, t_row = gamma_ptr + (run * fade_row - fade_start), trace_ptr + (run * fade_row - fade_start)
    W0 = tl.load(p + w0, mask=w0m, other=0.0)
    B0 = tl.load(p + b0, mask=hm, other=0.0)
    W1 = tl.load(p + w1, mask=w1m, other=0.0)
    B1 = tl.load(p + b1, mask=om, other=0.0)
    nothing = tl.full([], 0.0, dtype)  # the placeholder of state a variant does not keep on chip
    mW0, vW0, mB0, vB0, mW1, vW1, mB1, vB1 = nothing, nothing, nothing, nothing, nothing, nothing, nothing, nothing
    gW0, tW0, gB0, tB0, gW1, tW1, gB1, tB1 = nothing, nothing, nothing, nothing, nothing, nothing, nothing, nothing
    if ADAM:
        mB0, vB0 = tl.load(m_row + b0, mask=hm, other=0.0), tl.load(v_row + b0, mask=hm, other=0.0)
        mB1, vB1 = tl.load(m_row + b1, mask=om, other=0.0), tl.load(v_row + b1, mask=om, other=0.0)
        if STREAM < 1:
            mW0, vW0 = tl.load(m_row + w0, mask=w0m, other=0.0), tl.load(v_row + w0, mask=w0m, other=0.0)
        if STREAM < 2:
            mW1, vW1 = tl.load(m_row + w1, mask=w1m, other=0.0), tl.load(v_row + w1, mask=w1m, other=0.0)
    if FADE >= 1:
        gW1, tW1 = tl.load(g_row + w1, mask=w1m, other=0.0), tl.load(t_row + w1, mask=w1m, other=0.0)
        gB1, tB1 = tl.load(g_row + b1, mask=om, other=0.0), tl.load(t_row + b1, mask=om, other=0.0)
    if FADE == 2:
        gW0, tW0 = tl.load(g_row + w0, mask=w0m, other=0.0), tl.load(t_row + w0, mask=w0m, other=0.0)
        gB0, tB0 = tl.load(g_row + b0, mask=hm, other=0.0), tl.load(t_row + b0, mask=hm, other=0.0)
    alpha, lam, theta = tl.load(alpha_ptr + run), tl.load(lam_ptr + run), tl.load(theta_ptr + run)
    bound0, bound1 = tl.load(bound0_ptr + run), tl.load(bound1_ptr + run)
    slot = tl.load(slot_ptr + run)
    # The bin's sums so far, continued in step order (so they do not depend on the segmenting).
    loss_sum = tl.load(loss_ptr + run)
    sq_sum = tl.load(sq_ptr + run * n_out + oi, mask=om, other=0.0)
    fired = tl.load(active_ptr + run * n_hidden + hi, mask=hm, other=0).to(tl.int32)
    one = tl.full([], 1.0, dtype)
    step, sqrt_bc2, inv_bc2 = one, one, one
    xs, ys = x_ptr + slot * x_s, y_ptr + slot * y_s
    x_next = tl.load(xs + ii, mask=im, other=0.0)
    for t in range(steps):
        x = x_next  # (a segment's stream offsets fit in 32 bits: T x S x I)
        y = tl.load(ys + t * y_t + oi, mask=om, other=0.0)
        x_next = tl.load(xs + (t + 1) * x_t + ii, mask=im & (t + 1 < steps), other=0.0)  # prefetch
        if ADAM:
            step = (alpha.to(tl.float64) / tl.load(bc1_ptr + t)).to(dtype)
            sqrt_bc2, inv_bc2 = tl.load(sqrt_bc2_ptr + t), tl.load(inv_bc2_ptr + t)
        # forward
        z = tl.sum(W0 * x[None, :], axis=1) + B0
        h = tl.where(z > 0, z, z * SLOPE)
        fired = tl.maximum(fired, (z > 0).to(tl.int32))
        out = tl.sum(W1 * h[:, None], axis=0) + B1
        d = tl.where(om, out - y, 0.0)  # dJ/d(out) of J = 1/2 sum (out - y)^2
        d2 = d * d
        sq_sum += d2.to(tl.float64)
        loss_sum += (0.5 * tl.sum(d2, axis=0)).to(tl.float64)
        # backward through the weights before the step
        back = tl.sum(W1 * d[None, :], axis=1)
        dz = tl.where(z > 0, back, back * SLOPE)
        # updates, every parameter from its gradient at the old weights
        if STREAM >= 2 and ADAM:
            m1, v1 = tl.load(m_row + w1, mask=w1m, other=0.0), tl.load(v_row + w1, mask=w1m, other=0.0)
            W1, m1, v1, gW1, tW1 = RULE1(W1, h[:, None] * d[None, :], (h * h)[:, None], alpha, lam, theta, bound1,
                                         m1, v1, gW1, tW1, step, sqrt_bc2, inv_bc2, EXACT)
            tl.store(m_row + w1, m1, mask=w1m)
            tl.store(v_row + w1, v1, mask=w1m)
        else:
            W1, mW1, vW1, gW1, tW1 = RULE1(W1, h[:, None] * d[None, :], (h * h)[:, None], alpha, lam, theta, bound1,
                                           mW1, vW1, gW1, tW1, step, sqrt_bc2, inv_bc2, EXACT)
        B1, mB1, vB1, gB1, tB1 = RULE1(B1, d, one, alpha, lam, theta, bound1, mB1, vB1, gB1, tB1, step, sqrt_bc2, inv_bc2,
                                       EXACT)
        if STREAM >= 1 and ADAM:
            m0, v0 = tl.load(m_row + w0, mask=w0m, other=0.0), tl.load(v_row + w0, mask=w0m, other=0.0)
            W0, m0, v0, gW0, tW0 = RULE0(W0, dz[:, None] * x[None, :], (x * x)[None, :], alpha, lam, theta, bound0,
                                         m0, v0, gW0, tW0, step, sqrt_bc2, inv_bc2, EXACT)
            tl.store(m_row + w0, m0, mask=w0m)
            tl.store(v_row + w0, v0, mask=w0m)
        else:
            W0, mW0, vW0, gW0, tW0 = RULE0(W0, dz[:, None] * x[None, :], (x * x)[None, :], alpha, lam, theta, bound0,
                                           mW0, vW0, gW0, tW0, step, sqrt_bc2, inv_bc2, EXACT)
        B0, mB0, vB0, gB0, tB0 = RULE0(B0, dz, one, alpha, lam, theta, bound0, mB0, vB0, gB0, tB0, step, sqrt_bc2, inv_bc2,
                                       EXACT)
    # the segment's end: state and sums written once
    tl.store(p + w0, W0, mask=w0m)
    tl.store(p + b0, B0, mask=hm)
    tl.store(p + w1, W1, mask=w1m)
    tl.store(p + b1, B1, mask=om)
    if ADAM:
        tl.store(m_row + b0, mB0, mask=hm)
        tl.store(v_row + b0, vB0, mask=hm)
        tl.store(m_row + b1, mB1, mask=om)
        tl.store(v_row + b1, vB1, mask=om)
        if STREAM < 1:
            tl.store(m_row + w0, mW0, mask=w0m)
            tl.store(v_row + w0, vW0, mask=w0m)
        if STREAM < 2:
            tl.store(m_row + w1, mW1, mask=w1m)
            tl.store(v_row + w1, vW1, mask=w1m)
    if FADE >= 1:
        tl.store(g_row + w1, gW1, mask=w1m)
        tl.store(t_row + w1, tW1, mask=w1m)
        tl.store(g_row + b1, gB1, mask=om)
        tl.store(t_row + b1, tB1, mask=om)
    if FADE == 2:
        tl.store(g_row + w0, gW0, mask=w0m)
        tl.store(t_row + w0, tW0, mask=w0m)
        tl.store(g_row + b0, gB0, mask=hm)
        tl.store(t_row + b0, tB0, mask=hm)
    tl.store(loss_ptr + run, loss_sum)
    tl.store(sq_ptr + run * n_out + oi, sq_sum, mask=om)
    tl.store(active_ptr + run * n_hidden + hi, fired.to(tl.uint8), mask=hm)


def advance(learner: NeuralLearner, arch: Architecture, state: dict[str, torch.Tensor], hp: dict[str, torch.Tensor],
            x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums: Sequence[torch.Tensor],
            config: KernelConfig | None = None) -> object:
    """x.shape[0] steps of every run in one launch, as `NeuralRuns.advance` takes them: run r
    reads slot run_slot[r] of x ([T, S, in]) and target ([T, S, out]); `state` is
    `NeuralRuns.state_dict()` (updated in place, adam_steps included), `hp` its per-run
    hyperparameters, `sums` `StepSums.tensors()` (loss, sq_error, correct, active: accumulated).
    ValueError for a network or loss the kernel does not run (`unsupported`). Returns Triton's
    launch handle (compiled: its n_regs and n_spills tell the register budget's outcome)."""
    reason = unsupported(learner, arch, "squared_error" if target.dim() == 3 else "cross_entropy")
    if reason:
        raise ValueError(reason)
    config = config or default_config(learner)
    params = state["params"]
    runs, steps = params.shape[0], x.shape[0]
    if steps == 0 or runs == 0:
        return None
    loss, sq_error, _, active = sums
    n_in, n_hidden, n_out = arch.sizes
    zeros = torch.zeros(runs, device=params.device, dtype=params.dtype)
    kappa = hp.get("kappa", zeros)
    bounds = [_clip_bound(kappa, fan_in) for fan_in in (n_in, n_hidden)]
    adam = learner.base == "adam"
    table = adam_table(state["adam_steps"], steps, params.dtype) if adam else (zeros, zeros, zeros)
    x, target = x.contiguous(), target.contiguous()
    fade_row = state["gamma"].shape[1]
    fade = fade_row > 0
    handle = _segment_kernel[(runs,)](  # (a state the learner lacks is an empty tensor: the parameters stand in)
        params, state["adam_m"] if adam else params, state["adam_v"] if adam else params,
        state["gamma"] if fade else params, state["trace"] if fade else params,
        x, target, run_slot,
        hp["alpha"], hp.get("lambda", zeros), hp.get("theta_lambda", zeros), bounds[0], bounds[1],
        *table,
        loss, sq_error, active.view(torch.uint8),
        steps, x.stride(0), x.stride(1), target.stride(0), target.stride(1),
        params.stride(0), state["adam_m"].stride(0) if adam else 0, fade_row, params.shape[1] - fade_row,
        n_in, n_hidden, n_out,
        **kernel_flags(learner, config, arch.sizes), SLOPE=float(arch.negative_slope),
        num_warps=config.num_warps, enable_fp_fusion=config.fp_fusion, **({"maxnreg": config.maxnreg} if config.maxnreg else {}),
    )
    if adam:
        state["adam_steps"] += steps
    return handle


class PersistentKernel:
    """The "persistent" engine (fade_core.engines): `advance` runs a whole segment of steps in one launch,
    each run's network on chip. EngineError (one line) for a network or loss it does not run."""

    name = "persistent"

    def __init__(self, runs, config: KernelConfig | None = None):
        from fade_core.engines import EngineError

        problem = unsupported(runs.learner, runs.net.arch, runs.loss)
        if problem is not None:
            raise EngineError(f"engine 'persistent': {problem}; choose torch or triton")
        self.runs = runs
        self.config = config

    def advance(self, x: torch.Tensor, target: torch.Tensor, run_slot: torch.Tensor, sums) -> None:
        runs = self.runs
        advance(runs.learner, runs.net.arch, runs.state_dict(), runs.hp, x, target, run_slot, sums.tensors(), self.config)
