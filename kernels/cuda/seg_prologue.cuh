/* seg_prologue.cuh - the one-token prologue of the segmented GEMV: a
 * warp's 4 blocks of one segment of pro(x) (SwiGLU, the sigmoid gate or the
 * gated RMSNorm of matmul.h's cuda_mm_pro), quantized to Q8_1 into shared
 * memory. Shared by the segmented GEMV (gemv_seg.cu) and the fused output
 * projection + FFN (ffn_ring.cu), so both give the same bits. */
#ifndef CS_CUDA_SEG_PROLOGUE_CUH
#define CS_CUDA_SEG_PROLOGUE_CUH

#include "cuda_util.cuh"
#include "gated_norm.cuh"
#include "../numerics.h"
#include "matmul.h"

/* The prologue's inputs for this warp's 4 blocks of the segment at block b0
 * (blocks 4 warp .. 4 warp + 3, so a 128-value head is one warp's): x, the
 * op's second input and the gated norm's weights; 0 past cn. */
struct seg_pro_in {
    float v[4], a[4], w[4];
};

static __device__ __forceinline__ void seg_prologue_load(const struct cuda_mm_pro &pro,
                                                         const float *x, int b0, int cn, int warp,
                                                         int lane, struct seg_pro_in &in)
{
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int k = warp * 4 + u, i = (b0 + k) * 32 + lane;   /* i: index in the token's vector */
        bool ok = k < cn;
        in.v[u] = ok ? __ldg(x + i) : 0.0f;
        in.a[u] = 0.0f;
        in.w[u] = 0.0f;
        if (ok && pro.kind == CUDA_MM_PRO_SIGMOID_GATE) {
            int h = i / pro.head_dim;
            in.a[u] = __ldg(pro.aux + (size_t)h * pro.aux_head_stride + (i - h * pro.head_dim));
        } else if (ok && pro.kind != CUDA_MM_PRO_NONE) {
            in.a[u] = __ldg(pro.aux + i);
        }
        if (ok && pro.kind == CUDA_MM_PRO_GATED_RMSNORM)
            in.w[u] = __ldg(pro.norm_w + u * 32 + lane);
    }
}

/* pro of the loaded values, quantized into xs / xds (the segment's blocks).
 * Each transform is the expression of the op it replaces. */
static __device__ __forceinline__ void seg_prologue_store(const struct cuda_mm_pro &pro,
                                                          struct seg_pro_in &in, int cn, int warp,
                                                          int lane, int8_t *xs, float *xds)
{
    if (pro.kind == CUDA_MM_PRO_GATED_RMSNORM)   /* a whole head, or a warp past cn (all 0) */
        gated_norm_head_lane(in.v, in.a, in.w, pro.head_dim, pro.eps);
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int k = warp * 4 + u;
        if (k >= cn)
            break;
        float d, e = in.v[u];
        if (pro.kind == CUDA_MM_PRO_SWIGLU)
            e = silu_f(in.v[u]) * in.a[u];      /* k_silu_mul */
        else if (pro.kind == CUDA_MM_PRO_SIGMOID_GATE)
            e = in.v[u] * sigmoid_f(in.a[u]);   /* k_sigmoid_gate */
        int q = cuda_q8_1_quantize_lane(e, &d);
        xs[k * 32 + lane] = (int8_t)q;
        if (lane == 0)
            xds[k] = d;
    }
}

/* The one-token prologue of one segment (b0, cn blocks) into xs / xds. */
static __device__ __forceinline__ void seg_prologue(const struct cuda_mm_pro &pro, const float *x,
                                                    int b0, int cn, int warp, int lane, int8_t *xs,
                                                    float *xds)
{
    struct seg_pro_in in;
    seg_prologue_load(pro, x, b0, cn, warp, lane, in);
    seg_prologue_store(pro, in, cn, warp, lane, xs, xds);
}

/* seg_prologue over a whole row of nb blocks (ffn_ring.cu: every block needs
 * all of it), the loads of 4 segments issued before their first use; xs /
 * xds the row's blocks. */
static __device__ __forceinline__ void seg_prologue_row(const struct cuda_mm_pro &pro,
                                                        const float *x, int nb, int warp, int lane,
                                                        int8_t *xs, float *xds)
{
    const int per = 4, seg = CS_DOT_SEG_BLOCKS;
    for (int b0 = 0; b0 < nb; b0 += per * seg) {
        struct seg_pro_in in[per];
#pragma unroll
        for (int j = 0; j < per; j++) {
            int s0 = b0 + j * seg, cn = nb - s0 < seg ? nb - s0 : seg;
            seg_prologue_load(pro, x, s0, cn, warp, lane, in[j]);
        }
#pragma unroll
        for (int j = 0; j < per; j++) {
            int s0 = b0 + j * seg, cn = nb - s0 < seg ? nb - s0 : seg;
            if (cn > 0)   /* block-uniform */
                seg_prologue_store(pro, in[j], cn, warp, lane, xs + (size_t)s0 * 32, xds + s0);
        }
    }
}

#endif
