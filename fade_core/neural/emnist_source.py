"""The EMNIST segment kernel as CUDA C++ source: a whole segment of steps of a two-hidden-layer
classification network (the EMNIST student, 784-300-150-47), one block per run, the small layers on chip.

Why this layout (issue 40): a run's W0 (784 x 300, 941 KB) cannot stay on chip, W1 (300 x 150, 180 KB)
and W2 (150 x 47, 28 KB) can. So W1 and W2 live in shared memory for the whole segment (dynamic
shared memory: 208 KB of the 227 KB an sm_90 block may have), the head's FADE gamma and trace (56 KB)
in registers (thread (g, j) of the head pass owns W2[k, j] for k = g, g + G2, ...: R2 values each),
and W0 with its optimizer state is streamed from HBM once per step: the pass that updates W0 with
step t's gradient also forms step t + 1's first-layer pre-activation from the new weights, so W0 is
read once and written once a step. Adam's moments of W1 and W2 and every bias's values and state
stream too (they do not fit beside W1); every global access is `LD`/`ST`, so an emulation counts the
bytes a run-step moves (tests/emnist_emulation.py) from this very source.

A step, NT threads (NW warps), one barrier between phases:
  1 h1 = leaky(z0) (z0 from the last step's W0 pass); the next sample into the other half of sx; the label
  2 z1 = W1 h1 + b1, a warp per row (lanes over the row, a shuffle sum)
  3 logits = W2 h2 + b2, a warp per row
  4 warp 0: softmax, loss, argmax, delta = p - onehot, p(1 - p) (FADE's head curvature); b2's update
  5 thread (g, j): back2[j] partial over rows k = g + r G2 of W2[k, j] delta[k], and W2[k, j]'s update
  6 thread j: dz1[j] (the G2 partials summed in order), b1's update
  7 thread (g, i): back1[i] partial over rows j = g + r G1 of W1[j, i] dz1[j], and W1[j, i]'s update
  8 thread i: dz0[i]
  9 a warp per row i of W0: each element updated (dz0[i] x[t]) and stored, its new value times x[t + 1]
    summed into z0 of the next step; lane 0 updates b0[i]
The update of every parameter is `cuda_rule.apply_rule`, printed from fade_core/neural/parts.py.

Each run's numbers come from its own block only (bitwise independent of the pack, the run's position
and the segment lengths); a run that overflows turns inf/NaN alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fade_core.architecture import Architecture
from fade_core.neural.c_source import c_literal
from fade_core.neural.cuda_rule import rule_source
from fade_core.neural.rules import NeuralLearner

KERNEL_NAME = "emnist_segment"
THREADS = 512  # 16 warps: 128 registers a thread under __launch_bounds__(512, 1), no spill for any learner
SHARED_LIMIT = 227 * 1024  # an sm_90 block's most shared memory (static + dynamic)
_FADE_MODES = {"none": 0, "head": 1, "all": 2}


@dataclass(frozen=True)
class EmnistShape:
    """What a compiled kernel is specialised to: the learner, the layer sizes (in, h1, h2, out), the hidden
    activation's slope and the threads of a block."""

    learner: NeuralLearner
    sizes: tuple[int, int, int, int]
    negative_slope: float = 0.0
    threads: int = THREADS

    @property
    def dynamic_shared(self) -> int:
        """Bytes of dynamic shared memory a block takes: W1 and W2."""
        _, h1, h2, out = self.sizes
        return 4 * (h1 * h2 + h2 * out)

    @property
    def static_shared(self) -> int:
        """Bytes of the static shared arrays (the kernel's `__shared__` declarations, counted as declared)."""
        n_in, h1, h2, out = self.sizes
        return 4 * (2 * n_in + 3 * h1 + 3 * h2 + 3 * out + self.threads + 3) + 4

    def loop_trips(self) -> tuple[int, ...]:
        """Per step, the most iterations a thread makes of each `#pragma unroll 1` loop of the step, in the
        order the loops stand in the source (what cuda_sass-style counting multiplies their bodies by)."""
        n_in, h1, h2, out = self.sizes
        warps, g1 = self.threads // 32, self.threads // h1
        ceil = lambda a, b: -(-a // b)  # noqa: E731
        return (ceil(n_in, self.threads), ceil(h2, warps), ceil(out, warps), ceil(h2, g1), ceil(h1, warps))


def unsupported(learner: NeuralLearner, arch: Architecture, loss: str, dtype: str = "float32",
                threads: int = THREADS) -> str | None:
    """Why the EMNIST kernel cannot run a pack of these (None: it can)."""
    if arch.layers != 3:
        return f"the emnist kernel runs networks with two hidden layers, not {arch.layers - 1}"
    if loss != "cross_entropy":
        return f"the emnist kernel runs the classification loss (cross_entropy), not {loss}"
    if dtype != "float32":
        return f"the emnist kernel runs float32, not {dtype}"
    n_in, h1, h2, out = arch.sizes
    if not (h1 <= threads and h2 <= threads and 2 <= out <= 64):
        return f"the emnist kernel needs hidden widths up to {threads} and 2 to 64 classes, not {arch.sizes}"
    shape = EmnistShape(learner, arch.sizes, arch.negative_slope, threads)
    if shape.dynamic_shared + shape.static_shared > SHARED_LIMIT:
        return (f"the emnist kernel keeps the two small layers in shared memory: {arch.sizes} needs "
                f"{shape.dynamic_shared + shape.static_shared} bytes, over {SHARED_LIMIT}")
    return None


def kernel_source(shape: EmnistShape) -> str:
    """The whole translation unit NVRTC compiles for `shape` (entry point `KERNEL_NAME`)."""
    learner = shape.learner
    n_in, h1, h2, out = shape.sizes
    defines = {
        "NI": n_in, "NH1": h1, "NH2": h2, "NO": out, "NT": shape.threads,
        "ADAM": int(learner.base == "adam"), "FADE": _FADE_MODES[learner.fade],
        "SLOPE": c_literal(shape.negative_slope, np.float32),
    }
    header = "\n".join(f"#define {name} {value}" for name, value in defines.items())
    return (f"// fade-sweep EMNIST kernel: {learner.name}, network {n_in}-{h1}-{h2}-{out} "
            f"(fade_core/neural/emnist_source.py)\n{header}\n{_PRELUDE}\n{rule_source(learner)}\n{_HELPERS}\n{_KERNEL}")


_PRELUDE = r"""
#define NW (NT / 32)
#define G1 (NT / NH1)                  // column groups of W1's backward pass
#define G2 (NT / NH2)                  // column groups of W2's
#define R2 ((NO + G2 - 1) / G2)        // W2 rows a head thread owns
#define KC0 ((NI + 31) / 32)           // a W0 row's elements per lane
#define KC1 ((NH1 + 31) / 32)
#define KC2 ((NH2 + 31) / 32)
#define OFF_B0 (NI * NH1)
#define OFF_W1 (OFF_B0 + NH1)
#define OFF_B1 (OFF_W1 + NH1 * NH2)
#define OFF_W2 (OFF_B1 + NH2)
#define OFF_B2 (OFF_W2 + NH2 * NO)
#define FADE_START (FADE == 2 ? 0 : OFF_W2)
#define FADE_HIDDEN (FADE == 2)
#define FADE_HEAD (FADE >= 1)
#define FULL 0xffffffffu
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
// Every global access of the kernel (an emulation defines these to count the bytes moved).
#ifndef LD
#define LD(address) (*(address))
#define ST(address, value) (*(address) = (value))
#endif
#ifndef SHARED_DYNAMIC
#define SHARED_DYNAMIC(type, name) extern __shared__ __align__(16) type name[]
#endif
"""

_HELPERS = r"""
struct Rows { float *m, *v, *g, *t; };  // a run's Adam moments and FADE state, indexed by parameter offset

// One parameter's update (apply_rule) with its Adam moments (and, FADE_GLOBAL, its FADE state) in HBM;
// FADE state held elsewhere (registers) comes in gamma and trace.
template <bool USE_FADE, bool FADE_GLOBAL>
__device__ __forceinline__ void update(float &P, const float gd, const float gx, const float q, const Scalars &s,
                                       const float bound, const Rows &rows, const int at, float &gamma, float &trace)
{
    float m = 0.0f, v = 0.0f;
    if (ADAM) { m = LD(rows.m + at); v = LD(rows.v + at); }
    if (USE_FADE && FADE_GLOBAL) { gamma = LD(rows.g + at); trace = LD(rows.t + at); }
    apply_rule<USE_FADE>(P, gd, gx, m, v, gamma, trace, q, s, bound);
    if (ADAM) { ST(rows.m + at, m); ST(rows.v + at, v); }
    if (USE_FADE && FADE_GLOBAL) { ST(rows.g + at, gamma); ST(rows.t + at, trace); }
}

template <bool USE_FADE>
__device__ __forceinline__ void update_streamed(float &P, const float gd, const float gx, const float q, const Scalars &s,
                                                const float bound, const Rows &rows, const int at)
{
    float gamma = 0.0f, trace = 0.0f;
    update<USE_FADE, true>(P, gd, gx, q, s, bound, rows, at, gamma, trace);
}

__device__ __forceinline__ float warp_sum(float value)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(FULL, value, offset);
    return value;
}

__device__ __forceinline__ float leaky(const float z) { return z > 0.0f ? z : z * SLOPE; }

// The W0 pass: a warp per row i, each lane over columns lane + 32 k. UPDATE: each element's update with
// gradient dz0[i] x[c] (stored), and b0[i]'s; always: z0[i] = (new W0[i, :]) . xn + b0[i] into sz0.
template <bool UPDATE>
__device__ __forceinline__ void w0_pass(float *p, const Rows &rows, const float *xt, const float *xn, const float *sdz0,
                                        float *sz0, const Scalars &s, const float bound0, const int warp, const int lane)
{
#pragma unroll 1
    for (int i = warp; i < NH1; i += NW) {
        const float dz = UPDATE ? sdz0[i] : 0.0f;
        float *row = p + i * NI;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < KC0; ++k) {
            const int c = lane + 32 * k;
            if (c < NI) {
                float P = LD(row + c);
                if (UPDATE) {
                    const float xc = xt[c];
                    update_streamed<FADE_HIDDEN>(P, dz, xc, __fmul_rn(xc, xc), s, bound0, rows, i * NI + c);
                    ST(row + c, P);
                }
                acc[k % 4] = fmaf(P, xn[c], acc[k % 4]);
            }
        }
        const float z = warp_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
        if (lane == 0) {
            float b = LD(p + OFF_B0 + i);
            if (UPDATE) {
                update_streamed<FADE_HIDDEN>(b, dz, 1.0f, 1.0f, s, bound0, rows, OFF_B0 + i);
                ST(p + OFF_B0 + i, b);
            }
            sz0[i] = z + b;
        }
    }
}
"""

_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(NT, 1) emnist_segment(
    float *__restrict__ params, float *__restrict__ adam_m, float *__restrict__ adam_v,
    float *__restrict__ gamma_st, float *__restrict__ trace_st,
    const float *__restrict__ x_g, const long long *__restrict__ y_g, const long long *__restrict__ slots,
    const float *__restrict__ alpha_g, const float *__restrict__ lam_g, const float *__restrict__ theta_g,
    const float *__restrict__ bound0_g, const float *__restrict__ bound1_g, const float *__restrict__ bound2_g,
    const double *__restrict__ bc1_g, const float *__restrict__ sqrt_bc2_g, const float *__restrict__ inv_bc2_g,
    double *__restrict__ loss_g, double *__restrict__ correct_g, unsigned char *__restrict__ active_g,
    const int steps, const long long x_t, const long long x_s, const long long y_t, const long long y_s,
    const long long p_row, const long long state_row, const long long fade_row)
{
    SHARED_DYNAMIC(float, smem);  // W1 [NH2][NH1], then W2 [NO][NH2]
    float *sW1 = smem, *sW2 = smem + NH1 * NH2;
    __shared__ __align__(16) float sx[2][NI];
    __shared__ float sz0[NH1], sh1[NH1], sdz0[NH1], sz1[NH2], sh2[NH2], sdz1[NH2];
    __shared__ float sout[NO], sdelta[NO], spf[NO], spart[NT], sscal[3];
    __shared__ int slabel;
    const long long run = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *p = params + run * p_row;
    Rows rows;
    rows.m = adam_m + run * state_row; rows.v = adam_v + run * state_row;
    rows.g = gamma_st + (run * fade_row - FADE_START); rows.t = trace_st + (run * fade_row - FADE_START);
    const long long slot = LD(slots + run);
    const float *xrun = x_g + slot * x_s;
    const long long *yrun = y_g + slot * y_s;
    Scalars s;
    s.alpha = LD(alpha_g + run); s.lam = LD(lam_g + run); s.theta = LD(theta_g + run);
    s.factor = __fsub_rn(1.0f, __fmul_rn(s.alpha, s.lam));  // as torch: 1 - alpha * lambda in float32
    s.step = 0.0f; s.sqrt_bc2 = 1.0f; s.inv_bc2 = 0.0f; s.first_step = true;
    const float bound0 = LD(bound0_g + run), bound1 = LD(bound1_g + run), bound2 = LD(bound2_g + run);
    const double alpha_d = (double)s.alpha;

    // on chip for the segment: W1 and W2 (shared), the head's FADE state (registers of the head pass's threads)
    for (int e = tid; e < NH1 * NH2; e += NT) sW1[e] = LD(p + OFF_W1 + e);
    for (int e = tid; e < NH2 * NO; e += NT) sW2[e] = LD(p + OFF_W2 + e);
    const int g2 = tid / NH2, j2 = tid - g2 * NH2, g1 = tid / NH1, i1 = tid - g1 * NH1;
    float gam2[R2], tr2[R2];
#pragma unroll
    for (int r = 0; r < R2; ++r) {
        const int k = g2 + r * G2;
        const bool own = FADE_HEAD && g2 < G2 && k < NO;
        gam2[r] = own ? LD(rows.g + OFF_W2 + k * NH2 + j2) : 0.0f;
        tr2[r] = own ? LD(rows.t + OFF_W2 + k * NH2 + j2) : 0.0f;
    }
    double loss_sum = tid == 0 ? LD(loss_g + run) : 0.0, correct_sum = tid == 0 ? LD(correct_g + run) : 0.0;
    unsigned char *active = active_g + run * (NH1 + NH2);
    bool fired1 = tid < NH1 && LD(active + tid) != 0, fired2 = tid < NH2 && LD(active + NH1 + tid) != 0;

    for (int c = tid; c < NI; c += NT) sx[0][c] = LD(xrun + c);
    __syncthreads();
    w0_pass<false>(p, rows, sx[0], sx[0], sdz0, sz0, s, bound0, warp, lane);  // z0 of the segment's first step
    __syncthreads();

    for (int t = 0; t < steps; ++t) {
        const int b = t & 1;
        // 1: h1, the next sample, the label, Adam's scalars of this step
        if (tid < NH1) { const float z = sz0[tid]; fired1 = fired1 || z > 0.0f; sh1[tid] = leaky(z); }
        if (t + 1 < steps)
#pragma unroll 1
            for (int c = tid; c < NI; c += NT) sx[b ^ 1][c] = LD(xrun + (long long)(t + 1) * x_t + c);
        if (tid == 0) {
            slabel = (int)LD(yrun + (long long)t * y_t);
            if (ADAM) { sscal[0] = (float)(alpha_d / LD(bc1_g + t)); sscal[1] = LD(sqrt_bc2_g + t); sscal[2] = LD(inv_bc2_g + t); }
        }
        __syncthreads();
        if (ADAM) {
            s.step = sscal[0]; s.sqrt_bc2 = sscal[1]; s.inv_bc2 = sscal[2];
            s.first_step = !(s.inv_bc2 > 0.0f);  // inv_bc2 = 1 / (1 - beta2^(k-1)), 0 before the first step
        }
        // 2: z1 = W1 h1 + b1
#pragma unroll 1
        for (int j = warp; j < NH2; j += NW) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < KC1; ++k) {
                const int i = lane + 32 * k;
                if (i < NH1) acc = fmaf(sW1[j * NH1 + i], sh1[i], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) { const float z = acc + LD(p + OFF_B1 + j); sz1[j] = z; sh2[j] = leaky(z); }
        }
        __syncthreads();
        // 3: the logits
#pragma unroll 1
        for (int k = warp; k < NO; k += NW) {
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < KC2; ++c) {
                const int j = lane + 32 * c;
                if (j < NH2) acc = fmaf(sW2[k * NH2 + j], sh2[j], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) sout[k] = acc + LD(p + OFF_B2 + k);
        }
        __syncthreads();
        // 4: warp 0: softmax, the sums, delta and p(1 - p), the head bias
        if (warp == 0) {
            const int label = slabel;
            const bool has1 = lane + 32 < NO;
            const float o0 = lane < NO ? sout[lane] : -INFINITY, o1 = has1 ? sout[lane + 32] : -INFINITY;
            float best = o0;
            int arg = lane;
            if (o1 > best) { best = o1; arg = lane + 32; }
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) {  // the max and its first index (torch's argmax)
                const float other = __shfl_xor_sync(FULL, best, offset);
                const int at = __shfl_xor_sync(FULL, arg, offset);
                if (other > best || (other == best && at < arg)) { best = other; arg = at; }
            }
            const float total = warp_sum((lane < NO ? expf(o0 - best) : 0.0f) + (has1 ? expf(o1 - best) : 0.0f));
            const float lse = logf(total);
            const float lp0 = (o0 - best) - lse, lp1 = (o1 - best) - lse;  // log_softmax as torch forms it
            const float label_lp = __shfl_sync(FULL, label < 32 ? lp0 : lp1, label & 31);
            if (lane == 0) {
                loss_sum += (double)(-label_lp);
                correct_sum += arg == label ? 1.0 : 0.0;
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int k = lane + 32 * half;
                if (k < NO) {
                    const float prob = expf(half ? lp1 : lp0);
                    const float d = k == label ? prob - 1.0f : prob, pf = __fmul_rn(prob, __fsub_rn(1.0f, prob));
                    sdelta[k] = d; spf[k] = pf;
                    float bias = LD(p + OFF_B2 + k);
                    update_streamed<FADE_HEAD>(bias, d, 1.0f, pf, s, bound2, rows, OFF_B2 + k);
                    ST(p + OFF_B2 + k, bias);
                }
            }
        }
        __syncthreads();
        // 5: the head's backward partials and W2's update, thread (g2, j2) over rows g2 + r G2
        if (g2 < G2) {
            const float h = sh2[j2], hq = __fmul_rn(h, h);
            float back = 0.0f;
#pragma unroll
            for (int r = 0; r < R2; ++r) {
                const int k = g2 + r * G2;
                if (k < NO) {
                    float *w = sW2 + k * NH2 + j2;
                    const float d = sdelta[k];
                    float P = *w;
                    back = fmaf(P, d, back);
                    update<FADE_HEAD, false>(P, d, h, __fmul_rn(hq, spf[k]), s, bound2, rows, OFF_W2 + k * NH2 + j2,
                                             gam2[r], tr2[r]);
                    *w = P;
                }
            }
            spart[g2 * NH2 + j2] = back;
        }
        __syncthreads();
        // 6: dz1, b1's update
        if (tid < NH2) {
            float back = spart[tid];
#pragma unroll
            for (int g = 1; g < G2; ++g) back += spart[g * NH2 + tid];
            const float z = sz1[tid];
            fired2 = fired2 || z > 0.0f;
            const float dz = z > 0.0f ? back : back * SLOPE;
            sdz1[tid] = dz;
            float bias = LD(p + OFF_B1 + tid);
            update_streamed<FADE_HIDDEN>(bias, dz, 1.0f, 1.0f, s, bound1, rows, OFF_B1 + tid);
            ST(p + OFF_B1 + tid, bias);
        }
        __syncthreads();
        // 7: layer 1's backward partials and W1's update, thread (g1, i1) over rows g1 + r G1
        if (g1 < G1) {
            const float h = sh1[i1], hq = __fmul_rn(h, h);
            float back = 0.0f;
#pragma unroll 1
            for (int j = g1; j < NH2; j += G1) {
                float *w = sW1 + j * NH1 + i1;
                const float d = sdz1[j];
                float P = *w;
                back = fmaf(P, d, back);
                update_streamed<FADE_HIDDEN>(P, d, h, hq, s, bound1, rows, OFF_W1 + j * NH1 + i1);
                *w = P;
            }
            spart[g1 * NH1 + i1] = back;
        }
        __syncthreads();
        // 8: dz0
        if (tid < NH1) {
            float back = spart[tid];
#pragma unroll
            for (int g = 1; g < G1; ++g) back += spart[g * NH1 + tid];
            const float z = sz0[tid];
            sdz0[tid] = z > 0.0f ? back : back * SLOPE;
        }
        __syncthreads();
        // 9: W0 and b0 updated from HBM and back; the next step's z0 from the new W0 and x[t + 1]
        w0_pass<true>(p, rows, sx[b], sx[b ^ 1], sdz0, sz0, s, bound0, warp, lane);
        __syncthreads();
    }

    // the segment's end: what stayed on chip, and the sums, written once
    for (int e = tid; e < NH1 * NH2; e += NT) ST(p + OFF_W1 + e, sW1[e]);
    for (int e = tid; e < NH2 * NO; e += NT) ST(p + OFF_W2 + e, sW2[e]);
#pragma unroll
    for (int r = 0; r < R2; ++r) {
        const int k = g2 + r * G2;
        if (FADE_HEAD && g2 < G2 && k < NO) {
            ST(rows.g + OFF_W2 + k * NH2 + j2, gam2[r]);
            ST(rows.t + OFF_W2 + k * NH2 + j2, tr2[r]);
        }
    }
    if (tid == 0) { ST(loss_g + run, loss_sum); ST(correct_g + run, correct_sum); }
    if (tid < NH1) ST(active + tid, (unsigned char)(fired1 ? 1 : 0));
    if (tid < NH2) ST(active + NH1 + tid, (unsigned char)(fired2 ? 1 : 0));
}
"""
