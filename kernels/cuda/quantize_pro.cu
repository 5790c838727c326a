/* quantize_pro.cu - a matmul's prologue and the Q8_1 quantization of its
 * result in one pass over a prompt's activations (cuda_matmul_pro_tokens):
 * silu(g) * u before the FFN down projection, the gated RMSNorm before the
 * GDN output projection, the sigmoid gate before the attention output
 * projection, the residual add and RMSNorm before the input projections
 * (its row scales left after the Q8_1 for the GEMM's epilogue:
 * kernels/numerics.h).
 * Separately, the op writes fp32 and cuda_quantize_q8_1 reads it back: at
 * 2K tokens of the 9B model the ops and the quantizations were ~3.5% of the
 * prompt's kernel time (ncu, H200). Each value is computed by the op's own
 * expression (gated_norm.cuh, rms_row.cuh and the lines of elementwise.cu)
 * and quantized by cuda_q8_1_quantize_lane, so the Q8_1 is bitwise what the
 * op then cuda_quantize_q8_1 leave (tests/gpu/test_ops.c, test_fused_norm.c). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_util.cuh"
#include "gated_norm.cuh"
#include "launch.cuh"
#include "matmul.h"
#include "rms_row.cuh"

#define QP_WARPS 8         /* warps per block of k_quant_pro */
#define QP_SPAN 128        /* values per warp: 4 quant blocks, or one gated head */

/* The elementwise prologues, one warp per 128 values of a token: lane holds
 * values lane + 32 e (e < 4) of the span, so block e of the span is the
 * warp's 32 lanes. n_in % QP_SPAN == 0. */
template <int KIND>
static __global__ void __launch_bounds__(QP_WARPS * 32)
    k_quant_pro(int8_t *xq, float *xd, const float *x, struct cuda_mm_pro pro, int n_in,
                int64_t n_spans)
{
    int lane = threadIdx.x & 31;
    int64_t sp = (int64_t)blockIdx.x * QP_WARPS + (threadIdx.x >> 5);
    float w[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (KIND == CUDA_MM_PRO_GATED_RMSNORM) {   /* weights: before the wait (launch.cuh) */
#pragma unroll
        for (int e = 0; e < 4; e++)
            w[e] = __ldg(pro.norm_w + lane + 32 * e);
    }
    cuda_pdl_enter();
    if (sp >= n_spans)
        return;
    int spans_per_token = n_in / QP_SPAN;
    int64_t t = sp / spans_per_token;
    int r0 = (int)(sp - t * spans_per_token) * QP_SPAN;   /* the span's first index in the token */
    size_t base = (size_t)t * n_in + r0;
    float v[4], a[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int r = r0 + lane + 32 * e;
        v[e] = x[base + lane + 32 * e];
        if (KIND == CUDA_MM_PRO_SIGMOID_GATE) {
            int h = r / pro.head_dim, d = r - h * pro.head_dim;
            a[e] = pro.aux[t * (size_t)pro.aux_token_stride + (size_t)h * pro.aux_head_stride + d];
        } else {
            a[e] = pro.aux[base + lane + 32 * e];
        }
    }
    if (KIND == CUDA_MM_PRO_GATED_RMSNORM)   /* the span is one head (k_gated_rmsnorm) */
        gated_norm_head_lane(v, a, w, pro.head_dim, pro.eps);
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float o = v[e];
        if (KIND == CUDA_MM_PRO_SWIGLU)
            o = silu_f(v[e]) * a[e];       /* k_silu_mul */
        else if (KIND == CUDA_MM_PRO_SIGMOID_GATE)
            o = v[e] * sigmoid_f(a[e]);    /* k_sigmoid_gate */
        float d;
        int q = cuda_q8_1_quantize_lane(o, &d);
        xq[base + lane + 32 * e] = (int8_t)q;
        if (lane == 0)
            xd[(base >> 5) + e] = d;
    }
}

/* The residual add and RMSNorm (k_add_rmsnorm's arithmetic, rms_row.cuh):
 * one block of NORM_THREADS per token, thread tid holding values
 * rms_index(e), so a warp's 32 lanes hold whole quant blocks. What is
 * quantized is (x + aux) * w; the row's scale goes to rs[token], for the
 * GEMM's epilogue (kernels/numerics.h). */
static __global__ void __launch_bounds__(NORM_THREADS)
    k_quant_add_rmsnorm(int8_t *xq, float *xd, float *rs, const float *x, struct cuda_mm_pro pro,
                        int dim)
{
    __shared__ float sp[NORM_SPANS];
    int lane = threadIdx.x & 31;
    float v[NORM_NPT], wv[NORM_NPT];
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        wv[e] = i < dim ? __ldg(pro.norm_w + i) : 0.0f;
    }
    cuda_pdl_enter();
    size_t row = (size_t)blockIdx.x * dim;
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        v[e] = i < dim ? rms_add(x[row + i], pro.aux[row + i]) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);
        if (i < dim)
            pro.x_out[row + i] = v[e];
    }
    rms_row_span_sums(v, sp);
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = rms_index(e);   /* dim % 32 == 0: a warp is all in or all out */
        if (i >= dim)
            continue;
        float d;
        int q = cuda_q8_1_quantize_lane(rms_apply_w(v[e], wv[e]), &d);
        xq[row + i] = (int8_t)q;
        if (lane == 0)
            xd[(row + i) >> 5] = d;
    }
    __syncthreads();
    rms_row_scale_store(sp, dim, pro.eps, rs + blockIdx.x);
}

extern "C" int cuda_quantize_pro(void *scratch, const float *x, int64_t n_in, int n_tokens,
                                 const struct cuda_mm_pro *pro, struct CUstream_st *stream)
{
    if (!scratch || !x || !pro || !pro->aux || n_in <= 0 || n_tokens <= 0)
        return CS_EINVAL;
    if (n_in % QP_SPAN != 0 || n_in > INT32_MAX)
        return CS_EUNSUPPORTED;
    int8_t *xq = (int8_t *)scratch;
    float *xd = (float *)((char *)scratch + cuda_q8_1_scales_offset(n_in, n_tokens));
    cudaStream_t s = (cudaStream_t)stream;
    int64_t n_spans = n_in / QP_SPAN * n_tokens;
    unsigned grid = cs_div_up((size_t)n_spans, QP_WARPS);
    switch (pro->kind) {
    case CUDA_MM_PRO_SWIGLU:
        CS_CUDA_CHECK(cuda_launch(k_quant_pro<CUDA_MM_PRO_SWIGLU>, grid, QP_WARPS * 32, 0, s, xq,
                                  xd, x, *pro, (int)n_in, n_spans));
        return CS_OK;
    case CUDA_MM_PRO_SIGMOID_GATE:
        if (pro->head_dim <= 0 || n_in % pro->head_dim != 0 || pro->aux_token_stride <= 0)
            return CS_EUNSUPPORTED;
        CS_CUDA_CHECK(cuda_launch(k_quant_pro<CUDA_MM_PRO_SIGMOID_GATE>, grid, QP_WARPS * 32, 0, s,
                                  xq, xd, x, *pro, (int)n_in, n_spans));
        return CS_OK;
    case CUDA_MM_PRO_GATED_RMSNORM:
        if (pro->head_dim != GATED_NORM_HEAD || !pro->norm_w)
            return CS_EUNSUPPORTED;
        CS_CUDA_CHECK(cuda_launch(k_quant_pro<CUDA_MM_PRO_GATED_RMSNORM>, grid, QP_WARPS * 32, 0, s,
                                  xq, xd, x, *pro, (int)n_in, n_spans));
        return CS_OK;
    case CUDA_MM_PRO_ADD_RMSNORM:
        if (n_in > NORM_THREADS * NORM_NPT || !pro->norm_w || !pro->x_out)
            return CS_EUNSUPPORTED;
        CS_CUDA_CHECK(cuda_launch(k_quant_add_rmsnorm, (unsigned)n_tokens, NORM_THREADS, 0, s, xq,
                                  xd, (float *)((char *)scratch + cuda_row_scale_offset(n_in, n_tokens)),
                                  x, *pro, (int)n_in));
        return CS_OK;
    default:
        return CS_EUNSUPPORTED;
    }
}
