/* attention_prefill.h - the C entry of kernels/cuda/attention_prefill.cu:
 * causal GQA attention (kernels/ops.h `attention`) for the PREFILL tokens of
 * a step, by a register-tiled FP32 flash-attention kernel (FFMA only).
 *
 * cuda_attn_prefill writes out[t][n_heads * 256] for every token of the
 * step's prefill tiles (c->batch.ptiles: sequences with more than one token
 * in the step); decode tokens (a sequence with one token) are left to the
 * decode path of attention.cu and their rows of out are not touched. The
 * batch is the one of the last step_begin. head_dim 256, F16 or F32 KV,
 * n_heads / n_kv_heads in 1..8; anything else returns CS_EUNSUPPORTED (logged,
 * nothing run), as does a device whose opt-in shared memory per block is
 * below what the group needs (96 KB for G 4, 7, 8; 76 KB for 3, 5, 6; 56 KB
 * for 1, 2: every sm_70+ GPU has them).
 * Numerics: fp32, equal to the CPU reference within 1e-5 relative; a token's
 * bits depend only on its position and its sequence's KV, not on the batch
 * or the query tiling (kernels/ops.h batch invariance). */
#ifndef CS_CUDA_ATTENTION_PREFILL_H
#define CS_CUDA_ATTENTION_PREFILL_H

#include "../ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_ctx;

/* out[t][n_heads*D] for every prefill token of the step (c->batch.ptiles). */
int cuda_attn_prefill(struct cuda_ctx *c, float *out, const float *q, int q_token_stride,
                      int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale);

/* The same from a backend handle (tests): checks that b is the batch of the
 * last step_begin, then cuda_attn_prefill. */
int cuda_op_attn_prefill(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                         int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                         const struct cs_batch *b);

/* Tests: the int8 kernel's async staging (sm_80+, pages holding whole
 * 64-position tiles) allowed (the default) or not (register staging, as on
 * sm_70); and whether it ran since the context was made. */
void cuda_attn_prefill_async_enable(struct cs_backend *be, bool on);
bool cuda_attn_prefill_async_used(struct cs_backend *be);

#ifdef __cplusplus
}
#endif
#endif
