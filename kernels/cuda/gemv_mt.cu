/* gemv_mt.cu - the decode GEMV for 2..MM_MT_MAX_TOKENS tokens (a batch of
 * sequences, one token each), the per-token sums kept in registers.
 *
 * Why: the plain GEMV (matmul.cu) splits each 32-row group's K over the
 * warps of a block, so every (block, token) dot goes through shared memory
 * to a serial phase and a barrier a round; at 8 tokens a step of the 9B's
 * matrix calls took 6.1 ms on an H100 against 3.2 ms at one token, and
 * above 8 tokens it launched again and read the weights twice (docs/
 * PERF.md, twenty-seventh session). Here one warp walks one numerics
 * segment (CS_DOT_SEG_BLOCKS blocks) of one row group, lane = row, and
 * folds each block into its tokens' sums at once: no shared memory and no
 * barrier until the end, where the block's segments are added in order.
 *
 * A block is one row group: its warps are (segment, token half). With few
 * row groups (4096-row matrices: 128 groups, 4 segments) or more than 8
 * tokens, the tokens are split over two warps per segment; both read the
 * same weights within a few cycles, so DRAM sees them once.
 *
 * Numerics (kernels/numerics.h): per segment p = fma(d_w * d_x, isum, p) over
 * its blocks in increasing order, then total = total + p (times rs[t] with
 * a row norm) over the segments in order: bitwise the plain GEMV's, the
 * segmented GEMV's and the GEMM's (tests/gpu/test_matmul). */
#include "../numerics.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "matmul_int.cuh"

#define MT_SEG CS_DOT_SEG_BLOCKS
#ifndef MT_PF
#define MT_PF 4          /* weight blocks a warp has in flight (registers: 9 each) */
#endif
#define MT_MAX_WARPS 16  /* warps per block (__launch_bounds__: 128 registers a thread) */
#define MT_SMEM_MAX (48 * 1024)

/* Issue the loads of weight block b of this lane's row into ring slot j. */
static __device__ __forceinline__ void mt_load(const int4 *qg, const __half *dg, int b, int lane,
                                               int4 &w0, int4 &w1, float &wd)
{
    w0 = __ldg(qg + (size_t)b * 64 + lane);
    w1 = __ldg(qg + (size_t)b * 64 + 32 + lane);
    wd = __half2float(dg[(size_t)b * 32 + lane]);
}

/* Grid: one block per row group. Block: seg_warps x ceil(nt / NTW) warps;
 * warp (s, h) takes segments s, s + seg_warps, ... for tokens
 * [h * NTW, min(nt, (h + 1) * NTW)). Dynamic shared memory: the segment
 * partials [n_seg][nt][32]. */
template <int NTW>
static __global__ void __launch_bounds__(MT_MAX_WARPS * 32)
    gemv_mt_kernel(struct mm_parts ps, const int8_t *xq, const float *xd, int n_in, int nb, int nt,
                   int n_seg, int seg_warps)
{
    extern __shared__ float part[];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int sw = warp % seg_warps, t0 = (warp / seg_warps) * NTW;
    int tn = nt - t0 < NTW ? nt - t0 : NTW;
    int pi = mm_part_find(ps, blockIdx.x);
    int g = blockIdx.x - ps.p[pi].unit_begin;
    const int4 *qg = ps.p[pi].q + (size_t)g * nb * 64;
    const __half *dg = ps.p[pi].d + (size_t)g * nb * 32;
    const int8_t *xt = xq + (size_t)t0 * n_in;
    const float *dt = xd + (size_t)t0 * nb;
    int4 w0[MT_PF], w1[MT_PF];
    float wd[MT_PF];

    /* the first segment's first weights fly before x exists (launch.cuh) */
    int b1 = sw * MT_SEG + MT_SEG < nb ? sw * MT_SEG + MT_SEG : nb;
#pragma unroll
    for (int j = 0; j < MT_PF; j++)
        if (sw * MT_SEG + j < b1)
            mt_load(qg, dg, sw * MT_SEG + j, lane, w0[j], w1[j], wd[j]);
    cuda_pdl_enter();

    for (int sg = sw; sg < n_seg; sg += seg_warps) {
        int b0 = sg * MT_SEG;
        b1 = b0 + MT_SEG < nb ? b0 + MT_SEG : nb;
        if (sg != sw) {
#pragma unroll
            for (int j = 0; j < MT_PF; j++)
                if (b0 + j < b1)
                    mt_load(qg, dg, b0 + j, lane, w0[j], w1[j], wd[j]);
        }
        float acc[NTW];
#pragma unroll
        for (int t = 0; t < NTW; t++)
            acc[t] = 0.0f;
        for (int b = b0; b < b1; b += MT_PF) {
#pragma unroll
            for (int j = 0; j < MT_PF; j++) {
                int bb = b + j;
                if (bb >= b1)
                    break;
#pragma unroll
                for (int t = 0; t < NTW; t++) {
                    if (t < tn) {
                        const int4 *xv = (const int4 *)(xt + (size_t)t * n_in + (size_t)bb * 32);
                        int isum = dot32(w0[j], w1[j], __ldg(xv), __ldg(xv + 1), MM_DOT_BIAS);
                        float s = __fmul_rn(wd[j], __ldg(dt + (size_t)t * nb + bb));
                        acc[t] = __fmaf_rn(s, biased_dot_to_float(isum), acc[t]);
                    }
                }
                if (bb + MT_PF < b1)
                    mt_load(qg, dg, bb + MT_PF, lane, w0[j], w1[j], wd[j]);
            }
        }
#pragma unroll
        for (int t = 0; t < NTW; t++)
            if (t < tn)
                part[((size_t)sg * nt + t0 + t) * 32 + lane] = acc[t];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * 32; i += blockDim.x) {
        int t = i >> 5, l = i & 31, row = g * 32 + l;
        float tot = 0.0f;
        for (int sg = 0; sg < n_seg; sg++)
            tot = __fadd_rn(tot, mm_out(ps, t, part[((size_t)sg * nt + t) * 32 + l]));
        if (row < ps.p[pi].n_out)
            ps.p[pi].y[(size_t)t * ps.p[pi].n_out + row] = tot;
    }
}

/* Streaming multiprocessors of the current device (cached per device). */
static int mt_sm_count(void)
{
    static int cached[64];
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 64)
        return 80;
    if (!cached[dev]) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
            n = 80;
        cached[dev] = n;
    }
    return cached[dev];
}

bool gemv_mt_fits(int nt, int n_in)
{
    int n_seg = (n_in / 32 + MT_SEG - 1) / MT_SEG;
    return nt >= 2 && nt <= MM_MT_MAX_TOKENS && (size_t)n_seg * nt * 32 * sizeof(float) <= MT_SMEM_MAX;
}

cudaError_t gemv_mt_launch(int nt, const struct mm_parts &ps, int units, const int8_t *xq,
                           const float *xd, int n_in, int nb, cudaStream_t s)
{
    if (!gemv_mt_fits(nt, n_in) || units <= 0)
        return cudaErrorInvalidValue;
    int n_seg = (nb + MT_SEG - 1) / MT_SEG;
    /* two token halves when one warp a segment leaves the SMs short of
     * warps (fewer than 8 each) or the tokens exceed one warp's registers */
    bool split = nt > 8 || (nt >= 4 && (long)units * n_seg < 8L * mt_sm_count());
    int ntw = split ? (nt + 1) / 2 : nt, n_th = (nt + ntw - 1) / ntw;
    int seg_warps = n_seg < MT_MAX_WARPS / n_th ? n_seg : MT_MAX_WARPS / n_th;
    size_t smem = (size_t)n_seg * nt * 32 * sizeof(float);
    dim3 block(seg_warps * n_th * 32);
    switch (ntw) {
#define MT_CASE(N)                                                                                \
    case N:                                                                                       \
        return cuda_launch(gemv_mt_kernel<N>, units, block, smem, s, ps, xq, xd, n_in, nb, nt,    \
                           n_seg, seg_warps);
        MT_CASE(2) MT_CASE(3) MT_CASE(4) MT_CASE(5) MT_CASE(6) MT_CASE(7) MT_CASE(8)
#undef MT_CASE
    default:
        return cudaErrorInvalidValue;
    }
}
