/* rope.cu - head_norm_rope of kernels/ops.h on CUDA: per (token, head) an
 * RMSNorm over head_dim times norm_w, then NeoX RoPE on the first rope_dims
 * dims (dim i pairs with i + rope_dims/2). One warp per head; the head sits
 * in shared memory between the two steps. The angle pos * base^(-2i/rope_dims)
 * and its sine/cosine are computed in double: at positions near 256K an fp32
 * angle would be off by several hundredths of a radian. */
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define ROPE_WARPS 4
#define ROPE_MAX_DIM 512

static __global__ void k_head_norm_rope(float *x, int token_stride, int head_stride, int n_heads,
                                        int head_dim, const float *norm_w, int rope_dims,
                                        float rope_base, float eps, const int32_t *pos,
                                        int n_rows)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ float buf[ROPE_WARPS][ROPE_MAX_DIM];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * ROPE_WARPS + warp;
    if (row >= n_rows)
        return;
    int t = row / n_heads, h = row - t * n_heads;
    float *xh = x + (size_t)t * token_stride + (size_t)h * head_stride;
    float *b = buf[warp];
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32) {
        float v = xh[i];
        b[i] = v;
        ss += v * v;
    }
    ss = warp_sum(ss);
    float scale = 1.0f / sqrtf(ss / (float)head_dim + eps);
    for (int i = lane; i < head_dim; i += 32)
        b[i] = b[i] * scale * norm_w[i];
    __syncwarp();
    int half = rope_dims / 2;
    double p = (double)pos[t];
    for (int i = lane; i < half; i += 32) {
        double theta = p * pow((double)rope_base, -2.0 * (double)i / (double)rope_dims);
        double sn, cs;
        sincos(theta, &sn, &cs);
        float c = (float)cs, s = (float)sn;
        float a0 = b[i], a1 = b[i + half];
        b[i] = a0 * c - a1 * s;
        b[i + half] = a1 * c + a0 * s;
    }
    __syncwarp();
    for (int i = lane; i < head_dim; i += 32)
        xh[i] = b[i];
}

int cuda_op_head_norm_rope(struct cs_backend *be, float *x, int token_stride, int head_stride,
                           int n_heads, int head_dim, const float *norm_w, int rope_dims,
                           float rope_base, float eps, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "head_norm_rope");
    if (rc != CS_OK)
        return rc;
    if (head_dim > ROPE_MAX_DIM || rope_dims > head_dim || rope_dims < 0 || (rope_dims & 1)) {
        LOG_ERROR("cuda", "head_norm_rope: head_dim=%d rope_dims=%d unsupported (max %d)",
                  head_dim, rope_dims, ROPE_MAX_DIM);
        return CS_EUNSUPPORTED;
    }
    int rows = b->n_tokens * n_heads;
    if (rows <= 0)
        return CS_OK;
    CS_CUDA_CHECK(cuda_launch(k_head_norm_rope, cs_div_up(rows, ROPE_WARPS), ROPE_WARPS * 32, 0,
                              c->stream, x, token_stride, head_stride, n_heads, head_dim, norm_w,
                              rope_dims, rope_base, eps, c->batch.pos, rows));
    return CS_OK;
}
