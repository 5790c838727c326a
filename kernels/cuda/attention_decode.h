/* attention_decode.h - the decode part of the CUDA attention op
 * (attention_decode.cu): flash-decoding over the step's decode tokens. */
#ifndef CS_CUDA_ATTENTION_DECODE_H
#define CS_CUDA_ATTENTION_DECODE_H

#include "ops_cuda.cuh"

/* out[t][n_heads * head_dim] for every decode token of the step
 * (c->batch.dec_tokens), on c->stream. Returns CS_OK or an error code
 * (unsupported head_dim, KV type or GQA group; memory). */
int cuda_attn_decode(struct cuda_ctx *c, float *out, const float *q, int q_token_stride,
                     int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale);

#endif
