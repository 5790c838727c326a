/* gated_norm.cuh - the gated RMSNorm of one 128-value head by one warp, lane
 * holding values lane, lane + 32, lane + 64, lane + 96:
 * v = v * rsqrt(mean(v^2) + eps) * w * silu(z). Shared by k_gated_rmsnorm
 * (norm.cu) and the GDN output projection's fused prologue (gemv_seg.cu), so
 * both run the same instructions and agree bit for bit. The CPU backend's
 * gated_rmsnorm reproduces it: lane sums of squares as FFMA chains, the
 * warp_sum tree, xm_rms_scale, then ((v * scale) * w) * silu(z). */
#ifndef CS_CUDA_GATED_NORM_CUH
#define CS_CUDA_GATED_NORM_CUH

#include "cuda_util.cuh"

#define GATED_NORM_HEAD 128

/* head_dim is GATED_NORM_HEAD, passed at run time as k_gated_rmsnorm's
 * general path has it (the same division). Every lane of the warp calls it. */
static __device__ __forceinline__ void gated_norm_head_lane(float (&v)[4], const float (&z)[4],
                                                            const float (&w)[4], int head_dim,
                                                            float eps)
{
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++)
        ss = __fmaf_rn(v[e], v[e], ss);
    ss = warp_sum(ss);
    float scale = xm_rms_scale(ss, head_dim, eps);
#pragma unroll
    for (int e = 0; e < 4; e++)
        v[e] = __fmul_rn(__fmul_rn(__fmul_rn(v[e], scale), w[e]), silu_f(z[e]));
}

#endif
