/* msg_testlib.c - random valid protocol messages and their comparison (see
 * msg_testlib.h). Every generated value lies inside the ranges messages.h
 * documents, edges included (slot 65535, n_logprobs -1, empty lists). */
#include "msg_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rnd_init(struct rnd *r, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->state = seed * 0x9E3779B97F4A7C15ull + 1;
}

void rnd_release(struct rnd *r)
{
    for (int i = 0; i < r->n_blocks; i++)
        free(r->blocks[i]);
    free(r->blocks);
    r->blocks = NULL;
    r->n_blocks = r->cap_blocks = 0;
}

uint64_t rnd_u64(struct rnd *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t rnd_range(struct rnd *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
    if (span == 0)
        return (int64_t)rnd_u64(r);
    /* edges are interesting: pick an end now and then */
    uint64_t k = rnd_u64(r);
    if ((k & 15) == 0)
        return (k & 16) ? hi : lo;
    return (int64_t)((uint64_t)lo + rnd_u64(r) % span);
}

static float rnd_float(struct rnd *r, float lo, float hi)
{
    float u = (float)(rnd_u64(r) >> 40) * (1.0f / 16777216.0f);
    float v = lo + (hi - lo) * u;
    return v > hi ? hi : v;
}

static void *rnd_alloc(struct rnd *r, size_t bytes)
{
    if (r->n_blocks == r->cap_blocks) {
        int cap = r->cap_blocks ? 2 * r->cap_blocks : 64;
        void **nb = realloc(r->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            abort(); /* test code */
        r->blocks = nb;
        r->cap_blocks = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        abort();
    r->blocks[r->n_blocks++] = p;
    return p;
}

static char *rnd_str(struct rnd *r, int min_len, int max_len)
{
    int n = (int)rnd_range(r, min_len, max_len);
    char *s = rnd_alloc(r, (size_t)n + 1);
    for (int i = 0; i < n; i++)
        s[i] = (char)rnd_range(r, 1, 255);
    return s;
}

static int32_t *rnd_ids(struct rnd *r, int32_t n, int32_t lo, int32_t hi)
{
    if (n == 0 && (rnd_u64(r) & 1))
        return NULL;
    int32_t *a = rnd_alloc(r, (size_t)n * 4);
    for (int32_t i = 0; i < n; i++)
        a[i] = (int32_t)rnd_range(r, lo, hi);
    return a;
}

/* ================================================================
 * Bodies
 * ================================================================ */

static void rnd_hello(struct rnd *r, struct msg_hello *b, int size)
{
    b->stage = (int32_t)rnd_range(r, 0, MSG_MAX_STAGES - 1);
    b->gpu_index = (int32_t)rnd_range(r, -1, 4095);
    b->device_name = (rnd_u64(r) & 3) ? rnd_str(r, 0, MSG_MAX_NAME) : NULL;
    b->total_bytes = rnd_u64(r);
    b->free_bytes = b->total_bytes ? rnd_u64(r) % b->total_bytes : 0;
    b->capabilities = (uint32_t)rnd_u64(r) & MSG_CAP_ALL;
    b->pid = (int32_t)rnd_range(r, 1, INT32_MAX);
    b->proto_version = CS_PROTO_VERSION;
    (void)size;
}

static void rnd_edge(struct rnd *r, char **name, char **notify, bool none)
{
    *name = none ? ((rnd_u64(r) & 1) ? rnd_str(r, 0, 0) : NULL) : rnd_str(r, 1, MSG_MAX_NAME);
    *notify = none ? NULL : rnd_str(r, 1, MSG_MAX_NAME);
}

static void rnd_load(struct rnd *r, struct msg_load *b, int size)
{
    b->model_path = rnd_str(r, 1, 64 + size * 64);
    b->n_stages = (int32_t)rnd_range(r, 1, MSG_MAX_STAGES);
    b->stage = (int32_t)rnd_range(r, 0, b->n_stages - 1);
    b->layer_begin = (int32_t)rnd_range(r, 0, CS_MAX_LAYERS - 1);
    b->layer_end = (int32_t)rnd_range(r, b->layer_begin + 1, CS_MAX_LAYERS);
    b->state.max_tokens = (int)rnd_range(r, 1, MSG_MAX_STEP_TOKENS);
    b->state.n_slots = (int)rnd_range(r, 1, MSG_MAX_SLOTS);
    b->state.kv_pages = (int)rnd_range(r, 0, 1 << 24);
    b->state.page_size = (int)rnd_range(r, 1, 1 << 16);
    b->state.kv_type = (uint32_t)rnd_range(r, 0, 1);
    b->edge_dtype = (uint32_t)rnd_range(r, 0, 1);
    b->edge_slots = (int32_t)rnd_range(r, 1, MSG_MAX_EDGE_SLOTS);
    rnd_edge(r, &b->edge_in, &b->notify_in, b->stage == 0);
    rnd_edge(r, &b->edge_out, &b->notify_out, b->stage == b->n_stages - 1);
    b->config_json = rnd_str(r, 0, 16 + size * 1000);
}

static void rnd_ready(struct rnd *r, struct msg_ready *b, int size)
{
    b->stage = (int32_t)rnd_range(r, 0, MSG_MAX_STAGES - 1);
    b->layer_begin = (int32_t)rnd_range(r, 0, CS_MAX_LAYERS - 1);
    b->layer_end = (int32_t)rnd_range(r, b->layer_begin + 1, CS_MAX_LAYERS);
    b->kv_tokens = rnd_u64(r);
    b->n_slots = (int32_t)rnd_range(r, 0, MSG_MAX_SLOTS);
    b->max_tokens = (int32_t)rnd_range(r, 0, MSG_MAX_STEP_TOKENS);
    b->load_ms = (uint32_t)rnd_u64(r);
    b->weight_bytes = rnd_u64(r);
    b->state_bytes = rnd_u64(r);
    (void)size;
}

static void rnd_sample(struct rnd *r, struct msg_sample *p, int size)
{
    p->temperature = (rnd_u64(r) & 3) ? rnd_float(r, 0.0f, 2.0f) : 0.0f;
    p->top_k = (int32_t)rnd_range(r, 0, 1000);
    p->top_p = rnd_float(r, 0.0f, 1.0f);
    p->min_p = rnd_float(r, 0.0f, 1.0f);
    p->presence_penalty = rnd_float(r, -2.0f, 2.0f);
    p->frequency_penalty = rnd_float(r, -2.0f, 2.0f);
    p->repetition_penalty = rnd_float(r, 0.5f, 2.0f);
    p->seed = rnd_u64(r);
    p->draw = rnd_u64(r);
    p->n_logprobs = (int32_t)rnd_range(r, -1, CS_MAX_TOP_LOGPROBS);
    p->n_gen_tokens = (int32_t)rnd_range(r, 0, 8 + 40 * size);
    p->gen_tokens = rnd_ids(r, p->n_gen_tokens, 0, INT32_MAX);
    p->n_ctx_tokens = (int32_t)rnd_range(r, 0, 8 + 100 * size);
    p->ctx_tokens = rnd_ids(r, p->n_ctx_tokens, 0, 300000);
    p->n_bias = (int32_t)rnd_range(r, 0, 6 + 4 * size);
    p->bias_ids = rnd_ids(r, p->n_bias, 0, 300000);
    p->bias_vals = p->n_bias ? rnd_alloc(r, (size_t)p->n_bias * 4) : NULL;
    for (int32_t i = 0; i < p->n_bias; i++)
        p->bias_vals[i] = rnd_float(r, -100.0f, 100.0f);
    /* an allowed-token mask on about half the samples (sizes up to a real vocab's) */
    p->n_allowed = rnd_range(r, 0, 1) ? (int32_t)rnd_range(r, 1, 64 + 4000 * size) : 0;
    p->allowed = p->n_allowed ? rnd_alloc(r, (size_t)p->n_allowed) : NULL;
    for (int32_t i = 0; i < p->n_allowed; i++)
        p->allowed[i] = (uint8_t)rnd_u64(r);
}

static struct msg_timing *rnd_timings(struct rnd *r, int32_t *n)
{
    *n = (int32_t)rnd_range(r, 0, 8);
    struct msg_timing *t = rnd_alloc(r, (size_t)*n * sizeof *t);
    for (int32_t i = 0; i < *n; i++) {
        t[i].stage = (int32_t)rnd_range(r, 0, MSG_MAX_STAGES - 1);
        t[i].compute_us = (uint32_t)rnd_u64(r);
        t[i].copy_us = (uint32_t)rnd_u64(r);
        t[i].recv_us = rnd_u64(r);
        t[i].sent_us = rnd_u64(r);
    }
    return t;
}

static void rnd_step(struct rnd *r, struct msg_step *b, int size)
{
    b->edge_slot = (int32_t)rnd_range(r, -1, MSG_MAX_EDGE_SLOTS - 1);
    b->n_seqs = (int32_t)rnd_range(r, 1, 4 + 12 * size);
    b->seqs = rnd_alloc(r, (size_t)b->n_seqs * sizeof *b->seqs);
    int32_t base = (int32_t)rnd_range(r, 0, MSG_MAX_SLOTS - 1);
    int32_t stride = (int32_t)rnd_range(r, 0, 1000) * 2 + 1; /* odd: distinct slots */
    b->n_tokens = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        struct msg_seq *q = &b->seqs[s];
        q->seq_id = (int64_t)(rnd_u64(r) >> 1);
        q->slot = (int32_t)(((int64_t)base + (int64_t)s * stride) % MSG_MAX_SLOTS);
        q->n_past = (int32_t)rnd_range(r, 0, 1 << 20);
        q->n_tokens = (int32_t)rnd_range(r, 1, 1 + 30 * (size + 1));
        q->flags = (uint32_t)rnd_u64(r) & MSG_SEQ_FLAGS_ALL;
        q->snapshot_slot = -1;
        if (q->flags & MSG_SEQ_SNAPSHOT)
            q->snapshot_slot = (q->slot + 1 + (int32_t)rnd_range(r, 0, 100)) % MSG_MAX_SLOTS;
        q->tokens = rnd_ids(r, q->n_tokens, 0, 300000);
        q->n_pages = (int32_t)rnd_range(r, 0, 12);
        q->pages = rnd_ids(r, q->n_pages, 0, 100000);
        if (q->flags & MSG_SEQ_SAMPLE)
            rnd_sample(r, &q->sample, size);
        b->n_tokens += q->n_tokens;
    }
    b->timings = rnd_timings(r, &b->n_timings);
}

static void rnd_step_done(struct rnd *r, struct msg_step_done *b, int size)
{
    b->n_samples = (int32_t)rnd_range(r, 0, 4 + 20 * size);
    b->samples = b->n_samples ? rnd_alloc(r, (size_t)b->n_samples * sizeof *b->samples) : NULL;
    for (int32_t i = 0; i < b->n_samples; i++) {
        struct msg_sampled *s = &b->samples[i];
        s->seq_id = (int64_t)(rnd_u64(r) >> 1);
        s->result.token = (int32_t)rnd_range(r, 0, 300000);
        s->result.logprob = (rnd_u64(r) & 7) ? rnd_float(r, -30.0f, 0.0f) : -INFINITY;
        s->result.n_top = (int)rnd_range(r, 0, CS_MAX_TOP_LOGPROBS);
        for (int k = 0; k < s->result.n_top; k++) {
            s->result.top_ids[k] = (int32_t)rnd_range(r, 0, 300000);
            s->result.top_logprobs[k] = rnd_float(r, -30.0f, 0.0f);
        }
    }
    b->timings = rnd_timings(r, &b->n_timings);
}

void rnd_msg(struct rnd *r, struct msg *m, uint32_t type, int size)
{
    msg_init(m, type, rnd_u64(r), (int32_t)rnd_range(r, MSG_SENDER_COORD, MSG_MAX_STAGES - 1));
    switch (type) {
    case MSG_HELLO: rnd_hello(r, &m->u.hello, size); break;
    case MSG_LOAD: rnd_load(r, &m->u.load, size); break;
    case MSG_READY: rnd_ready(r, &m->u.ready, size); break;
    case MSG_STEP: rnd_step(r, &m->u.step, size); break;
    case MSG_STEP_DONE: rnd_step_done(r, &m->u.step_done, size); break;
    case MSG_SEQ_FREE:
        m->u.seq_free.seq_id = (int64_t)(rnd_u64(r) >> 1);
        m->u.seq_free.slot = (int32_t)rnd_range(r, -1, MSG_MAX_SLOTS - 1);
        m->u.seq_free.n_pages = (int32_t)rnd_range(r, 0, 20 + 100 * size);
        m->u.seq_free.pages = rnd_ids(r, m->u.seq_free.n_pages, 0, INT32_MAX);
        break;
    case MSG_SNAPSHOT:
    case MSG_RESTORE:
        m->u.slot_copy.seq_id = (int64_t)(rnd_u64(r) >> 1);
        m->u.slot_copy.src_slot = (int32_t)rnd_range(r, 0, MSG_MAX_SLOTS - 1);
        m->u.slot_copy.dst_slot = (m->u.slot_copy.src_slot + (int32_t)rnd_range(r, 1, 50)) %
                                  MSG_MAX_SLOTS;
        break;
    case MSG_HEARTBEAT:
        m->u.heartbeat.seq = rnd_u64(r);
        m->u.heartbeat.time_us = rnd_u64(r);
        m->u.heartbeat.state = (uint32_t)rnd_range(r, 0, 2);
        break;
    case MSG_SHUTDOWN: m->u.shutdown.drain = rnd_u64(r) & 1; break;
    case MSG_ERROR:
        m->u.error.code = (int32_t)rnd_range(r, -1000, -1);
        m->u.error.fatal = rnd_u64(r) & 1;
        m->u.error.message = rnd_str(r, 0, 200 + size * 1000);
        break;
    }
}

/* ================================================================
 * Comparison
 * ================================================================ */

#define SAME(field)                    \
    do {                               \
        if ((a)->field != (b)->field) { \
            *what = #field;            \
            return false;              \
        }                              \
    } while (0)

static bool same_str(const char *x, const char *y)
{
    return strcmp(x ? x : "", y ? y : "") == 0;
}

static bool same_words(const void *x, const void *y, int32_t n)
{
    return n == 0 || memcmp(x, y, (size_t)n * 4) == 0;
}

static bool same_f32(float x, float y)
{
    return memcmp(&x, &y, 4) == 0;
}

#define SAME_STR(field)                          \
    do {                                         \
        if (!same_str((a)->field, (b)->field)) { \
            *what = #field;                      \
            return false;                        \
        }                                        \
    } while (0)
#define SAME_WORDS(field, n)                               \
    do {                                                   \
        if (!same_words((a)->field, (b)->field, (a)->n)) { \
            *what = #field;                                \
            return false;                                  \
        }                                                  \
    } while (0)
#define SAME_F32(field)                          \
    do {                                         \
        if (!same_f32((a)->field, (b)->field)) { \
            *what = #field;                      \
            return false;                        \
        }                                        \
    } while (0)

static bool eq_sample(const struct msg_sample *a, const struct msg_sample *b, const char **what)
{
    SAME_F32(temperature);
    SAME(top_k);
    SAME_F32(top_p);
    SAME_F32(min_p);
    SAME_F32(presence_penalty);
    SAME_F32(frequency_penalty);
    SAME_F32(repetition_penalty);
    SAME(seed);
    SAME(draw);
    SAME(n_logprobs);
    SAME(n_gen_tokens);
    SAME_WORDS(gen_tokens, n_gen_tokens);
    SAME(n_ctx_tokens);
    SAME_WORDS(ctx_tokens, n_ctx_tokens);
    SAME(n_bias);
    SAME_WORDS(bias_ids, n_bias);
    SAME_WORDS(bias_vals, n_bias);
    SAME(n_allowed);
    if (a->n_allowed && memcmp(a->allowed, b->allowed, (size_t)a->n_allowed) != 0) {
        *what = "allowed";
        return false;
    }
    return true;
}

static bool eq_timings(const struct msg_timing *ta, const struct msg_timing *tb, int32_t n,
                       const char **what)
{
    for (int32_t i = 0; i < n; i++) {
        const struct msg_timing *a = &ta[i], *b = &tb[i];
        SAME(stage);
        SAME(compute_us);
        SAME(copy_us);
        SAME(recv_us);
        SAME(sent_us);
    }
    return true;
}

static bool eq_step(const struct msg_step *a, const struct msg_step *b, const char **what)
{
    SAME(edge_slot);
    SAME(n_tokens);
    SAME(n_seqs);
    SAME(n_timings);
    for (int32_t s = 0; s < a->n_seqs; s++) {
        const struct msg_seq *qa = &a->seqs[s], *qb = &b->seqs[s];
        {
            const struct msg_seq *a = qa, *b = qb;
            SAME(seq_id);
            SAME(slot);
            SAME(n_past);
            SAME(n_tokens);
            SAME(flags);
            SAME(snapshot_slot);
            SAME_WORDS(tokens, n_tokens);
            SAME(n_pages);
            SAME_WORDS(pages, n_pages);
            if ((a->flags & MSG_SEQ_SAMPLE) && !eq_sample(&a->sample, &b->sample, what))
                return false;
        }
    }
    return eq_timings(a->timings, b->timings, a->n_timings, what);
}

static bool eq_step_done(const struct msg_step_done *a, const struct msg_step_done *b,
                         const char **what)
{
    SAME(n_samples);
    SAME(n_timings);
    for (int32_t i = 0; i < a->n_samples; i++) {
        const struct msg_sampled *sa = &a->samples[i], *sb = &b->samples[i];
        {
            const struct msg_sampled *a = sa, *b = sb;
            SAME(seq_id);
            SAME(result.token);
            SAME_F32(result.logprob);
            SAME(result.n_top);
            SAME_WORDS(result.top_ids, result.n_top);
            SAME_WORDS(result.top_logprobs, result.n_top);
        }
    }
    return eq_timings(a->timings, b->timings, a->n_timings, what);
}

static bool eq_load(const struct msg_load *a, const struct msg_load *b, const char **what)
{
    SAME_STR(model_path);
    SAME(stage);
    SAME(n_stages);
    SAME(layer_begin);
    SAME(layer_end);
    SAME(state.max_tokens);
    SAME(state.n_slots);
    SAME(state.kv_pages);
    SAME(state.page_size);
    SAME(state.kv_type);
    SAME(edge_dtype);
    SAME(edge_slots);
    SAME_STR(edge_in);
    SAME_STR(edge_out);
    SAME_STR(notify_in);
    SAME_STR(notify_out);
    SAME_STR(config_json);
    return true;
}

static bool eq_small(const struct msg *ma, const struct msg *mb, const char **what)
{
    switch (ma->h.type) {
    case MSG_HELLO: {
        const struct msg_hello *a = &ma->u.hello, *b = &mb->u.hello;
        SAME(stage); SAME(gpu_index); SAME_STR(device_name); SAME(free_bytes);
        SAME(total_bytes); SAME(capabilities); SAME(pid); SAME(proto_version);
        return true;
    }
    case MSG_READY: {
        const struct msg_ready *a = &ma->u.ready, *b = &mb->u.ready;
        SAME(stage); SAME(layer_begin); SAME(layer_end); SAME(kv_tokens); SAME(n_slots);
        SAME(max_tokens); SAME(load_ms); SAME(weight_bytes); SAME(state_bytes);
        return true;
    }
    case MSG_SEQ_FREE: {
        const struct msg_seq_free *a = &ma->u.seq_free, *b = &mb->u.seq_free;
        SAME(seq_id); SAME(slot); SAME(n_pages); SAME_WORDS(pages, n_pages);
        return true;
    }
    case MSG_SNAPSHOT:
    case MSG_RESTORE: {
        const struct msg_slot_copy *a = &ma->u.slot_copy, *b = &mb->u.slot_copy;
        SAME(seq_id); SAME(src_slot); SAME(dst_slot);
        return true;
    }
    case MSG_HEARTBEAT: {
        const struct msg_heartbeat *a = &ma->u.heartbeat, *b = &mb->u.heartbeat;
        SAME(seq); SAME(time_us); SAME(state);
        return true;
    }
    case MSG_SHUTDOWN: {
        const struct msg_shutdown *a = &ma->u.shutdown, *b = &mb->u.shutdown;
        SAME(drain);
        return true;
    }
    case MSG_ERROR: {
        const struct msg_error *a = &ma->u.error, *b = &mb->u.error;
        SAME(code); SAME(fatal); SAME_STR(message);
        return true;
    }
    }
    *what = "type";
    return false;
}

bool msg_equal(const struct msg *ma, const struct msg *mb, const char **what)
{
    const char *dummy;
    if (!what)
        what = &dummy;
    {
        const struct msg_header *a = &ma->h, *b = &mb->h;
        SAME(type);
        SAME(step_id);
        SAME(sender);
    }
    switch (ma->h.type) {
    case MSG_LOAD: return eq_load(&ma->u.load, &mb->u.load, what);
    case MSG_STEP: return eq_step(&ma->u.step, &mb->u.step, what);
    case MSG_STEP_DONE: return eq_step_done(&ma->u.step_done, &mb->u.step_done, what);
    }
    return eq_small(ma, mb, what);
}
