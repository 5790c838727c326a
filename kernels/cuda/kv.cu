/* kv.cu - kv_store of kernels/ops.h on CUDA: write each token's K and V rows
 * into its sequence's KV pages (F32 or F16 elements, page layout in ops.h).
 * One thread per (token, element); tokens whose page is out of range (a
 * malformed page table) are skipped rather than written out of bounds. */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

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
