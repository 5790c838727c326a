/* norm.cu - RMSNorm ops of kernels/ops.h on CUDA: rmsnorm (one block per
 * token, the row held in registers), add_rmsnorm (the residual add x += y
 * fused in front of it: same loads plus y, same tree, so bitwise add then
 * rmsnorm) and gated_rmsnorm (one warp per head: x = rmsnorm(x) * w * silu(z)).
 * Sums of squares use a fixed reduction tree per row (batch invariant).
 * Launched as programmatic dependents (launch.cuh): the norm weights, which
 * no kernel writes, are loaded before the wait for the row. */
#include "cuda_util.cuh"
#include "gated_norm.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"
#include "rms_row.cuh"

/* This thread's norm weights w[threadIdx.x + e * NORM_THREADS] (0 past dim). */
static __device__ __forceinline__ void rms_weights(float *wv, const float *w, int dim)
{
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = threadIdx.x + e * NORM_THREADS;
        wv[e] = i < dim ? __ldg(w + i) : 0.0f;
    }
}

/* The part of an RMSNorm row after the loads, shared by k_rmsnorm and
 * k_add_rmsnorm so both run the same arithmetic (rms_row.cuh, which the
 * GEMV's add_rmsnorm prologue runs too): v holds x[threadIdx.x + e *
 * NORM_THREADS] (0 past dim), wv the weights alike; yr[i] = v * scale * w[i]. */
static __device__ __forceinline__ void rms_row_regs(float *yr, const float (&v)[NORM_NPT],
                                                    const float (&wv)[NORM_NPT], int dim, float eps,
                                                    float *scratch)
{
    float ss = block_sum(rms_sumsq(v), scratch);
    float scale = rms_scale(ss, dim, eps);
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = threadIdx.x + e * NORM_THREADS;
        if (i < dim)
            yr[i] = rms_apply(v[e], scale, wv[e]);
    }
}

/* One block per token: out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * w. The
 * row is read once into registers (all loads in flight together); rows
 * longer than NORM_THREADS * NORM_NPT take the looping variant. A decode
 * step runs ~65 of these on one row each, so latency is what counts. */
static __global__ void __launch_bounds__(NORM_THREADS) k_rmsnorm(float *out, const float *x,
                                                                 const float *w, int dim, float eps)
{
    __shared__ float scratch[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float v[NORM_NPT], wv[NORM_NPT];
    rms_weights(wv, w, dim);
    cuda_pdl_enter();
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = threadIdx.x + e * NORM_THREADS;
        v[e] = i < dim ? xr[i] : 0.0f;
    }
    rms_row_regs(out + (size_t)blockIdx.x * dim, v, wv, dim, eps, scratch);
}

/* k_rmsnorm of x[t] + y[t], the sum written to x_out[t] (x_out == x: in
 * place): each value is the one k_add would store, and it enters the same
 * tree. */
static __global__ void __launch_bounds__(NORM_THREADS)
    k_add_rmsnorm(float *x_out, const float *x, const float *y, float *out, const float *w,
                  int dim, float eps)
{
    __shared__ float scratch[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *xo = x_out + (size_t)blockIdx.x * dim;
    const float *yr = y + (size_t)blockIdx.x * dim;
    float v[NORM_NPT], wv[NORM_NPT];
    rms_weights(wv, w, dim);
    cuda_pdl_enter();
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = threadIdx.x + e * NORM_THREADS;
        v[e] = i < dim ? rms_add(xr[i], yr[i]) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = threadIdx.x + e * NORM_THREADS;
        if (i < dim)
            xo[i] = v[e];
    }
    rms_row_regs(out + (size_t)blockIdx.x * dim, v, wv, dim, eps, scratch);
}

/* Rows longer than NORM_THREADS * NORM_NPT. With y (add_rmsnorm), xw = xr +
 * y first (xw may equal xr); each thread rereads only the values it wrote
 * itself. */
static __device__ __forceinline__ void rms_row_long(float *yr, float *xw, const float *xr,
                                                    const float *ya, const float *w, int dim,
                                                    float eps, float *scratch)
{
    float ss = 0.0f;
    if (ya)
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            float s = rms_add(xr[i], ya[i]);
            xw[i] = s;
            ss = __fmaf_rn(s, s, ss);
        }
    else
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            ss = __fmaf_rn(xr[i], xr[i], ss);
    ss = block_sum(ss, scratch);
    float scale = rms_scale(ss, dim, eps);
    const float *xn = ya ? xw : xr;   /* the normed row: the sum when there is one */
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = rms_apply(xn[i], scale, w[i]);
}

static __global__ void k_rmsnorm_long(float *out, const float *x, const float *w, int dim,
                                      float eps)
{
    __shared__ float scratch[32];
    cuda_pdl_enter();
    size_t off = (size_t)blockIdx.x * dim;
    rms_row_long(out + off, NULL, x + off, NULL, w, dim, eps, scratch);
}

static __global__ void k_add_rmsnorm_long(float *x_out, const float *x, const float *y, float *out,
                                          const float *w, int dim, float eps)
{
    __shared__ float scratch[32];
    cuda_pdl_enter();
    size_t off = (size_t)blockIdx.x * dim;
    rms_row_long(out + off, x_out + off, x + off, y + off, w, dim, eps, scratch);
}

/* One warp per head of head_dim values: x = rmsnorm(x) * w * silu(z). Heads
 * of 128 (every Qwen3.5 GDN) take gated_norm_head_lane, which the fused GDN
 * output projection runs too. */
static __global__ void k_gated_rmsnorm(float *x, const float *z, const float *w, int n_rows,
                                       int head_dim, float eps)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    cuda_pdl_enter();
    if (row >= n_rows)
        return;
    float *xr = x + (size_t)row * head_dim;
    const float *zr = z + (size_t)row * head_dim;
    if (head_dim == GATED_NORM_HEAD) {
        float v[4], zv[4], wv[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            v[e] = xr[lane + 32 * e];
            zv[e] = zr[lane + 32 * e];
            wv[e] = w[lane + 32 * e];
        }
        gated_norm_head_lane(v, zv, wv, head_dim, eps);
#pragma unroll
        for (int e = 0; e < 4; e++)
            xr[lane + 32 * e] = v[e];
        return;
    }
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32)
        ss = __fmaf_rn(xr[i], xr[i], ss);
    ss = warp_sum(ss);
    float scale = xm_rms_scale(ss, head_dim, eps);
    for (int i = lane; i < head_dim; i += 32)
        xr[i] = __fmul_rn(__fmul_rn(__fmul_rn(xr[i], scale), w[i]), silu_f(zr[i]));
}

int cuda_op_rmsnorm(struct cs_backend *be, float *out, const float *x, const float *w, int n_tokens,
                    int dim, float eps)
{
    if (n_tokens <= 0)
        return CS_OK;
    cudaStream_t s = cuda_ctx_of(be)->stream;
    if (dim <= NORM_THREADS * NORM_NPT)
        CS_CUDA_CHECK(cuda_launch(k_rmsnorm, n_tokens, NORM_THREADS, 0, s, out, x, w, dim, eps));
    else
        CS_CUDA_CHECK(cuda_launch(k_rmsnorm_long, n_tokens, NORM_THREADS, 0, s, out, x, w, dim,
                                  eps));
    return CS_OK;
}

int cuda_add_rmsnorm_to(struct cs_backend *be, float *x_out, const float *x, const float *y,
                        float *out, const float *w, int n_tokens, int dim, float eps)
{
    if (n_tokens <= 0)
        return CS_OK;
    cudaStream_t s = cuda_ctx_of(be)->stream;
    if (dim <= NORM_THREADS * NORM_NPT)
        CS_CUDA_CHECK(cuda_launch(k_add_rmsnorm, n_tokens, NORM_THREADS, 0, s, x_out, x, y, out, w,
                                  dim, eps));
    else
        CS_CUDA_CHECK(cuda_launch(k_add_rmsnorm_long, n_tokens, NORM_THREADS, 0, s, x_out, x, y,
                                  out, w, dim, eps));
    return CS_OK;
}

int cuda_op_add_rmsnorm(struct cs_backend *be, float *x, const float *y, float *out,
                        const float *w, int n_tokens, int dim, float eps)
{
    return cuda_add_rmsnorm_to(be, x, x, y, out, w, n_tokens, dim, eps);
}

int cuda_op_gated_rmsnorm(struct cs_backend *be, float *x, const float *z, const float *w,
                          int n_heads, int head_dim, float eps, int n_tokens)
{
    int rows = n_heads * n_tokens;
    if (rows <= 0)
        return CS_OK;
    const int warps = 4;
    CS_CUDA_CHECK(cuda_launch(k_gated_rmsnorm, cs_div_up(rows, warps), warps * 32, 0,
                              cuda_ctx_of(be)->stream, x, z, w, rows, head_dim, eps));
    return CS_OK;
}
