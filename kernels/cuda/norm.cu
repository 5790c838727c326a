/* norm.cu - RMSNorm ops of kernels/ops.h on CUDA: rmsnorm (one block per
 * token, the row held in registers: out = x * w and the row's scale, which
 * the projection applies after its dot, kernels/numerics.h), add_rmsnorm
 * (the residual add x += y fused in front of it: same loads plus y, same
 * sums, so bitwise add then rmsnorm) and gated_rmsnorm (one warp per head:
 * x = rmsnorm(x) * w * silu(z)). Sums of squares in numerics.h's span
 * order (rms_row.cuh; batch invariant).
 * Launched as programmatic dependents (launch.cuh): the norm weights, which
 * no kernel writes, are loaded before the wait for the row. */
#include "cuda_util.cuh"
#include "gated_norm.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"
#include "rms_row.cuh"

/* This thread's norm weights (0 past dim). */
static __device__ __forceinline__ void rms_weights(float *wv, const float *w, int dim)
{
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        wv[e] = i < dim ? __ldg(w + i) : 0.0f;
    }
}

/* The part of a row after the loads, shared by k_rmsnorm and k_add_rmsnorm:
 * v holds the row at rms_index (0 past dim), wv the weights alike; out[i] =
 * v * w[i], and *scale = the norm's scale from the span sums (numerics.h). */
static __device__ __forceinline__ void rms_row_regs(float *out, float *scale,
                                                    const float (&v)[NORM_NPT],
                                                    const float (&wv)[NORM_NPT], int dim, float eps,
                                                    float *sp)
{
    rms_row_span_sums(v, sp);
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        if (i < dim)
            out[i] = rms_apply_w(v[e], wv[e]);
    }
    __syncthreads();
    rms_row_scale_store(sp, dim, eps, scale);
}

/* One block per token: out[t] = x[t] * w and scale[t] (ops.h rmsnorm). The
 * row is read once into registers (all loads in flight together); rows
 * longer than NORM_THREADS * NORM_NPT take the looping variant. A decode
 * step runs a few of these on one row each, so latency is what counts. */
static __global__ void __launch_bounds__(NORM_THREADS)
    k_rmsnorm(float *out, float *scale, const float *x, const float *w, int dim, float eps)
{
    __shared__ float sp[NORM_SPANS];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float v[NORM_NPT], wv[NORM_NPT];
    rms_weights(wv, w, dim);
    cuda_pdl_enter();
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        v[e] = i < dim ? xr[i] : 0.0f;
    }
    rms_row_regs(out + (size_t)blockIdx.x * dim, scale + blockIdx.x, v, wv, dim, eps, sp);
}

/* k_rmsnorm of x[t] + y[t], the sum written to x_out[t] (x_out == x: in
 * place): each value is the one k_add would store. */
static __global__ void __launch_bounds__(NORM_THREADS)
    k_add_rmsnorm(float *x_out, const float *x, const float *y, float *out, float *scale,
                  const float *w, int dim, float eps)
{
    __shared__ float sp[NORM_SPANS];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *xo = x_out + (size_t)blockIdx.x * dim;
    const float *yr = y + (size_t)blockIdx.x * dim;
    float v[NORM_NPT], wv[NORM_NPT];
    rms_weights(wv, w, dim);
    cuda_pdl_enter();
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        v[e] = i < dim ? rms_add(xr[i], yr[i]) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        if (i < dim)
            xo[i] = v[e];
    }
    rms_row_regs(out + (size_t)blockIdx.x * dim, scale + blockIdx.x, v, wv, dim, eps, sp);
}

/* Rows longer than NORM_THREADS * NORM_NPT: 32 spans (4 segments) a round,
 * warp W taking span W of the round. With y (add_rmsnorm), xw = xr + y
 * first (xw may equal xr); each thread rereads nothing. */
static __device__ __forceinline__ void rms_row_long(float *yr, float *scale, float *xw,
                                                    const float *xr, const float *ya,
                                                    const float *w, int dim, float eps, float *sp)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n_spans = (dim + CS_NORM_SPAN - 1) / CS_NORM_SPAN;
    float total = 0.0f;   /* warp 0's */
    for (int j0 = 0; j0 < n_spans; j0 += 32) {
        float q[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = (j0 + warp) * CS_NORM_SPAN + 32 * u + lane;
            float v = 0.0f;
            if (i < dim) {
                v = ya ? rms_add(xr[i], ya[i]) : xr[i];
                if (ya)
                    xw[i] = v;
                yr[i] = rms_apply_w(v, w[i]);
            }
            q[u] = v;
        }
        float s = rms_span_sum(q);
        if (lane == 0)
            sp[warp] = s;
        __syncthreads();
        if (warp == 0)
            total = rms_row_sum_from_spans(sp, n_spans - j0 < 32 ? n_spans - j0 : 32, lane, total);
        __syncthreads();   /* sp is reused */
    }
    if (threadIdx.x == 0)
        *scale = rms_scale(total, dim, eps);
}

static __global__ void k_rmsnorm_long(float *out, float *scale, const float *x, const float *w,
                                      int dim, float eps)
{
    __shared__ float sp[32];
    cuda_pdl_enter();
    size_t off = (size_t)blockIdx.x * dim;
    rms_row_long(out + off, scale + blockIdx.x, NULL, x + off, NULL, w, dim, eps, sp);
}

static __global__ void k_add_rmsnorm_long(float *x_out, const float *x, const float *y, float *out,
                                          float *scale, const float *w, int dim, float eps)
{
    __shared__ float sp[32];
    cuda_pdl_enter();
    size_t off = (size_t)blockIdx.x * dim;
    rms_row_long(out + off, scale + blockIdx.x, x_out + off, x + off, y + off, w, dim, eps, sp);
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

int cuda_op_rmsnorm(struct cs_backend *be, float *out, float *scale, const float *x,
                    const float *w, int n_tokens, int dim, float eps)
{
    if (n_tokens <= 0)
        return CS_OK;
    if (!out || !scale || !x || !w || dim <= 0)
        return CS_EINVAL;
    cudaStream_t s = cuda_ctx_of(be)->stream;
    if (dim <= NORM_THREADS * NORM_NPT)
        CS_CUDA_CHECK(cuda_launch(k_rmsnorm, n_tokens, NORM_THREADS, 0, s, out, scale, x, w, dim,
                                  eps));
    else
        CS_CUDA_CHECK(cuda_launch(k_rmsnorm_long, n_tokens, NORM_THREADS, 0, s, out, scale, x, w,
                                  dim, eps));
    return CS_OK;
}

int cuda_add_rmsnorm_to(struct cs_backend *be, float *x_out, const float *x, const float *y,
                        float *out, float *scale, const float *w, int n_tokens, int dim, float eps)
{
    if (n_tokens <= 0)
        return CS_OK;
    if (!x_out || !x || !y || !out || !scale || !w || dim <= 0)
        return CS_EINVAL;
    cudaStream_t s = cuda_ctx_of(be)->stream;
    if (dim <= NORM_THREADS * NORM_NPT)
        CS_CUDA_CHECK(cuda_launch(k_add_rmsnorm, n_tokens, NORM_THREADS, 0, s, x_out, x, y, out,
                                  scale, w, dim, eps));
    else
        CS_CUDA_CHECK(cuda_launch(k_add_rmsnorm_long, n_tokens, NORM_THREADS, 0, s, x_out, x, y,
                                  out, scale, w, dim, eps));
    return CS_OK;
}

int cuda_op_add_rmsnorm(struct cs_backend *be, float *x, const float *y, float *out, float *scale,
                        const float *w, int n_tokens, int dim, float eps)
{
    return cuda_add_rmsnorm_to(be, x, x, y, out, scale, w, n_tokens, dim, eps);
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
