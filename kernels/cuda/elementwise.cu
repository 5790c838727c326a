/* elementwise.cu - the elementwise ops of kernels/ops.h on CUDA: add,
 * silu_mul and sigmoid_gate. One thread per value (grid-stride), so every
 * value is computed alone: trivially batch invariant. */
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define EW_THREADS 256
#define EW_MAX_BLOCKS 65535u

static unsigned ew_blocks(size_t n)
{
    unsigned b = cs_div_up(n, EW_THREADS);
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : (b ? b : 1);
}

static __global__ void k_add(float *x, const float *y, size_t n)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

static __global__ void k_silu_mul(float *out, const float *g, const float *u, size_t n)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = silu_f(g[i]) * u[i];
}

/* out[t][h][d] *= sigmoid(gate[t * gts + h * ghs + d]); one thread per value. */
static __global__ void k_sigmoid_gate(float *out, const float *gate, int gts, int ghs,
                                      int n_heads, int head_dim, size_t n)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    size_t per_token = (size_t)n_heads * head_dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / per_token;
        int r = (int)(i - t * per_token);
        int h = r / head_dim, d = r - h * head_dim;
        out[i] *= sigmoid_f(gate[t * (size_t)gts + (size_t)h * ghs + d]);
    }
}

int cuda_op_add(struct cs_backend *be, float *x, const float *y, size_t n)
{
    if (n == 0)
        return CS_OK;
    CS_CUDA_CHECK(cuda_launch(k_add, ew_blocks(n), EW_THREADS, 0, cuda_ctx_of(be)->stream, x, y,
                              n));
    return CS_OK;
}

extern "C" int cuda_silu_mul(float *out, const float *g, const float *u, size_t n,
                             struct CUstream_st *stream)
{
    if (n == 0)
        return CS_OK;
    CS_CUDA_CHECK(cuda_launch(k_silu_mul, ew_blocks(n), EW_THREADS, 0, stream, out, g, u, n));
    return CS_OK;
}

int cuda_op_silu_mul(struct cs_backend *be, float *out, const float *g, const float *u, size_t n)
{
    return cuda_silu_mul(out, g, u, n, cuda_ctx_of(be)->stream);
}

int cuda_op_sigmoid_gate(struct cs_backend *be, float *out, const float *gate,
                         int gate_token_stride, int gate_head_stride, int n_heads, int head_dim,
                         int n_tokens)
{
    size_t n = (size_t)n_tokens * n_heads * head_dim;
    if (n == 0)
        return CS_OK;
    CS_CUDA_CHECK(cuda_launch(k_sigmoid_gate, ew_blocks(n), EW_THREADS, 0, cuda_ctx_of(be)->stream,
                              out, gate, gate_token_stride, gate_head_stride, n_heads, head_dim,
                              n));
    return CS_OK;
}
