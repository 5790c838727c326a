/* norm.c - RMSNorm over token rows, the residual add fused with it, and the
 * GDN output's gated RMSNorm per head (ops.h rmsnorm, add_rmsnorm, gated_rmsnorm).
 *
 * scale = xm_rms_scale(sum of squares, n, eps) with the sum formed as the
 * CUDA kernels form it (cpu_rms_scale_lanes: a token row as rms_row.cuh's
 * 1024 threads, a gated head as gated_norm.cuh's one warp); out = (x *
 * scale) * w, and for the gated form ((x * scale) * w) * silu(z): the CUDA
 * backend's bits. add_rmsnorm first does x[i] += y[i] over the row (as
 * cpu_add), then the same. Rows are split across threads; each row is
 * computed by one thread in this fixed order. */
#include "../../common/status.h"
#include "cpu.h"

struct norm_job {
    float *out;
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
        float scale = cpu_rms_scale_lanes(x, job->dim, job->eps, CPU_ROW_NORM_LANES);
        for (int i = 0; i < job->dim; i++)
            out[i] = (x[i] * scale) * job->w[i];
    }
}

int cpu_rmsnorm(struct cs_backend *be, float *out, const float *x, const float *w, int n_tokens,
                int dim, float eps)
{
    if (!out || !x || !w || n_tokens < 0 || dim <= 0)
        return CS_EINVAL;
    struct norm_job job = {.out = out, .x = x, .w = w, .dim = dim, .eps = eps};
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
        float scale = cpu_rms_scale_lanes(x, job->dim, job->eps, CPU_ROW_NORM_LANES);
        for (int i = 0; i < job->dim; i++)
            out[i] = (x[i] * scale) * job->w[i];
    }
}

int cpu_add_rmsnorm(struct cs_backend *be, float *x, const float *y, float *out, const float *w,
                    int n_tokens, int dim, float eps)
{
    if (!x || !y || !out || !w || n_tokens < 0 || dim <= 0)
        return CS_EINVAL;
    struct norm_job job = {.out = out, .xw = x, .y = y, .w = w, .dim = dim, .eps = eps};
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
