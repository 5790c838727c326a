/* conv_step.cuh - the one expression of GDN's causal depthwise conv for one
 * output: silu of the fma chain over its CONV_K columns, oldest first (kernels/
 * cpu/conv.c: fmaf in the same order). conv.cu's kernels and the segmented
 * GEMV's conv epilogue (gemv_seg.cu) all call it, so they give the same bits
 * by construction. Internal to kernels/cuda. */
#ifndef CS_CUDA_CONV_STEP_CUH
#define CS_CUDA_CONV_STEP_CUH

#include "cuda_util.cuh"

#define CONV_K 4   /* the only kernel width the CUDA backend takes (cuda_op_conv1d_silu) */

static __device__ __forceinline__ float conv_silu_out(const float (&w)[CONV_K],
                                                      const float (&col)[CONV_K])
{
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < CONV_K; j++)
        acc = __fmaf_rn(w[j], col[j], acc);
    return silu_f(acc);
}

#endif
