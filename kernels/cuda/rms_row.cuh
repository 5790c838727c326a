/* rms_row.cuh - the sum of squares of a token row's RMSNorm in kernels/
 * numerics.h's span order, shared by every kernel that forms it: the norm
 * ops (norm.cu), the prompt's quantization prologue (quantize_pro.cu), the
 * one-token GEMV's add_rmsnorm prologue (gemv_seg.cu, seg_addnorm.cuh) and
 * the fused FFN (ffn_ring.cu), so all give the CPU backend's bits
 * (kernels/cpu/cpu.h cpu_row_sumsq).
 *
 * A span is 128 values, lane l of a warp holding values l + 32 u (u < 4):
 * its sum is the lane's FFMA chain then warp_sum. A segment (1,024 values)
 * adds its 8 span sums left to right, the row its segment sums. The norm is
 * applied after the projection (numerics.h): what is quantized is u = v * w
 * (rms_apply_w), and the projection's output is multiplied by rms_scale(ss).
 * Each step is pinned to one instruction (the build runs --use_fast_math,
 * so a plain expression would leave contraction and approximation to the
 * compiler's context). */
#ifndef CS_CUDA_RMS_ROW_CUH
#define CS_CUDA_RMS_ROW_CUH

#include "../numerics.h"
#include "cuda_util.cuh"

#define NORM_THREADS 1024
#define NORM_NPT 8   /* values per thread held in registers: dim <= 8192 */
#define NORM_SPANS (NORM_THREADS * NORM_NPT / CS_NORM_SPAN)   /* 64 spans in registers */

/* The row of a block of NORM_THREADS (dim <= NORM_THREADS * NORM_NPT):
 * thread (warp W, lane l) holds, for e = 4 h + u, value (W + 32 h) * 128 +
 * 32 u + l, so that its 4 values of h are its lane's share of span W + 32 h
 * (and warp W quantizes blocks 4 W + u and 128 + 4 W + u). */
static __device__ __forceinline__ int rms_index(int e)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    return (warp + 32 * (e >> 2)) * CS_NORM_SPAN + 32 * (e & 3) + lane;
}

/* x + y of the residual add */
static __device__ __forceinline__ float rms_add(float x, float y)
{
    return __fadd_rn(x, y);
}

/* A span's sum of squares: this lane's 4 values (l + 32 u; 0 past the row)
 * as an FFMA chain, then the xor tree. A warp-collective call. */
static __device__ __forceinline__ float rms_span_sum(const float (&v)[4])
{
    float p = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; u++)
        p = __fmaf_rn(v[u], v[u], p);
    return warp_sum(p);
}

/* A segment's sum from its span sums sp[0..n) (n <= CS_NORM_SEG_SPANS; the
 * spans past the row, whose sums are +0, may be left out). */
static __device__ __forceinline__ float rms_seg_sum(const float *sp, int n)
{
    float s = 0.0f;
    for (int j = 0; j < n; j++)
        s = __fadd_rn(s, sp[j]);
    return s;
}

/* total + the sums of the segments whose n_spans span sums are in sp[]
 * (shared memory; whole segments but the last), added left to right, by
 * one warp (every lane returns it): lane k forms segment k's sum, then the
 * segment sums go through shuffles. total = 0 for a whole row. */
static __device__ __forceinline__ float rms_row_sum_from_spans(const float *sp, int n_spans,
                                                               int lane, float total = 0.0f)
{
    int n_seg = (n_spans + CS_NORM_SEG_SPANS - 1) / CS_NORM_SEG_SPANS;
    for (int s0 = 0; s0 < n_seg; s0 += 32) {
        int sg = s0 + lane, first = sg * CS_NORM_SEG_SPANS;
        int n = n_spans - first < CS_NORM_SEG_SPANS ? n_spans - first : CS_NORM_SEG_SPANS;
        float seg = sg < n_seg ? rms_seg_sum(sp + first, n) : 0.0f;
        int m = n_seg - s0 < 32 ? n_seg - s0 : 32;
        for (int k = 0; k < m; k++)
            total = __fadd_rn(total, __shfl_sync(CS_FULL_MASK, seg, k));
    }
    return total;
}

/* 1 / sqrt(ss / dim + eps) from the row's total ss. */
static __device__ __forceinline__ float rms_scale(float ss, int dim, float eps)
{
    return xm_rms_scale(ss, dim, eps);
}

/* A block's row held at rms_index (v, 0 past the row): the span sums of
 * this thread's two spans into sp[W + 32 h] (lane 0 of warp W). */
static __device__ __forceinline__ void rms_row_span_sums(const float (&v)[NORM_NPT], float *sp)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int h = 0; h < NORM_NPT / 4; h++) {
        float q[4] = {v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]};
        float s = rms_span_sum(q);
        if (lane == 0)
            sp[warp + 32 * h] = s;
    }
}

/* After rms_row_span_sums and a barrier: warp 0 stores the row's scale to
 * *scale. */
static __device__ __forceinline__ void rms_row_scale_store(const float *sp, int dim, float eps,
                                                           float *scale)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == 0) {
        float ss = rms_row_sum_from_spans(sp, (dim + CS_NORM_SPAN - 1) / CS_NORM_SPAN, lane);
        if (lane == 0)
            *scale = rms_scale(ss, dim, eps);
    }
}

/* What the projection quantizes: v * w, one rounding. */
static __device__ __forceinline__ float rms_apply_w(float v, float w)
{
    return __fmul_rn(v, w);
}

#endif
