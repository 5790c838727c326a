/* numerics.h - the summation order every backend uses for a Q8_0 x Q8_1 dot
 * product, so that the CPU int8 path, the CUDA GEMV (plain and segmented) and
 * the CUDA GEMM give bitwise equal results for any batch.
 *
 * y = W x for one row over nb = n_in / 32 blocks of 32 values:
 *   total = 0.0f
 *   for each segment k = 0, 1, ... of CS_DOT_SEG_BLOCKS consecutive blocks
 *   (the last one may be shorter):
 *       p = 0.0f
 *       for each block b of the segment, in increasing order:
 *           isum = exact int32 dot of the 32 int8 pairs
 *           s = fp32(d_w[b]) * d_x[b]                  (rounded)
 *           p = fma(s, (float)isum, p)                 (one rounding)
 *       total = total + p
 * The int -> float is exact (|isum| < 2^22). The one fused multiply-add
 * per block is deliberate: on the GPU the GEMM is bound by the pipe that
 * DP4A shares with this scale arithmetic, and folding the multiply and the
 * add into one FFMA measured +1.9 points of DP4A peak on an H200 (docs/
 * PERF.md, eighth session). Every other operation is rounded separately;
 * C's fmaf and CUDA's __fmaf_rn are both correctly rounded, so the CPU
 * and the GPU still agree bit for bit.
 *
 * Why segments: a decode GEMV over a short matrix (4096 x 4096) has too few
 * row groups to fill a GPU; with a fixed segment order the K dimension can
 * be split over blocks (one per segment) and the partial sums added in
 * segment order, which any kernel can reproduce.
 *
 * The fp32 work between two quantizations (norms, RoPE, conv, GDN,
 * attention, gates) has its own contract in kernels/exact_math.h; the two
 * together make the CPU int8 path and the CUDA backend give the same bits
 * (docs/VALIDATION.md, item 9). */
#ifndef CS_KERNELS_NUMERICS_H
#define CS_KERNELS_NUMERICS_H

#define CS_DOT_SEG_BLOCKS 32   /* 1024 values per segment */

#endif
