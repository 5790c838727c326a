/* ops_cuda.cu - the CUDA backend: its context (device, compute stream, batch
 * upload, scratch), the memory functions, step_begin, and the table of
 * kernels/ops.h filled with the entry points of the other .cu files of this
 * folder. The matrix entries (weight upload/free, matmul and the fused
 * projections) are ops_matmul.cu's, over matmul.h.
 *
 * All ops run asynchronously on one compute stream; sync waits for it.
 * Pure decode steps can be recorded as CUDA graphs and replayed (the
 * graph_* hooks; section "decode steps as CUDA graphs" below).
 * Errors are logged once (CS_CUDA_CHECK) and returned as CS_ECUDA; nothing
 * here exits or aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "launch.cuh"
#include "matmul.h"
#include "ffn_ring.h"
#include "ops_cuda.cuh"

/* ---- helpers shared by the op files ---- */

/* Bumped whenever backend device memory is freed or a buffer moves; a graph
 * recorded under an older value may hold a dead pointer. */
static unsigned long long g_mem_gen = 1;
/* The calling thread is recording a graph: no allocation, no synchronisation. */
static __thread bool t_recording;

unsigned long long cuda_mem_generation(void)
{
    return __atomic_load_n(&g_mem_gen, __ATOMIC_ACQUIRE);
}

void cuda_mem_generation_bump(void)
{
    __atomic_add_fetch(&g_mem_gen, 1, __ATOMIC_ACQ_REL);
}

int cuda_buffer_reserve(void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap && *buf)
        return CS_OK;
    if (t_recording) {
        /* the warm-up step sizes buffers; growing now would stall a capture */
        LOG_DEBUG("cuda", "buffer growth to %zu bytes while recording a graph: step runs eagerly",
                  bytes);
        return CS_EAGAIN;
    }
    cuda_mem_generation_bump();
    size_t want = bytes + bytes / 4 + 4096;
    if (*buf) {
        CS_CUDA_CHECK(cudaDeviceSynchronize());   /* queued kernels may still use it */
        CS_CUDA_CHECK(cudaFree(*buf));
        *buf = NULL;
        *cap = 0;
    }
    CS_CUDA_CHECK(cudaMalloc(buf, want));
    *cap = want;
    return CS_OK;
}

int cuda_batch_check(struct cuda_ctx *c, const struct cs_batch *b, const char *op)
{
    if (!b || b->n_tokens != c->batch.n_tokens || b->n_seqs != c->batch.n_seqs) {
        LOG_ERROR("cuda", "%s: batch differs from the one of step_begin (n_tokens=%d n_seqs=%d)",
                  op, b ? b->n_tokens : -1, b ? b->n_seqs : -1);
        return CS_EINVAL;
    }
    return CS_OK;
}

/* ---- memory ---- */

static int cu_alloc(struct cs_backend *be, void **ptr, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    *ptr = NULL;
    if (bytes == 0)
        bytes = 1;
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        LOG_ERROR("cuda", "cudaMalloc(%zu bytes) failed: %s", bytes, cudaGetErrorString(e));
        *ptr = NULL;
        return e == cudaErrorMemoryAllocation ? CS_ENOMEM : CS_ECUDA;
    }
    cuda_pdl_barrier();   /* launch.cuh: the launch after a copy or memset is plain */
    CS_CUDA_CHECK(cudaMemsetAsync(*ptr, 0, bytes, c->stream));
    return CS_OK;
}

static void cu_free(struct cs_backend *be, void *ptr)
{
    (void)be;
    if (ptr) {
        cuda_mem_generation_bump();
        cudaFree(ptr);   /* synchronises the device; an error leaves nothing to do */
    }
}

static int cu_upload_async(struct cs_backend *be, void *dst, const void *host_src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    cuda_pdl_barrier();
    if (bytes > 0)
        CS_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
    return CS_OK;
}

static int cu_download_async(struct cs_backend *be, void *host_dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    cuda_pdl_barrier();
    if (bytes > 0)
        CS_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return CS_OK;
}

/* The synchronous copies: the queued one, then a wait (host_src may be
 * freed, host_dst read, at return). */
static int cu_upload(struct cs_backend *be, void *dst, const void *host_src, size_t bytes)
{
    int rc = cu_upload_async(be, dst, host_src, bytes);
    if (rc == CS_OK && bytes > 0)
        CS_CUDA_CHECK(cudaStreamSynchronize(cuda_ctx_of(be)->stream));
    return rc;
}

static int cu_download(struct cs_backend *be, void *host_dst, const void *src, size_t bytes)
{
    int rc = cu_download_async(be, host_dst, src, bytes);
    if (rc == CS_OK && bytes > 0)
        CS_CUDA_CHECK(cudaStreamSynchronize(cuda_ctx_of(be)->stream));
    return rc;
}

static int cu_copy(struct cs_backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (bytes == 0)
        return CS_OK;
    cuda_pdl_barrier();
    CS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return CS_OK;
}

static int cu_zero(struct cs_backend *be, void *dst, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (bytes == 0)
        return CS_OK;
    cuda_pdl_barrier();
    CS_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, c->stream));
    return CS_OK;
}

static int cu_sync(struct cs_backend *be)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    CS_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return CS_OK;
}

static int cu_mem_info(struct cs_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    (void)be;
    size_t f = 0, t = 0;
    CS_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return CS_OK;
}

/* ---- pinned host memory (pipeline edges) ---- */

/* Page-lock an existing host range (a shared-memory edge mapping): copies
 * from and into it are then DMA. A failure is returned, not logged as an
 * error (the caller warns and goes on unpinned), and cleared so that no later
 * cudaGetLastError check reports it. */
static int cu_host_register(struct cs_backend *be, void *ptr, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (!ptr || bytes == 0)
        return CS_EINVAL;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess)
        e = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        LOG_DEBUG("cuda", "cudaHostRegister(%p, %zu bytes): %s", ptr, bytes, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? CS_ENOMEM : CS_ECUDA;
    }
    return CS_OK;
}

static void cu_host_unregister(struct cs_backend *be, void *ptr)
{
    (void)be;
    if (!ptr)
        return;
    cudaError_t e = cudaHostUnregister(ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        LOG_WARN("cuda", "cudaHostUnregister(%p): %s", ptr, cudaGetErrorString(e));
    }
}

/* ---- step_begin: the batch and the attention work lists, one upload ---- */

struct stage_layout {
    size_t off[8];      /* tokens pos seq_of seq_start slot page_table dec ptiles (int32 units) */
    size_t n_int32;
};

static void stage_layout_compute(struct stage_layout *l, const struct cs_batch *b, int n_dec,
                                 int n_ptiles)
{
    size_t n = (size_t)b->n_tokens, s = (size_t)b->n_seqs;
    size_t sizes[8] = {n, n, n, s + 1, s, s * (size_t)(b->max_pages > 0 ? b->max_pages : 0),
                       (size_t)n_dec, 2 * (size_t)n_ptiles};
    size_t at = 0;
    for (int i = 0; i < 8; i++) {
        l->off[i] = at;
        at += (sizes[i] + 3) & ~(size_t)3;   /* 16-byte aligned sections */
    }
    l->n_int32 = at;
}

static void stage_copy(int32_t *dst, const int32_t *src, size_t n)
{
    if (src)
        memcpy(dst, src, n * sizeof(int32_t));
    else
        memset(dst, 0, n * sizeof(int32_t));
}

/* Count decode tokens (a sequence with one token in this step) and prefill
 * query tiles (of CS_ATTN_PTILE tokens); when out arrays are given, fill
 * them (tiles as int2: first token, token count). Returns the splits of the
 * longest decode context through *max_splits, the largest prefill position
 * through *max_ppos. */
static void batch_work_lists(const struct cs_batch *b, int32_t *dec, int32_t *pt, int *n_dec,
                             int *n_ptiles, int *max_splits, int *max_ppos)
{
    int nd = 0, np = 0, ms = 0, mp = -1;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_start[s], t1 = b->seq_start[s + 1];
        if (t1 - t0 == 1) {
            if (dec)
                dec[nd] = t0;
            nd++;
            int splits = cs_attn_n_splits(b->pos[t0]);
            if (splits > ms)
                ms = splits;
            continue;
        }
        for (int t = t0; t < t1; t += CS_ATTN_PTILE) {
            int nt = t1 - t < CS_ATTN_PTILE ? t1 - t : CS_ATTN_PTILE;
            if (pt) {
                pt[2 * np] = t;
                pt[2 * np + 1] = nt;
            }
            np++;
            for (int i = t; i < t + nt; i++)
                mp = b->pos[i] > mp ? b->pos[i] : mp;
        }
    }
    *n_dec = nd;
    *n_ptiles = np;
    *max_splits = ms;
    *max_ppos = mp;
}

static int batch_validate(const struct cs_batch *b)
{
    if (b->n_tokens < 0 || b->n_seqs < 0 || (b->n_tokens > 0 && b->n_seqs <= 0))
        return CS_EINVAL;
    if (b->n_seqs > 0 && (!b->seq_start || !b->pos || b->seq_start[0] != 0 ||
                          b->seq_start[b->n_seqs] != b->n_tokens))
        return CS_EINVAL;
    for (int s = 0; s < b->n_seqs; s++)
        if (b->seq_start[s + 1] < b->seq_start[s])
            return CS_EINVAL;
    for (int t = 0; t < b->n_tokens; t++)
        if (b->pos[t] < 0)
            return CS_EINVAL;
    return CS_OK;
}

static int cu_step_begin(struct cs_backend *be, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (!b || batch_validate(b) != CS_OK) {
        LOG_ERROR("cuda", "step_begin: malformed batch");
        return CS_EINVAL;
    }
    int n_dec, n_pt, max_splits, max_ppos;
    batch_work_lists(b, NULL, NULL, &n_dec, &n_pt, &max_splits, &max_ppos);
    struct stage_layout l;
    stage_layout_compute(&l, b, n_dec, n_pt);
    size_t bytes = l.n_int32 * sizeof(int32_t) + 16;
    CS_CUDA_CHECK(cudaEventSynchronize(c->stage_done));   /* the last upload left h_stage */
    if (bytes > c->stage_cap) {
        cuda_mem_generation_bump();                       /* graphs read d_stage */
        CS_CUDA_CHECK(cudaStreamSynchronize(c->stream));  /* queued kernels read d_stage */
        if (c->h_stage)
            cudaFreeHost(c->h_stage);
        if (c->d_stage)
            cudaFree(c->d_stage);
        c->h_stage = c->d_stage = NULL;
        c->stage_cap = 0;
        size_t want = bytes * 2;
        CS_CUDA_CHECK(cudaMallocHost(&c->h_stage, want));
        CS_CUDA_CHECK(cudaMalloc(&c->d_stage, want));
        c->stage_cap = want;
    }
    int32_t *h = (int32_t *)c->h_stage, *d = (int32_t *)c->d_stage;
    size_t n = (size_t)b->n_tokens, s = (size_t)b->n_seqs;
    stage_copy(h + l.off[0], b->tokens, n);
    stage_copy(h + l.off[1], b->pos, n);
    stage_copy(h + l.off[2], b->seq_of, n);
    stage_copy(h + l.off[3], b->seq_start, s + 1);
    stage_copy(h + l.off[4], b->slot, s);
    if (b->max_pages > 0)
        stage_copy(h + l.off[5], b->page_table, s * (size_t)b->max_pages);
    batch_work_lists(b, h + l.off[6], h + l.off[7], &n_dec, &n_pt, &max_splits, &max_ppos);
    cuda_pdl_barrier();
    CS_CUDA_CHECK(cudaMemcpyAsync(d, h, l.n_int32 * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  c->stream));
    CS_CUDA_CHECK(cudaEventRecord(c->stage_done, c->stream));
    struct cuda_batch *cb = &c->batch;
    cb->n_tokens = b->n_tokens;
    cb->n_seqs = b->n_seqs;
    cb->max_pages = b->max_pages;
    cb->tokens = d + l.off[0];
    cb->pos = d + l.off[1];
    cb->seq_of = d + l.off[2];
    cb->seq_start = d + l.off[3];
    cb->slot = d + l.off[4];
    cb->page_table = d + l.off[5];
    cb->dec_tokens = d + l.off[6];
    cb->n_dec = n_dec;
    cb->max_dec_splits = max_splits;
    cb->ptiles = (int2 *)(d + l.off[7]);
    cb->n_ptiles = n_pt;
    cb->max_ptile_pos = max_ppos;
    return CS_OK;
}

/* ---- decode steps as CUDA graphs ----
 *
 * A pure decode step (every sequence one token, at most CUDA_GRAPH_MAX_SEQS)
 * launches the same kernels with the same arguments every time its key
 * (owner, variant, n_seqs, max_pages, split bucket, batch buffer) is the
 * same: step_begin puts the batch arrays at fixed offsets of d_stage, the
 * model's buffers and weights do not move, and the attention decode grid is
 * sized by a power-of-two bucket of splits, not by the current context
 * (blocks past a sequence's length exit at once, the combine merges the
 * same splits in the same order, so the bits equal the eager ones).
 * Life of a key: first sight runs eagerly (warm-up: buffers reach their
 * size) and is remembered; the next step with the same key is recorded by
 * stream capture, instantiated and launched; later ones replay. A changed
 * shape re-warms the key's entry; a bumped memory generation (free or
 * buffer move) makes every entry stale. */

/* Attention splits launched for a decode step whose longest context needs ms. */
static int graph_split_bucket(int ms)
{
    int p = 1;
    while (p < ms && p < (1 << 24))
        p <<= 1;
    return p;
}

static void graph_entry_reset(struct cuda_ctx *c, struct cuda_graph_entry *e)
{
    if (e->exec) {
        cudaStreamSynchronize(c->stream);   /* a launch of it may be in flight */
        cudaGraphExecDestroy(e->exec);
    }
    memset(e, 0, sizeof(*e));
}

static bool graph_entry_matches(const struct cuda_ctx *c, const struct cuda_graph_entry *e,
                                const void *owner, uint32_t variant, unsigned long long gen)
{
    const struct cuda_batch *cb = &c->batch;
    return e->state != CUDA_GRAPH_FREE && e->owner == owner && e->variant == variant &&
           e->n_seqs == cb->n_seqs && e->max_pages == cb->max_pages &&
           e->splits == cb->max_dec_splits && e->d_stage == c->d_stage && e->mem_gen == gen;
}

/* The entry of (owner, variant, n_seqs), else a free one, else the least
 * recently used. */
static int graph_entry_find(struct cuda_ctx *c, const void *owner, uint32_t variant)
{
    int free_i = -1, lru_i = 0;
    for (int i = 0; i < CUDA_GRAPH_SLOTS; i++) {
        struct cuda_graph_entry *e = &c->graphs[i];
        if (e->state == CUDA_GRAPH_FREE) {
            if (free_i < 0)
                free_i = i;
            continue;
        }
        if (e->owner == owner && e->variant == variant && e->n_seqs == c->batch.n_seqs)
            return i;
        if (e->last_use < c->graphs[lru_i].last_use)
            lru_i = i;
    }
    return free_i >= 0 ? free_i : lru_i;
}

static bool graph_step_is_decode(const struct cuda_batch *cb)
{
    return cb->n_tokens > 0 && cb->n_tokens == cb->n_seqs && cb->n_dec == cb->n_seqs &&
           cb->n_ptiles == 0 && cb->n_seqs <= CUDA_GRAPH_MAX_SEQS;
}

/* A recording that did not work: forget the entry; after repeated failures
 * stop trying (graphs off, every step eager). */
static void graph_record_failed(struct cuda_ctx *c, struct cuda_graph_entry *e, cudaError_t err)
{
    (void)cudaGetLastError();   /* clear a capture error so later checks do not see it */
    graph_entry_reset(c, e);
    c->graph_stats.failed++;
    c->graph_stats.eager++;
    if (c->graph_stats.failed >= 8 && !c->graphs_off) {
        c->graphs_off = true;
        LOG_WARN("cuda", "decode-step graphs off after %llu failed recordings",
                 (unsigned long long)c->graph_stats.failed);
    } else {
        LOG_WARN("cuda", "decode-step graph not recorded (%s): the step runs eagerly",
                 err == cudaSuccess ? "an op failed" : cudaGetErrorString(err));
    }
}

static int cu_graph_begin(struct cs_backend *be, const void *owner, uint32_t variant)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    struct cuda_batch *cb = &c->batch;
    c->graph_cur = -1;
    if (t_recording || !graph_step_is_decode(cb))
        return CS_GRAPH_EAGER;
    /* the same grid eager or recorded, so warm-up sizes the partial buffer */
    cb->max_dec_splits = graph_split_bucket(cb->max_dec_splits);
    if (c->graphs_off) {
        c->graph_stats.eager++;
        return CS_GRAPH_EAGER;
    }
    unsigned long long gen = cuda_mem_generation();
    int i = graph_entry_find(c, owner, variant);
    struct cuda_graph_entry *e = &c->graphs[i];
    bool same = graph_entry_matches(c, e, owner, variant, gen);
    e->last_use = ++c->graph_clock;
    cuda_pdl_barrier();   /* a graph's first kernel, or the one after a replay, is plain */
    if (same && e->state == CUDA_GRAPH_READY) {
        CS_CUDA_CHECK(cudaGraphLaunch(e->exec, c->stream));
        c->graph_stats.replayed++;
        return CS_GRAPH_REPLAYED;
    }
    if (same && e->state == CUDA_GRAPH_SEEN) {
        cudaError_t err = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
        if (err != cudaSuccess) {
            graph_record_failed(c, e, err);
            return CS_GRAPH_EAGER;
        }
        t_recording = true;
        c->graph_cur = i;
        return CS_GRAPH_RECORD;
    }
    graph_entry_reset(c, e);
    e->state = CUDA_GRAPH_SEEN;
    e->owner = owner;
    e->variant = variant;
    e->n_seqs = cb->n_seqs;
    e->max_pages = cb->max_pages;
    e->splits = cb->max_dec_splits;
    e->d_stage = c->d_stage;
    e->mem_gen = gen;
    e->last_use = ++c->graph_clock;
    c->graph_stats.eager++;
    return CS_GRAPH_EAGER;
}

static int cu_graph_end(struct cs_backend *be, bool ops_ok)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int i = c->graph_cur;
    c->graph_cur = -1;
    if (i < 0 || !t_recording)
        return CS_EINVAL;
    t_recording = false;
    cuda_pdl_barrier();
    struct cuda_graph_entry *e = &c->graphs[i];
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t err = cudaStreamEndCapture(c->stream, &g);
    if (err == cudaSuccess && ops_ok && g)
        err = cudaGraphInstantiateWithFlags(&exec, g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (err == cudaSuccess && exec)
        err = cudaGraphLaunch(exec, c->stream);
    if (err != cudaSuccess || !exec) {
        if (exec)
            cudaGraphExecDestroy(exec);
        graph_record_failed(c, e, err);
        return ops_ok ? CS_ECUDA : CS_EAGAIN;
    }
    e->exec = exec;
    e->state = CUDA_GRAPH_READY;
    c->graph_stats.recorded++;
    LOG_DEBUG("cuda", "decode-step graph recorded: %d seqs, %d pages, %d splits, variant %u",
              e->n_seqs, e->max_pages, e->splits, e->variant);
    return CS_OK;
}

static void cu_graph_enable(struct cs_backend *be, bool on)
{
    cuda_ctx_of(be)->graphs_off = !on;
}

static void cu_pdl_enable(struct cs_backend *be, bool on)
{
    (void)be;
    cuda_pdl_set_enabled(on);   /* one setting per process: kernels of any backend */
}

static void cu_graph_stats(struct cs_backend *be, struct cs_graph_stats *out)
{
    if (out)
        *out = cuda_ctx_of(be)->graph_stats;
}

/* ---- lifecycle ---- */

static void cu_destroy(struct cs_backend *be)
{
    if (!be)
        return;
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream)
            cudaStreamSynchronize(c->stream);
        for (int i = 0; i < CUDA_GRAPH_SLOTS; i++)
            graph_entry_reset(c, &c->graphs[i]);
        cuda_mem_generation_bump();
        cudaFree(c->attn_part);
        cudaFree(c->mm_scratch);
        cudaFree(c->gdnc_scratch);
        cudaFree(c->apf_part);
        cudaFree(c->apf_k8);
        cudaFree(c->ffn_buf);
        cuda_matmul_release_stream(c->stream);
        cudaFree(c->d_sample);
        cudaFreeHost(c->h_sample);
        cudaFree(c->d_stage);
        cudaFreeHost(c->h_stage);
        if (c->stage_done)
            cudaEventDestroy(c->stage_done);
        if (c->stream)
            cudaStreamDestroy(c->stream);
        free(c);
    }
    free((void *)be->name);
    free(be);
}

static void table_fill(struct cs_backend *be)
{
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->upload_async = cu_upload_async;
    be->download_async = cu_download_async;
    be->copy = cu_copy;
    be->zero = cu_zero;
    be->sync = cu_sync;
    be->mem_info = cu_mem_info;
    be->weight_upload = cuda_op_weight_upload;
    be->weight_free = cuda_op_weight_free;
    be->step_begin = cu_step_begin;
    be->embed = cuda_op_embed;
    be->rmsnorm = cuda_op_rmsnorm;
    be->matmul = cuda_op_matmul;
    be->matmul_scaled = cuda_op_matmul_scaled;
    be->add = cuda_op_add;
    be->add_rmsnorm = cuda_op_add_rmsnorm;
    be->silu_mul = cuda_op_silu_mul;
    be->matmul_swiglu = cuda_op_matmul_swiglu;
    be->matmul_gated_rmsnorm = cuda_op_matmul_gated_rmsnorm;
    be->matmul_sigmoid_gate = cuda_op_matmul_sigmoid_gate;
    be->matmul_add_rmsnorm = cuda_op_matmul_add_rmsnorm;
#ifndef CS_FUSE_CONV   /* -D CS_FUSE_CONV=0 only to time the two launches against the fusion */
#define CS_FUSE_CONV 1
#endif
    if (CS_FUSE_CONV)
        be->matmul_add_rmsnorm_conv1d = cuda_op_matmul_add_rmsnorm_conv1d;
    be->ffn_add_rmsnorm = cuda_op_ffn_add_rmsnorm;   /* -DCS_FFN_RING=0: always CS_EUNSUPPORTED */
    be->proj_ffn_add_rmsnorm = cuda_op_proj_ffn_add_rmsnorm;   /* the same switch */
    be->head_norm_rope = cuda_op_head_norm_rope;
    be->kv_store = cuda_op_kv_store;
    be->qk_norm_rope_store = cuda_op_qk_norm_rope_store;
    be->attention = cuda_op_attention;
    be->sigmoid_gate = cuda_op_sigmoid_gate;
    be->conv1d_silu = cuda_op_conv1d_silu;
    be->gdn = cuda_op_gdn;
    be->gated_rmsnorm = cuda_op_gated_rmsnorm;
    be->sample = cuda_op_sample;
    be->graph_begin = cu_graph_begin;
    be->graph_end = cu_graph_end;
    be->graph_enable = cu_graph_enable;
    be->pdl_enable = cu_pdl_enable;
    be->graph_stats = cu_graph_stats;
    be->host_register = cu_host_register;
    be->host_unregister = cu_host_unregister;
    be->destroy = cu_destroy;
}

static int ctx_init(struct cuda_ctx *c, int device)
{
    int n_dev = 0;
    CS_CUDA_CHECK(cudaGetDeviceCount(&n_dev));
    if (device < 0 || device >= n_dev) {
        LOG_ERROR("cuda", "device %d requested but %d CUDA device(s) present", device, n_dev);
        return CS_EINVAL;
    }
    c->device = device;
    c->graph_cur = -1;
    c->ffn_ring_on = CS_FFN_RING_DEFAULT;
    CS_CUDA_CHECK(cudaSetDevice(device));
    CS_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CS_CUDA_CHECK(cudaEventCreateWithFlags(&c->stage_done, cudaEventDisableTiming));
    struct cudaDeviceProp prop;
    CS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    /* before any capture; the sm_80/90 paths follow the code, not the card */
    int code = cuda_code_arch_probe(device);
    LOG_INFO("cuda", "device %d: %s sm_%d%d, %d SMs, %.1f GiB, kernels compiled for sm_%d%s",
             device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1u << 30), code / 10,
             code / 10 < prop.major * 10 + prop.minor ? " (an older target's code)" : "");
    if (code < 100) {
        LOG_ERROR("cuda", "device %d: no kernel of this build runs on it (sm_%d%d)", device,
                  prop.major, prop.minor);
        return CS_EUNSUPPORTED;
    }
    return CS_OK;
}

extern "C" int cs_backend_cuda_create(struct cs_backend **out, int device)
{
    *out = NULL;
    struct cs_backend *be = (struct cs_backend *)calloc(1, sizeof(*be));
    struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof(*c));
    char *name = (char *)malloc(32);
    if (!be || !c || !name) {
        free(be);
        free(c);
        free(name);
        return CS_ENOMEM;
    }
    snprintf(name, 32, "cuda:%d", device);
    be->name = name;
    be->ctx = c;
    table_fill(be);
    int rc = ctx_init(c, device);
    if (rc != CS_OK) {
        cu_destroy(be);
        return rc;
    }
    *out = be;
    return CS_OK;
}
