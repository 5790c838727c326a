/* bench_chain.cuh - what the decode-chain experiments share (bench_persistent.cu,
 * bench_ring.cu): the 9B preset's decode sequence of 129 matrix shapes with
 * random Q8_0-like weights (int8 rows, an fp16 scale per 32 values), a
 * plain DP4A GEMV over them (a warp streams a row pair; every call quantizes
 * its input per 32 in its prologue), one launch per matrix (k_pt_one: the
 * reference bits every variant must reproduce), and a grid barrier.
 * An experiment, not product code (docs/PERF.md). */
#ifndef CS_TESTS_BENCH_CHAIN_CUH
#define CS_TESTS_BENCH_CHAIN_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/cuda/probe.h"

#define PT_THREADS 256
#define PT_WARPS (PT_THREADS / 32)
#define PT_CH 4096          /* columns per chunk: 32 lanes x 8 loads x 16 bytes */
#define PT_MAXK 12288
#define PT_MAXM 160

struct pt_mat {
    const int8_t *w;        /* [n_out][n_in] */
    const __half *d;        /* [n_out][n_in / 32] */
    int n_out, n_in;
    const int8_t *wp;       /* bench_ring: w repacked per item (NULL: not made) */
    const __half *dp;       /* bench_ring: d repacked per item */
};

struct pt_args {
    struct pt_mat m[PT_MAXM];
    int n_mats;
    float *buf[2];          /* call i reads buf[i % 2], writes buf[(i + 1) % 2] */
    unsigned *barrier;
    unsigned *claims;       /* bench_ring: groups claimed per matrix (zero between passes) */
    /* modes 8, 9: buf[j] quantized by its producer into gq[j] / gdx[j]; cnt[j]
     * counts the finished row pairs of each 32-row block (zero between uses) */
    int8_t *gq[2];
    float *gdx[2];
    unsigned *cnt[2];
};

/* Where a producer quantizes its output (modes 8, 9); cnt NULL: nowhere. */
struct pt_qout {
    int8_t *xq;
    float *dx;
    unsigned *cnt;
};

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* The exact int dot of two 32-value int8 blocks (w0 w1 and x0 x1: 16 bytes
 * each), accumulated from 0 in the order of kernels/cuda/matmul_int.cuh. */
static __device__ __forceinline__ int chain_dot32(int4 w0, int4 w1, int4 x0, int4 x1)
{
    int v = __dp4a(w0.x, x0.x, 0);
    v = __dp4a(w0.y, x0.y, v);
    v = __dp4a(w0.z, x0.z, v);
    v = __dp4a(w0.w, x0.w, v);
    v = __dp4a(w1.x, x1.x, v);
    v = __dp4a(w1.y, x1.y, v);
    v = __dp4a(w1.z, x1.z, v);
    return __dp4a(w1.w, x1.w, v);
}

/* A warp's weights for one row pair and one chunk, as loaded. */
struct pt_regs {
    int4 w[2][8];
    __half d[2][8];
};

static __device__ __forceinline__ void pt_load(struct pt_regs &r, const struct pt_mat &m, int row,
                                               int kc, int lane)
{
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int8_t *wr = m.w + (size_t)(row + j) * m.n_in + kc + lane * 16;
        const __half *dr = m.d + (size_t)(row + j) * (m.n_in / 32) + kc / 32 + lane / 2;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            bool in = kc + i * 512 < m.n_in;
            r.w[j][i] = in ? __ldg((const int4 *)(wr + i * 512)) : make_int4(0, 0, 0, 0);
            r.d[j][i] = in ? __ldg(dr + i * 16) : __float2half(0.0f);
        }
    }
}

static __device__ __forceinline__ void pt_dot(const struct pt_regs &r, const int8_t *xq,
                                              const float *dx, int kc, int n_in, int lane,
                                              float acc[2])
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int e = kc + i * 512 + lane * 16;
        if (e >= n_in)
            break;
        int4 xv = *(const int4 *)(xq + e);
        float sx = dx[e / 32];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int s = __dp4a(r.w[j][i].x, xv.x, 0);
            s = __dp4a(r.w[j][i].y, xv.y, s);
            s = __dp4a(r.w[j][i].z, xv.z, s);
            s = __dp4a(r.w[j][i].w, xv.w, s);
            acc[j] = fmaf(__half2float(r.d[j][i]) * sx, (float)s, acc[j]);
        }
    }
}

/* Every block quantizes the whole input x[0, n) into shared memory: int8
 * per value, one fp32 scale (amax / 127) per 32. A warp takes 128 values at
 * a time (4 blocks of 32, 8 lanes each). */
static __device__ void pt_quantize(const float *x, int n, int8_t *xq, float *dx)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int base = warp * 128; base < n; base += PT_WARPS * 128) {
        int e = base + lane * 4;
        float4 v = e < n ? __ldcg((const float4 *)(x + e)) : make_float4(0, 0, 0, 0);
        float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int o = 4; o > 0; o >>= 1)
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        float d = a / 127.0f, inv = a > 0.0f ? 127.0f / a : 0.0f;
        if (e < n) {
            char4 q = make_char4((signed char)__float2int_rn(v.x * inv), (signed char)__float2int_rn(v.y * inv),
                                 (signed char)__float2int_rn(v.z * inv), (signed char)__float2int_rn(v.w * inv));
            *(char4 *)(xq + e) = q;
            if ((lane & 7) == 0)
                dx[e / 32] = d;
        }
    }
}

/* pt_quantize with every load of the input issued before the first is used:
 * one L2 round trip for the whole input instead of one per 1,024 values
 * (the loop above waits for each). */
static __device__ void pt_quantize_batched(const float *x, int n, int8_t *xq, float *dx)
{
    enum { IT = PT_MAXK / (PT_WARPS * 128) };
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4 v[IT];
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int e = (it * PT_WARPS + warp) * 128 + lane * 4;
        v[it] = e < n ? __ldcg((const float4 *)(x + e)) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int e = (it * PT_WARPS + warp) * 128 + lane * 4;
        float a = fmaxf(fmaxf(fabsf(v[it].x), fabsf(v[it].y)), fmaxf(fabsf(v[it].z), fabsf(v[it].w)));
#pragma unroll
        for (int o = 4; o > 0; o >>= 1)
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        float d = a / 127.0f, inv = a > 0.0f ? 127.0f / a : 0.0f;
        if (e < n) {
            char4 q = make_char4((signed char)__float2int_rn(v[it].x * inv), (signed char)__float2int_rn(v[it].y * inv),
                                 (signed char)__float2int_rn(v[it].z * inv), (signed char)__float2int_rn(v[it].w * inv));
            *(char4 *)(xq + e) = q;
            if ((lane & 7) == 0)
                dx[e / 32] = d;
        }
    }
}

/* The rows of matrix m this block's warps own: row pairs gw, gw + GW, ...
 * (gw the warp's index in the grid). r is the warp's working registers;
 * preloaded: r already holds the first row pair's first chunk. */
static __device__ __forceinline__ void pt_rows(const struct pt_mat &m, const int8_t *xq, const float *dx,
                                               float *y, struct pt_regs &r, bool preloaded,
                                               struct pt_qout qo = {NULL, NULL, NULL})
{
    int lane = threadIdx.x & 31;
    int gw = blockIdx.x * PT_WARPS + (threadIdx.x >> 5), GW = gridDim.x * PT_WARPS;
    for (int row = gw * 2; row < m.n_out; row += GW * 2) {
        float acc[2] = {0.0f, 0.0f};
        for (int kc = 0; kc < m.n_in; kc += PT_CH) {
            if (!preloaded)
                pt_load(r, m, row, kc, lane);
            preloaded = false;
            pt_dot(r, xq, dx, kc, m.n_in, lane, acc);
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
        }
        if (lane == 0) {
            y[row] = acc[0];
            y[row + 1] = acc[1];
        }
        if (qo.cnt) {   /* the last row pair of a 32-row block quantizes the block */
            unsigned t = 0;
            if (lane == 0) {
                __threadfence();
                t = atomicAdd(qo.cnt + row / 32, 1u);
            }
            t = __shfl_sync(0xffffffffu, t, 0);
            if (t == 15) {
                __threadfence();
                int b = row / 32;
                float v = __ldcg(y + b * 32 + lane), a = fabsf(v);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
                float d = a / 127.0f, inv = a > 0.0f ? 127.0f / a : 0.0f;
                qo.xq[b * 32 + lane] = (int8_t)__float2int_rn(v * inv);
                if (lane == 0) {
                    qo.dx[b] = d;
                    qo.cnt[b] = 0;   /* for the next use of this set */
                }
            }
        }
    }
}

/* Modes 8, 9: the producer's quantized input into shared memory, every load
 * in flight at once (n <= PT_MAXK: 3 x 16 bytes and 2 scales a thread). */
static __device__ void pt_load_quantized(const int8_t *gq, const float *gdx, int n, int8_t *xq, float *dx)
{
    int4 v[3];
    float d[2];
#pragma unroll
    for (int k = 0; k < 3; k++) {
        int i = threadIdx.x + k * PT_THREADS;
        v[k] = i < n / 16 ? __ldcg((const int4 *)gq + i) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
        int i = threadIdx.x + k * PT_THREADS;
        d[k] = i < n / 32 ? __ldcg(gdx + i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 3; k++) {
        int i = threadIdx.x + k * PT_THREADS;
        if (i < n / 16)
            ((int4 *)xq)[i] = v[k];
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
        int i = threadIdx.x + k * PT_THREADS;
        if (i < n / 32)
            dx[i] = d[k];
    }
}

/* One matrix per launch. */
static __global__ void __launch_bounds__(PT_THREADS, 2) k_pt_one(struct pt_mat m, const float *x, float *y)
{
    __shared__ __align__(16) int8_t xq[PT_MAXK];
    __shared__ float dx[PT_MAXK / 32];
    struct pt_regs r;
    pt_quantize(x, m.n_in, xq, dx);
    __syncthreads();
    pt_rows(m, xq, dx, y, r, false);
}

static __device__ __forceinline__ void pt_grid_sync(unsigned *ctr, unsigned target)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(ctr, 1u);
        while (*(volatile unsigned *)ctr < target) {
        }
        __threadfence();
    }
    __syncthreads();
}

/* 16 bytes global -> shared through the L2 (cp.async.cg, sm_80+): the
 * staged copies need no registers, so a block's whole round of partials is
 * in flight at once. */
static __device__ __forceinline__ void chain_cp16(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(src) : "memory");
#else
    *(int4 *)dst = __ldcg((const int4 *)src);
#endif
}

static __device__ __forceinline__ void chain_cp_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
#endif
}

static __global__ void k_fill(int8_t *w, __half *d, size_t n_w, size_t n_d, uint32_t seed, float scale)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_w; i += stride) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        w[i] = (int8_t)((int)(h % 255) - 127);
        if (i < n_d)
            d[i] = __float2half(scale * (0.5f + (float)(h >> 24) / 256.0f));
    }
}

static double checksum(const float *dev, int n)
{
    float *h = (float *)malloc((size_t)n * 4);
    CK(cudaMemcpy(h, dev, (size_t)n * 4, cudaMemcpyDeviceToHost));
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)h[i] * (double)((i % 7) + 1);
    free(h);
    return s;
}

/* The chain: 32 layers of [12352 x 4096 (GDN in), 4096 x 4096 (out),
 * 24576 x 4096 (gate+up), 4096 x 12288 (down)], then the LM head 248320 x
 * 4096, each matrix its own memory; buf[0] holds the first input. Returns
 * the bytes a pass reads. */
static double chain_build(struct pt_args &a)
{
    const int shapes[4][2] = {{12352, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}};
    double bytes = 0;
    for (int l = 0; l < 32; l++)
        for (int s = 0; s < 4; s++) {
            a.m[a.n_mats].n_out = shapes[s][0];
            a.m[a.n_mats++].n_in = shapes[s][1];
        }
    a.m[a.n_mats].n_out = 248320;
    a.m[a.n_mats++].n_in = 4096;
    for (int i = 0; i < a.n_mats; i++) {
        struct pt_mat *m = &a.m[i];
        size_t nw = (size_t)m->n_out * m->n_in, nd = nw / 32;
        int8_t *w;
        __half *d;
        CK(cudaMalloc(&w, nw));
        CK(cudaMalloc(&d, nd * 2));
        k_fill<<<1024, 256>>>(w, d, nw, nd, 0x9e3779b9u * (i + 1), 1.0f / (127.0f * sqrtf((float)m->n_in)));
        m->w = w;
        m->d = d;
        bytes += (double)nw + 2.0 * nd;
    }
    CK(cudaMalloc(&a.buf[0], 248320 * 4));
    CK(cudaMalloc(&a.buf[1], 248320 * 4));
    CK(cudaMalloc(&a.barrier, 256));   /* a counter; bench_ring's flag 128 bytes on */
    CK(cudaMalloc(&a.claims, PT_MAXM * sizeof(unsigned)));
    for (int j = 0; j < 2; j++) {
        CK(cudaMalloc(&a.gq[j], 248320));
        CK(cudaMalloc(&a.gdx[j], 248320 / 32 * 4));
        CK(cudaMalloc(&a.cnt[j], 248320 / 32 * 4));
        CK(cudaMemset(a.cnt[j], 0, 248320 / 32 * 4));
    }
    {
        float *h = (float *)malloc(248320 * 4);
        for (int i = 0; i < 248320; i++)
            h[i] = sinf(0.37f * i);
        CK(cudaMemcpy(a.buf[0], h, 248320 * 4, cudaMemcpyHostToDevice));
        free(h);
    }
    return bytes;
}

#endif
