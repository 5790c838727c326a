/* seg_addnorm.cuh - the add_rmsnorm prologue of a one-token GEMV: the
 * residual add, (x + aux) * norm_w quantized to Q8_1 into shared memory,
 * and the sums of squares of the values a warp holds, in kernels/
 * numerics.h's span order (rms_row.cuh). The norm's scale multiplies the
 * projection's output, so nothing here waits for the whole row: the block
 * quantizes what it loads. Shared by the segmented GEMV (gemv_seg.cu) and
 * the fused FFN (ffn_ring.cu), so both give the norm's bits; SEG_AN_WARPS
 * warps do the work, warp w holding span w of each segment. */
#ifndef CS_CUDA_SEG_ADDNORM_CUH
#define CS_CUDA_SEG_ADDNORM_CUH

#include "cuda_util.cuh"
#include "matmul.h"
#include "rms_row.cuh"

#define SEG_AN_WARPS 8
static_assert(SEG_AN_WARPS == CS_NORM_SEG_SPANS, "a warp per span of a segment");

/* The residual's y (pro.aux) from global memory through the read-only path,
 * or (AuxGlobal false: ffn_ring.cu's fused output projection) from shared
 * memory, where the kernel gathered it. The same value either way. */
template <bool AuxGlobal>
static __device__ __forceinline__ float seg_an_aux(const float *p)
{
    return AuxGlobal ? __ldg(p) : *p;
}

/* The segment of 32-value blocks [b0, b0 + cn) (one segment: cn <= 32):
 * this warp's 4 blocks b0 + 4 warp + u of (x + aux) * norm_w quantized into
 * xs / xds (block k = 4 warp + u of the segment); the blocks of the first
 * row group (write_sum) also store x + aux. Returns the warp's span sum
 * (every lane; +0 past the row). */
static __device__ __forceinline__ float seg_addnorm_prologue(const struct cuda_mm_pro &pro,
                                                             const float *x, int b0, int cn,
                                                             int warp, int lane, bool write_sum,
                                                             int8_t *xs, float *xds)
{
    float v[4], w[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int k = warp * 4 + u, i = (b0 + k) * 32 + lane;
        bool in = k < cn;
        v[u] = in ? rms_add(__ldg(x + i), __ldg(pro.aux + i)) : 0.0f;
        w[u] = in ? __ldg(pro.norm_w + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int k = warp * 4 + u, i = (b0 + k) * 32 + lane;
        if (k >= cn)
            break;
        if (write_sum)
            pro.x_out[i] = v[u];
        float d;
        int q = cuda_q8_1_quantize_lane(rms_apply_w(v[u], w[u]), &d);
        xs[k * 32 + lane] = (int8_t)q;
        if (lane == 0)
            xds[k] = d;
    }
    return rms_span_sum(v);
}

/* seg_addnorm_prologue over the whole row (ffn_ring.cu: every block needs
 * all of it): warp w quantizes blocks 32 sg + 4 w + u of each segment sg,
 * each value as seg_addnorm_prologue forms it, with the loads of 4 segments
 * (a 4,096-value row) issued before their first use: one round trip where
 * a call per segment took four. xs / xds: the row's nb blocks; sp[8 sg + w]
 * (lane 0) the span sums, for rms_row_sum_from_spans after a barrier. */
template <bool AuxGlobal = true>
static __device__ __forceinline__ void seg_addnorm_row(const struct cuda_mm_pro &pro,
                                                       const float *x, int n_in, int warp,
                                                       int lane, bool write_sum, int8_t *xs,
                                                       float *xds, float *sp)
{
    const int per = 4;   /* segments whose loads fly together */
    int nb = n_in / 32;
    for (int sg0 = 0; sg0 * 32 < nb; sg0 += per) {
        float v[per][4], w[per][4];
#pragma unroll
        for (int j = 0; j < per; j++) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int k = (sg0 + j) * 32 + warp * 4 + u, i = k * 32 + lane;
                bool in = k < nb;
                v[j][u] = in ? rms_add(__ldg(x + i), seg_an_aux<AuxGlobal>(pro.aux + i)) : 0.0f;
                w[j][u] = in ? __ldg(pro.norm_w + i) : 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < per; j++) {
            if ((sg0 + j) * 32 >= nb)
                break;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int k = (sg0 + j) * 32 + warp * 4 + u, i = k * 32 + lane;
                if (k >= nb)   /* warp-uniform: the quantization is warp-collective */
                    continue;
                if (write_sum)
                    pro.x_out[i] = v[j][u];
                float d;
                int q = cuda_q8_1_quantize_lane(rms_apply_w(v[j][u], w[j][u]), &d);
                xs[k * 32 + lane] = (int8_t)q;
                if (lane == 0)
                    xds[k] = d;
            }
            float s = rms_span_sum(v[j]);
            if (lane == 0)
                sp[(sg0 + j) * SEG_AN_WARPS + warp] = s;
        }
    }
}

#endif
