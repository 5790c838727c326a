/* quantize.cu - fp32 activations to Q8_1 (the int8 side of the Q8_0 matmul).
 * One warp per 32-value block; the rule is matmul.h's "Numerics" (the same as
 * kernels/cpu/quant.h): d = amax / 127, q = round-half-away(x / d), both
 * correctly rounded (explicit __fdiv_rn, immune to --use_fast_math).
 * Output layout: int8 quants [n_tokens][n_in], then at
 * cuda_q8_1_scales_offset() fp32 scales [n_tokens][n_in / 32]. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_util.cuh"
#include "launch.cuh"
#include "matmul.h"

#define QUANT_THREADS 256

static __global__ void quantize_q8_1_kernel(int8_t *xq, float *xd, const float *x, int64_t n_in,
                                            int64_t n_blocks_total)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int64_t blk = (int64_t)blockIdx.x * (QUANT_THREADS / 32) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (blk >= n_blocks_total)
        return;
    /* blocks never straddle tokens (n_in % 32 == 0): flat index works */
    float d;
    int q = cuda_q8_1_quantize_lane(x[blk * 32 + lane], &d);
    xq[blk * 32 + lane] = (int8_t)q;
    if (lane == 0)
        xd[blk] = d;
    (void)n_in;
}

extern "C" size_t cuda_q8_1_scales_offset(int64_t n_in, int n_tokens)
{
    size_t q = (size_t)n_in * (size_t)n_tokens;
    return (q + 255) & ~(size_t)255;
}

extern "C" size_t cuda_row_scale_offset(int64_t n_in, int n_tokens)
{
    size_t end = cuda_q8_1_scales_offset(n_in, n_tokens) +
                 (size_t)(n_in / 32) * n_tokens * sizeof(float);
    return (end + 255) & ~(size_t)255;
}

extern "C" size_t cuda_matmul_scratch_bytes(int64_t n_in, int n_tokens)
{
    return cuda_row_scale_offset(n_in, n_tokens) + (size_t)n_tokens * sizeof(float);
}

extern "C" int cuda_quantize_q8_1(void *scratch, const float *x, int64_t n_in, int n_tokens,
                                  struct CUstream_st *stream)
{
    if (!scratch || !x || n_in <= 0 || n_in % 32 != 0 || n_tokens <= 0)
        return CS_EINVAL;
    int64_t nblk = n_in / 32 * n_tokens;
    int8_t *xq = (int8_t *)scratch;
    float *xd = (float *)((char *)scratch + cuda_q8_1_scales_offset(n_in, n_tokens));
    unsigned grid = cs_div_up((size_t)nblk, QUANT_THREADS / 32);
    CS_CUDA_CHECK(cuda_launch(quantize_q8_1_kernel, grid, QUANT_THREADS, 0, stream, xq, xd, x, n_in,
                              nblk));
    return CS_OK;
}
