/* attn_numerics.h - which arithmetic the prefill attention uses, shared by
 * the CPU and CUDA backends (kernels/cpu/attention.c mirrors
 * kernels/cuda/attention_prefill.cu bit for bit).
 *
 * Over an F16 KV cache (the GPU default) prefill attention is int8 DP4A on
 * both of its products; over an F32 KV cache (the CPU default, and the
 * full-precision reference runs of `cmpserve logits`) both stay fp32 FFMA
 * chains. Decode attention is fp32 either way (it is bound by reading the KV
 * cache, not by arithmetic). CS_ATTN_Q8=0 at build time (C and CUDA alike)
 * turns the int8 path off everywhere.
 *
 * The int8 path (exact_math.h xm_q8_* / xm_u8_*), per KV tile of 64
 * positions (tiles start at absolute multiples of 64):
 * - Scores: each query row (scaled) and each key row is quantized to int8
 *   with one scale per 256-value head vector (d_q, d_k); the integer dot is
 *   exact, then s = (float)isum * (d_q * d_k).
 * - The online softmax gives p (fp32, as the fp32 path) and l sums it.
 * - P.V: each value row is quantized like a key row (int8, scale d_v per
 *   position). A row's weights p[c] * d_v[c] (fp32 products) are quantized
 *   to 0..255 with one scale d_p per row and tile; the integer dots over the
 *   tile's positions are exact, then acc[d] = fma((float)isum[d], d_p,
 *   acc[d] * alpha).
 * Both products of a tile are DP4A with 4 multiply-adds per instruction,
 * where fp32 takes one FFMA per multiply-add (docs/PERF.md, sixteenth and
 * seventeenth sessions). What it costs against exact arithmetic is bounded
 * by tests/kernels/test_cpu_attention.c. */
#ifndef CS_KERNELS_ATTN_NUMERICS_H
#define CS_KERNELS_ATTN_NUMERICS_H

#include <stdint.h>

#include "../common/gguf.h"

#ifndef CS_ATTN_Q8
#define CS_ATTN_Q8 1
#endif

static inline int cs_attn_q8(uint32_t kv_type)
{
    return CS_ATTN_Q8 && kv_type == CS_DTYPE_F16;
}

#endif
