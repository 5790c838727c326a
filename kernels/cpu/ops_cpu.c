/* ops_cpu.c - the CPU backend: host memory, weight upload, the thread pool and
 * per-thread scratch, and the struct cs_backend table whose ops live in the
 * other files of this folder (one per op family).
 *
 * Memory is plain host memory (64-byte aligned, zero-filled); weights are
 * copied in ggml layout so the GGUF mapping can be closed after loading. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../../common/status.h"
#include "cpu.h"

#define CPU_MAX_THREADS 256

void *cpu_aligned_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

int cpu_scratch_reserve(struct cpu_ctx *ctx, size_t n)
{
    for (int i = 0; i < ctx->n_threads; i++) {
        struct cpu_scratch *s = &ctx->scratch[i];
        if (s->cap >= n)
            continue;
        float *buf = cpu_aligned_alloc(n * sizeof(float));
        if (!buf)
            return CS_ENOMEM;
        free(s->buf);
        s->buf = buf;
        s->cap = n;
    }
    return CS_OK;
}

int cpu_xq_reserve(struct cpu_ctx *ctx, size_t bytes)
{
    if (ctx->xq_bytes >= bytes)
        return CS_OK;
    void *p = cpu_aligned_alloc(bytes);
    if (!p)
        return CS_ENOMEM;
    free(ctx->xq);
    ctx->xq = p;
    ctx->xq_bytes = bytes;
    return CS_OK;
}

/* ---- memory ---- */

static int cpu_alloc(struct cs_backend *be, void **ptr, size_t bytes)
{
    if (!ptr)
        return CS_EINVAL;
    *ptr = cpu_aligned_alloc(bytes);
    if (!*ptr) {
        LOG_ERROR("cpu", "cannot allocate %zu bytes", bytes);
        return CS_ENOMEM;
    }
    return CS_OK;
}

static void cpu_free(struct cs_backend *be, void *ptr)
{
    free(ptr);
}

static int cpu_memcpy(struct cs_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && (!dst || !src))
        return CS_EINVAL;
    if (bytes)
        memmove(dst, src, bytes);
    return CS_OK;
}

static int cpu_zero(struct cs_backend *be, void *dst, size_t bytes)
{
    if (bytes && !dst)
        return CS_EINVAL;
    if (bytes)
        memset(dst, 0, bytes);
    return CS_OK;
}

static int cpu_sync(struct cs_backend *be)
{
    return CS_OK;
}

static int cpu_mem_info(struct cs_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    long total = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || avail < 0 || total <= 0)
        return CS_EIO;
    if (free_bytes)
        *free_bytes = (size_t)avail * (size_t)page;
    if (total_bytes)
        *total_bytes = (size_t)total * (size_t)page;
    return CS_OK;
}

#define CPU_UPLOAD_PIECE_BYTES ((size_t)32 << 20)

static int cpu_weight_upload(struct cs_backend *be, struct cs_weight *w, uint32_t type,
                             int64_t n_in, int64_t n_out, const void *host_data)
{
    if (!w || !host_data || n_in <= 0 || n_out <= 0)
        return CS_EINVAL;
    size_t row = cpu_row_bytes(type, n_in);
    if (row == 0) {
        LOG_ERROR("cpu", "weight of type %u with %lld inputs is not supported", type,
                  (long long)n_in);
        return CS_EUNSUPPORTED;
    }
    size_t bytes = row * (size_t)n_out;
    void *data = cpu_aligned_alloc(bytes);
    if (!data) {
        LOG_ERROR("cpu", "cannot allocate %zu bytes for a weight", bytes);
        return CS_ENOMEM;
    }
    /* in pieces, so a large weight reports progress (the source is often the mmap) */
    for (size_t at = 0; at < bytes; at += CPU_UPLOAD_PIECE_BYTES) {
        size_t n = bytes - at < CPU_UPLOAD_PIECE_BYTES ? bytes - at : CPU_UPLOAD_PIECE_BYTES;
        memcpy((char *)data + at, (const char *)host_data + at, n);
        if (be->upload_progress)
            be->upload_progress(be->upload_progress_ctx, at + n);
    }
    *w = (struct cs_weight){.type = type, .n_in = n_in, .n_out = n_out, .data = data,
                            .bytes = bytes, .aux = NULL};
    return CS_OK;
}

static void cpu_weight_free(struct cs_backend *be, struct cs_weight *w)
{
    if (!w)
        return;
    free(w->data);
    memset(w, 0, sizeof(*w));
}

int cpu_batch_check(const struct cs_batch *b)
{
    if (!b || b->n_tokens < 0 || b->n_seqs < 0 || (b->n_tokens > 0 && (!b->pos || !b->seq_of)) ||
        !b->seq_start)
        return CS_EINVAL;
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return CS_EINVAL;
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->seq_start[s] > b->seq_start[s + 1])
            return CS_EINVAL;
        for (int t = b->seq_start[s]; t < b->seq_start[s + 1]; t++)
            if (b->seq_of[t] != s || b->pos[t] < 0)
                return CS_EINVAL;
    }
    return CS_OK;
}

static int cpu_step_begin(struct cs_backend *be, const struct cs_batch *b)
{
    return cpu_batch_check(b);
}

static void cpu_destroy(struct cs_backend *be)
{
    if (!be)
        return;
    struct cpu_ctx *ctx = be->ctx;
    if (ctx) {
        threadpool_destroy(ctx->pool);
        if (ctx->scratch)
            for (int i = 0; i < ctx->n_threads; i++)
                free(ctx->scratch[i].buf);
        free(ctx->scratch);
        free(ctx->xq);
        free(ctx);
    }
    free(be);
}

static void cpu_table_fill(struct cs_backend *be)
{
    be->name = "cpu";
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_memcpy;
    be->download = cpu_memcpy;
    be->upload_async = cpu_memcpy;
    be->download_async = cpu_memcpy;
    be->copy = cpu_memcpy;
    be->zero = cpu_zero;
    be->sync = cpu_sync;
    be->mem_info = cpu_mem_info;
    be->weight_upload = cpu_weight_upload;
    be->weight_free = cpu_weight_free;
    be->step_begin = cpu_step_begin;
    be->embed = cpu_embed;
    be->rmsnorm = cpu_rmsnorm;
    be->matmul = cpu_matmul;
    be->matmul_scaled = cpu_matmul_scaled;
    be->add = cpu_add;
    be->add_rmsnorm = cpu_add_rmsnorm;
    be->silu_mul = cpu_silu_mul;
    be->head_norm_rope = cpu_head_norm_rope;
    be->kv_store = cpu_kv_store;
    be->attention = cpu_attention;
    be->sigmoid_gate = cpu_sigmoid_gate;
    be->conv1d_silu = cpu_conv1d_silu;
    be->gdn = cpu_gdn;
    be->gated_rmsnorm = cpu_gated_rmsnorm;
    be->sample = cpu_sample;
    be->destroy = cpu_destroy;
}

/* Create the CPU backend with opt->n_threads threads (0: every online core,
 * capped at 256) and the chosen matmul mode. CS_OK, CS_EINVAL or CS_ENOMEM. */
int cs_backend_cpu_create(struct cs_backend **out, const struct cs_backend_cpu_options *opt)
{
    if (!out || !opt || opt->n_threads < 0)
        return CS_EINVAL;
    int n_threads = opt->n_threads;
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > CPU_MAX_THREADS)
        n_threads = CPU_MAX_THREADS;
    struct cs_backend *be = calloc(1, sizeof(*be));
    struct cpu_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return CS_ENOMEM;
    }
    be->ctx = ctx;
    cpu_table_fill(be);
    ctx->int8_matmul = opt->int8_matmul;
    ctx->scratch = calloc((size_t)n_threads, sizeof(*ctx->scratch));
    int rc = ctx->scratch ? threadpool_create(&ctx->pool, n_threads) : CS_ENOMEM;
    if (rc != CS_OK) {
        cpu_destroy(be);
        LOG_ERROR("cpu", "cannot start %d threads: %s", n_threads, cs_strerror(rc));
        return rc;
    }
    ctx->n_threads = n_threads;
    LOG_INFO("cpu", "cpu backend threads=%d matmul=%s", n_threads,
             opt->int8_matmul ? "int8" : "fp32");
    *out = be;
    return CS_OK;
}
