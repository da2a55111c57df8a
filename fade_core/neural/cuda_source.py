"""The CUDA engine's kernel as C++ source, per learner and network: a whole segment of steps of a
one-hidden-layer regression network (the nonlinear task's 32-256-20 student), one block per run.

Layout (issue 39): one block of H threads per run, thread j owns hidden unit j for the whole
segment: its row of W0 (I floats), its bias b0[j] and its column of the head W1 (O floats, not
padded), with their optimizer state, in registers. The head bias b1, its state and the float64
sums live in lanes 0..O-1 of warp 0. A step:
  forward   z_j = W0[j] . x + b0[j] (x broadcast from shared memory), h_j = leaky(z_j); each thread
            forms its O products W1[k, j] h_j, and a warp sums them by recursive halving (each of
            the 5 shuffle stages halves the values a lane carries: ~4 instructions per pair, ~80 for
            O = 20 instead of 5 x 2 x 20 for O butterflies), one lane per output writing the warp's
            partial to shared memory;                                         barrier 1
  output    warp 0, lane k: out_k = b1[k] + the H/32 warps' partials, d_k = out_k - y_k to shared
            memory (and Adam's per-step scalars, thread 0);                   barrier 2
  backward  every thread: back_j = W1[:, j] . d, dz_j; the head column's and the hidden row's
  + update  updates (cuda_rule.apply_rule), the head bias and the sums in warp 0 meanwhile.
fade_adam keeps the head's gamma and trace in shared memory (40 KB a block; in registers beside Adam's
moments they spill). The next step's x and y are loaded into registers at the top of a step and stored into the other
half of a double buffer after barrier 1, so a step waits on no load. Two barriers a step.

Every run's numbers come from its own block only: they do not depend on the pack, the run's
position, the wave or the segment length (bitwise), and a run that overflows turns inf/NaN alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from fade_core.architecture import Architecture
import numpy as np

from fade_core.neural.c_source import c_literal
from fade_core.neural.cuda_rule import rule_source
from fade_core.neural.rules import NeuralLearner

KERNEL_NAME = "nonlinear_segment"
_FADE_MODES = {"none": 0, "head": 1, "all": 2}


@dataclass(frozen=True)
class KernelShape:
    """What a compiled kernel is specialised to: the learner, the layer sizes and the activation's slope,
    and the blocks per SM its register cap is set for (`__launch_bounds__`)."""

    learner: NeuralLearner
    sizes: tuple[int, int, int]
    negative_slope: float = 0.0
    min_blocks: int = 1


def unsupported(learner: NeuralLearner, arch: Architecture, loss: str, dtype: str = "float32") -> str | None:
    """Why the CUDA engine cannot run a pack of these (None: it can)."""
    if arch.layers != 2:
        return f"the cuda engine runs networks with one hidden layer, not {arch.layers - 1}"
    if loss != "squared_error":
        return f"the cuda engine runs the regression loss (squared_error), not {loss}"
    if dtype != "float32":
        return f"the cuda engine runs float32, not {dtype}"
    n_in, hidden, n_out = arch.sizes
    if hidden % 32 or not 32 <= hidden <= 1024 or n_out > 32 or n_in + n_out > hidden:
        return (f"the cuda engine needs a hidden width that is a multiple of 32 up to 1024, at most 32 outputs and "
                f"inputs + outputs <= hidden units, not {arch.sizes}")
    return None


@dataclass(frozen=True)
class HalvingStage:
    """One shuffle stage of `halving_plan`: each lane keeps slot `lo` or `hi` of every pair (hi where
    its lane bit `offset` is set) plus its partner's (lane ^ offset) other one, into slot `lo`;
    `whole`: a slot summed whole with the partner's (an odd value out)."""

    offset: int
    pairs: tuple[tuple[int, int], ...]
    whole: int | None


def halving_plan(values: int) -> tuple[list[HalvingStage], list[int]]:
    """How `values` per-lane floats are summed over a warp's 32 lanes by recursive halving (5 stages,
    each halving the values a lane carries), and per lane the index of the complete sum its slot 0
    holds at the end. Lanes holding the same index may have added in different orders: the caller
    lets one writer lane per index store it."""
    slots = list(range(values))  # live slots, in order
    index = {k: [k] * 32 for k in slots}  # per slot: the value index it holds, per lane
    stages = []
    for offset in (16, 8, 4, 2, 1):
        if len(slots) == 1:
            stages.append(HalvingStage(offset, (), slots[0]))
            continue
        half = len(slots) // 2
        pairs = tuple((slots[i], slots[i + half]) for i in range(half))
        whole = slots[-1] if len(slots) % 2 else None
        for lo, hi in pairs:
            index[lo] = [index[hi][lane] if lane & offset else index[lo][lane] for lane in range(32)]
        stages.append(HalvingStage(offset, pairs, whole))
        slots = [lo for lo, _ in pairs] + ([whole] if whole is not None else [])
    assert slots == [0]
    return stages, index[0]


def halving_code(stages: list[HalvingStage], var: str = "r") -> str:
    """`halving_plan`'s stages as C over the float array `var` (lane: the thread's lane)."""
    shuffle = "__shfl_xor_sync(0xffffffffu, {}, {})"
    code = []
    for stage in stages:
        code.append(f"    {{ const bool hi = lane & {stage.offset};")
        for lo, hi in stage.pairs:
            code.append(f"      {{ const float keep = hi ? {var}[{hi}] : {var}[{lo}], send = hi ? {var}[{lo}] : {var}[{hi}];")
            code.append(f"        {var}[{lo}] = keep + {shuffle.format('send', stage.offset)}; }}")
        if stage.whole is not None:
            code.append(f"      {var}[{stage.whole}] += {shuffle.format(f'{var}[{stage.whole}]', stage.offset)};")
        code.append("    }")
    return "\n".join(code)


def kernel_source(shape: KernelShape) -> str:
    """The whole translation unit NVRTC compiles for `shape` (entry point `KERNEL_NAME`)."""
    learner = shape.learner
    n_in, hidden, n_out = shape.sizes
    stages, lane_index = halving_plan(n_out)
    reduce_code = halving_code(stages)
    writers = {}
    for lane, k in enumerate(lane_index):
        writers.setdefault(k, lane)
    head_index = ", ".join(str(k if writers[k] == lane else -1) for lane, k in enumerate(lane_index))
    defines = {
        "NI": n_in, "NH": hidden, "NO": n_out, "MIN_BLOCKS": shape.min_blocks,
        "ADAM": int(learner.base == "adam"), "FADE": _FADE_MODES[learner.fade],
        "SLOPE": c_literal(shape.negative_slope, np.float32), "HEAD_STATE_SHARED": int(learner.base == "adam" and learner.fade != "none"),
    }
    header = "\n".join(f"#define {name} {value}" for name, value in defines.items())
    return (f"// fade-sweep CUDA engine: {learner.name}, network {n_in}-{hidden}-{n_out} (fade_core/neural/cuda_source.py)\n"
            f"{header}\n{_PRELUDE}\n{rule_source(learner)}\n"
            f"__device__ const signed char HEAD_INDEX[32] = {{{head_index}}};\n"
            f"__device__ __forceinline__ void reduce_head(float (&r)[NO], const int lane)\n{{\n{reduce_code}\n}}\n"
            f"{_KERNEL}")


_PRELUDE = r"""
#define NW (NH / 32)
#define OFF_B0 (NI * NH)
#define OFF_W1 (OFF_B0 + NH)
#define OFF_B1 (OFF_W1 + NO * NH)
#define FADE_START (FADE == 2 ? 0 : OFF_W1)
#define FADE_HIDDEN (FADE == 2)
#define FADE_HEAD (FADE >= 1)


__device__ __forceinline__ float clamp_nan(const float x, const float lo, const float hi)
{
    return x < lo ? lo : (x > hi ? hi : x);  // NaN stays NaN, as torch's clamp
}
"""

_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(NH, MIN_BLOCKS) nonlinear_segment(
    float *__restrict__ params, float *__restrict__ adam_m, float *__restrict__ adam_v,
    float *__restrict__ gamma_st, float *__restrict__ trace_st,
    const float *__restrict__ x_g, const float *__restrict__ y_g, const long long *__restrict__ slots,
    const float *__restrict__ alpha_g, const float *__restrict__ lam_g, const float *__restrict__ theta_g,
    const float *__restrict__ bound0_g, const float *__restrict__ bound1_g,
    const double *__restrict__ bc1_g, const float *__restrict__ sqrt_bc2_g, const float *__restrict__ inv_bc2_g,
    double *__restrict__ loss_g, double *__restrict__ sq_g, unsigned char *__restrict__ active_g,
    const int steps, const long long x_t, const long long x_s, const long long y_t, const long long y_s,
    const long long p_row, const long long state_row, const long long fade_row)
{
    __shared__ __align__(16) float sx[2][NI];
    __shared__ __align__(16) float sy[2][NO];
    __shared__ __align__(16) float part[NW * 32];
    __shared__ __align__(16) float sd[32];
    __shared__ float sscal[3];
    const long long run = blockIdx.x;
    const int j = threadIdx.x, lane = j & 31, warp = j >> 5;
    float *p = params + run * p_row;
    float *mrow = adam_m + run * state_row, *vrow = adam_v + run * state_row;
    float *grow = gamma_st + (run * fade_row - FADE_START), *trow = trace_st + (run * fade_row - FADE_START);
    const float *xrun = x_g + slots[run] * x_s, *yrun = y_g + slots[run] * y_s;
    Scalars s;
    s.alpha = alpha_g[run]; s.lam = lam_g[run]; s.theta = theta_g[run];
    s.factor = __fsub_rn(1.0f, __fmul_rn(s.alpha, s.lam));  // as torch: 1 - alpha * lambda in float32
    s.step = 0.0f; s.sqrt_bc2 = 1.0f; s.inv_bc2 = 0.0f; s.first_step = true;
    const float bound0 = bound0_g[run], bound1 = bound1_g[run];
    const bool head_lane = warp == 0 && lane < NO;

    // this thread's state: hidden unit j (W0 row, b0, W1 column) and, in warp 0, head output `lane`
    float w0[NI], w1[NO], b0 = p[OFF_B0 + j], b1 = head_lane ? p[OFF_B1 + lane] : 0.0f;
    float m0[NI], v0[NI], m1[NO], v1[NO], mb0 = 0.0f, vb0 = 0.0f, mb1 = 0.0f, vb1 = 0.0f;
    float g0[NI], t0[NI], gb0 = 0.0f, tb0 = 0.0f, gb1 = 0.0f, tb1 = 0.0f;
#if HEAD_STATE_SHARED  // the head's gamma and trace in shared memory, column j per thread (no bank conflict)
    __shared__ float g1s[NO][NH], t1s[NO][NH];
#define G1(k) g1s[k][j]
#define T1(k) t1s[k][j]
#else
    float g1[NO], t1[NO];
#define G1(k) g1[k]
#define T1(k) t1[k]
#endif
#pragma unroll
    for (int i = 0; i < NI; ++i) {
        w0[i] = p[j * NI + i];
        m0[i] = ADAM ? mrow[j * NI + i] : 0.0f; v0[i] = ADAM ? vrow[j * NI + i] : 0.0f;
        g0[i] = FADE_HIDDEN ? grow[j * NI + i] : 0.0f; t0[i] = FADE_HIDDEN ? trow[j * NI + i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < NO; ++k) {
        const int at = OFF_W1 + k * NH + j;
        w1[k] = p[at];
        m1[k] = ADAM ? mrow[at] : 0.0f; v1[k] = ADAM ? vrow[at] : 0.0f;
        G1(k) = FADE_HEAD ? grow[at] : 0.0f; T1(k) = FADE_HEAD ? trow[at] : 0.0f;
    }
    if (ADAM) { mb0 = mrow[OFF_B0 + j]; vb0 = vrow[OFF_B0 + j]; }
    if (FADE_HIDDEN) { gb0 = grow[OFF_B0 + j]; tb0 = trow[OFF_B0 + j]; }
    if (head_lane && ADAM) { mb1 = mrow[OFF_B1 + lane]; vb1 = vrow[OFF_B1 + lane]; }
    if (head_lane && FADE_HEAD) { gb1 = grow[OFF_B1 + lane]; tb1 = trow[OFF_B1 + lane]; }
    // the bin's sums so far, continued in step order
    double loss_sum = (j == 0) ? loss_g[run] : 0.0;
    double sq_sum = head_lane ? sq_g[run * NO + lane] : 0.0;
    bool fired = active_g[run * NH + j] != 0;
    const int head_k = HEAD_INDEX[lane];  // the output whose warp partial this lane writes (-1: none)
    const double alpha_d = (double)s.alpha;

    // thread j < NI loads x[j], thread NH - NO + k loads y[k]
    const bool x_loader = j < NI, y_loader = j >= NH - NO;
    if (x_loader) sx[0][j] = xrun[j];
    if (y_loader) sy[0][j - (NH - NO)] = yrun[j - (NH - NO)];
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        const int buf = t & 1;
        const bool more = t + 1 < steps;
        float next = 0.0f;  // the next step's sample element this thread loads
        if (more && x_loader) next = xrun[(long long)(t + 1) * x_t + j];
        if (more && y_loader) next = yrun[(long long)(t + 1) * y_t + (j - (NH - NO))];
        double bc1 = 1.0;
        float sqrt_bc2 = 1.0f, inv_bc2 = 0.0f;
        if (ADAM && j == 0) { bc1 = bc1_g[t]; sqrt_bc2 = sqrt_bc2_g[t]; inv_bc2 = inv_bc2_g[t]; }

        // forward: hidden unit j, then its share of every output
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains: a quarter of the dependent latency
#pragma unroll
        for (int i = 0; i < NI; ++i) acc[i % 4] = fmaf(w0[i], sx[buf][i], acc[i % 4]);
        const float z = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + b0;
        const bool pos = z > 0.0f;
        const float h = pos ? z : z * SLOPE;
        fired = fired || pos;
        float r[NO];
#pragma unroll
        for (int k = 0; k < NO; ++k) r[k] = w1[k] * h;
        reduce_head(r, lane);
        if (head_k >= 0) part[warp * 32 + head_k] = r[0];
        __syncthreads();  // barrier 1: the warps' partials are in

        if (more && x_loader) sx[buf ^ 1][j] = next;
        if (more && y_loader) sy[buf ^ 1][j - (NH - NO)] = next;
        float d = 0.0f;  // head lanes: this output's error
        if (head_lane) {
            float out = part[lane];
#pragma unroll
            for (int w = 1; w < NW; ++w) out += part[w * 32 + lane];
            d = (out + b1) - sy[buf][lane];
            sd[lane] = d;
        }
        if (ADAM && j == 0) { sscal[0] = (float)(alpha_d / bc1); sscal[1] = sqrt_bc2; sscal[2] = inv_bc2; }
        __syncthreads();  // barrier 2: the error (and Adam's scalars) are in

        if (ADAM) {
            s.step = sscal[0]; s.sqrt_bc2 = sscal[1]; s.inv_bc2 = sscal[2];
            s.first_step = !(s.inv_bc2 > 0.0f);  // inv_bc2 = 1 / (1 - beta2^(k-1)), 0 before the first step
        }
        if (warp == 0) {  // the sums and the head bias, while the other warps update their weights
            const float d2 = d * d;
            if (head_lane) sq_sum += (double)d2;
            float total = d2;
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
            if (j == 0) loss_sum += (double)(0.5f * total);
            if (head_lane) apply_rule<FADE_HEAD>(b1, d, 1.0f, mb1, vb1, gb1, tb1, 1.0f, s, bound1);
        }
        // backward through the head as it stood, then the head column and the hidden row
        float part_back[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < NO; ++k) part_back[k % 2] = fmaf(sd[k], w1[k], part_back[k % 2]);
        const float back = part_back[0] + part_back[1];
        const float dz = pos ? back : back * SLOPE;
        const float q1 = h * h;
#pragma unroll
        for (int k = 0; k < NO; ++k) apply_rule<FADE_HEAD>(w1[k], sd[k], h, m1[k], v1[k], G1(k), T1(k), q1, s, bound1);
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const float xi = sx[buf][i];
            apply_rule<FADE_HIDDEN>(w0[i], dz, xi, m0[i], v0[i], g0[i], t0[i], xi * xi, s, bound0);
        }
        apply_rule<FADE_HIDDEN>(b0, dz, 1.0f, mb0, vb0, gb0, tb0, 1.0f, s, bound0);
    }

    // the segment's end: state and sums written once
#pragma unroll
    for (int i = 0; i < NI; ++i) {
        p[j * NI + i] = w0[i];
        if (ADAM) { mrow[j * NI + i] = m0[i]; vrow[j * NI + i] = v0[i]; }
        if (FADE_HIDDEN) { grow[j * NI + i] = g0[i]; trow[j * NI + i] = t0[i]; }
    }
#pragma unroll
    for (int k = 0; k < NO; ++k) {
        const int at = OFF_W1 + k * NH + j;
        p[at] = w1[k];
        if (ADAM) { mrow[at] = m1[k]; vrow[at] = v1[k]; }
        if (FADE_HEAD) { grow[at] = G1(k); trow[at] = T1(k); }
    }
    p[OFF_B0 + j] = b0;
    if (ADAM) { mrow[OFF_B0 + j] = mb0; vrow[OFF_B0 + j] = vb0; }
    if (FADE_HIDDEN) { grow[OFF_B0 + j] = gb0; trow[OFF_B0 + j] = tb0; }
    if (head_lane) {
        p[OFF_B1 + lane] = b1;
        if (ADAM) { mrow[OFF_B1 + lane] = mb1; vrow[OFF_B1 + lane] = vb1; }
        if (FADE_HEAD) { grow[OFF_B1 + lane] = gb1; trow[OFF_B1 + lane] = tb1; }
        sq_g[run * NO + lane] = sq_sum;
    }
    if (j == 0) loss_g[run] = loss_sum;
    active_g[run * NH + j] = fired ? 1 : 0;
}
"""
