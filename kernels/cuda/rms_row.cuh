/* rms_row.cuh - the arithmetic of one RMSNorm row as k_rmsnorm and
 * k_add_rmsnorm (norm.cu) run it, shared with the segmented GEMV's
 * add_rmsnorm prologue (gemv_seg.cu), which recomputes the same row in every
 * block and must agree bit for bit.
 *
 * Virtual thread tid of NORM_THREADS holds v[e] = row[tid + e * NORM_THREADS]
 * (0 past dim); its partial is the sum of v[e]^2 in e order; the partials are
 * reduced by warp_sum over 32 threads, then warp_sum over the 32 warp sums
 * (block_sum of cuda_util.cuh with 1024 threads).
 * Each step is pinned to one instruction (the build runs --use_fast_math, so
 * a plain expression would leave contraction and approximation to the
 * compiler's context): FADD, an FFMA chain, then scale = xm_rms_scale
 * (kernels/exact_math.h: correctly rounded 1/dim, FFMA, sqrt and division,
 * the CPU backend's bits), and out = (v * scale) * w as two FMULs. */
#ifndef CS_CUDA_RMS_ROW_CUH
#define CS_CUDA_RMS_ROW_CUH

#include "cuda_util.cuh"

#define NORM_THREADS 1024
#define NORM_NPT 8   /* values per thread held in registers: dim <= 8192 */

/* x + y of the residual add */
static __device__ __forceinline__ float rms_add(float x, float y)
{
    return __fadd_rn(x, y);
}

/* One virtual thread's partial sum of squares. */
static __device__ __forceinline__ float rms_sumsq(const float (&v)[NORM_NPT])
{
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++)
        ss = __fmaf_rn(v[e], v[e], ss);
    return ss;
}

/* 1 / sqrt(ss / dim + eps) from the row's total ss. */
static __device__ __forceinline__ float rms_scale(float ss, int dim, float eps)
{
    return xm_rms_scale(ss, dim, eps);
}

static __device__ __forceinline__ float rms_apply(float v, float scale, float w)
{
    return __fmul_rn(__fmul_rn(v, scale), w);
}

#endif
