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
 * radian. */
static __device__ __forceinline__ void head_norm_rope_warp(float *xh, float *b, int head_dim,
                                                           const float *norm_w, int rope_dims,
                                                           float rope_base, float eps, int pos)
{
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32) {
        float v = xh[i];
        b[i] = v;
        ss += v * v;
    }
    ss = warp_sum(ss);
    float scale = 1.0f / sqrtf(ss / (float)head_dim + eps);
    for (int i = lane; i < head_dim; i += 32)
        b[i] = b[i] * scale * norm_w[i];
    __syncwarp();
    int half = rope_dims / 2;
    double p = (double)pos;
    for (int i = lane; i < half; i += 32) {
        double theta = p * pow((double)rope_base, -2.0 * (double)i / (double)rope_dims);
        double sn, cs;
        sincos(theta, &sn, &cs);
        float c = (float)cs, s = (float)sn;
        float a0 = b[i], a1 = b[i + half];
        b[i] = a0 * c - a1 * s;
        b[i + half] = a1 * c + a0 * s;
    }
    __syncwarp();
    for (int i = lane; i < head_dim; i += 32)
        xh[i] = b[i];
}

#endif
