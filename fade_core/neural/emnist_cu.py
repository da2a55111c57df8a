"""The EMNIST kernel's CUDA C++ text, in three parts that emnist_source.kernel_source joins behind its
`#define`s (the sizes, the learner's parts, the slope) and the rule printed from parts.py:

    PRELUDE  the layout (a run's parameter offsets, the passes' groups and batches) and the LD/ST and
             SHARED_DYNAMIC hooks an emulation redefines (tests/emnist_emulation.py)
    HELPERS  a parameter's state to and from HBM, a warp's sum, the activation, and the W0 pass
    KERNEL   `emnist_segment`: what stays on chip, the step's nine phases, the segment's end

emnist_source.py's docstring describes the design and the phases.
"""

PRELUDE = r"""
#define NW (NT / 32)
#define G1 (NT / NH1)                  // column groups of W1's backward pass
#define G2 (NT / NH2)                  // column groups of W2's
#define R2 ((NO + G2 - 1) / G2)        // W2 rows a head thread owns
#define KC0 ((NI + 31) / 32)           // a W0 row's elements per lane
#define KC1 ((NH1 + 31) / 32)
#define KC2 ((NH2 + 31) / 32)
#define STREAMED (ADAM || FADE_HIDDEN)      // W0's optimizer state streams beside it: fewer columns a batch
#define CH0 (STREAMED ? 9 : KC0)           // a W0 row's columns per lane whose loads are in flight together
#define CH2 8                              // W2's rows a head thread updates per batch
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

HELPERS = r"""
struct Rows { float *m, *v, *g, *t; };  // a run's Adam moments and FADE state, indexed by parameter offset
struct State { float m, v, g, t; };     // one parameter's

// A parameter's state from HBM (Adam's moments; FADE's gamma and trace when FADE_GLOBAL) and back. The passes
// load a batch of parameters' state before updating any, so the loads are in flight together (the compiler
// cannot move a load above a store to memory it may alias).
template <bool FADE_GLOBAL>
__device__ __forceinline__ void load_state(State &st, const Rows &rows, const int at)
{
    st.m = ADAM ? LD(rows.m + at) : 0.0f; st.v = ADAM ? LD(rows.v + at) : 0.0f;
    st.g = FADE_GLOBAL ? LD(rows.g + at) : 0.0f; st.t = FADE_GLOBAL ? LD(rows.t + at) : 0.0f;
}

template <bool FADE_GLOBAL>
__device__ __forceinline__ void store_state(const State &st, const Rows &rows, const int at)
{
    if (ADAM) { ST(rows.m + at, st.m); ST(rows.v + at, st.v); }
    if (FADE_GLOBAL) { ST(rows.g + at, st.g); ST(rows.t + at, st.t); }
}

__device__ __forceinline__ float warp_sum(float value)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(FULL, value, offset);
    return value;
}

__device__ __forceinline__ float leaky(const float z) { return z > 0.0f ? z : z * SLOPE; }

// The W0 pass: a warp per row i, each lane over columns lane + 32 k, CH0 columns' loads in flight at once.
// UPDATE: each element's update with gradient dz0[i] x[c] (stored), and b0[i]'s; always: z0[i] =
// (new W0[i, :]) . xn + b0[i] into sz0.
template <bool UPDATE>
__device__ __forceinline__ void w0_pass(float *p, const Rows &rows, const float *xt, const float *xn, const float *sdz0,
                                        float *sz0, const Scalars &s, const float bound0, const int warp, const int lane)
{
#pragma unroll 1
    for (int i = warp; i < NH1; i += NW) {
        const float dz = UPDATE ? sdz0[i] : 0.0f;
        float *row = p + i * NI;
        float b = 0.0f;
        State bs;
        if (lane == 0) { b = LD(p + OFF_B0 + i); if (UPDATE) load_state<FADE_HIDDEN>(bs, rows, OFF_B0 + i); }
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k0 = 0; k0 < KC0; k0 += CH0) {
            float P[CH0];
            State st[CH0];
#pragma unroll
            for (int u = 0; u < CH0; ++u) {
                const int c = lane + 32 * (k0 + u);
                if (k0 + u < KC0 && c < NI) {
                    P[u] = LD(row + c);
                    if (UPDATE) load_state<FADE_HIDDEN>(st[u], rows, i * NI + c);
                }
            }
#pragma unroll
            for (int u = 0; u < CH0; ++u) {
                const int c = lane + 32 * (k0 + u);
                if (k0 + u < KC0 && c < NI) {
                    if (UPDATE) {
                        const float xc = xt[c];
                        apply_rule<FADE_HIDDEN>(P[u], dz, xc, st[u].m, st[u].v, st[u].g, st[u].t, __fmul_rn(xc, xc), s, bound0);
                        ST(row + c, P[u]);
                        store_state<FADE_HIDDEN>(st[u], rows, i * NI + c);
                    }
                    acc[(k0 + u) % 4] = fmaf(P[u], xn[c], acc[(k0 + u) % 4]);
                }
            }
        }
        const float z = warp_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
        if (lane == 0) {
            if (UPDATE) {
                apply_rule<FADE_HIDDEN>(b, dz, 1.0f, bs.m, bs.v, bs.g, bs.t, 1.0f, s, bound0);
                ST(p + OFF_B0 + i, b);
                store_state<FADE_HIDDEN>(bs, rows, OFF_B0 + i);
            }
            sz0[i] = z + b;
        }
    }
}
"""

KERNEL = r"""
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
    __shared__ double sloss, scorrect;  // the sums (thread 0's; in shared memory, not 4 long-lived registers)
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
    if (tid == 0) { sloss = LD(loss_g + run); scorrect = LD(correct_g + run); }
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
            if (ADAM) { sscal[0] = (float)((double)s.alpha / LD(bc1_g + t)); sscal[1] = LD(sqrt_bc2_g + t); sscal[2] = LD(inv_bc2_g + t); }
        }
        __syncthreads();
        if (ADAM) {
            s.step = sscal[0]; s.sqrt_bc2 = sscal[1]; s.inv_bc2 = sscal[2];
            s.first_step = !(s.inv_bc2 > 0.0f);  // inv_bc2 = 1 / (1 - beta2^(k-1)), 0 before the first step
        }
        // 2: z1 = W1 h1 + b1
#pragma unroll 1
        for (int j = warp; j < NH2; j += NW) {
            const float bias = lane == 0 ? LD(p + OFF_B1 + j) : 0.0f;  // (loaded first: its latency under the sum)
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < KC1; ++k) {
                const int i = lane + 32 * k;
                if (i < NH1) acc = fmaf(sW1[j * NH1 + i], sh1[i], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) { const float z = acc + bias; sz1[j] = z; sh2[j] = leaky(z); }
        }
        __syncthreads();
        // 3: the logits
#pragma unroll 1
        for (int k = warp; k < NO; k += NW) {
            const float bias = lane == 0 ? LD(p + OFF_B2 + k) : 0.0f;
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < KC2; ++c) {
                const int j = lane + 32 * c;
                if (j < NH2) acc = fmaf(sW2[k * NH2 + j], sh2[j], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) sout[k] = acc + bias;
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
                sloss += (double)(-label_lp);
                scorrect += arg == label ? 1.0 : 0.0;
            }
            float bias[2];
            State bst[2];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int k = lane + 32 * half;
                if (k < NO) { bias[half] = LD(p + OFF_B2 + k); load_state<FADE_HEAD>(bst[half], rows, OFF_B2 + k); }
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int k = lane + 32 * half;
                if (k < NO) {
                    const float prob = expf(half ? lp1 : lp0);
                    const float d = k == label ? prob - 1.0f : prob, pf = __fmul_rn(prob, __fsub_rn(1.0f, prob));
                    sdelta[k] = d; spf[k] = pf;
                    apply_rule<FADE_HEAD>(bias[half], d, 1.0f, bst[half].m, bst[half].v, bst[half].g, bst[half].t, pf, s, bound2);
                    ST(p + OFF_B2 + k, bias[half]);
                    store_state<FADE_HEAD>(bst[half], rows, OFF_B2 + k);
                }
            }
        }
        __syncthreads();
        // 5: the head's backward partials and W2's update, thread (g2, j2) over rows g2 + r G2
        if (g2 < G2) {
            const float h = sh2[j2], hq = __fmul_rn(h, h);
            float back = 0.0f;
#pragma unroll
            for (int r0 = 0; r0 < R2; r0 += CH2) {
                State st[CH2];
#pragma unroll
                for (int u = 0; u < CH2; ++u) {
                    const int k = g2 + (r0 + u) * G2;
                    if (r0 + u < R2 && k < NO) load_state<false>(st[u], rows, OFF_W2 + k * NH2 + j2);
                }
#pragma unroll
                for (int u = 0; u < CH2; ++u) {
                    const int r = r0 + u, k = g2 + r * G2;
                    if (r < R2 && k < NO) {
                        float *w = sW2 + k * NH2 + j2;
                        const float d = sdelta[k];
                        float P = *w;
                        back = fmaf(P, d, back);
                        apply_rule<FADE_HEAD>(P, d, h, st[u].m, st[u].v, gam2[r], tr2[r], __fmul_rn(hq, spf[k]), s, bound2);
                        *w = P;
                        store_state<false>(st[u], rows, OFF_W2 + k * NH2 + j2);
                    }
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
            State st;
            load_state<FADE_HIDDEN>(st, rows, OFF_B1 + tid);
            apply_rule<FADE_HIDDEN>(bias, dz, 1.0f, st.m, st.v, st.g, st.t, 1.0f, s, bound1);
            ST(p + OFF_B1 + tid, bias);
            store_state<FADE_HIDDEN>(st, rows, OFF_B1 + tid);
        }
        __syncthreads();
        // 7: layer 1's backward partials and W1's update, thread (g1, i1) over rows g1 + r G1
        if (g1 < G1) {
            const float h = sh1[i1], hq = __fmul_rn(h, h);
            float back = 0.0f;
#pragma unroll 1
            for (int j0 = g1; j0 < NH2; j0 += G1 * CH1) {
                State st[CH1];
#pragma unroll
                for (int u = 0; u < CH1; ++u) {
                    const int j = j0 + u * G1;
                    if (j < NH2) load_state<FADE_HIDDEN>(st[u], rows, OFF_W1 + j * NH1 + i1);
                }
#pragma unroll
                for (int u = 0; u < CH1; ++u) {
                    const int j = j0 + u * G1;
                    if (j < NH2) {
                        float *w = sW1 + j * NH1 + i1;
                        const float d = sdz1[j];
                        float P = *w;
                        back = fmaf(P, d, back);
                        apply_rule<FADE_HIDDEN>(P, d, h, st[u].m, st[u].v, st[u].g, st[u].t, hq, s, bound1);
                        *w = P;
                        store_state<FADE_HIDDEN>(st[u], rows, OFF_W1 + j * NH1 + i1);
                    }
                }
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
    if (tid == 0) { ST(loss_g + run, sloss); ST(correct_g + run, scorrect); }
    if (tid < NH1) ST(active + tid, (unsigned char)(fired1 ? 1 : 0));
    if (tid < NH2) ST(active + NH1 + tid, (unsigned char)(fired2 ? 1 : 0));
}
"""
