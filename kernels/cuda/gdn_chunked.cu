/* gdn_chunked.cu - the gated delta rule of kernels/ops.h (cuda_op_gdn's
 * semantics) in the chunked WY / UT-transform form, FP32 FMA only, as a
 * prefill candidate: the scan of gdn.cu walks the tokens one after another
 * (~0.4 us per token and layer at the 9B shape), the chunked form turns
 * almost all of that work into small matrix products. Measured against the
 * scan by tests/gpu/test_gdn_chunked.c; not wired into the backend.
 *
 * Math, per value head h (key head h % Gk) and chunk of n <= 64 tokens of
 * one sequence, S0 [128 key][128 value] the state entering the chunk,
 * q, k L2-normalised (q also scaled by 1/sqrt(128)), beta_t = sigmoid,
 * g_t = a softplus(alpha_t + dt_bias) <= 0, G_t = g_0 + .. + g_t (cumulated
 * inside the chunk only), Gam_t = exp(G_t). With w_t the delta of token t
 * (S_t = exp(g_t) S_{t-1} + k_t w_t^T), by induction
 *   S_t = Gam_t S0 + sum_{i<=t} exp(G_t - G_i) k_i w_i^T,
 * so the deltas solve the unit lower-triangular system
 *   w_t + sum_{i<t} A[t][i] w_i = R_t,  A[t][i] = beta_t exp(G_t - G_i) k_t.k_i,
 *   R_t = beta_t (v_t - Gam_t S0^T k_t);   W = T R with T = (I + A)^-1,
 * and  o_t = Gam_t S0^T q_t + sum_{i<=t} P[t][i] w_i,  P[t][i] = exp(G_t - G_i) q_t.k_i,
 *      S_end = Gam_{n-1} S0 + sum_i exp(G_{n-1} - G_i) k_i w_i^T.
 * Every exponent is a non-positive difference of cumulative log-decays: no
 * division by small cumulative products. T is formed by forward substitution
 * on its four 16x16 diagonal blocks, then block row k = 1..3 as
 * T[k][<k] = -T[k][k] (A[k][<k] T[<k][<k]). A numpy prototype of exactly
 * this algorithm (windows, partial chunks, the blocked inverse) matched the
 * float64 recurrence to ~1e-6 relative, and so did these two kernels run as
 * C++ under a CPU emulation of threads, barriers and shuffles.
 *
 * The batch is processed in windows of GDNC_WIN batch tokens: a window owns
 * the chunks (64-token pieces of each sequence, aligned to the sequence's
 * first token) that start inside it. Per window two kernels:
 * - k_gdnc_prep, block (chunk of the window, value head), 256 threads: all
 *   that does not depend on the state. q, k normalised into shared memory,
 *   G by a warp scan, K K^T and Q K^T (4x4 register tiles, float4 reads of
 *   rows padded to 132 floats), A and P, then T in shared memory. Writes T,
 *   P, G and beta of each token and head to a scratch buffer (132 floats
 *   per token and head: ~53 MB for a 2048-token window at Hv = 48). 68 KB
 *   of dynamic shared memory (two blocks per SM on sm_90).
 * - k_gdnc_scan, block (32 value columns, value head, sequence), 256
 *   threads, the column grid of gdn.cu: the sequence's chunks of the window
 *   in order, its state slice [128][32] in registers (thread: 4 key rows x
 *   4 columns). Per chunk: [Q; K] S0 (thread: 2 tokens x 4 columns of each),
 *   R, W = T R, O += P W, S = Gam S + (d K)^T W, d_t = exp(G_{n-1} - G_t).
 *   The next chunk's raw q/k are loaded into registers during the products.
 *   86 KB of dynamic shared memory: q/k [64][132] each (q's space then holds
 *   T and P [64][68]), S [128][32] (then R and W [64][32]).
 * Sums run in a fixed order: results do not depend on other sequences in
 * the batch. They do depend on where a prompt's steps start (chunks align
 * to each step's first token of the sequence), unlike the scan.
 *
 * Arithmetic: every rounding is explicit (__fmul_rn, __fadd_rn, __fsub_rn,
 * __fmaf_rn and kernels/exact_math.h's xm_exp_nonpos, xm_softplus,
 * xm_sigmoid, xm_l2_scale), so --use_fast_math neither contracts nor
 * approximates anything here, and every sum is one FFMA chain in a fixed
 * order (or the fixed warp_sum / shfl_up trees). kernels/cpu/gdn_chunked.c
 * reproduces these kernels bit for bit (denormals flushed as here); a
 * change here must change it there.
 *
 * Both kernels launch through cuda_launch (launch.cuh: on sm_90 each is a
 * programmatic dependent of the previous kernel, waiting before any access).
 * No tensor-core instructions, no sm_80+ features (compiles for sm_70; needs
 * 86 KB of opt-in shared memory per block: sm_70 and later). The scratch
 * buffer is the backend's (struct cuda_ctx gdnc_scratch). The gdn op
 * (gdn.cu) runs it for the sequences with >= GDN_CHUNKED_MIN_TOKENS tokens
 * in a step. */

#include "../gdn_chunked_shape.h"
#include "cuda_util.cuh"
#include "gdn_chunked.h"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define GDNC_COLS 32            /* value columns per scan block */
#define GDNC_THREADS 256
#define GDNC_LD 132             /* row stride of the q/k tiles (floats) */
#define GDNC_LDT 68             /* row stride of the A/T/P tiles */
#define GDNC_ROW 132            /* scratch floats per token and head: T 64, P 64, G, beta, pad */
#define GDNC_QREG (2 * GDNC_C * GDNC_LDT)   /* q tile, later T and P: 8704 >= 64 * 132 */
#define GDNC_PREP_SMEM ((2 * GDNC_C * GDNC_LD + 2 * GDNC_C) * 4)
#define GDNC_SCAN_SMEM ((GDNC_QREG + GDNC_C * GDNC_LD + GDNC_D * GDNC_COLS + 4 * GDNC_C) * 4)

struct gdnc_args {
    const float *y, *beta_raw, *alpha_raw, *a, *dt_bias;
    float *out, *rec, *scratch;
    float eps;
    int n_slots, n_k_heads, n_v_heads, conv_dim, n_seqs;
    int w0, w1;                 /* the window: chunks whose first token is in [w0, w1) */
    int min_len;                /* sequences with fewer tokens in the step are not ours */
};

static __device__ __forceinline__ float gdnc_softplus(float x)
{
    return xm_softplus(x);   /* kernels/exact_math.h, as gdn.cu */
}

/* Chunks [*lo, *hi) of a sequence of tokens [t0, t1) that start in [w0, w1). */
static __host__ __device__ __forceinline__ void gdnc_chunks(int t0, int t1, int w0, int w1, int *lo,
                                                           int *hi)
{
    int l = w0 > t0 ? (w0 - t0 + GDNC_C - 1) / GDNC_C : 0;
    int e = w1 < t1 ? w1 : t1;
    int h = e > t0 ? (e - t0 + GDNC_C - 1) / GDNC_C : 0;
    *lo = l;
    *hi = h > l ? h : l;
}

static __device__ __forceinline__ float4 ld4(const float *p)
{
    return *reinterpret_cast<const float4 *>(p);
}

static __device__ __forceinline__ void st4(float *p, float4 v)
{
    *reinterpret_cast<float4 *>(p) = v;
}

/* ---- q and k of a chunk: 128 rows (row r < 64: q of token r, else k of
 * token r - 64), warp w owns rows 16w..16w+15, lane the elements lane + 32e.
 * Tokens at or past n are zero. ---- */

static __device__ __forceinline__ void gdnc_qk_load(float (&x)[16][4], const struct gdnc_args &g,
                                                    int ts, int n, int kh)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int head = warp < 4 ? kh : g.n_k_heads + kh;    /* warps 0-3 q, 4-7 k */
#pragma unroll
    for (int i = 0; i < 16; i++) {
        int tok = (warp * 16 + i) & (GDNC_C - 1);
        const float *p = g.y + (size_t)(ts + tok) * g.conv_dim + (size_t)head * GDNC_D + lane;
#pragma unroll
        for (int e = 0; e < 4; e++)
            x[i][e] = tok < n ? p[32 * e] : 0.0f;
    }
}

/* Normalise the loaded rows as gdn.cu does (xm_l2_scale, q's scale also
 * times 1/sqrt(128)) into Qs / Ks [64][GDNC_LD]: the same bits. */
static __device__ __forceinline__ void gdnc_qk_store(float *Qs, float *Ks, const float (&x)[16][4],
                                                     int n, float eps)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float extra = warp < 4 ? XM_DIV(1.0f, XM_SQRT((float)GDNC_D)) : 1.0f;
    float *dst0 = warp < 4 ? Qs : Ks;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        int tok = (warp * 16 + i) & (GDNC_C - 1);
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++)
            ss = __fmaf_rn(x[i][e], x[i][e], ss);
        ss = warp_sum(ss);
        float inv = __fmul_rn(xm_l2_scale(ss, eps), extra);
        if (tok >= n)
            inv = 0.0f;   /* zero rows even with eps = 0 */
        float *dst = dst0 + tok * GDNC_LD + lane;
#pragma unroll
        for (int e = 0; e < 4; e++)
            dst[32 * e] = __fmul_rn(x[i][e], inv);
    }
}

/* ---- kernel 1: T, P, G, beta of every chunk of the window ---- */

static __global__ void __launch_bounds__(GDNC_THREADS, 2)
    k_gdnc_prep(struct gdnc_args g, const int32_t *seq_start, const int32_t *slot)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    extern __shared__ float4 gdnc_smem4[];
    float *Qs = reinterpret_cast<float *>(gdnc_smem4);   /* [64][LD], then A [64][LDT] */
    float *Ks = Qs + GDNC_C * GDNC_LD;                   /* [64][LD], then T [64][LDT], Y [16][48] */
    float *sG = Ks + GDNC_C * GDNC_LD, *sB = sG + GDNC_C;
    float *As = Qs, *Ts = Ks, *Ys = Ks + GDNC_C * GDNC_LDT;
    int tid = threadIdx.x, lane = tid & 31, h = blockIdx.y;

    /* chunk blockIdx.x of the window, counting sequence by sequence */
    int k = blockIdx.x, s, c = -1;
    for (s = 0; s < g.n_seqs; s++) {
        int sl = slot[s], t0 = seq_start[s], t1 = seq_start[s + 1], lo, hi;
        if (sl < 0 || sl >= g.n_slots || t0 >= t1 || t1 - t0 < g.min_len)
            continue;
        gdnc_chunks(t0, t1, g.w0, g.w1, &lo, &hi);
        if (k < hi - lo) {
            c = lo + k;
            break;
        }
        k -= hi - lo;
    }
    if (c < 0)
        return;
    int ts = seq_start[s] + c * GDNC_C, n = min(GDNC_C, seq_start[s + 1] - ts);
    int kh = h % g.n_k_heads;
    float *scr = g.scratch + ((size_t)(ts - g.w0) * g.n_v_heads + h) * GDNC_ROW;
    size_t scr_tok = (size_t)g.n_v_heads * GDNC_ROW;   /* scratch stride between tokens */

    {
        float x[16][4];
        gdnc_qk_load(x, g, ts, n, kh);
        float br0 = 0.0f, br1 = 0.0f, ar0 = 0.0f, ar1 = 0.0f;
        if (tid < 32) {   /* warp 0: tokens lane and lane + 32 */
            size_t i0 = (size_t)(ts + lane) * g.n_v_heads + h;
            size_t i1 = i0 + (size_t)32 * g.n_v_heads;
            if (lane < n)
                br0 = g.beta_raw[i0], ar0 = g.alpha_raw[i0];
            if (lane + 32 < n)
                br1 = g.beta_raw[i1], ar1 = g.alpha_raw[i1];
        }
        gdnc_qk_store(Qs, Ks, x, n, g.eps);
        if (tid < 32) {   /* inclusive scan of g over the chunk, in a fixed order */
            float ah = g.a[h], dh = g.dt_bias[h];
            float g0 = lane < n ? __fmul_rn(ah, gdnc_softplus(__fadd_rn(ar0, dh))) : 0.0f;
            float g1 = lane + 32 < n ? __fmul_rn(ah, gdnc_softplus(__fadd_rn(ar1, dh))) : 0.0f;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                float u0 = __shfl_up_sync(CS_FULL_MASK, g0, o);
                float u1 = __shfl_up_sync(CS_FULL_MASK, g1, o);
                if (lane >= o)
                    g0 = __fadd_rn(g0, u0), g1 = __fadd_rn(g1, u1);
            }
            g1 = __fadd_rn(g1, __shfl_sync(CS_FULL_MASK, g0, 31));
            sG[lane] = g0;
            sG[lane + 32] = g1;
            sB[lane] = lane < n ? sigmoid_f(br0) : 0.0f;
            sB[lane + 32] = lane + 32 < n ? sigmoid_f(br1) : 0.0f;
        }
    }
    __syncthreads();

    /* K K^T and Q K^T: thread (ty, tx) rows t = ty + 16r, columns i = tx + 16c */
    int ty = tid >> 4, tx = tid & 15;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int cc = 0; cc < 4; cc++)
            kk[r][cc] = qk[r][cc] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < GDNC_D; d += 4) {
        float4 ka[4], qa[4], kb[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            ka[r] = ld4(Ks + (ty + 16 * r) * GDNC_LD + d);
            qa[r] = ld4(Qs + (ty + 16 * r) * GDNC_LD + d);
            kb[r] = ld4(Ks + (tx + 16 * r) * GDNC_LD + d);
        }
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int cc = 0; cc < 4; cc++) {
                kk[r][cc] = __fmaf_rn(ka[r].x, kb[cc].x, kk[r][cc]);
                kk[r][cc] = __fmaf_rn(ka[r].y, kb[cc].y, kk[r][cc]);
                kk[r][cc] = __fmaf_rn(ka[r].z, kb[cc].z, kk[r][cc]);
                kk[r][cc] = __fmaf_rn(ka[r].w, kb[cc].w, kk[r][cc]);
                qk[r][cc] = __fmaf_rn(qa[r].x, kb[cc].x, qk[r][cc]);
                qk[r][cc] = __fmaf_rn(qa[r].y, kb[cc].y, qk[r][cc]);
                qk[r][cc] = __fmaf_rn(qa[r].z, kb[cc].z, qk[r][cc]);
                qk[r][cc] = __fmaf_rn(qa[r].w, kb[cc].w, qk[r][cc]);
            }
    }
    __syncthreads();   /* q and k are no longer read: A and T take their space */

    /* A (strictly lower) into shared memory, P (lower with the diagonal) out */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        int t = ty + 16 * r;
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            int i = tx + 16 * cc;
            float av = 0.0f, pv = 0.0f;
            if (i <= t && t < n) {
                /* G_t - G_i <= 0 (up to the scan's rounding: xm_exp_nonpos
                 * is exact for small positive arguments too) */
                float e = xm_exp_nonpos(__fsub_rn(sG[t], sG[i]));
                pv = __fmul_rn(e, qk[r][cc]);
                if (i < t)
                    av = __fmul_rn(__fmul_rn(sB[t], e), kk[r][cc]);
            }
            As[t * GDNC_LDT + i] = av;
            if (t < n)
                scr[t * scr_tok + GDNC_C + i] = pv;
        }
    }
    if (tid < n) {
        scr[tid * scr_tok + 2 * GDNC_C] = sG[tid];
        scr[tid * scr_tok + 2 * GDNC_C + 1] = sB[tid];
    }
    /* T's blocks above the diagonal are zero */
    for (int idx = tid; idx < 6 * 256; idx += GDNC_THREADS) {
        int blk = idx >> 8, r = (idx >> 4) & 15, cc = idx & 15;
        int bi = blk < 3 ? 0 : blk < 5 ? 1 : 2;
        int bj = blk < 3 ? blk + 1 : blk < 5 ? blk - 1 : 3;
        Ts[(16 * bi + r) * GDNC_LDT + 16 * bj + cc] = 0.0f;
    }
    __syncthreads();

    /* diagonal blocks: thread (block b, column jj) by forward substitution */
    if (tid < GDNC_C) {
        int b = tid >> 4, jj = tid & 15, base = 16 * b;
        float col[16];
#pragma unroll
        for (int tt = 0; tt < 16; tt++) {
            float acc = tt == jj ? 1.0f : 0.0f;
            const float *arow = As + (base + tt) * GDNC_LDT + base;
#pragma unroll
            for (int ss = 0; ss < tt; ss++)
                acc = __fmaf_rn(-arow[ss], col[ss], acc);
            col[tt] = acc;
        }
#pragma unroll
        for (int tt = 0; tt < 16; tt++)
            Ts[(base + tt) * GDNC_LDT + base + jj] = col[tt];
    }
    __syncthreads();

    /* block rows 1..3: Y = A[k][<k] T[<k][<k], then T[k][<k] = -T[k][k] Y */
    for (int blk = 1; blk < 4; blk++) {
        int m = 16 * blk;
        for (int o = tid; o < 16 * m; o += GDNC_THREADS) {
            int u = o / m, ci = o - u * m;
            const float *arow = As + (m + u) * GDNC_LDT;
            float acc = 0.0f;
            for (int s2 = ci & ~15; s2 < m; s2++)   /* T[s2][ci] = 0 above ci's block */
                acc = __fmaf_rn(arow[s2], Ts[s2 * GDNC_LDT + ci], acc);
            Ys[u * 48 + ci] = acc;
        }
        __syncthreads();
        for (int o = tid; o < 16 * m; o += GDNC_THREADS) {
            int u = o / m, ci = o - u * m;
            const float *trow = Ts + (m + u) * GDNC_LDT + m;
            float acc = 0.0f;
            for (int v = 0; v <= u; v++)
                acc = __fmaf_rn(trow[v], Ys[v * 48 + ci], acc);
            Ts[(m + u) * GDNC_LDT + ci] = -acc;
        }
        __syncthreads();
    }

    /* T rows of the chunk's tokens out */
    for (int idx = tid; idx < n * 16; idx += GDNC_THREADS) {
        int t = idx >> 4, q4 = 4 * (idx & 15);
        st4(scr + t * scr_tok + q4, ld4(Ts + t * GDNC_LDT + q4));
    }
}

/* ---- kernel 2: the window's chunks of one sequence, in order ---- */

static __global__ void __launch_bounds__(GDNC_THREADS, 1)
    k_gdnc_scan(struct gdnc_args g, const int32_t *seq_start, const int32_t *slot)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    extern __shared__ float4 gdnc_smem4[];
    float *Qs = reinterpret_cast<float *>(gdnc_smem4);   /* q [64][LD]; then T, P [64][LDT] */
    float *Ks = Qs + GDNC_QREG;                          /* k [64][LD], rows later times d_t */
    float *Ss = Ks + GDNC_C * GDNC_LD;                   /* S [128][32]; then R, W [64][32] */
    float *sBeta = Ss + GDNC_D * GDNC_COLS, *sGam = sBeta + GDNC_C, *sD = sGam + GDNC_C;
    float *Tm = Qs, *Pm = Qs + GDNC_C * GDNC_LDT, *Rs = Ss, *Ws = Ss + GDNC_C * GDNC_COLS;
    int cg = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int sl = slot[s], t0 = seq_start[s], t1 = seq_start[s + 1], lo, hi;
    if (sl < 0 || sl >= g.n_slots || t0 >= t1 || t1 - t0 < g.min_len)
        return;
    gdnc_chunks(t0, t1, g.w0, g.w1, &lo, &hi);
    if (lo >= hi)
        return;
    int tid = threadIdx.x, warp = tid >> 5, kh = h % g.n_k_heads;
    int col0 = cg * GDNC_COLS, j0 = 4 * (tid & 7), rp = tid >> 3, i0 = 4 * rp;
    size_t scr_tok = (size_t)g.n_v_heads * GDNC_ROW;
    size_t out_tok = (size_t)g.n_v_heads * GDNC_D;
    int s_end = 4 * warp + 36;   /* past the warp's last token row (4 warp + 35): T, P are 0 after */

    /* thread's state tile: key rows i0..i0+3, value columns col0+j0..+3 */
    float *S_g = g.rec + ((size_t)sl * g.n_v_heads + h) * GDNC_D * GDNC_D + col0 + j0;
    float S[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int cc = 0; cc < 4; cc++)
            S[a][cc] = S_g[(size_t)(i0 + a) * GDNC_D + cc];

    float raw[16][4];
    {
        int ts = t0 + lo * GDNC_C;
        gdnc_qk_load(raw, g, ts, min(GDNC_C, t1 - ts), kh);
    }
    for (int c = lo; c < hi; c++) {
        int ts = t0 + c * GDNC_C, n = min(GDNC_C, t1 - ts);
        const float *scr = g.scratch + ((size_t)(ts - g.w0) * g.n_v_heads + h) * GDNC_ROW;
        float glast = scr[(n - 1) * scr_tok + 2 * GDNC_C];
        float gam_end = xm_exp_nonpos(glast);   /* G <= 0: a sum of g <= 0 */
        __syncthreads();   /* the previous chunk's reads are done */
        if (tid < GDNC_C) {
            float gt = tid < n ? scr[tid * scr_tok + 2 * GDNC_C] : glast;
            float bt = tid < n ? scr[tid * scr_tok + 2 * GDNC_C + 1] : 0.0f;
            sBeta[tid] = bt;
            sGam[tid] = xm_exp_nonpos(gt);
            sD[tid] = tid < n ? xm_exp_nonpos(__fsub_rn(glast, gt)) : 0.0f;   /* G_{n-1} - G_t <= 0 */
        }
        gdnc_qk_store(Qs, Ks, raw, n, g.eps);
#pragma unroll
        for (int a = 0; a < 4; a++)
            st4(Ss + (i0 + a) * GDNC_COLS + j0, make_float4(S[a][0], S[a][1], S[a][2], S[a][3]));
        float vr[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int t = rp + 32 * r;
            const float *vp = g.y + (size_t)(ts + t) * g.conv_dim +
                              (size_t)2 * g.n_k_heads * GDNC_D + (size_t)h * GDNC_D + col0 + j0;
#pragma unroll
            for (int cc = 0; cc < 4; cc++)
                vr[r][cc] = t < n ? vp[cc] : 0.0f;
        }
        if (c + 1 < hi) {   /* next chunk's q/k: in flight during the products */
            int tn = ts + GDNC_C;
            gdnc_qk_load(raw, g, tn, min(GDNC_C, t1 - tn), kh);
        }
        __syncthreads();

        /* X = K S0 and Q S0 for tokens rp, rp + 32 and columns j0..j0+3 */
        float xq[2][4], xk[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int cc = 0; cc < 4; cc++)
                xq[r][cc] = xk[r][cc] = 0.0f;
#pragma unroll 2
        for (int i = 0; i < GDNC_D; i += 4) {
            float4 qa[2], ka[2], sb[4];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                qa[r] = ld4(Qs + (rp + 32 * r) * GDNC_LD + i);
                ka[r] = ld4(Ks + (rp + 32 * r) * GDNC_LD + i);
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
                sb[e] = ld4(Ss + (i + e) * GDNC_COLS + j0);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float qv[4] = {qa[r].x, qa[r].y, qa[r].z, qa[r].w};
                float kv[4] = {ka[r].x, ka[r].y, ka[r].z, ka[r].w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float sv[4] = {sb[e].x, sb[e].y, sb[e].z, sb[e].w};
#pragma unroll
                    for (int cc = 0; cc < 4; cc++) {
                        xq[r][cc] = __fmaf_rn(qv[e], sv[cc], xq[r][cc]);
                        xk[r][cc] = __fmaf_rn(kv[e], sv[cc], xk[r][cc]);
                    }
                }
            }
        }
        __syncthreads();   /* q, k and S are read: T, P, R take their space */

        /* T and P rows (zero past n), k rows times d_t, R = beta (v - Gam X) */
        for (int idx = tid; idx < GDNC_C * 32; idx += GDNC_THREADS) {
            int t = idx >> 5, q4 = 4 * (idx & 31);
            float4 v = t < n ? ld4(scr + t * scr_tok + q4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            st4((q4 < GDNC_C ? Tm + q4 : Pm + q4 - GDNC_C) + t * GDNC_LDT, v);
        }
        for (int idx = tid; idx < GDNC_C * 32; idx += GDNC_THREADS) {
            int t = idx >> 5, q4 = 4 * (idx & 31);
            float d = sD[t];
            float4 v = ld4(Ks + t * GDNC_LD + q4);
            st4(Ks + t * GDNC_LD + q4, make_float4(__fmul_rn(v.x, d), __fmul_rn(v.y, d),
                                                 __fmul_rn(v.z, d), __fmul_rn(v.w, d)));
        }
        float o[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int t = rp + 32 * r;
            float gam = sGam[t], bt = sBeta[t], rr[4];
#pragma unroll
            for (int cc = 0; cc < 4; cc++) {
                o[r][cc] = __fmul_rn(gam, xq[r][cc]);
                rr[cc] = __fmul_rn(bt, __fmaf_rn(-gam, xk[r][cc], vr[r][cc]));   /* v - gam X: one FFMA */
            }
            st4(Rs + t * GDNC_COLS + j0, make_float4(rr[0], rr[1], rr[2], rr[3]));
        }
        __syncthreads();

        /* W = T R (T[t][s2] = 0 for s2 > t) */
        float w[2][4];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int cc = 0; cc < 4; cc++)
                w[r][cc] = 0.0f;
        for (int s2 = 0; s2 < s_end; s2 += 4) {
            float4 ta[2], rb[4];
#pragma unroll
            for (int r = 0; r < 2; r++)
                ta[r] = ld4(Tm + (rp + 32 * r) * GDNC_LDT + s2);
#pragma unroll
            for (int e = 0; e < 4; e++)
                rb[e] = ld4(Rs + (s2 + e) * GDNC_COLS + j0);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float tv[4] = {ta[r].x, ta[r].y, ta[r].z, ta[r].w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float rv[4] = {rb[e].x, rb[e].y, rb[e].z, rb[e].w};
#pragma unroll
                    for (int cc = 0; cc < 4; cc++)
                        w[r][cc] = __fmaf_rn(tv[e], rv[cc], w[r][cc]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++)
            st4(Ws + (rp + 32 * r) * GDNC_COLS + j0, make_float4(w[r][0], w[r][1], w[r][2], w[r][3]));
        __syncthreads();

        /* O = Gam Q S0 + P W (P[t][s2] = 0 for s2 > t) */
        for (int s2 = 0; s2 < s_end; s2 += 4) {
            float4 pa[2], wb[4];
#pragma unroll
            for (int r = 0; r < 2; r++)
                pa[r] = ld4(Pm + (rp + 32 * r) * GDNC_LDT + s2);
#pragma unroll
            for (int e = 0; e < 4; e++)
                wb[e] = ld4(Ws + (s2 + e) * GDNC_COLS + j0);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float pv[4] = {pa[r].x, pa[r].y, pa[r].z, pa[r].w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float wv[4] = {wb[e].x, wb[e].y, wb[e].z, wb[e].w};
#pragma unroll
                    for (int cc = 0; cc < 4; cc++)
                        o[r][cc] = __fmaf_rn(pv[e], wv[cc], o[r][cc]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int t = rp + 32 * r;
            if (t < n) {
                float *op = g.out + (size_t)(ts + t) * out_tok + (size_t)h * GDNC_D + col0 + j0;
#pragma unroll
                for (int cc = 0; cc < 4; cc++)
                    op[cc] = o[r][cc];
            }
        }

        /* S = Gam_{n-1} S0 + (d K)^T W */
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int cc = 0; cc < 4; cc++)
                S[a][cc] = __fmul_rn(S[a][cc], gam_end);
        for (int t = 0; t < n; t++) {
            float4 kv = ld4(Ks + t * GDNC_LD + i0), wv = ld4(Ws + t * GDNC_COLS + j0);
            float ka[4] = {kv.x, kv.y, kv.z, kv.w}, wa[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int cc = 0; cc < 4; cc++)
                    S[a][cc] = __fmaf_rn(ka[a], wa[cc], S[a][cc]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int cc = 0; cc < 4; cc++)
            S_g[(size_t)(i0 + a) * GDNC_D + cc] = S[a][cc];
}

/* ---- host ---- */

/* The per-window T, P, G, beta buffer: the backend's (struct cuda_ctx), grown
 * on demand and freed with it. */
static int gdnc_scratch(struct cuda_ctx *c, size_t bytes, float **out)
{
    int rc = cuda_buffer_reserve(&c->gdnc_scratch, &c->gdnc_scratch_cap, bytes);
    *out = rc == CS_OK ? (float *)c->gdnc_scratch : NULL;
    return rc;
}

/* Once per context (one device): the device must offer the kernels' shared
 * memory, which they are then allowed to use. c->gdnc_ready: 0 not yet
 * asked, 1 ready, CS_EUNSUPPORTED too little shared memory. */
static int gdnc_setup(struct cuda_ctx *c)
{
    if (c->gdnc_ready == 1)
        return CS_OK;
    if (c->gdnc_ready == CS_EUNSUPPORTED)
        return CS_EUNSUPPORTED;
    if (!c->smem_optin)
        CS_CUDA_CHECK(cudaDeviceGetAttribute(&c->smem_optin,
                                             cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
    if (c->smem_optin < GDNC_SCAN_SMEM) {
        LOG_ERROR("cuda", "gdn_chunked: needs %d bytes of shared memory per block, device has %d",
                  GDNC_SCAN_SMEM, c->smem_optin);
        c->gdnc_ready = CS_EUNSUPPORTED;
        return CS_EUNSUPPORTED;
    }
    CS_CUDA_CHECK(cudaFuncSetAttribute(k_gdnc_prep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       GDNC_PREP_SMEM));
    CS_CUDA_CHECK(cudaFuncSetAttribute(k_gdnc_scan, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       GDNC_SCAN_SMEM));
    c->gdnc_ready = 1;
    return CS_OK;
}

cudaStream_t cuda_gdn_chunked_stream(struct cs_backend *be)
{
    return cuda_ctx_of(be)->stream;
}

int cuda_op_gdn_chunked(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                        const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                        struct cs_gdn_layer *st, const struct cs_batch *b)
{
    return cuda_gdn_chunked_from(be, out, y, beta_raw, alpha_raw, a, dt_bias, eps, st, b, 1);
}

int cuda_gdn_chunked_from(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                          const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                          struct cs_gdn_layer *st, const struct cs_batch *b, int min_len)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    static_assert(GDNC_D == 128, "the scan's head size (gdn.cu), which cuda_gdn_check enforces");
    int rc = cuda_gdn_check(c, st, b, "gdn_chunked");
    if (rc != CS_OK)
        return rc;
    if (b->n_seqs <= 0 || b->n_tokens <= 0)
        return CS_OK;
    if ((rc = gdnc_setup(c)) != CS_OK)
        return rc;
    float *scratch;
    rc = gdnc_scratch(c, (size_t)(GDNC_WIN + GDNC_C) * st->n_v_heads * GDNC_ROW * sizeof(float),
                      &scratch);
    if (rc != CS_OK)
        return rc;
    struct gdnc_args g;
    g.y = y;
    g.beta_raw = beta_raw;
    g.alpha_raw = alpha_raw;
    g.a = a;
    g.dt_bias = dt_bias;
    g.out = out;
    g.rec = st->rec;
    g.scratch = scratch;
    g.eps = eps;
    g.n_slots = st->n_slots;
    g.n_k_heads = st->n_k_heads;
    g.n_v_heads = st->n_v_heads;
    g.conv_dim = st->conv_dim;
    g.n_seqs = b->n_seqs;
    g.min_len = min_len;
    for (int w0 = 0; w0 < b->n_tokens; w0 += GDNC_WIN) {
        int w1 = w0 + GDNC_WIN < b->n_tokens ? w0 + GDNC_WIN : b->n_tokens;
        int n_chunks = 0;   /* the chunks k_gdnc_prep enumerates, counted the same way */
        for (int s = 0; s < b->n_seqs; s++) {
            int t0 = b->seq_start[s], t1 = b->seq_start[s + 1], lo, hi;
            if (b->slot[s] < 0 || b->slot[s] >= st->n_slots || t0 >= t1 || t1 - t0 < min_len)
                continue;
            gdnc_chunks(t0, t1, w0, w1, &lo, &hi);
            n_chunks += hi - lo;
        }
        if (n_chunks == 0)
            continue;
        g.w0 = w0;
        g.w1 = w1;
        CS_CUDA_CHECK(cuda_launch(k_gdnc_prep, dim3(n_chunks, st->n_v_heads), GDNC_THREADS,
                                  GDNC_PREP_SMEM, c->stream, g, c->batch.seq_start,
                                  c->batch.slot));
        CS_CUDA_CHECK(cuda_launch(k_gdnc_scan, dim3(GDNC_D / GDNC_COLS, st->n_v_heads, b->n_seqs),
                                  GDNC_THREADS, GDNC_SCAN_SMEM, c->stream, g, c->batch.seq_start,
                                  c->batch.slot));
    }
    return CS_OK;
}
