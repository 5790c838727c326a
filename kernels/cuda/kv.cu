/* kv.cu - kv_store of kernels/ops.h on CUDA: write each token's K and V rows
 * into its sequence's KV pages (F32 or F16 elements, page layout in ops.h).
 * One thread per (token, element); tokens whose page is out of range (a
 * malformed page table) are skipped rather than written out of bounds.
 * Also qk_norm_rope_store: head_norm_rope of q and k and kv_store in one
 * launch (a decode step ran three small kernels per attention layer). */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"
#include "rope.cuh"

template <typename T> static __device__ __forceinline__ T kv_from_float(float v);
template <> __device__ __forceinline__ float kv_from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half kv_from_float<__half>(float v)
{
    return __float2half_rn(v);
}

template <typename T>
static __global__ void k_kv_store(T *pages, int n_pages, int page_size, int row_elems,
                                  const float *k, int k_stride, const float *v, int v_stride,
                                  const int32_t *pos, const int32_t *seq_of,
                                  const int32_t *page_table, int max_pages, int n_tokens)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int t = blockIdx.y;
    if (t >= n_tokens)
        return;
    int p = pos[t];
    int pi = p / page_size;
    if (pi >= max_pages)
        return;
    int pg = page_table[(size_t)seq_of[t] * max_pages + pi];
    if (pg < 0 || pg >= n_pages)
        return;
    size_t page_elems = 2 * (size_t)page_size * row_elems;
    T *kd = pages + (size_t)pg * page_elems + (size_t)(p % page_size) * row_elems;
    T *vd = kd + (size_t)page_size * row_elems;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < row_elems; e += gridDim.x * blockDim.x) {
        kd[e] = kv_from_float<T>(k[(size_t)t * k_stride + e]);
        vd[e] = kv_from_float<T>(v[(size_t)t * v_stride + e]);
    }
}

int cuda_op_kv_store(struct cs_backend *be, struct cs_kv_layer *kv, const float *k, int k_stride,
                     const float *v, int v_stride, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "kv_store");
    if (rc != CS_OK)
        return rc;
    if (b->n_tokens <= 0)
        return CS_OK;
    if (b->n_tokens > 65535) {
        LOG_ERROR("cuda", "kv_store: %d tokens in one step (max 65535)", b->n_tokens);
        return CS_EINVAL;
    }
    int row = kv->n_kv_heads * kv->head_dim;
    dim3 grid(cs_div_up(row, 256), b->n_tokens);
    const struct cuda_batch *cb = &c->batch;
    if (kv->kv_type == CS_DTYPE_F16)
        CS_CUDA_CHECK(cuda_launch(k_kv_store<__half>, grid, 256, 0, c->stream, (__half *)kv->pages,
                                  kv->n_pages, kv->page_size, row, k, k_stride, v, v_stride,
                                  cb->pos, cb->seq_of, cb->page_table, cb->max_pages, b->n_tokens));
    else if (kv->kv_type == CS_DTYPE_F32)
        CS_CUDA_CHECK(cuda_launch(k_kv_store<float>, grid, 256, 0, c->stream, (float *)kv->pages,
                                  kv->n_pages, kv->page_size, row, k, k_stride, v, v_stride,
                                  cb->pos, cb->seq_of, cb->page_table, cb->max_pages, b->n_tokens));
    else {
        LOG_ERROR("cuda", "kv_store: KV type %u unsupported", kv->kv_type);
        return CS_EUNSUPPORTED;
    }
    return CS_OK;
}

/* The destination row of token t (K; V is page_size rows further), or NULL
 * when its page is out of range: k_kv_store's rule. */
template <typename T>
static __device__ __forceinline__ T *kv_row(T *pages, int n_pages, int page_size, int row_elems,
                                            int p, int seq, const int32_t *page_table,
                                            int max_pages)
{
    int pi = p / page_size;
    if (pi >= max_pages)
        return NULL;
    int pg = page_table[(size_t)seq * max_pages + pi];
    if (pg < 0 || pg >= n_pages)
        return NULL;
    return pages + (size_t)pg * 2 * page_size * row_elems + (size_t)(p % page_size) * row_elems;
}

struct qk_prep_args {
    float *q, *k;
    const float *v;
    int q_ts, q_hs, n_head, kv_stride, n_kv, head_dim;
    const float *q_norm, *k_norm;
    int rope_dims;
    float rope_base, eps;
    void *pages;
    int n_pages, page_size, max_pages, n_tokens;
    const int32_t *pos, *seq_of, *page_table;
};

/* One warp per row: rows [0, T n_head) are q heads, then T n_kv k heads
 * (normed, rotated, written back and stored), then T n_kv v heads (stored).
 * Each value is the one head_norm_rope and k_kv_store would produce. */
template <typename T>
static __global__ void k_qk_norm_rope_store(struct qk_prep_args a)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ float buf[ROPE_WARPS][ROPE_MAX_DIM];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * ROPE_WARPS + warp;
    int nq = a.n_tokens * a.n_head, nk = a.n_tokens * a.n_kv;
    if (row >= nq + 2 * nk)
        return;
    if (row < nq) {
        int t = row / a.n_head, h = row - t * a.n_head;
        head_norm_rope_warp(a.q + (size_t)t * a.q_ts + (size_t)h * a.q_hs, buf[warp], a.head_dim,
                            a.q_norm, a.rope_dims, a.rope_base, a.eps, a.pos[t]);
        return;
    }
    bool is_v = row >= nq + nk;
    int r = row - nq - (is_v ? nk : 0);
    int t = r / a.n_kv, h = r - t * a.n_kv;
    size_t src = (size_t)t * a.kv_stride + (size_t)h * a.head_dim;
    int row_elems = a.n_kv * a.head_dim;
    T *dst = kv_row<T>((T *)a.pages, a.n_pages, a.page_size, row_elems, a.pos[t], a.seq_of[t],
                       a.page_table, a.max_pages);
    const float *from = a.v + src;
    if (!is_v) {
        head_norm_rope_warp(a.k + src, buf[warp], a.head_dim, a.k_norm, a.rope_dims, a.rope_base,
                            a.eps, a.pos[t]);
        from = buf[warp];   /* the values just written to k */
    } else if (dst) {
        dst += (size_t)a.page_size * row_elems;
    }
    if (!dst)
        return;
    dst += (size_t)h * a.head_dim;
    for (int i = lane; i < a.head_dim; i += 32)
        dst[i] = kv_from_float<T>(from[i]);
}

int cuda_op_qk_norm_rope_store(struct cs_backend *be, float *q, int q_token_stride,
                               int q_head_stride, int n_head, float *k, const float *v,
                               int kv_stride, int n_head_kv, int head_dim, const float *q_norm,
                               const float *k_norm, int rope_dims, float rope_base, float eps,
                               struct cs_kv_layer *kv, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "qk_norm_rope_store");
    if (rc != CS_OK)
        return rc;
    if (head_dim > ROPE_MAX_DIM || rope_dims > head_dim || rope_dims < 0 || (rope_dims & 1) ||
        kv->n_kv_heads != n_head_kv || kv->head_dim != head_dim) {
        LOG_ERROR("cuda", "qk_norm_rope_store: head_dim=%d rope_dims=%d kv heads %d/%d unsupported",
                  head_dim, rope_dims, n_head_kv, kv->n_kv_heads);
        return CS_EUNSUPPORTED;
    }
    if (kv->kv_type != CS_DTYPE_F16 && kv->kv_type != CS_DTYPE_F32) {
        LOG_ERROR("cuda", "qk_norm_rope_store: KV type %u unsupported", kv->kv_type);
        return CS_EUNSUPPORTED;
    }
    long rows = (long)b->n_tokens * (n_head + 2 * n_head_kv);
    if (rows <= 0)
        return CS_OK;
    const struct cuda_batch *cb = &c->batch;
    struct qk_prep_args a = {q, k, v, q_token_stride, q_head_stride, n_head, kv_stride, n_head_kv,
                             head_dim, q_norm, k_norm, rope_dims, rope_base, eps, kv->pages,
                             kv->n_pages, kv->page_size, cb->max_pages, b->n_tokens, cb->pos,
                             cb->seq_of, cb->page_table};
    int blocks = (int)((rows + ROPE_WARPS - 1) / ROPE_WARPS);
    if (kv->kv_type == CS_DTYPE_F16)
        CS_CUDA_CHECK(cuda_launch(k_qk_norm_rope_store<__half>, blocks, ROPE_WARPS * 32, 0,
                                  c->stream, a));
    else
        CS_CUDA_CHECK(cuda_launch(k_qk_norm_rope_store<float>, blocks, ROPE_WARPS * 32, 0,
                                  c->stream, a));
    return CS_OK;
}
