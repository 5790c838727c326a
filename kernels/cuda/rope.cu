/* rope.cu - head_norm_rope of kernels/ops.h on CUDA: per (token, head) an
 * RMSNorm over head_dim times norm_w, then NeoX RoPE on the first rope_dims
 * dims (dim i pairs with i + rope_dims/2). One warp per head; the head sits
 * in shared memory between the two steps (rope.cuh). */
#include "launch.cuh"
#include "ops_cuda.cuh"
#include "rope.cuh"

static __global__ void k_head_norm_rope(float *x, int token_stride, int head_stride, int n_heads,
                                        int head_dim, const float *norm_w, int rope_dims,
                                        float rope_base, float eps, const int32_t *pos,
                                        int n_rows)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ float buf[ROPE_WARPS][ROPE_MAX_DIM];
    int warp = threadIdx.x >> 5;
    int row = blockIdx.x * ROPE_WARPS + warp;
    if (row >= n_rows)
        return;
    int t = row / n_heads, h = row - t * n_heads;
    head_norm_rope_warp(x + (size_t)t * token_stride + (size_t)h * head_stride, buf[warp],
                        head_dim, norm_w, rope_dims, rope_base, eps, pos[t]);
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
