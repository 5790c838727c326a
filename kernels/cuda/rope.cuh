/* rope.cuh - one head's RMSNorm then NeoX RoPE by one warp, shared by
 * k_head_norm_rope (rope.cu) and the fused q/k/KV kernel (kv.cu), so both
 * compute the same bits. */
#ifndef CS_CUDA_ROPE_CUH
#define CS_CUDA_ROPE_CUH

#include "cuda_util.cuh"

#define ROPE_WARPS 4
#define ROPE_MAX_DIM 512

/* xh (head_dim floats) = rope(rmsnorm(xh) * norm_w) at position pos; b is
 * this warp's ROPE_MAX_DIM floats of shared memory and holds the result
 * afterwards (synchronised within the warp). The angle pos *
 * base^(-2i/rope_dims) and its sine/cosine are computed in double: at
 * positions near 256K an fp32 angle would be off by several hundredths of a
 * radian. The CPU backend (kernels/cpu/rope.c) computes the same
 * expressions in the same order; its pow and sincos are glibc's, these
 * CUDA's, both within about an ulp of double, so their float roundings agree
 * except in the rare case where the double lands within those ulps of a
 * float rounding boundary (~1e-6 per value at position 300, more at longer
 * positions). */
static __device__ __forceinline__ void head_norm_rope_warp(float *xh, float *b, int head_dim,
                                                           const float *norm_w, int rope_dims,
                                                           float rope_base, float eps, int pos)
{
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32) {
        float v = xh[i];
        b[i] = v;
        ss = __fmaf_rn(v, v, ss);
    }
    ss = warp_sum(ss);
    float scale = xm_rms_scale(ss, head_dim, eps);
    for (int i = lane; i < head_dim; i += 32)
        b[i] = __fmul_rn(__fmul_rn(b[i], scale), norm_w[i]);
    __syncwarp();
    int half = rope_dims / 2;
    double p = (double)pos;
    for (int i = lane; i < half; i += 32) {
        double theta = p * pow((double)rope_base, -2.0 * (double)i / (double)rope_dims);
        double sn, cs;
        sincos(theta, &sn, &cs);
        float c = (float)cs, s = (float)sn;
        float a0 = b[i], a1 = b[i + half];
        b[i] = __fsub_rn(__fmul_rn(a0, c), __fmul_rn(a1, s));   /* as kernels/cpu/rope.c */
        b[i + half] = __fadd_rn(__fmul_rn(a1, c), __fmul_rn(a0, s));
    }
    __syncwarp();
    for (int i = lane; i < head_dim; i += 32)
        xh[i] = b[i];
}

#endif
