/* seg_addnorm.cuh - the add_rmsnorm prologue of a one-token GEMV: the
 * residual add and RMSNorm of the input row computed by every block that
 * needs it, with k_add_rmsnorm's summation order (rms_row.cuh), then
 * quantized to Q8_1 into shared memory. Shared by the segmented GEMV
 * (gemv_seg.cu) and the fused FFN (ffn_ring.cu), so both give the norm's
 * bits; SEG_AN_WARPS warps do the work (4 of k_add_rmsnorm's warps each). */
#ifndef CS_CUDA_SEG_ADDNORM_CUH
#define CS_CUDA_SEG_ADDNORM_CUH

#include "cuda_util.cuh"
#include "matmul.h"
#include "rms_row.cuh"

#define SEG_AN_WARPS 8
/* Virtual warps of the add_rmsnorm prologue's sums unrolled together (-D to
 * time variants): at 4 the compiler issues their loads together. */
#ifndef SEG_AN_UNROLL
#define SEG_AN_UNROLL 1
#endif
static constexpr int seg_an_unroll = SEG_AN_UNROLL;   /* #pragma unroll expands no macro */

/* The residual's y (pro.aux) from global memory through the read-only path,
 * or (AuxGlobal false: ffn_ring.cu's fused output projection) from shared
 * memory, where the kernel gathered it. The same value either way. */
template <bool AuxGlobal>
static __device__ __forceinline__ float seg_an_aux(const float *p)
{
    return AuxGlobal ? __ldg(p) : *p;
}
/* Virtual warp vw (0..31) of k_add_rmsnorm's 1024 threads (rms_row.cuh):
 * thread 32 vw + lane holds v[e] = x + aux at 32 vw + lane + 1024 e; its
 * partial sum of squares, reduced by warp_sum as block_sum's first level.
 * Every lane returns the virtual warp's sum. Its 16 loads fly together. */
template <bool AuxGlobal = true>
static __device__ __forceinline__ float seg_an_vwarp_sum(const struct cuda_mm_pro &pro,
                                                         const float *x, int n_in, int vw,
                                                         int lane)
{
    int vt = vw * 32 + lane;
    float v[NORM_NPT];
#pragma unroll
    for (int e = 0; e < NORM_NPT; e++) {
        int i = vt + e * NORM_THREADS;
        v[e] = i < n_in ? rms_add(__ldg(x + i), seg_an_aux<AuxGlobal>(pro.aux + i)) : 0.0f;
    }
    return warp_sum(rms_sumsq(v));
}

/* The add_rmsnorm prologue (CUDA_MM_PRO_ADD_RMSNORM), first half: every
 * block needs the whole row's sum of squares, formed as k_add_rmsnorm's 1024
 * threads form it (rms_row.cuh). Loader warp w plays k_add_rmsnorm's warps
 * 4w..4w+3 in turn; lane 0 leaves virtual warp vw's sum in ssw[vw]. One
 * virtual warp at a time: its 16 loads fly together while the first group's
 * weights stay in registers. (gemv_seg.cu's cluster launch splits the 32
 * virtual warps over the cluster's blocks instead: seg_an_sums_cluster.) */
template <bool AuxGlobal = true>
static __device__ __forceinline__ void seg_addnorm_sums(const struct cuda_mm_pro &pro,
                                                        const float *x, int n_in, int warp,
                                                        int lane, float *ssw)
{
    static_assert(SEG_AN_WARPS * 4 * 32 == NORM_THREADS, "4 virtual warps per loader warp");
#ifdef SEG_AN_EXPERIMENT_NO_SUMS
    /* A speed experiment only (wrong results; never in a product build): the
     * prologue without the row's sum of squares, i.e. the critical path a
     * contract would leave that applied the norm's scale after the block's
     * quantization (docs/PERF.md, twenty-third session). */
    if (lane < 4)   /* a row sum of n_in: scale ~1, so the stream stays finite */
        ssw[warp * 4 + lane] = (float)n_in / (SEG_AN_WARPS * 4);
    (void)pro, (void)x;
    return;
#endif
#pragma unroll seg_an_unroll
    for (int j = 0; j < 4; j++) {
        int vw = warp * 4 + j;
        float ss = seg_an_vwarp_sum<AuxGlobal>(pro, x, n_in, vw, lane);
        if (lane == 0)
            ssw[vw] = ss;
    }
}

/* Second half, after a barrier: block_sum's second level over ssw (every
 * warp the same total), the scale, then this warp's 4 blocks of the segment
 * of rmsnorm(x + aux) * norm_w quantized as seg_prologue does. The blocks of
 * the first row group (one per segment: write_sum) also store x + aux. */
static __device__ __forceinline__ void seg_addnorm_prologue(const struct cuda_mm_pro &pro,
                                                            const float *x, int n_in, int b0,
                                                            int cn, int warp, int lane,
                                                            bool write_sum, const float *ssw,
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
    float scale = rms_scale(warp_sum(ssw[lane]), n_in, pro.eps);
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int k = warp * 4 + u, i = (b0 + k) * 32 + lane;
        if (k >= cn)
            break;
        if (write_sum)
            pro.x_out[i] = v[u];
        float d;
        int q = cuda_q8_1_quantize_lane(rms_apply(v[u], scale, w[u]), &d);
        xs[k * 32 + lane] = (int8_t)q;
        if (lane == 0)
            xds[k] = d;
    }
}

/* seg_addnorm_prologue over the whole row (ffn_ring.cu: every block needs
 * all of it): warp w quantizes blocks 32 sg + 4 w + u of each segment sg,
 * each value as seg_addnorm_prologue forms it, with the loads of 4 segments
 * (a 4,096-value row) issued before their first use: one round trip where
 * a call per segment took four. xs / xds: the row's nb blocks. */
template <bool AuxGlobal = true>
static __device__ __forceinline__ void seg_addnorm_row(const struct cuda_mm_pro &pro,
                                                       const float *x, int n_in, int warp,
                                                       int lane, bool write_sum, const float *ssw,
                                                       int8_t *xs, float *xds)
{
    const int per = 4;   /* segments whose loads fly together */
    int nb = n_in / 32;
    float scale = rms_scale(warp_sum(ssw[lane]), n_in, pro.eps);
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
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int k = (sg0 + j) * 32 + warp * 4 + u, i = k * 32 + lane;
                if (k >= nb)   /* warp-uniform: the quantization is warp-collective */
                    continue;
                if (write_sum)
                    pro.x_out[i] = v[j][u];
                float d;
                int q = cuda_q8_1_quantize_lane(rms_apply(v[j][u], scale, w[j][u]), &d);
                xs[k * 32 + lane] = (int8_t)q;
                if (lane == 0)
                    xds[k] = d;
            }
        }
    }
}

#endif
