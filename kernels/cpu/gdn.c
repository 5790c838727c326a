/* gdn.c - the gated delta rule recurrence of a GDN layer, token by token
 * (ops.h gdn; model.md section 5, steps 4-6).
 *
 * Per sequence and value head h (key head h % Gk), tokens in order, fp32:
 *   q = q * (xm_l2_scale(sum q^2, eps) * (1/sqrt(Dk))), k = k * xm_l2_scale(sum k^2, eps)
 *   beta = sigmoid(beta_raw), decay = exp(a[h] * softplus(alpha_raw + dt_bias[h]))
 *   S[i][j] *= decay;   kv[j] = sum_i S[i][j] k[i]
 *   delta[j] = beta * (v[j] - kv[j]);   S[i][j] += k[i] delta[j]
 *   o[j] = sum_i S[i][j] q[i]
 * S is [Dk][Dv] in the slot's state. Items are (sequence, value head); one
 * thread runs an item's tokens in order, so results are batch and thread
 * invariant. This is the recurrent form; it is also used for prefill.
 *
 * The arithmetic is kernels/cuda/gdn.cu's, bit for bit: the sums of squares
 * as one warp forms them (cpu_sumsq_lanes), kernels/exact_math.h for the
 * scalar functions, and each sum over i as that kernel's 16 FFMA chains: the
 * thread with kq = i % 4 keeps 4 chains by (i / 4) % 4, i.e. chain i % 16
 * runs over i ascending, then chain sums ((c0 + c4) + (c8 + c12)) for each
 * kq (written (p0 + p1) + (p2 + p3) there) and the shuffle tree
 * (kq0 + kq1) + (kq2 + kq3).
 *
 * Sequences with GDN_CHUNKED_MIN_TOKENS (512) or more tokens in a step take
 * the chunked form instead, as on the GPU (gdn.cu hands them to
 * gdn_chunked.cu): gdn_chunked.c reproduces those kernels bit for bit, so
 * both backends give the same bits for every sequence. That form's results
 * depend on where a prompt's steps start (its 64-token chunks align to the
 * step's first token of the sequence), the recurrence's do not; the two
 * agree within rounding (tests/kernels/test_cpu_gdn.c). Items stay
 * (sequence, value head), one thread each, either form. */
#include "../../common/status.h"
#include "../gdn_chunked_shape.h"
#include "cpu.h"

#define GDN_CHAINS 16

struct gdn_job {
    struct cpu_ctx *ctx;
    float *out;
    const float *y, *beta_raw, *alpha_raw, *a, *dt_bias;
    float eps;
    struct cs_gdn_layer *st;
    const struct cs_batch *b;
};

static void l2norm(float *out, const float *x, int n, float eps, float post_scale)
{
    float inv = xm_l2_scale(cpu_sumsq_lanes(x, n, 32), eps) * post_scale;
    for (int i = 0; i < n; i++)
        out[i] = x[i] * inv;
}

/* chains[16][Dv] -> sum[Dv]: per value column, the kernel's chain sums and
 * shuffle tree (header). */
static void chain_tree(float *sum, const float *chains, int Dv)
{
    for (int j = 0; j < Dv; j++) {
        float kq[4];
        for (int q = 0; q < 4; q++)
            kq[q] = (chains[(size_t)q * Dv + j] + chains[(size_t)(4 + q) * Dv + j]) +
                    (chains[(size_t)(8 + q) * Dv + j] + chains[(size_t)(12 + q) * Dv + j]);
        sum[j] = (kq[0] + kq[1]) + (kq[2] + kq[3]);
    }
}

/* The hot loops, compiled twice: with FMA instructions where the CPU has
 * them (fmaf inlined and vectorised) and without (fmaf from libm: correct,
 * slower); the loader picks one at run time. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define GDN_HOT __attribute__((target_clones("fma", "default")))
#else
#define GDN_HOT
#endif

GDN_HOT static void decay_kdot(float *S, float *chains, const float *k, float decay, int Dk,
                               int Dv)
{
    for (size_t n = 0; n < (size_t)GDN_CHAINS * Dv; n++)
        chains[n] = 0.0f;
    for (int i = 0; i < Dk; i++) {
        float *Si = S + (size_t)i * Dv, *c = chains + (size_t)(i % GDN_CHAINS) * Dv;
        float ki = k[i];
        for (int j = 0; j < Dv; j++) {
            Si[j] = Si[j] * decay;
            c[j] = fmaf(Si[j], ki, c[j]);
        }
    }
}

GDN_HOT static void update_qdot(float *S, float *chains, const float *k, const float *q,
                                const float *delta, int Dk, int Dv)
{
    for (size_t n = 0; n < (size_t)GDN_CHAINS * Dv; n++)
        chains[n] = 0.0f;
    for (int i = 0; i < Dk; i++) {
        float *Si = S + (size_t)i * Dv, *c = chains + (size_t)(i % GDN_CHAINS) * Dv;
        float ki = k[i], qi = q[i];
        for (int j = 0; j < Dv; j++) {
            Si[j] = fmaf(ki, delta[j], Si[j]);
            c[j] = fmaf(Si[j], qi, c[j]);
        }
    }
}

static void gdn_token(const struct gdn_job *job, float *S, int t, int h, float *scratch)
{
    const struct cs_gdn_layer *st = job->st;
    int Dk = st->key_dim, Dv = st->value_dim, Gk = st->n_k_heads, Hv = st->n_v_heads;
    const float *yt = job->y + (size_t)t * st->conv_dim;
    int kh = h % Gk;
    float *q = scratch, *k = q + Dk, *kv = k + Dk, *chains = kv + Dv;
    l2norm(q, yt + (size_t)kh * Dk, Dk, job->eps, 1.0f / sqrtf((float)Dk));
    l2norm(k, yt + (size_t)(Gk + kh) * Dk, Dk, job->eps, 1.0f);
    const float *v = yt + (size_t)2 * Gk * Dk + (size_t)h * Dv;
    float beta = cpu_sigmoid(job->beta_raw[(size_t)t * Hv + h]);
    float decay = xm_exp(job->a[h] *
                         cpu_softplus(job->alpha_raw[(size_t)t * Hv + h] + job->dt_bias[h]));

    decay_kdot(S, chains, k, decay, Dk, Dv);
    chain_tree(kv, chains, Dv);
    for (int j = 0; j < Dv; j++)
        kv[j] = beta * (v[j] - kv[j]);                 /* now delta */
    update_qdot(S, chains, k, q, kv, Dk, Dv);
    chain_tree(job->out + (size_t)t * Hv * Dv + (size_t)h * Dv, chains, Dv);
}

/* The sequences the CUDA gdn op runs in the chunked form (gdn.cu): this
 * many tokens in the step, at the only head size it has (128 x 128). */
static int gdn_chunked(const struct cs_gdn_layer *st, int n_tokens)
{
    return n_tokens >= GDN_CHUNKED_MIN_TOKENS && st->key_dim == GDNC_D &&
           st->value_dim == GDNC_D;
}

static void gdn_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct gdn_job *job = arg;
    const struct cs_gdn_layer *st = job->st;
    float *scratch = job->ctx->scratch[tid].buf;
    size_t state_elems = (size_t)st->key_dim * st->value_dim;
    for (int64_t item = begin; item < end; item++) {
        int s = (int)(item / st->n_v_heads), h = (int)(item % st->n_v_heads);
        float *S = st->rec + ((size_t)job->b->slot[s] * st->n_v_heads + h) * state_elems;
        int t0 = job->b->seq_start[s], t1 = job->b->seq_start[s + 1];
        if (gdn_chunked(st, t1 - t0)) {
            cpu_gdn_chunked_seq(job->out, job->y, job->beta_raw, job->alpha_raw, job->a,
                                job->dt_bias, job->eps, st, t0, t1, h, S, scratch);
            continue;
        }
        for (int t = t0; t < t1; t++)
            gdn_token(job, S, t, h, scratch);
    }
}

int cpu_gdn(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
            const float *alpha_raw, const float *a, const float *dt_bias, float eps,
            struct cs_gdn_layer *st, const struct cs_batch *b)
{
    int rc = cpu_gdn_state_check(st, b);
    if (rc != CS_OK)
        return rc;
    if (!out || !y || !beta_raw || !alpha_raw || !a || !dt_bias || !st->rec ||
        st->n_k_heads <= 0 || st->n_v_heads <= 0 || st->key_dim <= 0 || st->value_dim <= 0 ||
        st->conv_dim != 2 * st->n_k_heads * st->key_dim + st->n_v_heads * st->value_dim)
        return CS_EINVAL;
    struct cpu_ctx *ctx = cpu_ctx_of(be);
    size_t scratch = 2 * (size_t)st->key_dim + (1 + GDN_CHAINS) * (size_t)st->value_dim;
    for (int s = 0; s < b->n_seqs; s++)
        if (gdn_chunked(st, b->seq_start[s + 1] - b->seq_start[s]) &&
            cpu_gdn_chunked_scratch() > scratch)
            scratch = cpu_gdn_chunked_scratch();
    rc = cpu_scratch_reserve(ctx, scratch);
    if (rc != CS_OK)
        return rc;
    struct gdn_job job = {.ctx = ctx, .out = out, .y = y, .beta_raw = beta_raw,
                          .alpha_raw = alpha_raw, .a = a, .dt_bias = dt_bias, .eps = eps,
                          .st = st, .b = b};
    threadpool_for(ctx->pool, (int64_t)b->n_seqs * st->n_v_heads, 1, gdn_range, &job);
    return CS_OK;
}
