/* ops_matmul.cu - the CUDA backend's matrix entries of kernels/ops.h:
 * weight upload and free, matmul, and the fused ops whose elementwise part
 * runs in the matrix kernel's prologue or epilogue (matmul.h's cuda_mm_pro),
 * each falling back to its two launches where the fusion does not apply.
 * The kernels themselves are matmul.h's (matmul.cu, gemv_seg.cu, gemm.cu);
 * ops_cuda.cu puts these in the backend's table. */
#include <string.h>

#include "cuda_util.cuh"
#include "ffn_ring.h"
#include "launch.h"
#include "matmul.h"
#include "ops_cuda.cuh"

int cuda_op_weight_upload(struct cs_backend *be, struct cs_weight *w, uint32_t type,
                          int64_t n_in, int64_t n_out, const void *host_data)
{
    return cuda_weight_upload_progress(w, type, n_in, n_out, host_data, cuda_ctx_of(be)->stream,
                                       be->upload_progress, be->upload_progress_ctx);
}

void cuda_op_weight_free(struct cs_backend *be, struct cs_weight *w)
{
    (void)be;
    cuda_mem_generation_bump();
    cuda_weight_free(w);
}

int cuda_op_matmul_scaled(struct cs_backend *be, int n, float *const *ys,
                          const struct cs_weight *const *ws, const float *x, const float *scale,
                          int n_tokens)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (n <= 0 || n_tokens <= 0)
        return CS_OK;
    size_t need = cuda_matmul_scratch_bytes(ws[0]->n_in, n_tokens);
    int rc = cuda_buffer_reserve(&c->mm_scratch, &c->mm_scratch_cap, need);
    if (rc != CS_OK)
        return rc;
    return cuda_matmul_scaled(n, ys, ws, x, scale, n_tokens, c->mm_scratch, c->mm_scratch_cap,
                              c->stream);
}

int cuda_op_matmul(struct cs_backend *be, int n, float *const *ys,
                   const struct cs_weight *const *ws, const float *x, int n_tokens)
{
    return cuda_op_matmul_scaled(be, n, ys, ws, x, NULL, n_tokens);
}

/* y = w x for one weight: what the fused ops below fall back to after
 * their separate op. */
static int cu_matmul_1(struct cs_backend *be, float *y, const struct cs_weight *w, const float *x,
                       int n_tokens)
{
    float *ys[1] = {y};
    const struct cs_weight *ws[1] = {w};
    return cuda_op_matmul(be, 1, ys, ws, x, n_tokens);
}

/* ys = ws pro(x), fused: one decode token through the segmented GEMV's
 * prologue, a prompt through the quantization before the GEMM (matmul.h).
 * CS_EUNSUPPORTED, nothing launched, where neither applies: the caller then
 * runs the op and the matmul. */
static int cu_matmul_pro(struct cs_backend *be, int n, float *const *ys,
                         const struct cs_weight *const *ws, const float *x, int n_tokens,
                         const struct cuda_mm_pro *pro)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (n_tokens == 1)
        return cuda_matmul_pro_n(n, ys, ws, x, pro, c->stream);
    size_t need = cuda_matmul_scratch_bytes(ws[0]->n_in, n_tokens);
    int rc = cuda_buffer_reserve(&c->mm_scratch, &c->mm_scratch_cap, need);
    if (rc != CS_OK)
        return rc;
    return cuda_matmul_pro_tokens(n, ys, ws, x, n_tokens, pro, c->mm_scratch, c->mm_scratch_cap,
                                  c->stream);
}

int cuda_op_matmul_swiglu(struct cs_backend *be, float *y, const struct cs_weight *w, float *g,
                          const float *u, int n_tokens)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (n_tokens <= 0)
        return CS_OK;
    struct cuda_mm_pro pro = {CUDA_MM_PRO_SWIGLU, u, NULL, 0, 0, 0.0f};
    int rc = cu_matmul_pro(be, 1, &y, &w, g, n_tokens, &pro);
    if (rc != CS_EUNSUPPORTED)
        return rc;
    rc = cuda_silu_mul(g, g, u, (size_t)n_tokens * (size_t)w->n_in, c->stream);
    return rc != CS_OK ? rc : cu_matmul_1(be, y, w, g, n_tokens);
}

int cuda_op_matmul_gated_rmsnorm(struct cs_backend *be, float *y, const struct cs_weight *w,
                                 float *x, const float *z, const float *norm_w, int n_heads,
                                 int head_dim, float eps, int n_tokens)
{
    if (n_tokens <= 0)
        return CS_OK;
    if (w->n_in != (int64_t)n_heads * head_dim)
        return CS_EINVAL;
    struct cuda_mm_pro pro = {CUDA_MM_PRO_GATED_RMSNORM, z, norm_w, head_dim, 0, eps};
    int rc = cu_matmul_pro(be, 1, &y, &w, x, n_tokens, &pro);
    if (rc != CS_EUNSUPPORTED)
        return rc;
    rc = cuda_op_gated_rmsnorm(be, x, z, norm_w, n_heads, head_dim, eps, n_tokens);
    return rc != CS_OK ? rc : cu_matmul_1(be, y, w, x, n_tokens);
}

int cuda_op_matmul_sigmoid_gate(struct cs_backend *be, float *y, const struct cs_weight *w,
                                float *x, const float *gate, int gate_token_stride,
                                int gate_head_stride, int n_heads, int head_dim, int n_tokens)
{
    if (n_tokens <= 0)
        return CS_OK;
    if (w->n_in != (int64_t)n_heads * head_dim)
        return CS_EINVAL;
    struct cuda_mm_pro pro = {CUDA_MM_PRO_SIGMOID_GATE, gate, NULL, head_dim, gate_head_stride,
                              0.0f, NULL, gate_token_stride};
    int rc = cu_matmul_pro(be, 1, &y, &w, x, n_tokens, &pro);
    if (rc != CS_EUNSUPPORTED)
        return rc;
    rc = cuda_op_sigmoid_gate(be, x, gate, gate_token_stride, gate_head_stride, n_heads, head_dim,
                              n_tokens);
    return rc != CS_OK ? rc : cu_matmul_1(be, y, w, x, n_tokens);
}

/* One decode token: the add and the norm in the GEMV's prologue (each
 * block quantizes its segment of (x + y) * w and sums its squares; the sums
 * meet with the partial dots; blocks of the first row group store the sum).
 * A prompt: the add and the norm in the quantization before the GEMM, the
 * scale applied in its epilogue. Else, or where neither applies, the two
 * launches. */
int cuda_op_matmul_add_rmsnorm(struct cs_backend *be, int n, float *const *ys,
                               const struct cs_weight *const *ws, float *x_out, const float *x,
                               const float *y, const float *norm_w, float *normed,
                               float *norm_scale, int n_tokens, int dim, float eps)
{
    if (n_tokens <= 0)
        return CS_OK;
    if (n <= 0 || n > CUDA_MATMUL_MAX_WEIGHTS || !ws || !ws[0] || ws[0]->n_in != dim)
        return CS_EINVAL;
    struct cuda_mm_pro pro = {CUDA_MM_PRO_ADD_RMSNORM, y, norm_w, 0, 0, eps, x_out};
    int rc = cu_matmul_pro(be, n, ys, ws, x, n_tokens, &pro);
    if (rc != CS_EUNSUPPORTED)
        return rc;
    rc = cuda_add_rmsnorm_to(be, x_out, x, y, normed, norm_scale, norm_w, n_tokens, dim, eps);
    return rc ? rc : cuda_op_matmul_scaled(be, n, ys, ws, normed, norm_scale, n_tokens);
}

/* One decode token (the step's only sequence): the conv of GDN's first
 * projection in the GEMV's epilogue (matmul.h), so conv1d_silu's launch
 * goes. Else CS_EUNSUPPORTED, nothing launched. */
int cuda_op_matmul_add_rmsnorm_conv1d(struct cs_backend *be, int n, float *const *ys,
                                      const struct cs_weight *const *ws, float *x_out,
                                      const float *x, const float *y, const float *norm_w,
                                      float *normed, int dim, float eps, const float *conv_w,
                                      struct cs_gdn_layer *st, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    (void)normed;
    if (!b || !st || !conv_w || b->n_tokens != 1 || b->n_seqs != 1 || c->batch.n_dec != 1 ||
        st->conv_kernel != 4)
        return CS_EUNSUPPORTED;
    int rc = cuda_batch_check(c, b, "matmul_add_rmsnorm_conv1d");
    if (rc != CS_OK)
        return rc;
    if (n <= 0 || n > CUDA_MATMUL_MAX_WEIGHTS || !ws || !ws[0] || ws[0]->n_in != dim)
        return CS_EINVAL;
    struct cuda_mm_pro pro = {CUDA_MM_PRO_ADD_RMSNORM, y, norm_w, 0, 0, eps, x_out};
    pro.conv_w = conv_w;
    pro.conv_state = st->conv;
    pro.conv_slot = c->batch.slot;
    pro.conv_n_slots = st->n_slots;
    pro.conv_dim = st->conv_dim;
    return cuda_matmul_pro_n(n, ys, ws, x, &pro, c->stream);
}

/* The fused FFN's exchange buffer, grown (zeroed, so its epoch restarts)
 * only outside a graph recording: CS_EUNSUPPORTED while one records. */
static int cu_ffn_buffer(struct cuda_ctx *c, int64_t n_ff, int64_t dim)
{
    size_t need = cuda_ffn_ring_buffer_bytes(n_ff, dim);
    if (c->ffn_buf_cap >= need && c->ffn_buf)
        return CS_OK;
    int rc = cuda_buffer_reserve(&c->ffn_buf, &c->ffn_buf_cap, need);
    if (rc == CS_EAGAIN)
        return CS_EUNSUPPORTED;
    if (rc != CS_OK)
        return rc;
    CS_CUDA_CHECK(cudaMemsetAsync(c->ffn_buf, 0, c->ffn_buf_cap, c->stream));
    cuda_pdl_barrier();   /* the launch after the memset is plain */
    return CS_OK;
}

/* One decode token: the FFN in one kernel (ffn_ring.cu) where it applies;
 * else CS_EUNSUPPORTED, nothing launched (the model runs the two fused
 * matmuls). */
int cuda_op_ffn_add_rmsnorm(struct cs_backend *be, float *out, const struct cs_weight *gate,
                            const struct cs_weight *up, const struct cs_weight *down, float *x_out,
                            const float *x, const float *y, const float *norm_w, int n_tokens,
                            int dim, float eps)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (n_tokens != 1 || !gate || !c->ffn_ring_on)
        return CS_EUNSUPPORTED;
    int rc = cu_ffn_buffer(c, gate->n_out, dim);
    if (rc != CS_OK)
        return rc;
    return cuda_ffn_ring(out, gate, up, down, x_out, x, y, norm_w, dim, eps, c->ffn_buf,
                         c->ffn_buf_cap, c->stream);
}

#ifndef CS_PROJ_FFN_RING
#define CS_PROJ_FFN_RING 1   /* -DCS_PROJ_FFN_RING=0: the FFN alone in the kernel (A/B timing) */
#endif

/* One decode token: the output projection and the FFN in one kernel
 * (ffn_ring.cu) where it applies; else CS_EUNSUPPORTED, nothing launched. */
int cuda_op_proj_ffn_add_rmsnorm(struct cs_backend *be, float *out, const struct cs_out_proj *p,
                                 const struct cs_weight *gate, const struct cs_weight *up,
                                 const struct cs_weight *down, float *x_out, const float *x,
                                 const float *norm_w, int n_tokens, int dim, float eps)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (!CS_PROJ_FFN_RING || n_tokens != 1 || !gate || !p || !p->w || !c->ffn_ring_on)
        return CS_EUNSUPPORTED;
    if (p->w->n_in != (int64_t)p->n_heads * p->head_dim)
        return CS_EINVAL;
    struct cuda_mm_pro pro;
    memset(&pro, 0, sizeof pro);
    pro.aux = p->aux;
    pro.head_dim = p->head_dim;
    if (p->kind == CS_OUT_PROJ_GATED_RMSNORM) {
        pro.kind = CUDA_MM_PRO_GATED_RMSNORM;
        pro.norm_w = p->norm_w;
        pro.eps = p->eps;
    } else if (p->kind == CS_OUT_PROJ_SIGMOID_GATE) {
        pro.kind = CUDA_MM_PRO_SIGMOID_GATE;
        pro.aux_head_stride = p->aux_head_stride;
        pro.aux_token_stride = p->aux_token_stride;
    } else {
        return CS_EINVAL;
    }
    int rc = cu_ffn_buffer(c, gate->n_out, dim);
    if (rc != CS_OK)
        return rc;
    return cuda_proj_ffn_ring(out, p->w, p->a, &pro, gate, up, down, x_out, x, norm_w, dim, eps,
                              c->ffn_buf, c->ffn_buf_cap, c->stream);
}

extern "C" void cuda_ffn_ring_enable(struct cs_backend *be, bool on)
{
    cuda_ctx_of(be)->ffn_ring_on = on;
}
