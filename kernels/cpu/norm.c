/* norm.c - RMSNorm over token rows, the residual add fused with it, and the
 * GDN output's gated RMSNorm per head (ops.h rmsnorm, add_rmsnorm, gated_rmsnorm).
 *
 * A token row's norm is applied after the projection that reads it
 * (kernels/numerics.h): out = x * w, scale = xm_rms_scale(cpu_row_sumsq(x)),
 * the CUDA backend's bits (rms_row.cuh). add_rmsnorm first does x[i] +=
 * y[i] over the row (as cpu_add), then the same. The gated form per head
 * is applied in place: ((x * scale) * w) * silu(z), its sum formed as
 * gated_norm.cuh's one warp forms it. Rows are split across threads; each
 * row is computed by one thread in this fixed order. */
#include "../../common/status.h"
#include "cpu.h"

struct norm_job {
    float *out;
    float *scale;          /* row norms: [n_tokens] */
    const float *x;
    const float *z;        /* gated form only */
    float *xw;             /* add_rmsnorm: the row updated in place */
    const float *y;        /* add_rmsnorm: the row added */
    const float *w;
    int dim;
    float eps;
};

static void rmsnorm_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct norm_job *job = arg;
    for (int64_t t = begin; t < end; t++) {
        const float *x = job->x + t * job->dim;
        float *out = job->out + t * job->dim;
        job->scale[t] = xm_rms_scale(cpu_row_sumsq(x, job->dim), job->dim, job->eps);
        for (int i = 0; i < job->dim; i++)
            out[i] = x[i] * job->w[i];
    }
}

int cpu_rmsnorm(struct cs_backend *be, float *out, float *scale, const float *x, const float *w,
                int n_tokens, int dim, float eps)
{
    if (!out || !scale || !x || !w || n_tokens < 0 || dim <= 0)
        return CS_EINVAL;
    struct norm_job job = {.out = out, .scale = scale, .x = x, .w = w, .dim = dim, .eps = eps};
    threadpool_for(cpu_ctx_of(be)->pool, n_tokens, 1 + 16384 / dim, rmsnorm_range, &job);
    return CS_OK;
}

static void add_rmsnorm_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct norm_job *job = arg;
    for (int64_t t = begin; t < end; t++) {
        float *x = job->xw + t * job->dim;
        const float *y = job->y + t * job->dim;
        float *out = job->out + t * job->dim;
        for (int i = 0; i < job->dim; i++)
            x[i] += y[i];
        job->scale[t] = xm_rms_scale(cpu_row_sumsq(x, job->dim), job->dim, job->eps);
        for (int i = 0; i < job->dim; i++)
            out[i] = x[i] * job->w[i];
    }
}

int cpu_add_rmsnorm(struct cs_backend *be, float *x, const float *y, float *out, float *scale,
                    const float *w, int n_tokens, int dim, float eps)
{
    if (!x || !y || !out || !scale || !w || n_tokens < 0 || dim <= 0)
        return CS_EINVAL;
    struct norm_job job = {.out = out, .scale = scale, .xw = x, .y = y, .w = w, .dim = dim,
                           .eps = eps};
    threadpool_for(cpu_ctx_of(be)->pool, n_tokens, 1 + 16384 / dim, add_rmsnorm_range, &job);
    return CS_OK;
}

static void gated_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct norm_job *job = arg;
    for (int64_t r = begin; r < end; r++) {
        float *x = job->out + r * job->dim;
        const float *z = job->z + r * job->dim;
        float scale = cpu_rms_scale_lanes(x, job->dim, job->eps, CPU_HEAD_NORM_LANES);
        for (int i = 0; i < job->dim; i++)
            x[i] = ((x[i] * scale) * job->w[i]) * cpu_silu(z[i]);
    }
}

int cpu_gated_rmsnorm(struct cs_backend *be, float *x, const float *z, const float *w,
                      int n_heads, int head_dim, float eps, int n_tokens)
{
    if (!x || !z || !w || n_heads <= 0 || head_dim <= 0 || n_tokens < 0)
        return CS_EINVAL;
    struct norm_job job = {.out = x, .x = x, .z = z, .w = w, .dim = head_dim, .eps = eps};
    threadpool_for(cpu_ctx_of(be)->pool, (int64_t)n_tokens * n_heads, 1 + 16384 / head_dim,
                   gated_range, &job);
    return CS_OK;
}
