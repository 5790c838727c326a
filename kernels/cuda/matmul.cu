/* matmul.cu - y = W x on the GPU without tensor cores: DP4A (int8) for Q8_0
 * weights x Q8_1 activations, fp32 FMA for F16/F32 weights.
 *
 * Kernels
 * - gemv_q8_kernel<NT> (decode, NT <= 8 tokens per launch): one block per
 *   group of 32 rows (lane = row, 16-byte coalesced loads of the repacked
 *   layout). It quantizes x into shared memory itself when it fits (one
 *   launch per call instead of two). In rounds, each warp computes the block
 *   dots isum of a few 32-value blocks into shared memory (with their
 *   scales d_w and d_x), prefetches the next round's weights, then thread
 *   (token, row) folds the round's blocks in increasing order, p = fma(d_w *
 *   d_x, isum, p). Memory-bound.
 * - gemv_seg_kernel (gemv_seg.cu): the same for matrices with few row
 *   groups, K split over blocks by numerics.h segments.
 * - gemm_q8_kernel (prefill, gemm.cu): 128 rows x 64 tokens per block
 *   through double-buffered shared memory; matmul_q8 below picks it above
 *   64 tokens, and for 17-64 where it measured faster on the call's shape
 *   (matmul_tune.h; arch_tiles.h's gemv_max_tokens until measured).
 * - gemv_f_kernel: F16/F32 weights, a warp per row, fp32 FMA.
 * All Q8_0 kernels follow matmul.h "Numerics" exactly, so they are bitwise
 * equal to each other for any n_tokens (tests/gpu/test_matmul checks it).
 * Several weights of one call are fused into one launch over their
 * concatenated row groups (struct mm_parts). Tile choices: arch_tiles.h. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../../common/gguf.h"
#include "arch_tiles.h"
#include "cuda_util.cuh"
#include "gated_norm.cuh"
#include "launch.cuh"
#include "matmul.h"
#include "matmul_int.cuh"
#include "matmul_tune.h"
#include "rms_row.cuh"
#include "../numerics.h"

/* ---- GEMV ---- */

#define GEMV_XS_U 8   /* x blocks per warp loaded together by the quantizing prologue */

/* Block: W warps (blockDim.x = 32 W >= 32 NT). Dynamic shared memory
 * (gemv_terms_bytes): the dots (float) [2][C][NT][32], the weight scales
 * [2][C][32] and the x scales [2][C][NT] (C = W * BPW; double-buffered, so
 * the serial sum of round r overlaps the dots of round r + 1 with one
 * barrier per round), then with XS the Q8_1 copy of the NT
 * tokens: int8 [NT][n_in] and fp32 scales [NT][nb], quantized here from x
 * (no separate quantize launch); without XS, xq/xd hold them (scratch). */
/* MB: resident blocks per SM asked of the compiler from 3 to 8 tokens (1 or
 * 2; gemv_launch_nt picks the instance per call). The wide instances
 * (9 to GEMV_WIDE_NT tokens, 16 warps) read the weights once for up to 16. */
#define GEMV_WIDE_NT 16
#define GEMV_IS_WIDE(nt) ((nt) > MM_GEMV_MAX_TOKENS)   /* 16 warps, one block an SM */
template <int NT, int BPW, bool XS, int MB>
static __global__ void __launch_bounds__(NT <= 2 || GEMV_IS_WIDE(NT) ? 512 : 256,
                                         NT <= 2 ? MM_GEMV_MIN_BLOCKS
                                                 : (GEMV_IS_WIDE(NT) ? 1 : MB))
    gemv_q8_kernel(struct mm_parts ps, const float *x, const int8_t *xq, const float *xd, int n_in,
                   int nb)
{
    extern __shared__ int4 smem_raw[];
    float *terms = (float *)smem_raw;
    int gid = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nw = blockDim.x >> 5, C = nw * BPW;
    int pi = mm_part_find(ps, gid);
    int g = gid - ps.p[pi].unit_begin;
    const int4 *qg = ps.p[pi].q + (size_t)g * nb * 64;
    const __half *dg = ps.p[pi].d + (size_t)g * nb * 32;
    float *wscale = terms + 2 * C * NT * 32, *xscale = wscale + 2 * C * 32;
    int t_own = threadIdx.x >> 5;      /* serial phase: token t_own, row lane */
    float acc = 0.0f, tot = 0.0f;      /* this segment's sum, the segments' so far */
    int4 wv0[BPW], wv1[BPW];
    float wd[BPW];

    /* first round's weights in flight before anything else */
#pragma unroll
    for (int j = 0; j < BPW; j++) {
        int b = warp * BPW + j;
        if (b < nb) {
            wv0[j] = __ldg(qg + (size_t)b * 64 + lane);
            wv1[j] = __ldg(qg + (size_t)b * 64 + 32 + lane);
            wd[j] = __half2float(dg[(size_t)b * 32 + lane]);
        }
    }
    cuda_pdl_enter();   /* launch.cuh: x (or xq/xd) is the previous kernel's output */
    if (XS) {
        int8_t *xs = (int8_t *)(xscale + 2 * C * NT);
        float *xds = (float *)(xs + (size_t)NT * n_in);
        /* GEMV_XS_U blocks of x per warp in flight at once: fetched one at
         * a time, each paid a full L2 round trip (~6 us of prologue at
         * n_in = 12288, longer than the weights' own streaming) */
        for (int b0 = warp; b0 < NT * nb; b0 += nw * GEMV_XS_U) {
            float xv[GEMV_XS_U];
#pragma unroll
            for (int u = 0; u < GEMV_XS_U; u++) {
                int blk = b0 + u * nw;
                xv[u] = blk < NT * nb ? __ldg(x + (size_t)blk * 32 + lane) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < GEMV_XS_U; u++) {
                int blk = b0 + u * nw;
                if (blk >= NT * nb)
                    break;
                float d;
                int q = cuda_q8_1_quantize_lane(xv[u], &d);
                xs[blk * 32 + lane] = (int8_t)q;
                if (lane == 0)
                    xds[blk] = d;
            }
        }
        xq = xs;
        xd = xds;
        __syncthreads();
    }

    for (int c0 = 0, round = 0; c0 < nb; c0 += C, round++) {
        float *tb = terms + (round & 1) * C * NT * 32;
        float *wb = wscale + (round & 1) * C * 32, *xb = xscale + (round & 1) * C * NT;
#pragma unroll
        for (int j = 0; j < BPW; j++) {
            int b = c0 + warp * BPW + j;
            if (b >= nb)
                break;
            int k = warp * BPW + j;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 *xv = (const int4 *)(xq + (size_t)t * n_in + (size_t)b * 32);
                float dx;
                int4 x0, x1;
                if (XS) {
                    x0 = xv[0];
                    x1 = xv[1];
                    dx = xd[t * nb + b];
                } else {
                    x0 = __ldg(xv);
                    x1 = __ldg(xv + 1);
                    dx = __ldg(xd + (size_t)t * nb + b);
                }
                int isum = dot32(wv0[j], wv1[j], x0, x1, MM_DOT_BIAS);
                tb[(k * NT + t) * 32 + lane] = biased_dot_to_float(isum);
                if (lane == 0)
                    xb[k * NT + t] = dx;
            }
            wb[k * 32 + lane] = wd[j];
        }
        /* next round's weights fly during the barrier and the serial sum */
#pragma unroll
        for (int j = 0; j < BPW; j++) {
            int b = c0 + C + warp * BPW + j;
            if (b < nb) {
                wv0[j] = __ldg(qg + (size_t)b * 64 + lane);
                wv1[j] = __ldg(qg + (size_t)b * 64 + 32 + lane);
                wd[j] = __half2float(dg[(size_t)b * 32 + lane]);
            }
        }
        __syncthreads();
        if (t_own < NT) {
            int cn = nb - c0 < C ? nb - c0 : C, k = 0;
            const float *tp = tb + t_own * 32 + lane, *wp = wb + lane, *xp = xb + t_own;
            /* c0 and k are multiples of 8, so are the segment starts */
            for (; k + 8 <= cn; k += 8) {
                if ((c0 + k) % CS_DOT_SEG_BLOCKS == 0 && c0 + k > 0) {
                    tot = __fadd_rn(tot, mm_out(ps, t_own, acc));
                    acc = 0.0f;
                }
                float v[8], sc[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    v[u] = tp[(k + u) * NT * 32];
                    sc[u] = __fmul_rn(wp[(k + u) * 32], xp[(k + u) * NT]);
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    acc = __fmaf_rn(sc[u], v[u], acc);
            }
            for (; k < cn; k++) {
                if ((c0 + k) % CS_DOT_SEG_BLOCKS == 0 && c0 + k > 0) {
                    tot = __fadd_rn(tot, mm_out(ps, t_own, acc));
                    acc = 0.0f;
                }
                acc = __fmaf_rn(__fmul_rn(wp[k * 32], xp[k * NT]), tp[k * NT * 32], acc);
            }
        }
    }
    if (t_own < NT) {
        int row = g * 32 + lane;
        if (row < ps.p[pi].n_out)
            ps.p[pi].y[(size_t)t_own * ps.p[pi].n_out + row] =
                __fadd_rn(tot, mm_out(ps, t_own, acc));
    }
}

/* ---- F16 / F32 weights ---- */

template <typename T>
static __device__ __forceinline__ float load_f(const T *p);
template <>
__device__ __forceinline__ float load_f<float>(const float *p) { return __ldg(p); }
template <>
__device__ __forceinline__ float load_f<__half>(const __half *p) { return __half2float(__ldg(p)); }

/* A warp per row (8 per block); fixed-order sum, the same for every n_tokens. */
template <typename T>
static __global__ void gemv_f_kernel(float *y, const T *w, const float *x, const float *rs,
                                     int n_in, int n_out, int n_tokens)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n_out)
        return;
    const T *wr = w + (size_t)row * n_in;
    for (int t = 0; t < n_tokens; t++) {
        const float *xt = x + (size_t)t * n_in;
        float s = 0.0f;
        for (int k = lane; k < n_in; k += 32)
            s = __fmaf_rn(load_f(wr + k), xt[k], s);
        s = warp_sum(s);
        if (lane == 0)
            y[(size_t)t * n_out + row] = rs ? __fmul_rn(s, rs[t]) : s;
    }
}

/* ---- host side ---- */

static int device_cc(void)
{
    int dev = 0, major = 7, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major * 10 + minor;
}

/* 32-value blocks each warp loads per round. 8 for NT <= 2 measured worse on
 * H200 (one 512-thread block per SM at 128 registers: 42% vs 54% of read
 * bandwidth over the 9B decode projections), so 4 throughout. */
#ifndef MM_GEMV_BPW
#define MM_GEMV_BPW 4
#endif
/* The wide instances (9-16 tokens, 16 warps) take 1: 128 registers at 16, no spills. */
#define GEMV_BPW(nt) (GEMV_IS_WIDE(nt) ? 1 : MM_GEMV_BPW)

/* The block's dots, weight scales and x scales (gemv_q8_kernel). */
static size_t gemv_terms_bytes(int nt, int warps)
{
    size_t c = (size_t)warps * GEMV_BPW(nt);
    return 2 * c * (nt * 32 + 32 + nt) * sizeof(float);
}

static size_t gemv_xs_bytes(int nt, int n_in)
{
    return (size_t)nt * n_in + (size_t)nt * (n_in / 32) * sizeof(float);
}

/* Raises the instance's dynamic shared memory limit where smem needs it
 * (once per device and size: the attribute is not a stream operation, and a
 * decode step recorded as a CUDA graph (ops_cuda.cu) should launch only
 * kernels) and returns its resident blocks per SM at warps and smem (0 on
 * error), cached. The caches assume one thread launches matrix calls per
 * process (the engine thread), as the attribute cache before them did; a
 * stale entry could only pick the slower instance, never other bits. */
template <int NT, bool XS, int MB>
static int gemv_prepare(int warps, size_t smem)
{
    enum { SLOTS = 8 };   /* (warps, smem) pairs remembered per device: a model has a few n_in */
    static int raised[16], key[16][SLOTS], occ[16][SLOTS];
    int dev = 0, k = warps * (1 << 20) + (int)smem;   /* smem < 1 MB */
    cudaGetDevice(&dev);
    bool cache = dev >= 0 && dev < 16;
    if (smem > 48 * 1024 && (!cache || raised[dev] < (int)smem)) {
        if (cudaFuncSetAttribute(gemv_q8_kernel<NT, GEMV_BPW(NT), XS, MB>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) != cudaSuccess) {
            (void)cudaGetLastError();   /* not left for a later check to find */
            return 0;
        }
        if (cache)
            raised[dev] = (int)smem;
    }
    int slot = 0;
    if (cache) {
        for (; slot < SLOTS && key[dev][slot]; slot++)
            if (key[dev][slot] == k)
                return occ[dev][slot];
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemv_q8_kernel<NT, GEMV_BPW(NT), XS, MB>,
                                                      warps * 32, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (cache && slot < SLOTS)
        key[dev][slot] = k, occ[dev][slot] = n;
    return n;
}

/* Whether the two-block instance (at most 128 registers) should run a call
 * of units blocks. From 5 tokens the free instance takes 142-177 registers,
 * one block an SM; capped, a block runs longer (H200, 8 tokens: 1.2-1.4x
 * when the call is one partial wave) but twice as many share the GPU. So
 * count full waves of each and charge the capped one 1.5x: on the H200 this
 * picked the faster instance for every 9B and 27B decode matrix at 5 and 8
 * tokens (docs/PERF.md, twenty-eighth session). */
static bool gemv_two_blocks_pay(int units, int sms, int occ_free, int occ_capped)
{
    if (occ_free <= 0 || occ_capped <= occ_free)
        return false;
    long w_free = (units + (long)sms * occ_free - 1) / ((long)sms * occ_free);
    long w_capped = (units + (long)sms * occ_capped - 1) / ((long)sms * occ_capped);
    return 2 * w_free > 3 * w_capped;
}

template <int NT, bool XS>
static cudaError_t gemv_launch_nt(const struct mm_parts &ps, int units, const float *x,
                                  const int8_t *xq, const float *xd, int n_in, int nb, int warps,
                                  cudaStream_t s)
{
    size_t smem = gemv_terms_bytes(NT, warps) + (XS ? gemv_xs_bytes(NT, n_in) : 0);
    if (!XS && smem > 48 * 1024 && !GEMV_IS_WIDE(NT))
        warps = 8;   /* keep the scratch path under the default limit (the wide one needs 16) */
    smem = gemv_terms_bytes(NT, warps) + (XS ? gemv_xs_bytes(NT, n_in) : 0);
    /* up to 4 tokens the free instance fits 128 registers already: no second one */
    const int MB2 = NT >= 5 && !GEMV_IS_WIDE(NT) ? 2 : 1;
    int occ_free = gemv_prepare<NT, XS, 1>(warps, smem);
    if (occ_free <= 0)
        return cudaErrorInvalidConfiguration;
    if (MB2 == 2 && gemv_two_blocks_pay(units, cuda_sm_count(), occ_free,
                                        gemv_prepare<NT, XS, MB2>(warps, smem)))
        return cuda_launch(gemv_q8_kernel<NT, GEMV_BPW(NT), XS, MB2>, units, warps * 32, smem, s,
                           ps, x, xq, xd, n_in, nb);
    return cuda_launch(gemv_q8_kernel<NT, GEMV_BPW(NT), XS, 1>, units, warps * 32, smem, s, ps, x,
                       xq, xd, n_in, nb);
}

template <bool XS>
static cudaError_t gemv_launch(int nt, const struct mm_parts &ps, int units, const float *x,
                               const int8_t *xq, const float *xd, int n_in, int nb, int warps,
                               cudaStream_t s)
{
    switch (nt) {
    case 1: return gemv_launch_nt<1, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 2: return gemv_launch_nt<2, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 3: return gemv_launch_nt<3, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 4: return gemv_launch_nt<4, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 5: return gemv_launch_nt<5, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 6: return gemv_launch_nt<6, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 7: return gemv_launch_nt<7, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 8: return gemv_launch_nt<8, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    /* the wide instances (16 warps, 1 block a warp per round) */
    case 9: return gemv_launch_nt<9, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 10: return gemv_launch_nt<10, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 11: return gemv_launch_nt<11, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 12: return gemv_launch_nt<12, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 13: return gemv_launch_nt<13, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 14: return gemv_launch_nt<14, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case 15: return gemv_launch_nt<15, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    case GEMV_WIDE_NT:
        return gemv_launch_nt<GEMV_WIDE_NT, XS>(ps, units, x, xq, xd, n_in, nb, warps, s);
    default: return cudaErrorInvalidValue;   /* gemv_chunk gives 1..16 */
    }
}

/* How one GEMV launch of nt tokens runs: warps per block and whether x is
 * quantized in shared memory (true) or read from scratch (false). */
static bool gemv_plan(const struct mm_arch_tiles *tiles, int nt, int n_in, int *warps)
{
    *warps = GEMV_IS_WIDE(nt)           ? GEMV_WIDE_NT
             : nt <= tiles->gemv_small_nt ? tiles->gemv_warps_small
                                          : tiles->gemv_warps;
    return nt <= tiles->gemv_fuse_quant_nt &&
           gemv_terms_bytes(nt, *warps) + gemv_xs_bytes(nt, n_in) <= (size_t)tiles->gemv_smem_max;
}

/* Tokens of the GEMV launch with left tokens to go: up to 16 in one wide
 * launch where more than 8 remain (the weights read once instead of twice)
 * and its shared memory (72 KB at 16) fits the architecture (not a P40's
 * 48 KB; the segmented GEMV stops at 8), else up to 8. Each token's bits
 * are the same either way. */
static int gemv_chunk(const struct mm_arch_tiles *tiles, int left, enum cuda_mm_kernel kernel)
{
    int wide = left < GEMV_WIDE_NT ? left : GEMV_WIDE_NT;
    if (left > MM_GEMV_MAX_TOKENS && kernel != CUDA_MM_GEMV_SEG &&
        gemv_terms_bytes(wide, GEMV_WIDE_NT) <= (size_t)tiles->gemv_smem_max)
        return wide;
    return left < MM_GEMV_MAX_TOKENS ? left : MM_GEMV_MAX_TOKENS;
}

/* Rows of all the weights of a call (the tune table's key with n_in). */
static int64_t rows_of(int n, const struct cs_weight *const *ws)
{
    int64_t rows = 0;
    for (int i = 0; i < n; i++)
        rows += ws[i]->n_out;
    return rows;
}

static bool capturing(cudaStream_t s)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(s, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

/* CUDA_MM_AUTO: the GEMM (true) or the GEMV. In matmul_tune.h's range the
 * time measured on this card decides; where nothing is measured yet (a
 * graph being recorded) arch_tiles.h's gemv_max_tokens does, as it does
 * outside the range. */
static bool auto_uses_gemm(const struct mm_arch_tiles *tiles, int n,
                           const struct cs_weight *const *ws, int n_tokens)
{
    if (mm_tune_in_range(n_tokens)) {
        enum mm_tune_choice c = mm_tune_lookup(ws[0]->n_in, rows_of(n, ws), n_tokens);
        if (c != MM_TUNE_UNKNOWN)
            return c == MM_TUNE_GEMM;
    }
    return n_tokens > tiles->gemv_max_tokens;
}

static int matmul_q8(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                     const float *rs, int n_tokens, void *scratch, size_t scratch_bytes,
                     cudaStream_t s, enum cuda_mm_kernel kernel, bool x_ready = false);

/* A call as mm_tune_measure reruns it with each kernel forced. */
struct tune_call {
    int n;
    float *const *ys;
    const struct cs_weight *const *ws;
    const float *x, *rs;
    int n_tokens;
    void *scratch;
    size_t scratch_bytes;
    cudaStream_t s;
};

static int tune_run(void *arg, int gemm)
{
    const struct tune_call *c = (const struct tune_call *)arg;
    return matmul_q8(c->n, c->ys, c->ws, c->x, c->rs, c->n_tokens, c->scratch, c->scratch_bytes,
                     c->s, gemm ? CUDA_MM_GEMM : CUDA_MM_GEMV);
}

/* The Q8_0 weights ws[0..n) (validated: same n_in). Quantizes x into scratch
 * first unless every launch quantizes it in shared memory, or x_ready: the
 * GEMM (only) on the Q8_1 a prologue already left in scratch (x unused). */
static int matmul_q8(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                     const float *rs, int n_tokens, void *scratch, size_t scratch_bytes,
                     cudaStream_t s, enum cuda_mm_kernel kernel, bool x_ready)
{
    const struct mm_arch_tiles *tiles = mm_arch_tiles_for(device_cc());
    int n_in = (int)ws[0]->n_in, nb = n_in / 32;
    if (kernel == CUDA_MM_AUTO && !x_ready && mm_tune_in_range(n_tokens) && scratch &&
        scratch_bytes >= cuda_matmul_scratch_bytes(n_in, n_tokens) &&
        mm_tune_lookup(n_in, rows_of(n, ws), n_tokens) == MM_TUNE_UNKNOWN && !capturing(s)) {
        /* first call of this shape and token count: time both kernels on it */
        struct tune_call tc = {n, ys, ws, x, rs, n_tokens, scratch, scratch_bytes, s};
        enum mm_tune_choice choice;
        return mm_tune_measure(n_in, rows_of(n, ws), n_tokens, tune_run, &tc, s, &choice);
    }
    bool gemm = kernel == CUDA_MM_GEMM ||
                (kernel == CUDA_MM_AUTO && auto_uses_gemm(tiles, n, ws, n_tokens));
    int all_groups = 0;
    for (int i = 0; i < n; i++)
        all_groups += (int)((ws[i]->n_out + 31) / 32);
    /* the segmented GEMV (gemv_seg.cu) for one token, up to its ticket
     * limit (8,192 row groups: the LM head of a 248K vocabulary fits); the
     * plain one for 2-8 tokens, where it measured faster (H200: 27B
     * ffn_down at 4 tokens 46 vs 48 us, gate_up 65 vs 68 us, before the
     * segmented one kept its blocks resident) */
    bool seg = !gemm && (kernel == CUDA_MM_GEMV_SEG ||
                         (kernel == CUDA_MM_AUTO && all_groups <= gemv_seg_max_units() &&
                          nb > CS_DOT_SEG_BLOCKS));
    if (x_ready && !gemm)
        return CS_EINVAL;
    bool need_scratch = gemm;
    for (int t0 = 0, nt = 0; !gemm && t0 < n_tokens; t0 += nt) {
        nt = gemv_chunk(tiles, n_tokens - t0, kernel);
        int warps;
        if (!gemv_plan(tiles, nt, n_in, &warps) || (kernel == CUDA_MM_GEMV_SEG && nt > 1))
            need_scratch = true;
    }
    const int8_t *xq = (const int8_t *)scratch;
    const float *xd = (const float *)((char *)scratch + cuda_q8_1_scales_offset(n_in, n_tokens));
    if (need_scratch) {
        size_t need = cuda_matmul_scratch_bytes(n_in, n_tokens);
        if (!scratch || scratch_bytes < need) {
            LOG_ERROR("matmul", "scratch too small: %zu < %zu bytes", scratch_bytes, need);
            return CS_EINVAL;
        }
        int rc = x_ready ? CS_OK : cuda_quantize_q8_1(scratch, x, n_in, n_tokens, s);
        if (rc != CS_OK)
            return rc;
    }
    struct mm_parts ps;
    ps.n = n;
    ps.rs = rs;
    int units = 0;
    for (int i = 0; i < n; i++) {
        int groups = (int)((ws[i]->n_out + 31) / 32);
        ps.p[i].q = (const int4 *)ws[i]->data;
        ps.p[i].d = (const __half *)ws[i]->aux;
        ps.p[i].y = ys[i];
        ps.p[i].n_out = (int)ws[i]->n_out;
        ps.p[i].unit_begin = units;
        units += gemm ? (groups + MM_GEMM_BM / 32 - 1) / (MM_GEMM_BM / 32) : groups;
    }
    if (gemm) {
        CS_CUDA_CHECK(gemm_q8_launch(ps, units, xq, xd, n_in, nb, n_tokens, tiles->gemm_kb, s));
        return CS_OK;
    }
    for (int t0 = 0, nt = 0; t0 < n_tokens; t0 += nt) {
        nt = gemv_chunk(tiles, n_tokens - t0, kernel);
        int warps;
        bool xs = gemv_plan(tiles, nt, n_in, &warps);
        struct mm_parts pt = ps;
        for (int i = 0; i < n; i++)
            pt.p[i].y = ys[i] + (size_t)t0 * ws[i]->n_out;
        pt.rs = rs ? rs + t0 : NULL;
        const float *xt = x + (size_t)t0 * n_in;
        if (seg && (nt == 1 || kernel == CUDA_MM_GEMV_SEG)) {
            cudaError_t e = gemv_seg_launch(nt, pt, units, xt, xq + (size_t)t0 * n_in,
                                            xd + (size_t)t0 * nb, n_in, nb, nt == 1 && xs, s);
            if (e == cudaSuccess)
                continue;
            if (kernel == CUDA_MM_GEMV_SEG || e != cudaErrorNotReady) {
                LOG_ERROR("matmul", "gemv_seg launch failed: %s", cudaGetErrorString(e));
                return CS_ECUDA;
            }
            /* no workspace now (capturing): the plain GEMV, same result */
        }
        cudaError_t e = xs ? gemv_launch<true>(nt, pt, units, xt, NULL, NULL, n_in, nb, warps, s)
                           : gemv_launch<false>(nt, pt, units, xt, xq + (size_t)t0 * n_in,
                                                xd + (size_t)t0 * nb, n_in, nb, warps, s);
        if (e != cudaSuccess) {
            LOG_ERROR("matmul", "gemv_q8 launch failed: %s", cudaGetErrorString(e));
            return CS_ECUDA;
        }
    }
    return CS_OK;
}

static int matmul_f(float *y, const struct cs_weight *w, const float *x, const float *rs,
                    int n_tokens, cudaStream_t s)
{
    unsigned grid = cs_div_up((size_t)w->n_out, 8);
    if (w->type == CS_DTYPE_F16)
        CS_CUDA_CHECK(cuda_launch(gemv_f_kernel<__half>, grid, 256, 0, s, y,
                                  (const __half *)w->data, x, rs, (int)w->n_in, (int)w->n_out,
                                  n_tokens));
    else
        CS_CUDA_CHECK(cuda_launch(gemv_f_kernel<float>, grid, 256, 0, s, y, (const float *)w->data,
                                  x, rs, (int)w->n_in, (int)w->n_out, n_tokens));
    return CS_OK;
}

static int matmul_check(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                        int n_tokens, bool *any_q8)
{
    if (n <= 0 || n > CUDA_MATMUL_MAX_WEIGHTS || !ys || !ws || !x || n_tokens <= 0) {
        LOG_ERROR("matmul", "bad call n=%d n_tokens=%d", n, n_tokens);
        return CS_EINVAL;
    }
    *any_q8 = false;
    for (int i = 0; i < n; i++) {
        if (!ws[i] || !ws[i]->data || !ys[i] || ws[i]->n_in != ws[0]->n_in) {
            LOG_ERROR("matmul", "bad weight %d of %d (missing, or n_in differs)", i, n);
            return CS_EINVAL;
        }
        if (ws[i]->type == CS_DTYPE_Q8_0)
            *any_q8 = true;
        else if (ws[i]->type != CS_DTYPE_F16 && ws[i]->type != CS_DTYPE_F32)
            return CS_EUNSUPPORTED;
    }
    return CS_OK;
}

/* cuda_matmul_with, each output times rs[t] (NULL: none). */
static int matmul_with_rs(int n, float *const *ys, const struct cs_weight *const *ws,
                          const float *x, const float *rs, int n_tokens, void *scratch,
                          size_t scratch_bytes, struct CUstream_st *stream,
                          enum cuda_mm_kernel kernel)
{
    bool any_q8;
    int rc = matmul_check(n, ys, ws, x, n_tokens, &any_q8);
    if (rc != CS_OK)
        return rc;
    /* fuse the Q8_0 weights; F16/F32 ones run alone */
    float *qys[CUDA_MATMUL_MAX_WEIGHTS];
    const struct cs_weight *qws[CUDA_MATMUL_MAX_WEIGHTS];
    int nq = 0;
    for (int i = 0; i < n; i++) {
        if (ws[i]->type == CS_DTYPE_Q8_0) {
            qys[nq] = ys[i];
            qws[nq++] = ws[i];
        } else if ((rc = matmul_f(ys[i], ws[i], x, rs, n_tokens, stream)) != CS_OK) {
            return rc;
        }
    }
    if (nq > 0)
        rc = matmul_q8(nq, qys, qws, x, rs, n_tokens, scratch, scratch_bytes, stream, kernel);
    return rc;
}

extern "C" int cuda_matmul_with(int n, float *const *ys, const struct cs_weight *const *ws,
                                const float *x, int n_tokens, void *scratch, size_t scratch_bytes,
                                struct CUstream_st *stream, enum cuda_mm_kernel kernel)
{
    return matmul_with_rs(n, ys, ws, x, NULL, n_tokens, scratch, scratch_bytes, stream, kernel);
}

/* Do [a, a + an) and [b, b + bn) floats overlap? */
static bool ranges_overlap(const float *a, size_t an, const float *b, size_t bn)
{
    return a < b + bn && b < a + an;
}

extern "C" int cuda_matmul_pro_n(int n, float *const *ys, const struct cs_weight *const *ws,
                                 const float *x, const struct cuda_mm_pro *pro,
                                 struct CUstream_st *stream)
{
    bool any_q8;
    if (!pro || matmul_check(n, ys, ws, x, 1, &any_q8) != CS_OK ||
        (pro->kind != CUDA_MM_PRO_NONE && !pro->aux))
        return CS_EINVAL;
    const struct mm_arch_tiles *tiles = mm_arch_tiles_for(device_cc());
    int n_in = (int)ws[0]->n_in, nb = n_in / 32, groups = 0, warps;
    for (int i = 0; i < n; i++) {
        if (ws[i]->type != CS_DTYPE_Q8_0)
            return CS_EUNSUPPORTED;
        groups += (int)((ws[i]->n_out + 31) / 32);
    }
    /* exactly the cases where matmul_q8 would run the segmented GEMV with x
     * quantized in shared memory for this one token */
    if (groups > gemv_seg_max_units() || nb <= CS_DOT_SEG_BLOCKS || tiles->gemv_max_tokens < 1 ||
        !gemv_plan(tiles, 1, n_in, &warps))
        return CS_EUNSUPPORTED;
    /* the prologue's shapes: a gated head is one warp's 4 blocks */
    if (pro->kind == CUDA_MM_PRO_GATED_RMSNORM &&
        (pro->head_dim != GATED_NORM_HEAD || n_in % GATED_NORM_HEAD != 0 || !pro->norm_w))
        return CS_EUNSUPPORTED;
    if (pro->kind == CUDA_MM_PRO_SIGMOID_GATE && (pro->head_dim <= 0 || n_in % pro->head_dim != 0))
        return CS_EUNSUPPORTED;
    /* the row in registers as k_add_rmsnorm holds it; the sum is written
     * while other blocks still read x and aux */
    if (pro->kind == CUDA_MM_PRO_ADD_RMSNORM &&
        (n_in > NORM_THREADS * NORM_NPT || !pro->norm_w || !pro->x_out ||
         ranges_overlap(pro->x_out, n_in, x, n_in) ||
         ranges_overlap(pro->x_out, n_in, pro->aux, n_in)))
        return CS_EUNSUPPORTED;
    /* the conv epilogue: part 0's rows are the conv channels */
    if (pro->conv_w && (!pro->conv_state || !pro->conv_slot || pro->conv_n_slots <= 0 ||
                        ws[0]->n_out != pro->conv_dim))
        return CS_EUNSUPPORTED;
    struct mm_parts ps;
    ps.n = n;
    ps.rs = NULL;   /* ADD_RMSNORM: the kernel forms the row's scale itself */
    int units = 0;
    for (int i = 0; i < n; i++) {
        ps.p[i].q = (const int4 *)ws[i]->data;
        ps.p[i].d = (const __half *)ws[i]->aux;
        ps.p[i].y = ys[i];
        ps.p[i].n_out = (int)ws[i]->n_out;
        ps.p[i].unit_begin = units;
        units += (int)((ws[i]->n_out + 31) / 32);
    }
    cudaError_t e = gemv_seg_launch(1, ps, units, x, NULL, NULL, n_in, nb, true, stream, pro);
    if (e == cudaErrorNotReady)
        return CS_EUNSUPPORTED;   /* no workspace now (capturing): the caller's two launches */
    if (e != cudaSuccess) {
        LOG_ERROR("matmul", "gemv_seg (prologue %d) launch failed: %s", pro->kind,
                  cudaGetErrorString(e));
        return CS_ECUDA;
    }
    return CS_OK;
}

extern "C" int cuda_matmul_pro_tokens(int n, float *const *ys, const struct cs_weight *const *ws,
                                      const float *x, int n_tokens, const struct cuda_mm_pro *pro,
                                      void *scratch, size_t scratch_bytes,
                                      struct CUstream_st *stream)
{
    bool any_q8;
    if (!pro || matmul_check(n, ys, ws, x, n_tokens, &any_q8) != CS_OK || !pro->aux)
        return CS_EINVAL;
    if (pro->conv_w)
        return CS_EUNSUPPORTED;   /* the conv epilogue is the one-token GEMV's */
    for (int i = 0; i < n; i++)
        if (ws[i]->type != CS_DTYPE_Q8_0)
            return CS_EUNSUPPORTED;
    int64_t n_in = ws[0]->n_in;
    /* the GEMV's calls run the op then cuda_matmul; so does a shape not yet
     * timed, so that its cuda_matmul times it (matmul_tune.h) */
    if (mm_tune_in_range(n_tokens) && !capturing((cudaStream_t)stream) &&
        mm_tune_lookup(n_in, rows_of(n, ws), n_tokens) == MM_TUNE_UNKNOWN)
        return CS_EUNSUPPORTED;
    if (!auto_uses_gemm(mm_arch_tiles_for(device_cc()), n, ws, n_tokens))
        return CS_EUNSUPPORTED;
    if (!scratch || scratch_bytes < cuda_matmul_scratch_bytes(n_in, n_tokens))
        return CS_EINVAL;
    if (pro->kind == CUDA_MM_PRO_ADD_RMSNORM &&
        (!pro->x_out || ranges_overlap(pro->x_out, (size_t)n_in * n_tokens, x,
                                       (size_t)n_in * n_tokens) ||
         ranges_overlap(pro->x_out, (size_t)n_in * n_tokens, pro->aux, (size_t)n_in * n_tokens)))
        return CS_EUNSUPPORTED;
    int rc = cuda_quantize_pro(scratch, x, n_in, n_tokens, pro, stream);
    if (rc != CS_OK)
        return rc;   /* CS_EUNSUPPORTED: nothing launched */
    const float *rs = pro->kind != CUDA_MM_PRO_ADD_RMSNORM ? NULL
        : (const float *)((const char *)scratch + cuda_row_scale_offset(n_in, n_tokens));
    return matmul_q8(n, ys, ws, x, rs, n_tokens, scratch, scratch_bytes, (cudaStream_t)stream,
                     CUDA_MM_GEMM, true);
}

extern "C" int cuda_matmul_pro_1(float *y, const struct cs_weight *w, const float *x,
                                 const struct cuda_mm_pro *pro, struct CUstream_st *stream)
{
    float *ys[1] = {y};
    const struct cs_weight *ws[1] = {w};
    return cuda_matmul_pro_n(1, ys, ws, x, pro, stream);
}

extern "C" int cuda_matmul_swiglu_1(float *y, const struct cs_weight *w, const float *g,
                                    const float *u, struct CUstream_st *stream)
{
    struct cuda_mm_pro pro = {CUDA_MM_PRO_SWIGLU, u, NULL, 0, 0, 0.0f};
    return cuda_matmul_pro_1(y, w, g, &pro, stream);
}

extern "C" int cuda_matmul(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                           int n_tokens, void *scratch, size_t scratch_bytes, struct CUstream_st *stream)
{
    return cuda_matmul_with(n, ys, ws, x, n_tokens, scratch, scratch_bytes, stream, CUDA_MM_AUTO);
}

extern "C" int cuda_matmul_scaled(int n, float *const *ys, const struct cs_weight *const *ws,
                                  const float *x, const float *scale, int n_tokens, void *scratch,
                                  size_t scratch_bytes, struct CUstream_st *stream)
{
    return matmul_with_rs(n, ys, ws, x, scale, n_tokens, scratch, scratch_bytes, stream,
                          CUDA_MM_AUTO);
}
