/* embed.cu - embed of kernels/ops.h on CUDA: out[t] = row tokens[t] of the
 * embedding table, dequantized to fp32, reading the table in the device
 * layout matmul.h documents (Q8_0 in 32-row groups with separate fp16
 * scales; F16 as in the file; F32 and BF16 as fp32). Token ids out of
 * range give a zero row rather than an out-of-bounds read. */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define EMBED_THREADS 256
#define EMBED_PER_THREAD 4   /* values a thread dequantizes, their loads in flight together */
#define EMBED_PER_BLOCK (EMBED_THREADS * EMBED_PER_THREAD)

/* Block (token, chunk of EMBED_PER_BLOCK values): one block per token with
 * a loop of dependent loads took ~10 us for a 4096-wide row on an H200
 * (ncu, docs/PERF.md twelfth session), a whole decode step's 0.3%. */
static __global__ void k_embed_q8_0(float *out, const int8_t *qs, const __half *scales,
                                    int64_t n_in, int64_t n_out, const int32_t *tokens)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int t = blockIdx.x;
    int64_t row = tokens[t];
    float *o = out + (size_t)t * n_in;
    int64_t n_blocks = n_in / 32;
    int64_t group = row >> 5;
    int lane = (int)(row & 31);
    bool ok = row >= 0 && row < n_out;
    int64_t i0 = (int64_t)blockIdx.y * EMBED_PER_BLOCK + threadIdx.x;
    int8_t q[EMBED_PER_THREAD];
    __half d[EMBED_PER_THREAD];
#pragma unroll
    for (int u = 0; u < EMBED_PER_THREAD; u++) {
        int64_t i = i0 + (int64_t)u * EMBED_THREADS;
        q[u] = 0;
        d[u] = __float2half(0.0f);
        if (ok && i < n_in) {
            int64_t b = i >> 5;
            int v = (int)(i & 31), half = v >> 4, e = v & 15;
            size_t gb = (size_t)group * n_blocks + b;
            q[u] = qs[gb * 1024 + half * 512 + lane * 16 + e];
            d[u] = scales[gb * 32 + lane];
        }
    }
#pragma unroll
    for (int u = 0; u < EMBED_PER_THREAD; u++) {
        int64_t i = i0 + (int64_t)u * EMBED_THREADS;
        if (i < n_in)
            o[i] = ok ? __half2float(d[u]) * (float)q[u] : 0.0f;
    }
}

template <typename T>
static __device__ __forceinline__ float embed_elem(const T *p);
template <> __device__ __forceinline__ float embed_elem<float>(const float *p) { return *p; }
template <> __device__ __forceinline__ float embed_elem<__half>(const __half *p)
{
    return __half2float(*p);
}

template <typename T>
static __global__ void k_embed_plain(float *out, const T *table, int64_t n_in, int64_t n_out,
                                     const int32_t *tokens)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int t = blockIdx.x;
    int64_t row = tokens[t];
    float *o = out + (size_t)t * n_in;
    bool ok = row >= 0 && row < n_out;
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x)
        o[i] = ok ? embed_elem<T>(table + (size_t)row * n_in + i) : 0.0f;
}

int cuda_op_embed(struct cs_backend *be, float *out, const struct cs_weight *table,
                  const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "embed");
    if (rc != CS_OK)
        return rc;
    int n = b->n_tokens;
    if (n <= 0)
        return CS_OK;
    const int32_t *tok = c->batch.tokens;
    switch (table->type) {
    case CS_DTYPE_Q8_0:
        CS_CUDA_CHECK(cuda_launch(k_embed_q8_0,
                                  dim3(n, (unsigned)cs_div_up(table->n_in, EMBED_PER_BLOCK)),
                                  EMBED_THREADS, 0, c->stream, out,
                                  (const int8_t *)table->data, (const __half *)table->aux,
                                  table->n_in, table->n_out, tok));
        break;
    case CS_DTYPE_F16:
        CS_CUDA_CHECK(cuda_launch(k_embed_plain<__half>, n, EMBED_THREADS, 0, c->stream, out,
                                  (const __half *)table->data, table->n_in, table->n_out, tok));
        break;
    case CS_DTYPE_F32:
        CS_CUDA_CHECK(cuda_launch(k_embed_plain<float>, n, EMBED_THREADS, 0, c->stream, out,
                                  (const float *)table->data, table->n_in, table->n_out, tok));
        break;
    default:
        LOG_ERROR("cuda", "embed: table type %u unsupported", table->type);
        return CS_EUNSUPPORTED;
    }
    return CS_OK;
}
