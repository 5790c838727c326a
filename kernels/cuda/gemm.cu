/* gemm.cu - the prefill GEMM for Q8_0 weights x Q8_1 activations (many
 * tokens; matmul.cu's matmul_q8 chooses between it and the GEMVs).
 *
 * gemm_q8_kernel: 128 rows x 64 tokens per block through double-buffered
 * shared memory (register prefetch: no cp.async, sm_70), each thread 4 rows
 * x 8 tokens, accumulating block by block in order and folding once per
 * numerics.h segment, so every output follows matmul.h "Numerics" exactly,
 * bitwise equal to the GEMV for any n_tokens (tests/gpu/test_matmul).
 * Tile choices: arch_tiles.h. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "arch_tiles.h"
#include "launch.cuh"
#include "matmul_int.cuh"
#include "../numerics.h"

#define BM MM_GEMM_BM
#define BN MM_GEMM_BN
#define KB MM_GEMM_KB

struct gemm_smem {
    int4 a[2][KB][2][BM];     /* [buf][block][half][row] */
    int4 b[2][KB][2][BN];     /* [buf][block][half][token] */
    float ad[2][KB][BM];
    float bd[2][KB][BN];
};

struct gemm_stage_regs {
    int4 a[KB];
    float ad;
    int4 b;
    float bd;
};

/* Global -> registers for the stage starting at block b0 (256 threads). */
static __device__ __forceinline__ void gemm_load(struct gemm_stage_regs &r, const int4 *q,
                                                 const __half *d, int g0, int groups, const int8_t *xq,
                                                 const float *xd, int t0, int n_tokens, int n_in, int nb,
                                                 int b0)
{
    int tid = threadIdx.x;
    int gi = tid >> 6, w = tid & 63;
#pragma unroll
    for (int kb = 0; kb < KB; kb++) {
        int b = b0 + kb;
        r.a[kb] = make_int4(0, 0, 0, 0);
        if (g0 + gi < groups && b < nb)
            r.a[kb] = __ldg(q + ((size_t)(g0 + gi) * nb + b) * 64 + w);
    }
    {   /* scales: KB * BM = 256 (KB = 2) */
        int kb = tid >> 7, row = tid & 127, b = b0 + kb, gg = g0 + (row >> 5);
        r.ad = 0.0f;
        if (gg < groups && b < nb)
            r.ad = __half2float(d[((size_t)gg * nb + b) * 32 + (row & 31)]);
    }
    {   /* activations: KB * BN * 2 halves = 256 int4 */
        int kb = tid >> 7, rem = tid & 127, tok = rem >> 1, h = rem & 1, b = b0 + kb;
        r.b = make_int4(0, 0, 0, 0);
        if (t0 + tok < n_tokens && b < nb)
            r.b = __ldg((const int4 *)(xq + (size_t)(t0 + tok) * n_in + (size_t)b * 32 + h * 16));
        r.bd = 0.0f;
        if (tid < KB * BN) {
            int kb2 = tid / BN, tk = tid % BN;
            if (t0 + tk < n_tokens && b0 + kb2 < nb)
                r.bd = __ldg(xd + (size_t)(t0 + tk) * nb + b0 + kb2);
        }
    }
}

static __device__ __forceinline__ void gemm_store(struct gemm_smem &sm, int buf,
                                                  const struct gemm_stage_regs &r)
{
    int tid = threadIdx.x;
    int gi = tid >> 6, w = tid & 63;
#pragma unroll
    for (int kb = 0; kb < KB; kb++)
        sm.a[buf][kb][w >> 5][gi * 32 + (w & 31)] = r.a[kb];
    sm.ad[buf][tid >> 7][tid & 127] = r.ad;
    int rem = tid & 127;
    sm.b[buf][tid >> 7][rem & 1][rem >> 1] = r.b;
    if (tid < KB * BN)
        sm.bd[buf][tid / BN][tid % BN] = r.bd;
}

/* End of a segment (numerics.h): y = (first ? 0 : y) + acc for this thread's
 * outputs, acc = 0. The running total lives in y (global memory) to keep
 * registers for the tile. After the first segment the add is a global
 * reduction (RED.ADD.F32, fire and forget): a load-add-store stalled the
 * block for a memory round trip per segment (10% of GEMM time on an H200).
 * Only this thread touches these elements and same-address operations of
 * one thread stay in program order, so the sum order is the segment order;
 * RED rounds to nearest and flushes subnormals, as every fp32 add of these
 * kernels does (--use_fast_math implies -ftz=true). Every index is
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
                if (first)
                    *yp = __fadd_rn(0.0f, acc[i][t]);
                else
                    atomicAdd(yp, acc[i][t]);
            }
            acc[i][t] = 0.0f;
        }
}

static __global__ void __launch_bounds__(MM_GEMM_THREADS, MM_GEMM_MIN_BLOCKS) gemm_q8_kernel(struct mm_parts ps,
                                                                        const int8_t *xq,
                                                                        const float *xd, int n_in,
                                                                        int nb, int n_tokens)
{
    __shared__ struct gemm_smem sm;
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int pi = mm_part_find(ps, blockIdx.x);
    int tile = blockIdx.x - ps.p[pi].unit_begin;
    int n_out = ps.p[pi].n_out, groups = (n_out + 31) >> 5, g0 = tile * (BM / 32);
    int t0 = blockIdx.y * BN;
    float acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int t = 0; t < 8; t++)
            acc[i][t] = 0.0f;

    struct gemm_stage_regs r;
    gemm_load(r, ps.p[pi].q, ps.p[pi].d, g0, groups, xq, xd, t0, n_tokens, n_in, nb, 0);
    gemm_store(sm, 0, r);
    __syncthreads();
    int n_stages = (nb + KB - 1) / KB;
    /* stages by segment (CS_DOT_SEG_BLOCKS is a multiple of KB), the fold
     * outside the inner loop so its body stays the plain K loop */
#pragma unroll 1
    for (int s0 = 0; s0 < n_stages; s0 += CS_DOT_SEG_BLOCKS / KB) {
        int s1 = s0 + CS_DOT_SEG_BLOCKS / KB < n_stages ? s0 + CS_DOT_SEG_BLOCKS / KB : n_stages;
        for (int s = s0; s < s1; s++) {
            int buf = s & 1;
            if (s + 1 < n_stages)
                gemm_load(r, ps.p[pi].q, ps.p[pi].d, g0, groups, xq, xd, t0, n_tokens, n_in, nb,
                          (s + 1) * KB);
#pragma unroll
            for (int kb = 0; kb < KB; kb++) {
                if (s * KB + kb >= nb)
                    break;
                int isum[4][8];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int t = 0; t < 8; t++)
                        isum[i][t] = MM_DOT_BIAS;   /* see biased_dot_to_float */
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int4 a[4];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        a[i] = sm.a[buf][kb][h][lane + 32 * i];
#pragma unroll
                    for (int t = 0; t < 8; t++) {
                        int4 bv = sm.b[buf][kb][h][warp * 8 + t];
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            int v = __dp4a(a[i].x, bv.x, isum[i][t]);
                            v = __dp4a(a[i].y, bv.y, v);
                            v = __dp4a(a[i].z, bv.z, v);
                            isum[i][t] = __dp4a(a[i].w, bv.w, v);
                        }
                    }
                }
                float da[4], db[8];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    da[i] = sm.ad[buf][kb][lane + 32 * i];
#pragma unroll
                for (int t = 0; t < 8; t++)
                    db[t] = sm.bd[buf][kb][warp * 8 + t];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int t = 0; t < 8; t++)
                        acc[i][t] = __fadd_rn(acc[i][t], __fmul_rn(__fmul_rn(da[i], db[t]), biased_dot_to_float(isum[i][t])));
            }
            if (s + 1 < n_stages)
                gemm_store(sm, buf ^ 1, r);
            __syncthreads();
        }
        gemm_fold(acc, ps, n_tokens, s0 == 0);
    }
}

cudaError_t gemm_q8_launch(const struct mm_parts &ps, int units, const int8_t *xq, const float *xd,
                           int n_in, int nb, int n_tokens, cudaStream_t s)
{
    dim3 grid(units, (n_tokens + BN - 1) / BN);
    return cuda_launch(gemm_q8_kernel, grid, MM_GEMM_THREADS, 0, s, ps, xq, xd, n_in, nb, n_tokens);
}
