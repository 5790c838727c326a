/* matmul_int.cuh - what the Q8_0 matrix kernels share (matmul.cu,
 * gemv_seg.cu, gemm.cu): the description of a fused launch over several
 * weights, the exact block dot product and the launchers matmul.cu calls.
 * Internal to kernels/cuda. */
#ifndef CS_CUDA_MATMUL_INT_CUH
#define CS_CUDA_MATMUL_INT_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "matmul.h"

/* One weight of a fused launch; groups/tiles [unit_begin, next part's). */
struct mm_part {
    const int4 *q;        /* repacked quants */
    const __half *d;      /* repacked scales */
    float *y;             /* [n_tokens][n_out] */
    int n_out;
    int unit_begin;       /* first GEMV group / GEMM row tile of this part */
};

struct mm_parts {
    struct mm_part p[CUDA_MATMUL_MAX_WEIGHTS];
    int n;
    const float *rs;      /* [n_tokens] or NULL: each output times rs[t] (ops.h matmul_scaled;
                           * the norm applied after the dot, kernels/numerics.h) */
};

/* A segment's partial as added (kernels/numerics.h): v, or v * rs[t] (one
 * rounding). */
static __device__ __forceinline__ float mm_out(const struct mm_parts &ps, int t, float v)
{
    return ps.rs ? __fmul_rn(v, ps.rs[t]) : v;
}

static __device__ __forceinline__ int mm_part_find(const struct mm_parts &ps, int unit)
{
    int i = 0;
    while (i + 1 < ps.n && unit >= ps.p[i + 1].unit_begin)
        i++;
    return i;
}

/* acc + the dot product of two 32-value int8 blocks */
static __device__ __forceinline__ int dot32(int4 a0, int4 a1, int4 b0, int4 b1, int acc)
{
    int s = __dp4a(a0.x, b0.x, acc);
    s = __dp4a(a0.y, b0.y, s);
    s = __dp4a(a0.z, b0.z, s);
    s = __dp4a(a0.w, b0.w, s);
    s = __dp4a(a1.x, b1.x, s);
    s = __dp4a(a1.y, b1.y, s);
    s = __dp4a(a1.z, b1.z, s);
    return __dp4a(a1.w, b1.w, s);
}

/* Exact int -> float of a block dot v (|v| <= 32 * 127 * 127 < 2^22): the
 * DP4A chain starts from MM_DOT_BIAS instead of 0, so it ends on the bits
 * of the fp32 1.5 * 2^23 + v, and one fp32 subtract gives v. That replaces
 * the quarter-rate I2F conversion and costs no integer add. */
#define MM_DOT_BIAS 0x4B400000
static __device__ __forceinline__ float biased_dot_to_float(int biased)
{
    return __fsub_rn(__int_as_float(biased), 12582912.0f);
}

/* Launch the segmented GEMV (gemv_seg.cu) for nt <= MM_GEMV_MAX_TOKENS
 * tokens over units row groups of 32, n_seg = ceil(nb / MM_SEG_BLOCKS)
 * segments each. xs: quantize x in shared memory (x fp32) instead of
 * reading xq/xd; with pro too (one token), the vector is pro(x) (matmul.h
 * struct cuda_mm_pro). Returns cudaErrorNotReady when the stream's workspace
 * cannot be prepared now (the caller then uses another kernel). */
cudaError_t gemv_seg_launch(int nt, const struct mm_parts &ps, int units, const float *x,
                            const int8_t *xq, const float *xd, int n_in, int nb, bool xs,
                            cudaStream_t s, const struct cuda_mm_pro *pro = NULL);

/* Row groups one segmented launch may take (its workspace's tickets). */
int gemv_seg_max_units(void);

/* Launch the GEMM (gemm.cu) over units row tiles of MM_GEMM_BM rows (parts'
 * unit_begin count tiles) and all n_tokens tokens of xq/xd (Q8_1 scratch),
 * kb (2, 4 or 8; arch_tiles.h's gemm_kb) blocks per stage, or the next
 * smaller that fits MM_GEMM_MIN_BLOCKS blocks per SM. */
cudaError_t gemm_q8_launch(const struct mm_parts &ps, int units, const int8_t *xq, const float *xd,
                           int n_in, int nb, int n_tokens, int kb, cudaStream_t s);

#endif
