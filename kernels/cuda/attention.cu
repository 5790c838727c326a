/* attention.cu - the attention op of kernels/ops.h on CUDA: causal GQA
 * attention over paged KV (F16 or F32 elements), fp32 softmax and
 * accumulation. The work is split per sequence, which keeps it batch
 * invariant (ops.h):
 * - prefill tokens (a sequence with several tokens in the step):
 *   attention_prefill.cu, a register-tiled flash-attention kernel over query
 *   tiles of CS_ATTN_PTILE tokens;
 * - decode tokens (one token in the step): attention_decode.cu,
 *   flash-decoding over splits of the context.
 * Positions whose page is out of range read as zeros (no out-of-bounds). */
#include "../../common/log.h"
#include "../../common/status.h"
#include "attention_decode.h"
#include "attention_prefill.h"
#include "ops_cuda.cuh"

int cuda_op_attention(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                      int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                      const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "attention");
    if (rc != CS_OK)
        return rc;
    if (kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads != 0) {
        LOG_ERROR("cuda", "attention: %d query heads over %d kv heads", n_heads, kv->n_kv_heads);
        return CS_EINVAL;
    }
    const struct cuda_batch *cb = &c->batch;
    if (cb->n_ptiles > 0)
        rc = cuda_attn_prefill(c, out, q, q_token_stride, q_head_stride, n_heads, kv, scale);
    if (rc == CS_OK && cb->n_dec > 0)
        rc = cuda_attn_decode(c, out, q, q_token_stride, q_head_stride, n_heads, kv, scale);
    return rc;
}
