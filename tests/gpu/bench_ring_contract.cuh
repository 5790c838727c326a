/* bench_ring_contract.cuh - bench_ring.cu's consumer in the product's
 * summation order (MODE 13): the packed item layout, the block dots, the
 * per-segment chains, and a slow reference chain in the same order. An
 * experiment, not product code. */
#ifndef CS_TESTS_BENCH_RING_CONTRACT_CUH
#define CS_TESTS_BENCH_RING_CONTRACT_CUH

#include "bench_chain.cuh"

/* MODE 13: an item's rows in the product's summation order (kernels/
 * numerics.h: per 1,024-value segment p = fma(d_w d_x, isum, p) over its 32
 * blocks in order, then total = 0 + p_0 + p_1 + ...), as a ring consumer
 * would have to compute it: the 8 warps form the block dots and scale
 * products into terms / scs, then a tenth warp (the chain warp, one item
 * behind, double-buffered through named barriers 2 and 3, as gemv_seg.cu's
 * tail warp) runs the R x n_seg chains (one a lane), adds the segments and
 * publishes the groups. */
/* terms and scale products of an item at index k + k / 32: warp 0's lanes
 * (one chain each, chains 32 blocks apart) then read distinct banks. */
#define RG_PAD(k) ((k) + ((k) >> 5))
#define RG_TERMS (1024 + 32)

/* The contract-order modes read an item in a packed layout (k_repack_w /
 * k_repack_d, made once at start, as the product repacks at load): the
 * quants in groups of 32 block dots, [group][half][dot][16 bytes], dot l of
 * a group being row l % R of block group (32 / R) + l / R, so each 16-byte
 * load of a warp reads 512 contiguous bytes; the scales [block][row]. */
static __global__ void k_repack_w(const int8_t *w, int8_t *wp, int n_out, int n_in, int R)
{
    size_t n16 = (size_t)n_out * n_in / 16, per_item = (size_t)R * n_in / 16;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < n16;
         o += (size_t)gridDim.x * blockDim.x) {
        size_t j = o / per_item;
        int q = (int)(o % per_item), g = q / 64, h = (q % 64) / 32, l = q % 32;
        int r = l % R, b = g * (32 / R) + l / R;
        ((int4 *)wp)[o] = *(const int4 *)(w + (j * R + r) * n_in + b * 32 + h * 16);
    }
}

static __global__ void k_repack_d(const __half *d, __half *dp, int n_out, int nb, int R)
{
    size_t n = (size_t)n_out * nb, per_item = (size_t)R * nb;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < n;
         o += (size_t)gridDim.x * blockDim.x) {
        size_t j = o / per_item;
        int q = (int)(o % per_item), b = q / R, r = q % R;
        dp[o] = d[(j * R + r) * nb + b];
    }
}

static __device__ __forceinline__ void rg_item_dots(const int4 *wq, const __half *d, int R, int n_in,
                                                    const int8_t *xq, const float *dx, float *terms,
                                                    float *sc)
{
    /* dot g = threadIdx + 256 k: group g / 32 (warp w takes groups w, w + 8,
     * ...), lane l = g % 32; row and block from the packed layout above */
    int nb = n_in / 32, lane = threadIdx.x & 31;
    int r = R == 8 ? lane & 7 : lane & 1, bl = R == 8 ? lane >> 3 : lane >> 1;
#pragma unroll 4
    for (int g = threadIdx.x >> 5; g < R * nb / 32; g += PT_WARPS) {
        int b = g * (32 / R) + bl, idx = r * nb + b;
        int4 w0 = wq[g * 64 + lane], w1 = wq[g * 64 + 32 + lane];
        const int4 *x = (const int4 *)(xq + b * 32);
        terms[RG_PAD(idx)] = (float)chain_dot32(w0, w1, x[0], x[1]);   /* exact: |v| < 2^22 */
        sc[RG_PAD(idx)] = __fmul_rn(__half2float(d[b * R + r]), dx[b]);
    }
}

static __device__ __forceinline__ float rg_item_chains(int R, int n_in, const float *terms,
                                                       const float *sc, float *pbuf, int lane)
{
    int nb = n_in / 32, nseg = nb / 32;
    float p = 0.0f;
    if (lane < R * nseg) {   /* the chain's 64 operands loaded first, then its 32 FMAs */
        int k0 = (lane / nseg) * nb + (lane % nseg) * 32, base = RG_PAD(k0);
        float tv[32], sv[32];
#pragma unroll
        for (int k = 0; k < 32; k++) {
            tv[k] = terms[base + k];
            sv[k] = sc[base + k];
        }
#pragma unroll
        for (int k = 0; k < 32; k++)
            p = __fmaf_rn(sv[k], tv[k], p);
    }
    pbuf[lane] = p;
    __syncwarp();
    float tot = 0.0f;
    if (lane < R)
        for (int sg = 0; sg < nseg; sg++)
            tot = __fadd_rn(tot, pbuf[lane * nseg + sg]);
    __syncwarp();
    return tot;
}

/* The reference for MODE 13: one launch per matrix, a thread per row in the
 * same order, the input quantized as pt_quantize does. Slow; run once. */
static __global__ void __launch_bounds__(PT_THREADS) k_ref_contract(struct pt_mat m, const float *x, float *y)
{
    __shared__ __align__(16) int8_t xq[PT_MAXK];
    __shared__ float dx[PT_MAXK / 32];
    pt_quantize(x, m.n_in, xq, dx);
    __syncthreads();
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m.n_out)
        return;
    int nb = m.n_in / 32;
    float tot = 0.0f;
    for (int sg = 0; sg < nb / 32; sg++) {
        float p = 0.0f;
        for (int b = sg * 32; b < sg * 32 + 32; b++) {
            const int4 *w = (const int4 *)(m.w + (size_t)row * m.n_in + b * 32);
            const int4 *xv = (const int4 *)(xq + b * 32);
            int v = chain_dot32(__ldg(w), __ldg(w + 1), xv[0], xv[1]);
            p = __fmaf_rn(__fmul_rn(__half2float(m.d[(size_t)row * nb + b]), dx[b]), (float)v, p);
        }
        tot = __fadd_rn(tot, p);
    }
    y[row] = tot;
}

#endif
