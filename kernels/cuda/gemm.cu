/* gemm.cu - the prefill GEMM for Q8_0 weights x Q8_1 activations (many
 * tokens; matmul.cu's matmul_q8 chooses between it and the GEMVs).
 *
 * gemm_q8_kernel<KB, KP>: a block of 256 threads computes BM = 128
 * rows x BN = 64 tokens; warp w owns tokens 8w..8w+7, lane l rows l, l+32,
 * l+64, l+96 (a 4 x 8 register tile). K goes by stages of KB 32-value
 * blocks through double-buffered shared memory filled by register prefetch
 * (plain loads and stores, so the kernel builds for sm_70; on sm_80+ the
 * quants go by cp.async instead, GEMM_ASYNC below, same layout):
 * while stage s is computed from one buffer, stage s + 1 is loaded into
 * registers and stored to the other in pieces of KP blocks (piece p is
 * loaded before its blocks are computed and stored after them, so one
 * piece's staging registers are live at a time). One barrier per stage. The
 * stages whose successor lies wholly below nb run a loop without any bound
 * check; the last one or two run a copy with clamped loads (gemm_stage_run).
 * Each output accumulates its block terms in block order and folds once per
 * numerics.h segment (gemm_fold), so every output follows matmul.h
 * "Numerics" exactly, bitwise equal to the GEMV for any n_tokens
 * (tests/gpu/test_matmul).
 *
 * A thread forms one output's whole block sum at a time: the 4 rows' A
 * fragments of both halves (32 registers), then per token its B block and
 * each row's 8-DP4A isum, scaled and added at once (4 live isums: forming
 * the 32 isums of a half together, as the kernel before gemm.cu did, spilled
 * at 128 registers and issued 1.00 other instructions per DP4A).
 *
 * Configurations KB = 2, 4, 8 are compiled; gemm_q8_launch runs the one
 * arch_tiles.h's row asks for, or the next smaller whose shared memory fits
 * MM_GEMM_MIN_BLOCKS blocks per SM (dynamic shared memory, its limit raised
 * once per device above 48 KB). Choices and measurements: arch_tiles.h. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "arch_tiles.h"
#include "cp_async.cuh"
#include "launch.cuh"
#include "matmul_int.cuh"
#include "../numerics.h"

#define BM MM_GEMM_BM
#define BN MM_GEMM_BN

static_assert(BM == 128 && BN == 64 && MM_GEMM_THREADS == 256, "the thread mapping bakes these in");
static_assert(CS_DOT_SEG_BLOCKS % 8 == 0 && (MM_GEMM_KP == 1 || MM_GEMM_KP == 2 ||
                                            MM_GEMM_KP == 4 || MM_GEMM_KP == 8),
              "a segment is whole stages (KB = 2, 4, 8), a stage whole pieces");

/* Where the loaded code is sm_80+, a stage's quants go global -> shared by
 * cp.async (cp_async.cuh): the next stage's copies are issued as a stage
 * starts and waited for before its barrier, so no staging registers, no
 * stores and no wait for the loads sit on the issue path between the DP4As.
 * The scales keep the register path (converted and transposed on the way).
 * The shared layout, and so the arithmetic, are the register path's. */
#ifndef GEMM_ASYNC
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GEMM_ASYNC 1
#else
#define GEMM_ASYNC 0
#endif
#endif

/* One stage of shared memory; the kernel's dynamic shared memory is two. */
template <int KB>
struct gemm_stage {
    int4 a[KB][4][2][32];   /* [block][row group][half][lane]: thread t stores int4 t */
    int4 b[KB / 2][BN][4];  /* [block pair][token][block of the pair, half] */
    float4 ad[KB][32];      /* [block][lane]: the scales of rows lane + 32 i, i = 0..3 */
    float bd[KB][BN];       /* [block][token] */
};

/* Blocks of one scale slot: 256 threads load 4 blocks' scales at once (4 row
 * groups x 4 blocks x 16 lane pairs, 64 tokens x 4 blocks), 2 when KB = 2
 * (threads 128.. then load copies and store none). */
#define GEMM_SB(KB) ((KB) < 4 ? (KB) : 4)

/* What a thread stages: per piece of KP blocks its A int4s (4 row groups x
 * KP blocks x 64 int4: KP each) and B int4s (64 tokens x KP blocks x 2
 * halves: KP / 2 each, threads 0..127 one each when KP = 1); per stage its
 * scales, one A pair and one B scale per slot of GEMM_SB blocks. */
template <int KP>
struct gemm_piece {
    int4 a[KP];
    int4 b[(KP + 1) / 2];
};
template <int KB>
struct gemm_scales {
    __half2 ad[KB / GEMM_SB(KB)];
    float bd[KB / GEMM_SB(KB)];
};

/* The thread's sources at block bs (row group and token clamped into the
 * matrices, so no load leaves them; rows and tokens past the end compute
 * values nobody stores). A load adds its block's offset from bs: unchecked
 * while the whole stage lies below nb, else clamped to block nb - 1 (blocks
 * past nb are never computed). */
struct gemm_src {
    const int4 *a;      /* quants: row group (tid / 64), int4 tid % 64 of each block */
    const int4 *b;      /* activations: gemm_b_slot's token and int4 */
    const __half2 *ad;  /* weight scales: gemm_sc_slot's group, block, lane pair */
    const float *bd;    /* activation scales: gemm_sc_slot's token, block */
    int bs;             /* the block the pointers are at (the stage being loaded) */
    int nb;
};

/* Thread tid's B int4 of a piece of KP >= 2 blocks: token tid / 4, int4 k =
 * tid % 4 (block 2j + k / 2, half k % 2) of block pair j; KP = 1: token
 * tid / 2, half tid % 2 (threads 128.. load copies and store none). */
static __device__ __forceinline__ void gemm_b_slot(int kp, int tid, int *tok, int *k)
{
    *tok = kp == 1 ? (tid >> 1) & 63 : tid >> 2;
    *k = kp == 1 ? tid & 1 : tid & 3;
}

/* Thread tid's scales of a slot of sb blocks: e = tid % (64 sb); A: group
 * e / (16 sb), block (e / 16) % sb, lanes 2 (e % 16) and + 1; B: token
 * e / sb, block e % sb. */
static __device__ __forceinline__ void gemm_sc_slot(int sb, int tid, int *g, int *kg, int *m,
                                                    int *tok, int *kt)
{
    int e = tid & (64 * sb - 1);
    *g = e / (16 * sb);
    *kg = (e >> 4) % sb;
    *m = e & 15;
    *tok = e / sb;
    *kt = e % sb;
}

template <int KB, int KP>
static __device__ __forceinline__ struct gemm_src gemm_src_init(const int4 *q, const __half *d,
                                                                const int8_t *xq, const float *xd,
                                                                int g0, int groups, int t0,
                                                                int n_tokens, int n_in, int nb)
{
    int tid = threadIdx.x, tok, k, g, kg, m, kt;
    struct gemm_src c;
    c.a = q + (size_t)min(g0 + (tid >> 6), groups - 1) * nb * 64 + (tid & 63);
    gemm_b_slot(GEMM_ASYNC ? 2 : KP, tid, &tok, &k);   /* the async copies take KP >= 2's */
    c.b = (const int4 *)(xq + (size_t)min(t0 + tok, n_tokens - 1) * n_in) + k;
    gemm_sc_slot(GEMM_SB(KB), tid, &g, &kg, &m, &tok, &kt);
    c.ad = (const __half2 *)(d + (size_t)min(g0 + g, groups - 1) * nb * 32) + kg * 16 + m;
    c.bd = xd + (size_t)min(t0 + tok, n_tokens - 1) * nb + kt;
    c.bs = 0;
    c.nb = nb;
    return c;
}

/* Global -> registers: the piece of KP blocks from block c.bs + kb0
 * (CLAMP: some of them may be >= nb). */
template <int KP, bool CLAMP>
static __device__ __forceinline__ void gemm_load(struct gemm_piece<KP> &r, const struct gemm_src &c,
                                                 int kb0)
{
    int tid = threadIdx.x, tok, k;
    gemm_b_slot(KP, tid, &tok, &k);
#pragma unroll
    for (int j = 0; j < KP; j++) {
        int b = CLAMP ? min(c.bs + kb0 + j, c.nb - 1) - c.bs : kb0 + j;
        r.a[j] = __ldg(c.a + (ptrdiff_t)b * 64);
    }
#pragma unroll
    for (int j = 0; j < (KP + 1) / 2; j++) {   /* KP = 1: threads 128.. load a copy, store none */
        int b = kb0 + 2 * j;   /* this int4's block, less k / 2 (in c.b) */
        if (CLAMP)
            b = min(c.bs + b + k / 2, c.nb - 1) - k / 2 - c.bs;
        r.b[j] = __ldg(c.b + (ptrdiff_t)b * 2);
    }
}

/* The scales of the stage at c.bs. */
template <int KB, bool CLAMP>
static __device__ __forceinline__ void gemm_load_scales(struct gemm_scales<KB> &r,
                                                        const struct gemm_src &c)
{
    int tid = threadIdx.x, g, kg, m, tok, kt;
    gemm_sc_slot(GEMM_SB(KB), tid, &g, &kg, &m, &tok, &kt);
#pragma unroll
    for (int j = 0; j < KB / GEMM_SB(KB); j++) {
        int ba = GEMM_SB(KB) * j, bb = ba;
        if (CLAMP) {
            ba = min(c.bs + ba + kg, c.nb - 1) - kg - c.bs;
            bb = min(c.bs + bb + kt, c.nb - 1) - kt - c.bs;
        }
        r.ad[j] = __ldg(c.ad + (ptrdiff_t)ba * 16);
        r.bd[j] = __ldg(c.bd + bb);
    }
}

/* Move c to the next stage. */
template <int KB>
static __device__ __forceinline__ void gemm_src_next(struct gemm_src &c)
{
    c.a += KB * 64;
    c.b += KB * 2;
    c.ad += KB * 16;
    c.bd += KB;
    c.bs += KB;
}

/* Registers -> the piece's blocks kb0..kb0 + KP - 1 of stage st. */
template <int KB, int KP>
static __device__ __forceinline__ void gemm_store(struct gemm_stage<KB> &st, int kb0,
                                                  const struct gemm_piece<KP> &r)
{
    int tid = threadIdx.x, tok, k;
#pragma unroll
    for (int j = 0; j < KP; j++)
        (&st.a[kb0 + j][0][0][0])[tid] = r.a[j];
    gemm_b_slot(KP, tid, &tok, &k);
#pragma unroll
    for (int j = 0; j < (KP + 1) / 2; j++) {
        int kb = kb0 + 2 * j;
        if (KP > 1)
            (&st.b[kb / 2][0][0])[tid] = r.b[j];   /* token tid / 4, int4 tid % 4 */
        else if (tid < 128)
            st.b[kb / 2][tok][(kb & 1) * 2 + k] = r.b[j];
    }
}

template <int KB>
static __device__ __forceinline__ void gemm_store_scales(struct gemm_stage<KB> &st,
                                                         const struct gemm_scales<KB> &r)
{
    int tid = threadIdx.x, g, kg, m, tok, kt;
    gemm_sc_slot(GEMM_SB(KB), tid, &g, &kg, &m, &tok, &kt);
    if (KB == 2 && tid >= 128)
        return;   /* threads 128.. hold copies */
#pragma unroll
    for (int j = 0; j < KB / GEMM_SB(KB); j++) {
        int kb = GEMM_SB(KB) * j;
        float2 v = __half22float2(r.ad[j]);
        ((float *)&st.ad[kb + kg][2 * m])[g] = v.x;
        ((float *)&st.ad[kb + kg][2 * m + 1])[g] = v.y;
        st.bd[kb + kt][tok] = r.bd[j];
    }
}

/* The quants of the stage at c.bs into st by cp.async (CLAMP: blocks >= nb
 * read block nb - 1 again): thread tid's A int4 of every block, and its B
 * int4 of every block pair (gemm_b_slot with KP >= 2: token tid / 4, int4
 * tid % 4). */
template <int KB, bool CLAMP>
static __device__ __forceinline__ void gemm_copy_async(struct gemm_stage<KB> &st,
                                                       const struct gemm_src &c)
{
    int tid = threadIdx.x, tok, k;
    gemm_b_slot(2, tid, &tok, &k);
    uint32_t a_dst = (uint32_t)__cvta_generic_to_shared(&st.a[0][0][0][0]) + 16 * tid;
    uint32_t b_dst = (uint32_t)__cvta_generic_to_shared(&st.b[0][0][0]) + 16 * tid;
#pragma unroll
    for (int j = 0; j < KB; j++) {
        int b = CLAMP ? min(c.bs + j, c.nb - 1) - c.bs : j;
        cp_async16(a_dst + j * (uint32_t)sizeof(st.a[0]), c.a + (ptrdiff_t)b * 64, 16);
    }
#pragma unroll
    for (int j = 0; j < KB / 2; j++) {
        int b = 2 * j;   /* the pair's first block, less k / 2 (in c.b) */
        if (CLAMP)
            b = min(c.bs + b + k / 2, c.nb - 1) - k / 2 - c.bs;
        cp_async16(b_dst + j * (uint32_t)sizeof(st.b[0]), c.b + (ptrdiff_t)b * 2, 16);
    }
}

/* How a block's isum becomes fp32; both are exact (|isum| < 2^22), so the
 * bits are the same. 0: the biased DP4A chain and one FSUB (matmul_int.cuh);
 * 1: I2FP (sm_86+, the ALU pipe), which leaves two fp32 operations per
 * block term on the FMA pipes that DP4A shares from sm_80 on. On an H100 1
 * gave the 9B prefill matrices 70.3% of the DP4A peak against 69.3% (27B
 * 70.7 against 69.6; docs/PERF.md, sixteenth session). sm_70 keeps 0: its
 * FP32 pipe is separate from the integer pipe DP4A uses, and I2F there is
 * quarter rate. */
#ifndef GEMM_I2F
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GEMM_I2F 1
#else
#define GEMM_I2F 0
#endif
#endif

/* acc[i][t] = fma(d_w * d_x, isum, acc[i][t]) for block kb of stage st,
 * output by output (numerics.h). */
template <int KB>
static __device__ __forceinline__ void gemm_block(float (&acc)[4][8],
                                                  const struct gemm_stage<KB> &st, int kb)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4 da4 = st.ad[kb][lane];
    float da[4] = {da4.x, da4.y, da4.z, da4.w};
    int4 a0[4], a1[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        a0[i] = st.a[kb][i][0][lane];
        a1[i] = st.a[kb][i][1][lane];
    }
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const int4 *bt = st.b[kb / 2][warp * 8 + t] + (kb & 1) * 2;
        int4 b0 = bt[0], b1 = bt[1];
        float db = st.bd[kb][warp * 8 + t];
#pragma unroll
        for (int i = 0; i < 4; i++) {
#if GEMM_I2F
            float fsum = __int2float_rn(dot32(a0[i], a1[i], b0, b1, 0));
#else
            float fsum = biased_dot_to_float(dot32(a0[i], a1[i], b0, b1, MM_DOT_BIAS));
#endif
#ifdef GEMM_EXPERIMENT_NO_ACT_SCALE
            /* A speed experiment only (wrong results; never in a product build):
             * the GEMM without the per-block activation scale, i.e. the rate one
             * activation scale per segment would allow (docs/PERF.md,
             * eighteenth session). */
            (void)db;
            acc[i][t] = __fmaf_rn(da[i], fsum, acc[i][t]);
#elif defined(GEMM_EXPERIMENT_POW2_ACT_SCALE)
            /* A speed experiment only (wrong results unless every d_x is a power
             * of two): d_w * d_x as an integer add of d_x's exponent to d_w's
             * bits (ALU pipe) instead of an FMUL (FMA pipe), the arithmetic of
             * power-of-two activation scales (docs/PERF.md, twenty-third
             * session). */
            acc[i][t] = __fmaf_rn(__int_as_float(__float_as_int(da[i]) +
                                                 (__float_as_int(db) - 0x3f800000)),
                                  fsum, acc[i][t]);
#else
            acc[i][t] = __fmaf_rn(__fmul_rn(da[i], db), fsum, acc[i][t]);
#endif
        }
    }
}

/* End of a segment (numerics.h): y = (first ? 0 : y) + acc for this thread's
 * outputs, acc = 0. The running total lives in y (global memory) to keep
 * registers for the tile. After the first segment the add is a global
 * reduction (RED.ADD.F32, fire and forget): a load-add-store stalled the
 * block for a memory round trip per segment (10% of GEMM time on an H200).
 * Only this thread touches these elements and same-address operations of
 * one thread stay in program order, so the sum order is the segment order;
 * RED rounds to nearest and flushes subnormals, as every fp32 add of these
 * kernels does (--use_fast_math implies -ftz=true). A row scale (ps.rs:
 * the norm applied after the dot) multiplies each segment's acc first
 * (numerics.h), so the reductions stay fire and forget. Every index is
 * recomputed from the block and thread ids and the kernel parameters, so
 * nothing extra stays live across the K loop. */
static __device__ __forceinline__ void gemm_fold(float (&acc)[4][8], const struct mm_parts &ps,
                                                 int n_tokens, bool first)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int pi = mm_part_find(ps, blockIdx.x);
    int tile = blockIdx.x - ps.p[pi].unit_begin, n_out = ps.p[pi].n_out;
    int tok0 = blockIdx.y * BN + warp * 8;
#pragma unroll
    for (int t = 0; t < 8; t++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int row = tile * BM + lane + 32 * i;
            if (tok0 + t < n_tokens && row < n_out) {
                float *yp = ps.p[pi].y + (size_t)(tok0 + t) * n_out + row;
                float v = mm_out(ps, tok0 + t, acc[i][t]);   /* a row scale: per segment */
                if (first)
                    *yp = __fadd_rn(0.0f, v);
                else
                    atomicAdd(yp, v);
            }
            acc[i][t] = 0.0f;
        }
}

/* One stage: compute stage s from cur while the next one (at c.bs = (s + 1)
 * KB) goes to nxt. TAIL: the next stage is not wholly below nb, so its loads
 * are clamped (the last stage loads block nb - 1 again and stores it to the
 * idle buffer: cheaper than skipping) and this stage's blocks are checked
 * against nb. */
template <int KB, int KP, bool TAIL>
static __device__ __forceinline__ void gemm_stage_run(float (&acc)[4][8], struct gemm_src &c,
                                                      const struct gemm_stage<KB> &cur,
                                                      struct gemm_stage<KB> &nxt, int s)
{
    if (GEMM_ASYNC) {
        gemm_copy_async<KB, TAIL>(nxt, c);
        cp_async_commit();
        struct gemm_scales<KB> sc;
        gemm_load_scales<KB, TAIL>(sc, c);
#pragma unroll
        for (int k = 0; k < KB; k++)
            if (!TAIL || s * KB + k < c.nb)
                gemm_block<KB>(acc, cur, k);
        gemm_store_scales(nxt, sc);
        gemm_src_next<KB>(c);
        cp_async_wait<0>();   /* this thread's copies landed; the barrier shows them to all */
        __syncthreads();
        return;
    }
#pragma unroll
    for (int p = 0; p < KB / KP; p++) {
        struct gemm_piece<KP> r;
        struct gemm_scales<KB> sc;   /* with the first piece: live during its blocks only */
        gemm_load<KP, TAIL>(r, c, p * KP);
        if (p == 0)
            gemm_load_scales<KB, TAIL>(sc, c);
#pragma unroll
        for (int k = 0; k < KP; k++)
            if (!TAIL || s * KB + p * KP + k < c.nb)
                gemm_block<KB>(acc, cur, p * KP + k);
        gemm_store(nxt, p * KP, r);
        if (p == 0)
            gemm_store_scales(nxt, sc);
    }
    gemm_src_next<KB>(c);
    __syncthreads();
}

/* Dynamic shared memory: struct gemm_stage<KB>[2]. */
template <int KB, int KP>
static __global__ void __launch_bounds__(MM_GEMM_THREADS, MM_GEMM_MIN_BLOCKS)
    gemm_q8_kernel(struct mm_parts ps, const int8_t *xq, const float *xd, int n_in, int nb,
                   int n_tokens)
{
    static_assert(!GEMM_ASYNC || KP >= 2, "the async copies and the first stage share KP >= 2's B slots");
    extern __shared__ int4 gemm_smem_raw[];
    struct gemm_stage<KB> *st = (struct gemm_stage<KB> *)gemm_smem_raw;
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int pi = mm_part_find(ps, blockIdx.x);
    struct gemm_src c = gemm_src_init<KB, KP>(
        ps.p[pi].q, ps.p[pi].d, xq, xd, (int)(blockIdx.x - ps.p[pi].unit_begin) * (BM / 32),
        (ps.p[pi].n_out + 31) >> 5, (int)blockIdx.y * BN, n_tokens, n_in, nb);
    float acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int t = 0; t < 8; t++)
            acc[i][t] = 0.0f;

    {
        struct gemm_scales<KB> sc;
        gemm_load_scales<KB, true>(sc, c);
#pragma unroll
        for (int p = 0; p < KB / KP; p++) {
            struct gemm_piece<KP> r;
            gemm_load<KP, true>(r, c, p * KP);
            gemm_store(st[0], p * KP, r);
        }
        gemm_store_scales(st[0], sc);
        gemm_src_next<KB>(c);
    }
    __syncthreads();
    int n_stages = (nb + KB - 1) / KB;
    int n_whole = nb / KB - 1;   /* stages s whose next stage lies wholly below nb */
    /* stages by segment (CS_DOT_SEG_BLOCKS is a multiple of KB), the fold
     * outside the inner loops so their bodies stay the plain K loop */
#pragma unroll 1
    for (int s0 = 0; s0 < n_stages; s0 += CS_DOT_SEG_BLOCKS / KB) {
        int s1 = s0 + CS_DOT_SEG_BLOCKS / KB < n_stages ? s0 + CS_DOT_SEG_BLOCKS / KB : n_stages;
        int s = s0;
#pragma unroll 1
        for (; s < s1 && s < n_whole; s++)
            gemm_stage_run<KB, KP, false>(acc, c, st[s & 1], st[(s & 1) ^ 1], s);
#pragma unroll 1
        for (; s < s1; s++)
            gemm_stage_run<KB, KP, true>(acc, c, st[s & 1], st[(s & 1) ^ 1], s);
        gemm_fold(acc, ps, n_tokens, s0 == 0);
    }
}

/* ---- host side ---- */

#define GEMM_KP(KB) (MM_GEMM_KP < (KB) ? MM_GEMM_KP : (KB))
#define GEMM_KERNEL(KB) gemm_q8_kernel<KB, GEMM_KP(KB)>

/* Can the KB configuration run MM_GEMM_MIN_BLOCKS blocks per SM on the
 * current device? Asked once per device and KB; raises the kernel's dynamic
 * shared memory limit when it can (KB = 2 fits the default 48 KB). */
template <int KB>
static bool gemm_fits(void)
{
    static signed char known[64];   /* 0: not asked, 1: yes, -1: no */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return false;
    if (!known[dev]) {
        int optin = 0, per_sm = 0, reserved = 0;
        size_t need = 2 * sizeof(struct gemm_stage<KB>);
        bool ok = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
                      cudaSuccess &&
                  cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                         dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) ==
                      cudaSuccess &&
                  need <= (size_t)optin &&
                  MM_GEMM_MIN_BLOCKS * (need + (size_t)reserved) <= (size_t)per_sm;
        if (ok && need > 48 * 1024 &&
            cudaFuncSetAttribute(GEMM_KERNEL(KB), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)need) != cudaSuccess) {
            ok = false;
            cudaGetLastError();   /* a refusal is an answer, not an error for the next check */
        }
        known[dev] = ok ? 1 : -1;
    }
    return known[dev] > 0;
}

template <int KB>
static cudaError_t gemm_launch_kb(const struct mm_parts &ps, int units, const int8_t *xq,
                                  const float *xd, int n_in, int nb, int n_tokens, cudaStream_t s)
{
    dim3 grid(units, (n_tokens + BN - 1) / BN);
    return cuda_launch(GEMM_KERNEL(KB), grid, MM_GEMM_THREADS, 2 * sizeof(struct gemm_stage<KB>), s,
                       ps, xq, xd, n_in, nb, n_tokens);
}

cudaError_t gemm_q8_launch(const struct mm_parts &ps, int units, const int8_t *xq, const float *xd,
                           int n_in, int nb, int n_tokens, int kb, cudaStream_t s)
{
#ifdef MM_GEMM_KB
    static_assert(MM_GEMM_KB == 2 || MM_GEMM_KB == 4 || MM_GEMM_KB == 8, "MM_GEMM_KB: 2, 4 or 8");
    kb = MM_GEMM_KB;
#endif
    if (kb >= 8 && gemm_fits<8>())
        return gemm_launch_kb<8>(ps, units, xq, xd, n_in, nb, n_tokens, s);
    if (kb >= 4 && gemm_fits<4>())
        return gemm_launch_kb<4>(ps, units, xq, xd, n_in, nb, n_tokens, s);
    return gemm_launch_kb<2>(ps, units, xq, xd, n_in, nb, n_tokens, s);
}
