/* gdn.c - the gated delta rule recurrence of a GDN layer, token by token
 * (ops.h gdn; model.md section 5, steps 4-6).
 *
 * Per sequence and value head h (key head h % Gk), tokens in order, fp32:
 *   q = q * (1/sqrtf(sum q^2 + eps)) then q = q * (1/sqrtf(Dk))   (transformers' l2norm)
 *   k = k * (1/sqrtf(sum k^2 + eps))       (sums via cpu_dot)
 *   beta = sigmoid(beta_raw), g = a[h] * softplus(alpha_raw + dt_bias[h])
 *   S[i][j] *= expf(g);   kv[j] = sum_i S[i][j] k[i]        (i ascending)
 *   delta[j] = beta * (v[j] - kv[j]);   S[i][j] += k[i] delta[j]
 *   o[j] = sum_i S[i][j] q[i]                                (i ascending)
 * S is [Dk][Dv] in the slot's state. Items are (sequence, value head); one
 * thread runs an item's tokens in order, so results are batch and thread
 * invariant. This is the recurrent form; it is also used for prefill. */
#include "../../common/status.h"
#include "cpu.h"

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
    float inv = 1.0f / sqrtf(cpu_dot(x, x, n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = (x[i] * inv) * post_scale;
}

static void gdn_token(const struct gdn_job *job, float *S, int t, int h, float *scratch)
{
    const struct cs_gdn_layer *st = job->st;
    int Dk = st->key_dim, Dv = st->value_dim, Gk = st->n_k_heads, Hv = st->n_v_heads;
    const float *yt = job->y + (size_t)t * st->conv_dim;
    int kh = h % Gk;
    float *q = scratch, *k = q + Dk, *kv = k + Dk;
    l2norm(q, yt + (size_t)kh * Dk, Dk, job->eps, 1.0f / sqrtf((float)Dk));
    l2norm(k, yt + (size_t)(Gk + kh) * Dk, Dk, job->eps, 1.0f);
    const float *v = yt + (size_t)2 * Gk * Dk + (size_t)h * Dv;
    float beta = cpu_sigmoid(job->beta_raw[(size_t)t * Hv + h]);
    float g = job->a[h] * cpu_softplus(job->alpha_raw[(size_t)t * Hv + h] + job->dt_bias[h]);
    float eg = expf(g);

    for (int j = 0; j < Dv; j++)
        kv[j] = 0.0f;
    for (int i = 0; i < Dk; i++) {
        float *Si = S + (size_t)i * Dv;
        for (int j = 0; j < Dv; j++) {
            Si[j] *= eg;
            kv[j] += Si[j] * k[i];
        }
    }
    for (int j = 0; j < Dv; j++)
        kv[j] = beta * (v[j] - kv[j]);                 /* now delta */
    float *o = job->out + (size_t)t * Hv * Dv + (size_t)h * Dv;
    for (int j = 0; j < Dv; j++)
        o[j] = 0.0f;
    for (int i = 0; i < Dk; i++) {
        float *Si = S + (size_t)i * Dv;
        for (int j = 0; j < Dv; j++) {
            Si[j] += k[i] * kv[j];
            o[j] += Si[j] * q[i];
        }
    }
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
        for (int t = job->b->seq_start[s]; t < job->b->seq_start[s + 1]; t++)
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
    rc = cpu_scratch_reserve(ctx, 2 * (size_t)st->key_dim + (size_t)st->value_dim);
    if (rc != CS_OK)
        return rc;
    struct gdn_job job = {.ctx = ctx, .out = out, .y = y, .beta_raw = beta_raw,
                          .alpha_raw = alpha_raw, .a = a, .dt_bias = dt_bias, .eps = eps,
                          .st = st, .b = b};
    threadpool_for(ctx->pool, (int64_t)b->n_seqs * st->n_v_heads, 1, gdn_range, &job);
    return CS_OK;
}
