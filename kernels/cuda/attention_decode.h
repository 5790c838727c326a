/* attention_decode.h - the decode part of the CUDA attention op
 * (attention_decode.cu): flash-decoding over the step's decode tokens.
 * Includable from C (tests switch the fp16 path's kernel). */
#ifndef CS_CUDA_ATTENTION_DECODE_H
#define CS_CUDA_ATTENTION_DECODE_H

#include <stdbool.h>

#include "../ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_ctx;

/* out[t][n_heads * head_dim] for every decode token of the step
 * (c->batch.dec_tokens), on c->stream. Returns CS_OK or an error code
 * (unsupported head_dim, KV type or GQA group; memory). */
int cuda_attn_decode(struct cuda_ctx *c, float *out, const float *q, int q_token_stride,
                     int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale);

/* On (the default): fp16 KV runs the cp.async kernel where the device has
 * it (sm_80+, enough shared memory); off: the register kernel always. Both
 * give the same bits; tests compare them. A recorded decode-step graph keeps
 * the kernel it was recorded with. */
void cuda_attn_decode_pipe_enable(struct cs_backend *be, bool on);
/* Whether the cp.async kernel has been chosen on be (for any GQA group). */
bool cuda_attn_decode_pipe_used(struct cs_backend *be);

#ifdef __cplusplus
}
#endif
#endif
