/* attn_numerics.h - which scores the prefill attention computes, shared by
 * the CPU and CUDA backends (kernels/cpu/attention.c mirrors
 * kernels/cuda/attention_prefill.cu bit for bit).
 *
 * Over an F16 KV cache (the GPU default) the prefill scores are DP4A int8
 * dot products: each query row (scaled) and each key row quantized to int8
 * with one scale per 256-value head vector (exact_math.h xm_q8_*), the
 * integer dot exact, then s = (float)isum * (d_q * d_k). On an H200 the
 * scores are half of prefill attention's FFMAs, and DP4A does 4 multiply-
 * adds per instruction (docs/PERF.md, sixteenth session). Over an F32 KV
 * cache (the CPU default, and the full-precision reference runs of
 * `cmpserve logits`) they stay fp32 FFMA chains. Decode attention is fp32
 * either way (it is bound by reading the KV cache, not by arithmetic).
 * CS_ATTN_Q8_SCORES=0 at build time (C and CUDA alike) turns the int8 scores
 * off everywhere. */
#ifndef CS_KERNELS_ATTN_NUMERICS_H
#define CS_KERNELS_ATTN_NUMERICS_H

#include <stdint.h>

#include "../common/gguf.h"

#ifndef CS_ATTN_Q8_SCORES
#define CS_ATTN_Q8_SCORES 1
#endif

static inline int cs_attn_q8_scores(uint32_t kv_type)
{
    return CS_ATTN_Q8_SCORES && kv_type == CS_DTYPE_F16;
}

#endif
