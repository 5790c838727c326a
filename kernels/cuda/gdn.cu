/* gdn.cu - the gated delta rule of kernels/ops.h on CUDA (decode and
 * prefill alike), with the q/k L2 norms, beta and the decay fused in.
 *
 * Block (column group of 32 value dims, value head h, sequence): 128 threads;
 * thread (j = tid / 4, kq = tid % 4) owns value column cg*32 + j and key rows
 * i = 4r + kq (r < 32) of the head's 128x128 state, held in 32 registers for
 * the whole step: the state is read and written once per step, not per
 * token (a sequential scan over the chunk's tokens with the state resident;
 * the chunked form, gdn_chunked.cu, takes the sequences with at least
 * GDN_CHUNKED_MIN_TOKENS tokens in the step: measured faster there, slower
 * on short ones). Reductions over key rows are a fixed 4-lane shuffle tree
 * (batch invariant: a sequence's path depends on its own token count only).
 * kernels/cpu/gdn.c reproduces this arithmetic bit for bit (every FFMA, the
 * 4-chain split, the shuffle tree, kernels/exact_math.h's exp, softplus,
 * sigmoid and L2 scale); a change here must change it there.
 *
 * Tokens are staged GDN_TB at a time: each warp loads the raw q, k, v, beta
 * and alpha of its GDN_TB / 4 tokens into registers (all loads in flight at
 * once), then normalises them into shared memory; the next batch's loads are
 * issued before the current batch is scanned, so the scan itself touches
 * only registers and shared memory and pays no global-memory latency per
 * token (it was ~1 us per token when each token was fetched on its own). */
#include <limits.h>

#include "../gdn_chunked_shape.h"
#include "cuda_util.cuh"
#include "gdn_chunked.h"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define GDN_DK 128
#define GDN_DV 128
#define GDN_COLS 32
#define GDN_THREADS 128
#define GDN_TB 16                          /* tokens staged per batch */
#define GDN_TPW (GDN_TB / (GDN_THREADS / 32)) /* tokens per warp and batch */
/* Sequences with GDN_CHUNKED_MIN_TOKENS (../gdn_chunked_shape.h, shared
 * with the CPU backend) tokens in a step take the chunked form
 * (tests/gpu/test_gdn_chunked.c, H200: 9B shape 1.6x at 512 tokens, 27B
 * 1.05x; a 300-token sequence among short ones was slower chunked). */

struct gdn_tok {
    float q[GDN_DK], k[GDN_DK], v[GDN_COLS];
    float beta, decay;
};

struct gdn_args {
    const float *y, *beta_raw, *alpha_raw, *a, *dt_bias;
    float *out, *rec;
    float eps;
    int n_slots, n_k_heads, n_v_heads, conv_dim;
};

/* One warp's raw inputs of its GDN_TPW tokens of a batch (lane's share). */
struct gdn_raw {
    float q[GDN_TPW][4], k[GDN_TPW][4], v[GDN_TPW];
    float beta[GDN_TPW], alpha[GDN_TPW];
};


/* Token tb0 + warp + 4 i of the batch, for i < GDN_TPW, while below t1. */
static __device__ __forceinline__ void gdn_load(struct gdn_raw &r, const struct gdn_args &g,
                                                int tb0, int t1, int h, int col0)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int kh = h % g.n_k_heads;
#pragma unroll
    for (int i = 0; i < GDN_TPW; i++) {
        int t = tb0 + warp + 4 * i;
        if (t >= t1)
            break;
        const float *yt = g.y + (size_t)t * g.conv_dim;
        const float *qs = yt + (size_t)kh * GDN_DK;
        const float *ks = yt + (size_t)g.n_k_heads * GDN_DK + (size_t)kh * GDN_DK;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            r.q[i][e] = qs[lane + 32 * e];
            r.k[i][e] = ks[lane + 32 * e];
        }
        r.v[i] = yt[2 * (size_t)g.n_k_heads * GDN_DK + (size_t)h * GDN_DV + col0 + lane];
        size_t bi = (size_t)t * g.n_v_heads + h;
        r.beta[i] = g.beta_raw[bi];
        r.alpha[i] = g.alpha_raw[bi];
    }
}

static __device__ __forceinline__ void gdn_norm_store(float *dst, const float (&v)[4], float eps,
                                                      float extra)
{
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++)
        ss = __fmaf_rn(v[e], v[e], ss);
    ss = warp_sum(ss);
    float inv = __fmul_rn(xm_l2_scale(ss, eps), extra);
#pragma unroll
    for (int e = 0; e < 4; e++)
        dst[lane + 32 * e] = __fmul_rn(v[e], inv);
}

/* Normalise the loaded tokens into the batch buffer. */
static __device__ __forceinline__ void gdn_store(struct gdn_tok *buf, const struct gdn_raw &r,
                                                 const struct gdn_args &g, int tb0, int t1, int h)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < GDN_TPW; i++) {
        int bt = warp + 4 * i;
        if (tb0 + bt >= t1)
            break;
        struct gdn_tok *b = &buf[bt];
        gdn_norm_store(b->q, r.q[i], g.eps, XM_DIV(1.0f, XM_SQRT((float)GDN_DK)));
        gdn_norm_store(b->k, r.k[i], g.eps, 1.0f);
        b->v[lane] = r.v[i];
        if (lane == 0) {
            b->beta = sigmoid_f(r.beta[i]);
            b->decay = xm_exp(__fmul_rn(g.a[h], xm_softplus(__fadd_rn(r.alpha[i], g.dt_bias[h]))));
        }
    }
}

static __global__ void __launch_bounds__(GDN_THREADS)
    k_gdn(struct gdn_args g, const int32_t *seq_start, const int32_t *slot, int max_len)
{
    __shared__ struct gdn_tok buf[GDN_TB];
    int cg = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    /* The batch and the recurrent state were written before the previous
     * kernel's launch (an earlier step, or this step's upload): launch.cuh
     * allows reading them before the wait, so the state's DRAM round trip
     * overlaps the end of the input projection. */
    int sl = slot[s];
    int t0 = seq_start[s], t1 = seq_start[s + 1];
    bool run = sl >= 0 && sl < g.n_slots && t0 < t1 && t1 - t0 < max_len;
    int j = threadIdx.x >> 2, kq = threadIdx.x & 3;
    int col0 = cg * GDN_COLS, col = col0 + j;
    float *S_g = g.rec + ((size_t)(run ? sl : 0) * g.n_v_heads + h) * GDN_DK * GDN_DV + col;
    float S[GDN_DK / 4];
    if (run) {
#pragma unroll
        for (int r = 0; r < GDN_DK / 4; r++)
            S[r] = S_g[(size_t)(4 * r + kq) * GDN_DV];
    }
    cuda_pdl_enter();   /* launch.cuh: y, beta, alpha, out and the state's write from here */
    if (!run)
        return;   /* max_len: the chunked form has the long ones */
    struct gdn_raw raw;
    gdn_load(raw, g, t0, t1, h, col0);
    float *out = g.out + (size_t)h * GDN_DV + col;
    size_t out_stride = (size_t)g.n_v_heads * GDN_DV;
    for (int tb = t0; tb < t1; tb += GDN_TB) {
        __syncthreads();   /* the previous batch is no longer read */
        gdn_store(buf, raw, g, tb, t1, h);
        __syncthreads();
        if (tb + GDN_TB < t1)
            gdn_load(raw, g, tb + GDN_TB, t1, h, col0);   /* in flight during the scan */
        int n = t1 - tb < GDN_TB ? t1 - tb : GDN_TB;
        for (int i = 0; i < n; i++) {
            const struct gdn_tok *b = &buf[i];
            float decay = b->decay;
            /* four independent chains: a lone warp per scheduler hides no
             * FMA latency, so a single 32-deep chain would cost 4x */
            float kp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < GDN_DK / 4; r++) {
                S[r] = __fmul_rn(S[r], decay);
                kp[r & 3] = __fmaf_rn(S[r], b->k[4 * r + kq], kp[r & 3]);
            }
            float kvp = (kp[0] + kp[1]) + (kp[2] + kp[3]);
            float kv = kvp + __shfl_xor_sync(CS_FULL_MASK, kvp, 1);
            kv += __shfl_xor_sync(CS_FULL_MASK, kv, 2);
            float delta = b->beta * (b->v[j] - kv);
            float op[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < GDN_DK / 4; r++) {
                S[r] = __fmaf_rn(b->k[4 * r + kq], delta, S[r]);
                op[r & 3] = __fmaf_rn(S[r], b->q[4 * r + kq], op[r & 3]);
            }
            float o4 = (op[0] + op[1]) + (op[2] + op[3]);
            float o = o4 + __shfl_xor_sync(CS_FULL_MASK, o4, 1);
            o += __shfl_xor_sync(CS_FULL_MASK, o, 2);
            if (kq == 0)
                out[(size_t)(tb + i) * out_stride] = o;
        }
    }
#pragma unroll
    for (int r = 0; r < GDN_DK / 4; r++)
        S_g[(size_t)(4 * r + kq) * GDN_DV] = S[r];
}

/* k_gdn over the sequences with fewer than max_len tokens in the step
 * (INT_MAX: all of them); the caller checked the batch and the shapes. */
static int gdn_scan(struct cuda_ctx *c, float *out, const float *y, const float *beta_raw,
                    const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                    const struct cs_gdn_layer *st, int n_seqs, int max_len)
{
    struct gdn_args g;
    g.y = y;
    g.beta_raw = beta_raw;
    g.alpha_raw = alpha_raw;
    g.a = a;
    g.dt_bias = dt_bias;
    g.out = out;
    g.rec = st->rec;
    g.eps = eps;
    g.n_slots = st->n_slots;
    g.n_k_heads = st->n_k_heads;
    g.n_v_heads = st->n_v_heads;
    g.conv_dim = st->conv_dim;
    dim3 grid(GDN_DV / GDN_COLS, st->n_v_heads, n_seqs);
    CS_CUDA_CHECK(cuda_launch(k_gdn, grid, GDN_THREADS, 0, c->stream, g, c->batch.seq_start,
                              c->batch.slot, max_len));
    return CS_OK;
}

int cuda_gdn_check(struct cuda_ctx *c, const struct cs_gdn_layer *st, const struct cs_batch *b,
                   const char *op)
{
    int rc = cuda_batch_check(c, b, op);
    if (rc != CS_OK)
        return rc;
    if (st->key_dim != GDN_DK || st->value_dim != GDN_DV || st->n_k_heads <= 0) {
        LOG_ERROR("cuda", "%s: key_dim=%d value_dim=%d unsupported (%d x %d)", op, st->key_dim,
                  st->value_dim, GDN_DK, GDN_DV);
        return CS_EUNSUPPORTED;
    }
    return CS_OK;
}

int cuda_gdn_scan(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                  const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                  struct cs_gdn_layer *st, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_gdn_check(c, st, b, "gdn");
    if (rc != CS_OK || b->n_seqs <= 0)
        return rc;
    return gdn_scan(c, out, y, beta_raw, alpha_raw, a, dt_bias, eps, st, b->n_seqs, INT_MAX);
}

int cuda_op_gdn(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                struct cs_gdn_layer *st, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_gdn_check(c, st, b, "gdn");
    if (rc != CS_OK)
        return rc;
    if (b->n_seqs <= 0)
        return CS_OK;
    int max_len = INT_MAX, n_short = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int n = b->seq_start[s + 1] - b->seq_start[s];
        if (n >= GDN_CHUNKED_MIN_TOKENS)
            max_len = GDN_CHUNKED_MIN_TOKENS;
        else
            n_short++;
    }
    if (max_len != INT_MAX) {
        rc = cuda_gdn_chunked_from(be, out, y, beta_raw, alpha_raw, a, dt_bias, eps, st, b,
                                   GDN_CHUNKED_MIN_TOKENS);
        if (rc == CS_EUNSUPPORTED)   /* e.g. too little shared memory: all by the scan */
            max_len = INT_MAX, n_short = b->n_seqs;
        else if (rc != CS_OK)
            return rc;
        if (n_short == 0)
            return CS_OK;
    }
    return gdn_scan(c, out, y, beta_raw, alpha_raw, a, dt_bias, eps, st, b->n_seqs, max_len);
}
