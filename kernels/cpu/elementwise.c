/* elementwise.c - the element-wise ops and the embedding lookup (ops.h add,
 * silu_mul, sigmoid_gate, embed). Each element is independent, so any split
 * across threads gives the same bits. silu and sigmoid are
 * kernels/exact_math.h's, so these equal kernels/cuda/elementwise.cu's bits. */
#include "../../common/log.h"
#include "../../common/status.h"
#include "cpu.h"

#define EW_GRAIN 16384

struct ew_job {
    float *out;
    const float *a;
    const float *b;
};

static void add_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct ew_job *job = arg;
    for (int64_t i = begin; i < end; i++)
        job->out[i] += job->b[i];
}

int cpu_add(struct cs_backend *be, float *x, const float *y, size_t n)
{
    if (n && (!x || !y))
        return CS_EINVAL;
    struct ew_job job = {.out = x, .b = y};
    threadpool_for(cpu_ctx_of(be)->pool, (int64_t)n, EW_GRAIN, add_range, &job);
    return CS_OK;
}

static void silu_mul_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct ew_job *job = arg;
    for (int64_t i = begin; i < end; i++)
        job->out[i] = cpu_silu(job->a[i]) * job->b[i];
}

int cpu_silu_mul(struct cs_backend *be, float *out, const float *g, const float *u, size_t n)
{
    if (n && (!out || !g || !u))
        return CS_EINVAL;
    struct ew_job job = {.out = out, .a = g, .b = u};
    threadpool_for(cpu_ctx_of(be)->pool, (int64_t)n, EW_GRAIN, silu_mul_range, &job);
    return CS_OK;
}

struct gate_job {
    float *out;
    const float *gate;
    int token_stride, head_stride, n_heads, head_dim;
};

static void gate_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct gate_job *job = arg;
    for (int64_t item = begin; item < end; item++) {
        int64_t t = item / job->n_heads, h = item % job->n_heads;
        float *o = job->out + item * job->head_dim;
        const float *g = job->gate + t * job->token_stride + h * job->head_stride;
        for (int d = 0; d < job->head_dim; d++)
            o[d] *= cpu_sigmoid(g[d]);
    }
}

int cpu_sigmoid_gate(struct cs_backend *be, float *out, const float *gate, int gate_token_stride,
                     int gate_head_stride, int n_heads, int head_dim, int n_tokens)
{
    if (!out || !gate || n_heads <= 0 || head_dim <= 0 || n_tokens < 0)
        return CS_EINVAL;
    struct gate_job job = {.out = out, .gate = gate, .token_stride = gate_token_stride,
                           .head_stride = gate_head_stride, .n_heads = n_heads,
                           .head_dim = head_dim};
    threadpool_for(cpu_ctx_of(be)->pool, (int64_t)n_tokens * n_heads, 1 + EW_GRAIN / head_dim,
                   gate_range, &job);
    return CS_OK;
}

struct embed_job {
    float *out;
    const struct cs_weight *table;
    const int32_t *tokens;
};

static void embed_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct embed_job *job = arg;
    const struct cs_weight *w = job->table;
    size_t row_bytes = cpu_row_bytes(w->type, w->n_in);
    for (int64_t t = begin; t < end; t++) {
        const char *row = (const char *)w->data + (size_t)job->tokens[t] * row_bytes;
        cpu_row_to_float(job->out + t * w->n_in, row, w->type, w->n_in);
    }
}

int cpu_embed(struct cs_backend *be, float *out, const struct cs_weight *table,
              const struct cs_batch *b)
{
    if (!out || !table || !table->data || !b || b->n_tokens < 0 ||
        cpu_row_bytes(table->type, table->n_in) == 0)
        return CS_EINVAL;
    if (b->n_tokens > 0 && !b->tokens)
        return CS_EINVAL;
    for (int t = 0; t < b->n_tokens; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= table->n_out) {
            LOG_ERROR("cpu", "token id %d at batch index %d is outside the vocabulary of %lld",
                      b->tokens[t], t, (long long)table->n_out);
            return CS_ERANGE;
        }
    struct embed_job job = {.out = out, .table = table, .tokens = b->tokens};
    threadpool_for(cpu_ctx_of(be)->pool, b->n_tokens, 4, embed_range, &job);
    return CS_OK;
}
