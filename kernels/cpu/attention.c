/* attention.c - the paged KV cache writes and causal GQA attention (ops.h
 * kv_store, attention).
 *
 * Page p holds K [page_size][n_kv_heads][head_dim] then V likewise, as F32 or
 * F16 (rounded to nearest even on store). Token t of sequence s at position
 * pos reads positions j = 0..pos of s through the page table. Per (token,
 * query head), in this order, all fp32:
 *     s_j = cpu_dot(q, k_j) * scale          j ascending
 *     m = max_j s_j;  e_j = expf(s_j - m);  sum = e_0 + e_1 + ... (ascending)
 *     out[d] = (e_0 v_0[d] + e_1 v_1[d] + ...) / sum
 * One thread computes one (token, head) item, so results do not depend on the
 * batch or the thread count. */
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../../common/status.h"
#include "cpu.h"

static size_t kv_elem_bytes(uint32_t type)
{
    return type == CS_DTYPE_F32 ? 4 : type == CS_DTYPE_F16 ? 2 : 0;
}

/* Element offset of row (K or V) `pos` of kv head h within the pages. */
static size_t kv_offset(const struct cs_kv_layer *kv, int32_t page, int32_t pos, int is_v, int h)
{
    size_t row = (size_t)kv->n_kv_heads * (size_t)kv->head_dim;
    size_t page_elems = 2 * (size_t)kv->page_size * row;
    return (size_t)page * page_elems + (size_t)is_v * kv->page_size * row +
           (size_t)(pos % kv->page_size) * row + (size_t)h * kv->head_dim;
}

static int kv_check(const struct cs_kv_layer *kv, const struct cs_batch *b)
{
    if (!kv || !kv->pages || kv_elem_bytes(kv->kv_type) == 0 || kv->page_size <= 0 ||
        kv->n_kv_heads <= 0 || kv->head_dim <= 0 || kv->n_pages <= 0)
        return CS_EINVAL;
    int rc = cpu_batch_check(b);
    if (rc != CS_OK)
        return rc;
    if (b->n_tokens > 0 && (!b->page_table || b->max_pages <= 0))
        return CS_EINVAL;
    for (int s = 0; s < b->n_seqs; s++) {
        int32_t max_pos = -1;
        for (int t = b->seq_start[s]; t < b->seq_start[s + 1]; t++)
            max_pos = b->pos[t] > max_pos ? b->pos[t] : max_pos;
        if (max_pos < 0)
            continue;
        if (max_pos / kv->page_size >= b->max_pages) {
            LOG_ERROR("cpu", "position %d of sequence %d needs more than %d pages", max_pos, s,
                      b->max_pages);
            return CS_ERANGE;
        }
        for (int p = 0; p <= max_pos / kv->page_size; p++) {
            int32_t page = b->page_table[(size_t)s * b->max_pages + p];
            if (page < 0 || page >= kv->n_pages) {
                LOG_ERROR("cpu", "sequence %d page %d is %d, outside 0..%d", s, p, page,
                          kv->n_pages - 1);
                return CS_ERANGE;
            }
        }
    }
    return CS_OK;
}

static int32_t kv_page(const struct cs_kv_layer *kv, const struct cs_batch *b, int s, int32_t pos)
{
    return b->page_table[(size_t)s * b->max_pages + pos / kv->page_size];
}

static void kv_row_write(const struct cs_kv_layer *kv, size_t off, const float *src, int n)
{
    if (kv->kv_type == CS_DTYPE_F32) {
        memcpy((float *)kv->pages + off, src, (size_t)n * 4);
    } else {
        uint16_t *dst = (uint16_t *)kv->pages + off;
        for (int i = 0; i < n; i++)
            dst[i] = cs_float_to_half(src[i]);
    }
}

/* Pointer to a head row as fp32: the page itself (F32) or tmp converted (F16). */
static const float *kv_row_read(const struct cs_kv_layer *kv, size_t off, float *tmp)
{
    if (kv->kv_type == CS_DTYPE_F32)
        return (const float *)kv->pages + off;
    const uint16_t *src = (const uint16_t *)kv->pages + off;
    for (int i = 0; i < kv->head_dim; i++)
        tmp[i] = cs_half_to_float(src[i]);
    return tmp;
}

int cpu_kv_store(struct cs_backend *be, struct cs_kv_layer *kv, const float *k, int k_stride,
                 const float *v, int v_stride, const struct cs_batch *b)
{
    int rc = kv_check(kv, b);
    if (rc != CS_OK)
        return rc;
    if (b->n_tokens > 0 && (!k || !v))
        return CS_EINVAL;
    int n = kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < b->n_tokens; t++) {
        int32_t pos = b->pos[t], page = kv_page(kv, b, b->seq_of[t], pos);
        kv_row_write(kv, kv_offset(kv, page, pos, 0, 0), k + (size_t)t * k_stride, n);
        kv_row_write(kv, kv_offset(kv, page, pos, 1, 0), v + (size_t)t * v_stride, n);
    }
    return CS_OK;
}

struct attn_job {
    struct cpu_ctx *ctx;
    float *out;
    const float *q;
    int q_token_stride, q_head_stride, n_heads;
    const struct cs_kv_layer *kv;
    float scale;
    const struct cs_batch *b;
};

static void attn_item(const struct attn_job *job, int t, int h, float *scratch)
{
    const struct cs_kv_layer *kv = job->kv;
    const struct cs_batch *b = job->b;
    int D = kv->head_dim, kvh = h / (job->n_heads / kv->n_kv_heads);
    int s = b->seq_of[t];
    int32_t pos = b->pos[t];
    float *tmp = scratch, *scores = scratch + D;
    const float *q = job->q + (size_t)t * job->q_token_stride + (size_t)h * job->q_head_stride;
    float m = -INFINITY;
    for (int32_t j = 0; j <= pos; j++) {
        size_t off = kv_offset(kv, kv_page(kv, b, s, j), j, 0, kvh);
        scores[j] = cpu_dot(q, kv_row_read(kv, off, tmp), D) * job->scale;
        m = scores[j] > m ? scores[j] : m;
    }
    float sum = 0.0f;
    for (int32_t j = 0; j <= pos; j++) {
        scores[j] = expf(scores[j] - m);
        sum += scores[j];
    }
    float *out = job->out + ((size_t)t * job->n_heads + h) * D;
    for (int d = 0; d < D; d++)
        out[d] = 0.0f;
    for (int32_t j = 0; j <= pos; j++) {
        size_t off = kv_offset(kv, kv_page(kv, b, s, j), j, 1, kvh);
        const float *vj = kv_row_read(kv, off, tmp);
        for (int d = 0; d < D; d++)
            out[d] += scores[j] * vj[d];
    }
    for (int d = 0; d < D; d++)
        out[d] /= sum;
}

static void attn_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct attn_job *job = arg;
    float *scratch = job->ctx->scratch[tid].buf;
    for (int64_t item = begin; item < end; item++)
        attn_item(job, (int)(item / job->n_heads), (int)(item % job->n_heads), scratch);
}

int cpu_attention(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                  int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                  const struct cs_batch *b)
{
    int rc = kv_check(kv, b);
    if (rc != CS_OK)
        return rc;
    if ((b->n_tokens > 0 && (!out || !q)) || n_heads <= 0 || n_heads % kv->n_kv_heads)
        return CS_EINVAL;
    int32_t max_pos = 0;
    for (int t = 0; t < b->n_tokens; t++)
        max_pos = b->pos[t] > max_pos ? b->pos[t] : max_pos;
    struct cpu_ctx *ctx = cpu_ctx_of(be);
    rc = cpu_scratch_reserve(ctx, (size_t)kv->head_dim + (size_t)max_pos + 1);
    if (rc != CS_OK)
        return rc;
    struct attn_job job = {.ctx = ctx, .out = out, .q = q, .q_token_stride = q_token_stride,
                           .q_head_stride = q_head_stride, .n_heads = n_heads, .kv = kv,
                           .scale = scale, .b = b};
    threadpool_for(ctx->pool, (int64_t)b->n_tokens * n_heads, 1, attn_range, &job);
    return CS_OK;
}
