/* rope.c - per-head RMSNorm then partial NeoX RoPE of attention q/k heads
 * (ops.h head_norm_rope).
 *
 * For each (token, head): x = (x * scale) * norm_w with scale =
 * cpu_rms_scale_lanes over head_dim (one warp's order, as
 * kernels/cuda/rope.cuh); then for i < half = rope_dims / 2, with
 * theta = pos * base^(-2i / rope_dims) and its cosine c and sine s computed
 * in double and rounded to float (rope.cuh's expressions: an fp32 angle would
 * be off by hundredths of a radian near 256K),
 *     x[i]        = x[i] * c - x[i + half] * s
 *     x[i + half] = x[i + half] * c + x[i] * s      (each product rounded)
 * Dims from rope_dims on are left as normalised. */
#include <math.h>

#include "../../common/status.h"
#include "cpu.h"

struct rope_job {
    float *x;
    int token_stride, head_stride, n_heads, head_dim;
    const float *norm_w;
    int rope_dims;
    float rope_base, eps;
    const int32_t *pos;
};

static void head_apply(const struct rope_job *job, float *x, int32_t pos)
{
    float scale = cpu_rms_scale_lanes(x, job->head_dim, job->eps, CPU_HEAD_NORM_LANES);
    for (int i = 0; i < job->head_dim; i++)
        x[i] = (x[i] * scale) * job->norm_w[i];
    int half = job->rope_dims / 2;
    double p = (double)pos;
    for (int i = 0; i < half; i++) {
        double theta = p * pow((double)job->rope_base, -2.0 * (double)i / (double)job->rope_dims);
        float c = (float)cos(theta), s = (float)sin(theta);
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

static void rope_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct rope_job *job = arg;
    for (int64_t item = begin; item < end; item++) {
        int64_t t = item / job->n_heads, h = item % job->n_heads;
        head_apply(job, job->x + t * job->token_stride + h * job->head_stride, job->pos[t]);
    }
}

int cpu_head_norm_rope(struct cs_backend *be, float *x, int token_stride, int head_stride,
                       int n_heads, int head_dim, const float *norm_w, int rope_dims,
                       float rope_base, float eps, const struct cs_batch *b)
{
    if (!x || !norm_w || n_heads <= 0 || head_dim <= 0 || rope_dims < 0 ||
        rope_dims > head_dim || rope_dims % 2 || cpu_batch_check(b) != CS_OK)
        return CS_EINVAL;
    struct rope_job job = {.x = x, .token_stride = token_stride, .head_stride = head_stride,
                           .n_heads = n_heads, .head_dim = head_dim, .norm_w = norm_w,
                           .rope_dims = rope_dims, .rope_base = rope_base, .eps = eps,
                           .pos = b->pos};
    threadpool_for(cpu_ctx_of(be)->pool, (int64_t)b->n_tokens * n_heads, 8, rope_range, &job);
    return CS_OK;
}
