/* gdn.cu - the gated delta rule of kernels/ops.h on CUDA (decode and
 * prefill alike), with the q/k L2 norms, beta and the decay fused in.
 *
 * Block (column group of 32 value dims, value head h, sequence): 128 threads;
 * thread (j = tid / 4, kq = tid % 4) owns value column cg*32 + j and key rows
 * i = 4r + kq (r < 32) of the head's 128x128 state, held in 32 registers for
 * the whole step: the state is read and written once per step, not per
 * token (a sequential scan over the chunk's tokens with the state resident;
 * the chunked form is not used). Reductions over key rows are a fixed
 * 4-lane shuffle tree (batch invariant). Per token, warps 0-2 prepare the
 * next token's normalised q, k, v, beta and decay in shared memory (double
 * buffered) while all warps update the state with the current one. */
#include "cuda_util.cuh"
#include "ops_cuda.cuh"

#define GDN_DK 128
#define GDN_DV 128
#define GDN_COLS 32
#define GDN_THREADS 128

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

static __device__ __forceinline__ float softplus_f(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* Warps 0 (q), 1 (k) and 2 (v, beta, decay) fill one token's buffer. */
static __device__ void gdn_prep(struct gdn_tok *b, const struct gdn_args &g, int t, int h, int col0)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int kh = h % g.n_k_heads;
    const float *yt = g.y + (size_t)t * g.conv_dim;
    if (warp < 2) {
        const float *src = yt + (size_t)warp * g.n_k_heads * GDN_DK + (size_t)kh * GDN_DK;
        float v[4], ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[i] = src[lane + 32 * i];
            ss += v[i] * v[i];
        }
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss + g.eps);
        if (warp == 0)
            inv *= 1.0f / sqrtf((float)GDN_DK);
        float *dst = warp == 0 ? b->q : b->k;
#pragma unroll
        for (int i = 0; i < 4; i++)
            dst[lane + 32 * i] = v[i] * inv;
    } else if (warp == 2) {
        const float *vs = yt + 2 * (size_t)g.n_k_heads * GDN_DK + (size_t)h * GDN_DV + col0;
        b->v[lane] = vs[lane];
        if (lane == 0) {
            size_t bi = (size_t)t * g.n_v_heads + h;
            b->beta = sigmoid_f(g.beta_raw[bi]);
            float gg = g.a[h] * softplus_f(g.alpha_raw[bi] + g.dt_bias[h]);
            b->decay = expf(gg);
        }
    }
}

static __global__ void __launch_bounds__(GDN_THREADS)
    k_gdn(struct gdn_args g, const int32_t *seq_start, const int32_t *slot)
{
    __shared__ struct gdn_tok buf[2];
    int cg = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int sl = slot[s];
    int t0 = seq_start[s], t1 = seq_start[s + 1];
    if (sl < 0 || sl >= g.n_slots || t0 >= t1)
        return;
    int j = threadIdx.x >> 2, kq = threadIdx.x & 3;
    int col = cg * GDN_COLS + j;
    float *S_g = g.rec + ((size_t)sl * g.n_v_heads + h) * GDN_DK * GDN_DV + col;
    float S[GDN_DK / 4];
#pragma unroll
    for (int r = 0; r < GDN_DK / 4; r++)
        S[r] = S_g[(size_t)(4 * r + kq) * GDN_DV];
    gdn_prep(&buf[0], g, t0, h, cg * GDN_COLS);
    __syncthreads();
    for (int t = t0; t < t1; t++) {
        if (t + 1 < t1)
            gdn_prep(&buf[(t + 1 - t0) & 1], g, t + 1, h, cg * GDN_COLS);
        const struct gdn_tok *b = &buf[(t - t0) & 1];
        float decay = b->decay;
        float kvp = 0.0f;
#pragma unroll
        for (int r = 0; r < GDN_DK / 4; r++) {
            S[r] *= decay;
            kvp += S[r] * b->k[4 * r + kq];
        }
        float kv = kvp + __shfl_xor_sync(CS_FULL_MASK, kvp, 1);
        kv += __shfl_xor_sync(CS_FULL_MASK, kv, 2);
        float delta = b->beta * (b->v[j] - kv);
        float op = 0.0f;
#pragma unroll
        for (int r = 0; r < GDN_DK / 4; r++) {
            S[r] += b->k[4 * r + kq] * delta;
            op += S[r] * b->q[4 * r + kq];
        }
        float o = op + __shfl_xor_sync(CS_FULL_MASK, op, 1);
        o += __shfl_xor_sync(CS_FULL_MASK, o, 2);
        if (kq == 0)
            g.out[(size_t)t * g.n_v_heads * GDN_DV + (size_t)h * GDN_DV + col] = o;
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < GDN_DK / 4; r++)
        S_g[(size_t)(4 * r + kq) * GDN_DV] = S[r];
}

int cuda_op_gdn(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                struct cs_gdn_layer *st, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "gdn");
    if (rc != CS_OK)
        return rc;
    if (st->key_dim != GDN_DK || st->value_dim != GDN_DV || st->n_k_heads <= 0) {
        LOG_ERROR("cuda", "gdn: key_dim=%d value_dim=%d unsupported (%d x %d)", st->key_dim,
                  st->value_dim, GDN_DK, GDN_DV);
        return CS_EUNSUPPORTED;
    }
    if (b->n_seqs <= 0)
        return CS_OK;
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
    dim3 grid(GDN_DV / GDN_COLS, st->n_v_heads, b->n_seqs);
    k_gdn<<<grid, GDN_THREADS, 0, c->stream>>>(g, c->batch.seq_start, c->batch.slot);
    CS_CUDA_LAUNCHED("gdn");
    return CS_OK;
}
