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
/* The row RMSNorm in front of a projection (the input, post-attention and
 * final norms) is applied after the dot: y = W (x / rms(x) * w) is computed
 * as
 *   u_i = x_i * w_i                  (one rounding; x = the residual's sum
 *                                     x + y first for add_rmsnorm)
 *   u quantized to Q8_1 as any input, dotted with W as above, except that
 *   each segment's p is scaled before it is added:
 *       total = total + p * r        (the product rounded, then the sum)
 *   r = xm_rms_scale(ss, dim, eps)   (kernels/exact_math.h)
 * (Scaling each segment, not the total, lets the prompt's GEMM keep adding
 * its segments with fire-and-forget reductions: a load of the total before
 * one final multiply cost 1.8% of the 9B 2K prefill, twenty-fourth session.)
 * Q8_1 quantization is scale-invariant up to its roundings, so quantizing u
 * instead of u * r loses nothing, and a one-token GEMV may quantize its
 * segment of u before the row's sum of squares exists: each block sums its
 * own segment and the sums meet where the segments' partial dots meet.
 * (Before, every block of such a GEMV waited for the whole row's sum: a
 * build without that wait decoded the 9B 2.2% faster; docs/PERF.md,
 * twenty-third and twenty-fourth sessions.)
 * The sum of squares ss, in the same order everywhere:
 *   a span is CS_NORM_SPAN = 128 consecutive values (4 blocks of 32), lane l
 *   (0..31) of a span holding values l, l + 32, l + 64, l + 96 of it;
 *   lane partial = FFMA chain v*v + ... in that order from 0;
 *   span sum = the 32 lane partials reduced by the xor-shuffle tree (warp_sum
 *   / cpu_warp_sum);
 *   segment sum = 0 + span sums of the segment's CS_NORM_SEG_SPANS spans in
 *   order, left to right; ss = 0 + segment sums in order, left to right.
 * Values past dim count as 0 (adding +0 to a sum of squares changes no bit,
 * so a kernel may skip them). */
#ifndef CS_KERNELS_NUMERICS_H
#define CS_KERNELS_NUMERICS_H

#define CS_DOT_SEG_BLOCKS 32   /* 1024 values per segment */
#define CS_NORM_SPAN 128       /* values of a row norm's span: one warp's 4 blocks */
#define CS_NORM_SEG_SPANS (CS_DOT_SEG_BLOCKS * 32 / CS_NORM_SPAN)   /* 8 spans a segment */

#endif
