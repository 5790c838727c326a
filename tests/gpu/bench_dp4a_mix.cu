/* bench_dp4a_mix.cu - how fast DP4A issues with the prefill GEMM's operands
 * and arithmetic, with no memory in the loop (docs/PERF.md, twenty-first
 * session: the 2K GEMM's warps wait on a ready DP4A at ~76% of the probe's
 * rate, and its counters do not say why).
 *
 * Four register-only kernels of 256-thread blocks, timed in one run (the
 * gemm loops' ~124 registers allow 2 blocks an SM, the GEMM's occupancy; the
 * probe's loop fits more, as in the probe itself):
 *   probe: kernels/cuda/probe.cu's loop, a = dp4a(a, k, a): one vector
 *          register read an instruction (the figure bench's ratios divide by);
 *   gemm_int: the GEMM's DP4A pattern, a thread's 4 rows x 8 tokens of block
 *          dots, each a chain of 8 DP4A over distinct A and B registers,
 *          ended by an integer add (no float work);
 *   gemm_fp: the same, each dot ended as gemm.cu ends it: I2F, FMUL of the
 *          two scales, FFMA into the output (the numerics contract's three
 *          float operations per 8 DP4A);
 *   gemm_fp_no_act_scale: gemm_fp without the FMUL (I2F and FFMA by the
 *          weight scale only): the ceiling of a contract that would apply
 *          the activation scale once per segment.
 * Each prints its DP4A rate in TOPS and as a share of probe's. The first H100
 * run (docs/PERF.md, twenty-second session): gemm_int 96.9%, gemm_fp 81.8%,
 * gemm_fp_no_act_scale 88.0%, so the float work per block, not the operands,
 * costs the GEMM most of what it lacks against the probe on sm_90 (the GEMM
 * runs at 72-73%).
 * Usage: bench_gpu_dp4a_mix [device] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define MIX_THREADS 256
#define MIX_ITERS 128

static __global__ void __launch_bounds__(MIX_THREADS, 2) mix_probe(int seed, int *sink)
{
    int a[8];
#pragma unroll
    for (int c = 0; c < 8; c++)
        a[c] = seed + c + threadIdx.x;
    for (int it = 0; it < MIX_ITERS * 32; it++)
#pragma unroll
        for (int c = 0; c < 8; c++)
            a[c] = __dp4a(a[c], seed, a[c]);
    int v = 0;
#pragma unroll
    for (int c = 0; c < 8; c++)
        v ^= a[c];
    if (v == 0x7fffffff)
        sink[0] = v;
}

/* A: 4 rows x 8 words (the GEMM's a0/a1), B: 2 tokens x 8 words used for
 * tokens t and t + 2 ... alike (the GEMM loads a new token's 8 words from
 * shared memory; here they stay in registers and change every iteration so
 * nothing is loop-invariant). MIX_FP: end each dot as gemm.cu's gemm_block;
 * MIX_FP_NO_ACT_SCALE: without the activation scale's FMUL (the rate of a
 * contract that applied the activation scale once per segment). */
enum { MIX_INT, MIX_FP, MIX_FP_NO_ACT_SCALE };
template <int MODE>
static __global__ void __launch_bounds__(MIX_THREADS, 2) mix_gemm(int seed, int *sink)
{
    int a[4][8], b[2][8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            a[i][j] = seed * (i * 8 + j + 1) + threadIdx.x;
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            b[t][j] = seed ^ (t * 8 + j + (int)threadIdx.x);
    float da[4], db[8], acc[4][8];
    int iacc[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        da[i] = 1e-3f * (i + 1);
#pragma unroll
        for (int t = 0; t < 8; t++) {
            acc[i][t] = 0.0f;
            iacc[i][t] = 0;
        }
    }
#pragma unroll
    for (int t = 0; t < 8; t++)
        db[t] = 1e-2f * (t + 1);
    for (int it = 0; it < MIX_ITERS; it++) {
        if (MODE != MIX_INT) {   /* scales that change every iteration (the GEMM loads them per block), so
                     * that the FMUL stays in the loop: small positive floats from B's bits */
#pragma unroll
            for (int i = 0; i < 4; i++)
                da[i] = __int_as_float((b[0][i] & 0x007fffff) | 0x3a800000);
#pragma unroll
            for (int t = 0; t < 8; t++)
                db[t] = __int_as_float((b[1][t] & 0x007fffff) | 0x3c000000);
        }
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int *bt = b[t & 1];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int s = it + t;   /* a changing start per token (t and t + 2 share B) */
#pragma unroll
                for (int j = 0; j < 8; j++)
                    s = __dp4a(a[i][j], bt[j], s);
                if (MODE == MIX_FP)
                    acc[i][t] = __fmaf_rn(__fmul_rn(da[i], db[t]), __int2float_rn(s), acc[i][t]);
                else if (MODE == MIX_FP_NO_ACT_SCALE)
                    acc[i][t] = __fmaf_rn(da[i], __int2float_rn(s), acc[i][t]);
                else
                    iacc[i][t] += s;
            }
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {   /* the next iteration's B: 16 ALU operations per 256 DP4A */
            b[0][j] += 0x01010101;
            b[1][j] ^= 0x02020202;
        }
    }
    float v = 0.0f;
    int iv = 0;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int t = 0; t < 8; t++) {
            v += acc[i][t];
            iv ^= iacc[i][t];
        }
    if (v == 1234.5f || iv == 0x7fffffff)
        sink[0] = 1;
}

/* Best of 5 launches after a warm-up, in seconds. */
static double mix_time(int kind, int blocks, int *sink)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        cudaEventRecord(e0);
        if (kind == 0)
            mix_probe<<<blocks, MIX_THREADS>>>(0x01010101, sink);
        else if (kind == 1)
            mix_gemm<MIX_INT><<<blocks, MIX_THREADS>>>(0x01010101, sink);
        else if (kind == 2)
            mix_gemm<MIX_FP><<<blocks, MIX_THREADS>>>(0x01010101, sink);
        else
            mix_gemm<MIX_FP_NO_ACT_SCALE><<<blocks, MIX_THREADS>>>(0x01010101, sink);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r > 0 && ms * 1e-3 < best)
            best = ms * 1e-3;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

int main(int argc, char **argv)
{
    int dev = argc > 1 ? atoi(argv[1]) : 0, sms = 0;
    int *sink = NULL;
    if (cudaSetDevice(dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaMalloc(&sink, sizeof(int)) != cudaSuccess) {
        fprintf(stderr, "bench_dp4a_mix: no CUDA device %d\n", dev);
        return 1;
    }
    int blocks = 2 * sms * 4;   /* 4 waves of 2 blocks an SM: ~0.5 ms a launch at 133 TOPS */
    /* DP4A per thread: probe 8 x 32 x ITERS, gemm 4 x 8 x 8 x ITERS: both 256 x ITERS */
    double ops = 2.0 * 4 * 256.0 * MIX_ITERS * MIX_THREADS * blocks;
    const char *name[4] = {"probe (1 register read a DP4A)", "gemm_int (4x8 tile of 8-DP4A dots)",
                           "gemm_fp (+ I2F, FMUL, FFMA per dot)",
                           "gemm_fp_no_act_scale (+ I2F, FFMA)"};
    double tops[4];
    for (int k = 0; k < 4; k++) {
        double s = mix_time(k, blocks, sink);
        tops[k] = ops / s * 1e-12;
    }
    if (cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "bench_dp4a_mix: a launch failed\n");
        return 1;
    }
    for (int k = 0; k < 4; k++)
        printf("BENCH dp4a_mix %-40s %7.2f TOPS  %5.1f%% of probe\n", name[k], tops[k],
               100.0 * tops[k] / tops[0]);
    cudaFree(sink);
    return 0;
}
