/* matmul.c - y = W x for several weights sharing one input (ops.h matmul).
 *
 * Two modes (struct cs_backend_cpu_options.int8_matmul):
 * - fp32 reference (and always for F32/F16/BF16 weights): each weight row is
 *   converted to fp32 and y[t][r] = cpu_dot(row, x[t]) (cpu.h: fixed 8-lane
 *   order, fp32 accumulation).
 * - int8 for Q8_0 weights: each token's x is quantized to Q8_1 blocks and
 *   y[t][r] = quant_q8_0_q8_1_dot(row, xq[t]) (quant.h: int32 block dots,
 *   fp32 sum over blocks in order), mirroring the GPU's DP4A path.
 * Work is split by groups of MATMUL_ROWS output rows across threads; a group
 * converts its rows once and runs every token against them while they are in
 * cache. The value of y[t][r] depends only on row r and x[t] (and, for
 * matmul_scaled, scale[t]: the norm applied after the dot, each segment's
 * sum scaled in the int8 path as kernels/numerics.h says, the total in the
 * fp32 reference). */
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/status.h"
#include "cpu.h"
#include "quant.h"

#define MATMUL_ROWS 4
#define MATMUL_MAX_WEIGHTS 16

struct matmul_job {
    struct cpu_ctx *ctx;
    int n;
    float *const *ys;
    const struct cs_weight *const *ws;
    int64_t group_end[MATMUL_MAX_WEIGHTS];  /* prefix sums of row groups per weight */
    const float *x;
    const float *scale;                      /* [n_tokens] or NULL */
    const struct block_q8_1 *xq;             /* int8 mode: [n_tokens][n_in / 32] */
    int64_t n_in;
    int n_tokens;
};

static bool use_int8(const struct matmul_job *job, const struct cs_weight *w)
{
    return job->xq && w->type == CS_DTYPE_Q8_0;
}

static void group_fp32(const struct matmul_job *job, float *buf, float *y,
                       const struct cs_weight *w, int64_t r0, int nr)
{
    int64_t n_in = job->n_in;
    size_t row_bytes = cpu_row_bytes(w->type, n_in);
    const float *rows[MATMUL_ROWS];
    for (int k = 0; k < nr; k++) {
        const char *src = (const char *)w->data + (size_t)(r0 + k) * row_bytes;
        if (w->type == CS_DTYPE_F32) {
            rows[k] = (const float *)src;
        } else {
            cpu_row_to_float(buf + k * n_in, src, w->type, n_in);
            rows[k] = buf + k * n_in;
        }
    }
    for (int t = 0; t < job->n_tokens; t++) {
        const float *xt = job->x + (size_t)t * n_in;
        float *yt = y + (size_t)t * w->n_out + r0;
        for (int k = 0; k < nr; k++)
            yt[k] = cpu_dot(rows[k], xt, n_in);
        if (job->scale)
            for (int k = 0; k < nr; k++)
                yt[k] = yt[k] * job->scale[t];
    }
}

static void group_int8(const struct matmul_job *job, float *y, const struct cs_weight *w,
                       int64_t r0, int nr)
{
    int64_t nb = job->n_in / QUANT_BLOCK;
    const struct block_q8_0 *rows = (const struct block_q8_0 *)w->data + r0 * nb;
    for (int t = 0; t < job->n_tokens; t++) {
        const struct block_q8_1 *xt = job->xq + (size_t)t * nb;
        float *yt = y + (size_t)t * w->n_out + r0;
        float r = job->scale ? job->scale[t] : 1.0f;
        for (int k = 0; k < nr; k++)
            yt[k] = quant_q8_0_q8_1_dot_scaled(rows + k * nb, xt, job->n_in, r);
    }
}

static void matmul_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct matmul_job *job = arg;
    float *buf = job->ctx->scratch[tid].buf;
    int i = 0;
    for (int64_t g = begin; g < end; g++) {
        while (g >= job->group_end[i])
            i++;
        const struct cs_weight *w = job->ws[i];
        int64_t first = i ? job->group_end[i - 1] : 0;
        int64_t r0 = (g - first) * MATMUL_ROWS;
        int nr = (int)(w->n_out - r0 < MATMUL_ROWS ? w->n_out - r0 : MATMUL_ROWS);
        if (use_int8(job, w))
            group_int8(job, job->ys[i], w, r0, nr);
        else
            group_fp32(job, buf, job->ys[i], w, r0, nr);
    }
}

static void quantize_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct matmul_job *job = arg;
    int64_t nb = job->n_in / QUANT_BLOCK;
    struct block_q8_1 *xq = (struct block_q8_1 *)job->xq;
    for (int64_t t = begin; t < end; t++)
        quant_q8_1_quantize_row(xq + t * nb, job->x + t * job->n_in, job->n_in);
}

/* Prepare the int8 activations when any weight uses the int8 path. */
static int matmul_quantize_x(struct matmul_job *job)
{
    struct cpu_ctx *ctx = job->ctx;
    bool any = false;
    for (int i = 0; i < job->n; i++)
        any = any || job->ws[i]->type == CS_DTYPE_Q8_0;
    if (!ctx->int8_matmul || !any)
        return CS_OK;
    size_t bytes = (size_t)job->n_tokens * (size_t)(job->n_in / QUANT_BLOCK) *
                   sizeof(struct block_q8_1);
    int rc = cpu_xq_reserve(ctx, bytes);
    if (rc != CS_OK)
        return rc;
    job->xq = ctx->xq;
    threadpool_for(ctx->pool, job->n_tokens, 4, quantize_range, job);
    return CS_OK;
}

int cpu_matmul(struct cs_backend *be, int n, float *const *ys, const struct cs_weight *const *ws,
               const float *x, int n_tokens)
{
    return cpu_matmul_scaled(be, n, ys, ws, x, NULL, n_tokens);
}

int cpu_matmul_scaled(struct cs_backend *be, int n, float *const *ys,
                      const struct cs_weight *const *ws, const float *x, const float *scale,
                      int n_tokens)
{
    if (n <= 0 || n > MATMUL_MAX_WEIGHTS || !ys || !ws || !x || n_tokens < 0)
        return CS_EINVAL;
    struct matmul_job job = {.ctx = cpu_ctx_of(be), .n = n, .ys = ys, .ws = ws, .x = x,
                             .scale = scale, .n_tokens = n_tokens,
                             .n_in = ws[0] ? ws[0]->n_in : 0};
    int64_t groups = 0;
    for (int i = 0; i < n; i++) {
        const struct cs_weight *w = ws[i];
        if (!w || !ys[i] || !w->data || w->n_in != job.n_in || w->n_out <= 0 ||
            cpu_row_bytes(w->type, w->n_in) == 0)
            return CS_EINVAL;
        groups += (w->n_out + MATMUL_ROWS - 1) / MATMUL_ROWS;
        job.group_end[i] = groups;
    }
    if (n_tokens == 0)
        return CS_OK;
    int rc = cpu_scratch_reserve(job.ctx, (size_t)MATMUL_ROWS * (size_t)job.n_in);
    if (rc == CS_OK)
        rc = matmul_quantize_x(&job);
    if (rc != CS_OK)
        return rc;
    threadpool_for(job.ctx->pool, groups, 1, matmul_range, &job);
    return CS_OK;
}
