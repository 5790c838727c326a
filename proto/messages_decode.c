/* messages_decode.c - msgpack bytes -> struct msg, strictly (see messages.h
 * for the rules and messages.c for the body layouts).
 *
 * Two passes. First a structural scan of the raw bytes (scan_object): every
 * length must fit in the bytes that remain, containers nest at most
 * SCAN_MAX_DEPTH deep, and the buffer holds exactly one object. msgpack-c
 * allocates n object slots as soon as it reads an array header of n, so
 * without this pass five bytes could ask it for 100 GB. Then msgpack_unpack_next
 * builds the object tree and the walkers below copy it into the message,
 * checking types; msg_validate finishes with the semantic checks.
 *
 * A decoded message owns its strings and arrays: each is one malloc linked
 * into m->mem, released by msg_free. */
#include "messages.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#define SCAN_MAX_DEPTH 8

/* ================================================================
 * Memory of a decoded message
 * ================================================================ */

struct msg_mem {
    struct msg_mem *next;
    max_align_t data[];
};

static void *mem_alloc(struct msg *m, size_t bytes)
{
    struct msg_mem *b = calloc(1, sizeof *b + (bytes ? bytes : 1));
    if (!b)
        return NULL;
    b->next = m->mem;
    m->mem = b;
    return b->data;
}

void msg_free(struct msg *m)
{
    if (!m)
        return;
    struct msg_mem *b = m->mem;
    while (b) {
        struct msg_mem *next = b->next;
        free(b);
        b = next;
    }
    memset(m, 0, sizeof *m);
}

/* ================================================================
 * Structural scan of the raw bytes
 * ================================================================ */

static uint64_t be_read(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Skip one object at *p; 0 on success, -1 when malformed or too deep. */
static int scan_object(const uint8_t **pp, const uint8_t *end, int depth)
{
    const uint8_t *p = *pp;
    if (p >= end || depth > SCAN_MAX_DEPTH)
        return -1;
    uint8_t c = *p++;
    uint64_t n = 0, skip = 0;
    int container = 0; /* 1: array of n, 2: map of n */
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
        skip = 0;
    } else if (c >= 0x80 && c <= 0x8f) {
        n = c & 0x0f, container = 2;
    } else if (c >= 0x90 && c <= 0x9f) {
        n = c & 0x0f, container = 1;
    } else if (c >= 0xa0 && c <= 0xbf) {
        skip = c & 0x1f;
    } else {
        /* length-prefixed or fixed-size types: size of the length field, extra bytes */
        static const struct { uint8_t code, len_bytes, fixed, extra, kind; } t[] = {
            {0xc4, 1, 0, 0, 0}, {0xc5, 2, 0, 0, 0}, {0xc6, 4, 0, 0, 0},     /* bin */
            {0xc7, 1, 0, 1, 0}, {0xc8, 2, 0, 1, 0}, {0xc9, 4, 0, 1, 0},     /* ext */
            {0xca, 0, 4, 0, 0}, {0xcb, 0, 8, 0, 0},                         /* float */
            {0xcc, 0, 1, 0, 0}, {0xcd, 0, 2, 0, 0}, {0xce, 0, 4, 0, 0}, {0xcf, 0, 8, 0, 0},
            {0xd0, 0, 1, 0, 0}, {0xd1, 0, 2, 0, 0}, {0xd2, 0, 4, 0, 0}, {0xd3, 0, 8, 0, 0},
            {0xd4, 0, 2, 0, 0}, {0xd5, 0, 3, 0, 0}, {0xd6, 0, 5, 0, 0}, {0xd7, 0, 9, 0, 0},
            {0xd8, 0, 17, 0, 0},                                            /* fixext */
            {0xd9, 1, 0, 0, 0}, {0xda, 2, 0, 0, 0}, {0xdb, 4, 0, 0, 0},     /* str */
            {0xdc, 2, 0, 0, 1}, {0xdd, 4, 0, 0, 1}, {0xde, 2, 0, 0, 2}, {0xdf, 4, 0, 0, 2},
        };
        size_t i = 0;
        while (i < sizeof t / sizeof t[0] && t[i].code != c)
            i++;
        if (i == sizeof t / sizeof t[0])
            return -1; /* 0xc1: never used */
        if ((uint64_t)(end - p) < t[i].len_bytes)
            return -1;
        uint64_t len = be_read(p, t[i].len_bytes);
        p += t[i].len_bytes;
        if (t[i].kind)
            n = len, container = t[i].kind;
        else
            skip = t[i].fixed + len + t[i].extra;
    }
    if (container) {
        uint64_t items = container == 2 ? 2 * n : n;
        if (items > (uint64_t)(end - p)) /* every item takes at least one byte */
            return -1;
        for (uint64_t i = 0; i < items; i++)
            if (scan_object(&p, end, depth + 1))
                return -1;
    } else {
        if (skip > (uint64_t)(end - p))
            return -1;
        p += skip;
    }
    *pp = p;
    return 0;
}

/* ================================================================
 * Object walkers: type checks and copies
 * ================================================================ */

struct dec {
    struct msg *m;
    struct cs_error *err;
};

static int bad(struct dec *d, const char *what, const char *expected)
{
    return cs_error_set(d->err, CS_EPROTO, "%s: expected %s", what, expected);
}

static int get_int(struct dec *d, const msgpack_object *o, const char *what, int64_t lo,
                   int64_t hi, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX || (int64_t)o->via.u64 > hi)
            return cs_error_set(d->err, CS_EPROTO, "%s %llu above %lld", what,
                                (unsigned long long)o->via.u64, (long long)hi);
        *out = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
    } else {
        return bad(d, what, "an integer");
    }
    if (*out < lo || *out > hi)
        return cs_error_set(d->err, CS_EPROTO, "%s %lld out of range [%lld, %lld]", what,
                            (long long)*out, (long long)lo, (long long)hi);
    return CS_OK;
}

static int get_i32(struct dec *d, const msgpack_object *o, const char *what, int32_t *out)
{
    int64_t v;
    int rc = get_int(d, o, what, INT32_MIN, INT32_MAX, &v);
    *out = (int32_t)v;
    return rc;
}

static int get_u32(struct dec *d, const msgpack_object *o, const char *what, uint32_t *out)
{
    int64_t v;
    int rc = get_int(d, o, what, 0, UINT32_MAX, &v);
    *out = (uint32_t)v;
    return rc;
}

static int get_i64(struct dec *d, const msgpack_object *o, const char *what, int64_t *out)
{
    return get_int(d, o, what, INT64_MIN, INT64_MAX, out);
}

static int get_u64(struct dec *d, const msgpack_object *o, const char *what, uint64_t *out)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return bad(d, what, "an unsigned integer");
    *out = o->via.u64;
    return CS_OK;
}

static int get_f32(struct dec *d, const msgpack_object *o, const char *what, float *out)
{
    if (o->type != MSGPACK_OBJECT_FLOAT32 && o->type != MSGPACK_OBJECT_FLOAT64)
        return bad(d, what, "a float");
    *out = (float)o->via.f64;
    return CS_OK;
}

static int get_bool(struct dec *d, const msgpack_object *o, const char *what, bool *out)
{
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return bad(d, what, "a boolean");
    *out = o->via.boolean;
    return CS_OK;
}

/* A string of at most max bytes without NUL, copied NUL-terminated. */
static int get_str(struct dec *d, const msgpack_object *o, const char *what, size_t max,
                   char **out)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return bad(d, what, "a string");
    size_t n = o->via.str.size;
    if (n > max)
        return cs_error_set(d->err, CS_EPROTO, "%s: %zu bytes, limit %zu", what, n, max);
    /* an empty string may come with a NULL pointer: never hand it to memchr/memcpy */
    if (n && memchr(o->via.str.ptr, 0, n))
        return cs_error_set(d->err, CS_EPROTO, "%s contains a NUL byte", what);
    char *s = mem_alloc(d->m, n + 1);
    if (!s)
        return cs_error_set(d->err, CS_ENOMEM, "%s: out of memory", what);
    if (n)
        memcpy(s, o->via.str.ptr, n);
    s[n] = 0;
    *out = s;
    return CS_OK;
}

/* A bin of 32-bit little-endian words, at most max_n of them. */
static int get_words(struct dec *d, const msgpack_object *o, const char *what, int32_t max_n,
                     void **out, int32_t *n_out)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return bad(d, what, "a bin of 32-bit values");
    size_t bytes = o->via.bin.size;
    if (bytes % 4)
        return cs_error_set(d->err, CS_EPROTO, "%s: %zu bytes is not a whole number of 32-bit "
                            "values", what, bytes);
    if (bytes / 4 > (size_t)max_n)
        return cs_error_set(d->err, CS_EPROTO, "%s: %zu entries, limit %d", what, bytes / 4, max_n);
    uint32_t *w = NULL;
    if (bytes) {
        w = mem_alloc(d->m, bytes);
        if (!w)
            return cs_error_set(d->err, CS_ENOMEM, "%s: out of memory", what);
        const uint8_t *b = (const uint8_t *)o->via.bin.ptr;
        for (size_t i = 0; i < bytes / 4; i++)
            w[i] = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                   (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    }
    *out = w;
    *n_out = (int32_t)(bytes / 4);
    return CS_OK;
}

/* A bin of raw bytes (at most max_n); an empty bin gives NULL and 0. */
static int get_bytes(struct dec *d, const msgpack_object *o, const char *what, int32_t max_n,
                     uint8_t **out, int32_t *n_out)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return bad(d, what, "a bin of bytes");
    size_t bytes = o->via.bin.size;
    if (bytes > (size_t)max_n)
        return cs_error_set(d->err, CS_EPROTO, "%s: %zu bytes, limit %d", what, bytes, max_n);
    uint8_t *b = NULL;
    if (bytes) {
        b = mem_alloc(d->m, bytes);
        if (!b)
            return cs_error_set(d->err, CS_ENOMEM, "%s: out of memory", what);
        memcpy(b, o->via.bin.ptr, bytes);
    }
    *out = b;
    *n_out = (int32_t)bytes;
    return CS_OK;
}

static int get_i32s(struct dec *d, const msgpack_object *o, const char *what, int32_t max_n,
                    int32_t **out, int32_t *n_out)
{
    void *w = NULL;
    int rc = get_words(d, o, what, max_n, &w, n_out);
    *out = w;
    return rc;
}

static int get_f32s(struct dec *d, const msgpack_object *o, const char *what, int32_t max_n,
                    float **out, int32_t *n_out)
{
    void *w = NULL;
    int rc = get_words(d, o, what, max_n, &w, n_out);
    *out = w;
    return rc;
}

/* An array of exactly n items (n < 0: any length up to -n). */
static int get_array(struct dec *d, const msgpack_object *o, const char *what, int64_t n,
                     const msgpack_object **items, uint32_t *size)
{
    *items = NULL;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return bad(d, what, "an array");
    uint32_t got = o->via.array.size;
    if (n >= 0 && got != n)
        return cs_error_set(d->err, CS_EPROTO, "%s: %u fields, expected %lld", what, got,
                            (long long)n);
    if (n < 0 && got > -n)
        return cs_error_set(d->err, CS_EPROTO, "%s: %u entries, limit %lld", what, got,
                            (long long)-n);
    *items = o->via.array.ptr;
    if (size)
        *size = got;
    return CS_OK;
}

/* ================================================================
 * Bodies
 * ================================================================ */

static int dec_hello(struct dec *d, const msgpack_object *o)
{
    struct msg_hello *b = &d->m->u.hello;
    const msgpack_object *f = NULL;
    int rc = get_array(d, o, "body", 8, &f, NULL);
    if (rc || (rc = get_i32(d, &f[0], "stage", &b->stage)) ||
        (rc = get_i32(d, &f[1], "gpu_index", &b->gpu_index)) ||
        (rc = get_str(d, &f[2], "device_name", MSG_MAX_NAME, &b->device_name)) ||
        (rc = get_u64(d, &f[3], "free_bytes", &b->free_bytes)) ||
        (rc = get_u64(d, &f[4], "total_bytes", &b->total_bytes)) ||
        (rc = get_u32(d, &f[5], "capabilities", &b->capabilities)) ||
        (rc = get_i32(d, &f[6], "pid", &b->pid)))
        return rc;
    return get_u32(d, &f[7], "proto_version", &b->proto_version);
}

static int dec_load(struct dec *d, const msgpack_object *o)
{
    struct msg_load *b = &d->m->u.load;
    struct cs_state_config *s = &b->state;
    const msgpack_object *f = NULL, *c = NULL;
    int rc = get_array(d, o, "body", 13, &f, NULL);
    if (rc || (rc = get_str(d, &f[0], "model_path", MSG_MAX_PATH, &b->model_path)) ||
        (rc = get_i32(d, &f[1], "stage", &b->stage)) ||
        (rc = get_i32(d, &f[2], "n_stages", &b->n_stages)) ||
        (rc = get_i32(d, &f[3], "layer_begin", &b->layer_begin)) ||
        (rc = get_i32(d, &f[4], "layer_end", &b->layer_end)) ||
        (rc = get_array(d, &f[5], "state", 5, &c, NULL)) ||
        (rc = get_i32(d, &c[0], "max_tokens", &s->max_tokens)) ||
        (rc = get_i32(d, &c[1], "n_slots", &s->n_slots)) ||
        (rc = get_i32(d, &c[2], "kv_pages", &s->kv_pages)) ||
        (rc = get_i32(d, &c[3], "page_size", &s->page_size)) ||
        (rc = get_u32(d, &c[4], "kv_type", &s->kv_type)) ||
        (rc = get_u32(d, &f[6], "edge_dtype", &b->edge_dtype)) ||
        (rc = get_i32(d, &f[7], "edge_slots", &b->edge_slots)) ||
        (rc = get_str(d, &f[8], "edge_in", MSG_MAX_NAME, &b->edge_in)) ||
        (rc = get_str(d, &f[9], "edge_out", MSG_MAX_NAME, &b->edge_out)) ||
        (rc = get_str(d, &f[10], "notify_in", MSG_MAX_NAME, &b->notify_in)) ||
        (rc = get_str(d, &f[11], "notify_out", MSG_MAX_NAME, &b->notify_out)))
        return rc;
    return get_str(d, &f[12], "config_json", MSG_MAX_CONFIG, &b->config_json);
}

static int dec_ready(struct dec *d, const msgpack_object *o)
{
    struct msg_ready *b = &d->m->u.ready;
    const msgpack_object *f = NULL;
    int rc = get_array(d, o, "body", 9, &f, NULL);
    if (rc || (rc = get_i32(d, &f[0], "stage", &b->stage)) ||
        (rc = get_i32(d, &f[1], "layer_begin", &b->layer_begin)) ||
        (rc = get_i32(d, &f[2], "layer_end", &b->layer_end)) ||
        (rc = get_u64(d, &f[3], "kv_tokens", &b->kv_tokens)) ||
        (rc = get_i32(d, &f[4], "n_slots", &b->n_slots)) ||
        (rc = get_i32(d, &f[5], "max_tokens", &b->max_tokens)) ||
        (rc = get_u32(d, &f[6], "load_ms", &b->load_ms)) ||
        (rc = get_u64(d, &f[7], "weight_bytes", &b->weight_bytes)))
        return rc;
    return get_u64(d, &f[8], "state_bytes", &b->state_bytes);
}

static int dec_sample(struct dec *d, const msgpack_object *o, struct msg_sample *p)
{
    const msgpack_object *f = NULL;
    int32_t n_vals = 0;
    int rc = get_array(d, o, "sample", 15, &f, NULL);
    if (rc || (rc = get_f32(d, &f[0], "temperature", &p->temperature)) ||
        (rc = get_i32(d, &f[1], "top_k", &p->top_k)) ||
        (rc = get_f32(d, &f[2], "top_p", &p->top_p)) ||
        (rc = get_f32(d, &f[3], "min_p", &p->min_p)) ||
        (rc = get_f32(d, &f[4], "presence_penalty", &p->presence_penalty)) ||
        (rc = get_f32(d, &f[5], "frequency_penalty", &p->frequency_penalty)) ||
        (rc = get_f32(d, &f[6], "repetition_penalty", &p->repetition_penalty)) ||
        (rc = get_u64(d, &f[7], "seed", &p->seed)) || (rc = get_u64(d, &f[8], "draw", &p->draw)) ||
        (rc = get_i32(d, &f[9], "n_logprobs", &p->n_logprobs)) ||
        (rc = get_i32s(d, &f[10], "gen_tokens", MSG_MAX_PENALTY_TOKENS, &p->gen_tokens,
                       &p->n_gen_tokens)) ||
        (rc = get_i32s(d, &f[11], "ctx_tokens", MSG_MAX_PENALTY_TOKENS, &p->ctx_tokens,
                       &p->n_ctx_tokens)) ||
        (rc = get_i32s(d, &f[12], "bias_ids", MSG_MAX_BIAS, &p->bias_ids, &p->n_bias)) ||
        (rc = get_f32s(d, &f[13], "bias_vals", MSG_MAX_BIAS, &p->bias_vals, &n_vals)) ||
        (rc = get_bytes(d, &f[14], "allowed", MSG_MAX_ALLOWED_BYTES, &p->allowed,
                        &p->n_allowed)))
        return rc;
    if (n_vals != p->n_bias)
        return cs_error_set(d->err, CS_EPROTO, "%d bias_ids but %d bias_vals", p->n_bias, n_vals);
    return CS_OK;
}

static int dec_seq(struct dec *d, const msgpack_object *o, struct msg_seq *q)
{
    const msgpack_object *f = NULL;
    int32_t n_tok = 0;
    int rc = get_array(d, o, "seq", 9, &f, NULL);
    if (rc || (rc = get_i64(d, &f[0], "seq_id", &q->seq_id)) ||
        (rc = get_i32(d, &f[1], "slot", &q->slot)) ||
        (rc = get_i32(d, &f[2], "n_past", &q->n_past)) ||
        (rc = get_i32(d, &f[3], "n_tokens", &q->n_tokens)) ||
        (rc = get_u32(d, &f[4], "flags", &q->flags)) ||
        (rc = get_i32(d, &f[5], "snapshot_slot", &q->snapshot_slot)) ||
        (rc = get_i32s(d, &f[6], "tokens", MSG_MAX_STEP_TOKENS, &q->tokens, &n_tok)) ||
        (rc = get_i32s(d, &f[7], "pages", MSG_MAX_PAGES, &q->pages, &q->n_pages)))
        return rc;
    if (n_tok != q->n_tokens)
        return cs_error_set(d->err, CS_EPROTO, "n_tokens %d but %d token ids", q->n_tokens, n_tok);
    bool has_sample = f[8].type != MSGPACK_OBJECT_NIL;
    if (has_sample != ((q->flags & MSG_SEQ_SAMPLE) != 0))
        return cs_error_set(d->err, CS_EPROTO, "sample block %s but the sample flag is %s",
                            has_sample ? "present" : "absent", has_sample ? "clear" : "set");
    return has_sample ? dec_sample(d, &f[8], &q->sample) : CS_OK;
}

static int dec_timings(struct dec *d, const msgpack_object *o, struct msg_timing **out,
                       int32_t *n_out)
{
    const msgpack_object *items = NULL, *f = NULL;
    uint32_t n;
    int rc = get_array(d, o, "timings", -MSG_MAX_STAGES, &items, &n);
    if (rc)
        return rc;
    struct msg_timing *t = mem_alloc(d->m, (size_t)n * sizeof *t);
    if (!t)
        return cs_error_set(d->err, CS_ENOMEM, "timings: out of memory");
    for (uint32_t i = 0; i < n; i++)
        if ((rc = get_array(d, &items[i], "timing", 5, &f, NULL)) ||
            (rc = get_i32(d, &f[0], "stage", &t[i].stage)) ||
            (rc = get_u32(d, &f[1], "compute_us", &t[i].compute_us)) ||
            (rc = get_u32(d, &f[2], "copy_us", &t[i].copy_us)) ||
            (rc = get_u64(d, &f[3], "recv_us", &t[i].recv_us)) ||
            (rc = get_u64(d, &f[4], "sent_us", &t[i].sent_us)))
            return rc;
    *out = t;
    *n_out = (int32_t)n;
    return CS_OK;
}

static int dec_step(struct dec *d, const msgpack_object *o)
{
    struct msg_step *b = &d->m->u.step;
    const msgpack_object *f = NULL, *items = NULL;
    uint32_t n;
    int rc = get_array(d, o, "body", 4, &f, NULL);
    if (rc || (rc = get_i32(d, &f[0], "edge_slot", &b->edge_slot)) ||
        (rc = get_i32(d, &f[1], "n_tokens", &b->n_tokens)) ||
        (rc = get_array(d, &f[2], "seqs", -MSG_MAX_SEQS, &items, &n)))
        return rc;
    b->seqs = mem_alloc(d->m, (size_t)n * sizeof *b->seqs);
    if (!b->seqs)
        return cs_error_set(d->err, CS_ENOMEM, "seqs: out of memory");
    b->n_seqs = (int32_t)n;
    for (uint32_t s = 0; s < n; s++) {
        if ((rc = dec_seq(d, &items[s], &b->seqs[s]))) {
            cs_error_prefix(d->err, "seq %u", s);
            return rc;
        }
    }
    return dec_timings(d, &f[3], &b->timings, &b->n_timings);
}

static int dec_sampled(struct dec *d, const msgpack_object *o, struct msg_sampled *s)
{
    const msgpack_object *f = NULL;
    void *ids, *lps;
    int32_t n_ids, n_lps;
    int rc = get_array(d, o, "sampled", 5, &f, NULL);
    if (rc || (rc = get_i64(d, &f[0], "seq_id", &s->seq_id)) ||
        (rc = get_i32(d, &f[1], "token", &s->result.token)) ||
        (rc = get_f32(d, &f[2], "logprob", &s->result.logprob)) ||
        (rc = get_words(d, &f[3], "top_ids", CS_MAX_TOP_LOGPROBS, &ids, &n_ids)) ||
        (rc = get_words(d, &f[4], "top_logprobs", CS_MAX_TOP_LOGPROBS, &lps, &n_lps)))
        return rc;
    if (n_ids != n_lps)
        return cs_error_set(d->err, CS_EPROTO, "%d top_ids but %d top_logprobs", n_ids, n_lps);
    s->result.n_top = n_ids;
    if (n_ids) {
        memcpy(s->result.top_ids, ids, (size_t)n_ids * 4);
        memcpy(s->result.top_logprobs, lps, (size_t)n_ids * 4);
    }
    return CS_OK;
}

static int dec_step_done(struct dec *d, const msgpack_object *o)
{
    struct msg_step_done *b = &d->m->u.step_done;
    const msgpack_object *f = NULL, *items = NULL;
    uint32_t n;
    int rc = get_array(d, o, "body", 2, &f, NULL);
    if (rc || (rc = get_array(d, &f[0], "samples", -MSG_MAX_SEQS, &items, &n)))
        return rc;
    b->samples = mem_alloc(d->m, (size_t)n * sizeof *b->samples);
    if (!b->samples)
        return cs_error_set(d->err, CS_ENOMEM, "samples: out of memory");
    b->n_samples = (int32_t)n;
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = dec_sampled(d, &items[i], &b->samples[i]))) {
            cs_error_prefix(d->err, "sample %u", i);
            return rc;
        }
    }
    return dec_timings(d, &f[1], &b->timings, &b->n_timings);
}

static int dec_small(struct dec *d, const msgpack_object *o)
{
    struct msg *m = d->m;
    const msgpack_object *f = NULL;
    int rc;
    switch (m->h.type) {
    case MSG_SEQ_FREE:
        if ((rc = get_array(d, o, "body", 3, &f, NULL)) ||
            (rc = get_i64(d, &f[0], "seq_id", &m->u.seq_free.seq_id)) ||
            (rc = get_i32(d, &f[1], "slot", &m->u.seq_free.slot)))
            return rc;
        return get_i32s(d, &f[2], "pages", MSG_MAX_PAGES, &m->u.seq_free.pages,
                        &m->u.seq_free.n_pages);
    case MSG_SNAPSHOT:
    case MSG_RESTORE:
        if ((rc = get_array(d, o, "body", 3, &f, NULL)) ||
            (rc = get_i64(d, &f[0], "seq_id", &m->u.slot_copy.seq_id)) ||
            (rc = get_i32(d, &f[1], "src_slot", &m->u.slot_copy.src_slot)))
            return rc;
        return get_i32(d, &f[2], "dst_slot", &m->u.slot_copy.dst_slot);
    case MSG_HEARTBEAT:
        if ((rc = get_array(d, o, "body", 3, &f, NULL)) ||
            (rc = get_u64(d, &f[0], "seq", &m->u.heartbeat.seq)) ||
            (rc = get_u64(d, &f[1], "time_us", &m->u.heartbeat.time_us)))
            return rc;
        return get_u32(d, &f[2], "state", &m->u.heartbeat.state);
    case MSG_SHUTDOWN:
        if ((rc = get_array(d, o, "body", 1, &f, NULL)))
            return rc;
        return get_bool(d, &f[0], "drain", &m->u.shutdown.drain);
    case MSG_ERROR:
        if ((rc = get_array(d, o, "body", 3, &f, NULL)) ||
            (rc = get_i32(d, &f[0], "code", &m->u.error.code)) ||
            (rc = get_bool(d, &f[1], "fatal", &m->u.error.fatal)))
            return rc;
        return get_str(d, &f[2], "message", MSG_MAX_TEXT, &m->u.error.message);
    }
    return cs_error_set(d->err, CS_EPROTO, "unknown message type %u", m->h.type);
}

static int dec_body(struct dec *d, const msgpack_object *o)
{
    switch (d->m->h.type) {
    case MSG_HELLO: return dec_hello(d, o);
    case MSG_LOAD: return dec_load(d, o);
    case MSG_READY: return dec_ready(d, o);
    case MSG_STEP: return dec_step(d, o);
    case MSG_STEP_DONE: return dec_step_done(d, o);
    }
    return dec_small(d, o);
}

/* The header: version first, so a peer of another version gets that message. */
static int dec_header(struct dec *d, const msgpack_object *root, const msgpack_object **body)
{
    struct msg_header *h = &d->m->h;
    const msgpack_object *f = NULL;
    int64_t v;
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 1)
        return cs_error_set(d->err, CS_EPROTO, "not a message: expected a non-empty array");
    f = root->via.array.ptr;
    if (f[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return cs_error_set(d->err, CS_EPROTO, "header: version is not an unsigned integer");
    if (f[0].via.u64 != CS_PROTO_VERSION)
        return cs_error_set(d->err, CS_EPROTO, "protocol version %llu, expected %d",
                            (unsigned long long)f[0].via.u64, CS_PROTO_VERSION);
    h->version = CS_PROTO_VERSION;
    int rc = get_array(d, root, "header", 5, &f, NULL);
    if (rc || (rc = get_int(d, &f[1], "type", 0, UINT32_MAX, &v)))
        return rc;
    if (v < MSG_TYPE_FIRST || v > MSG_TYPE_LAST)
        return cs_error_set(d->err, CS_EPROTO, "unknown message type %lld", (long long)v);
    h->type = (uint32_t)v;
    if ((rc = get_u64(d, &f[2], "step_id", &h->step_id)) ||
        (rc = get_i32(d, &f[3], "sender", &h->sender)))
        return rc;
    *body = &f[4];
    return CS_OK;
}

static int decode_tree(struct msg *m, const void *data, size_t size, struct cs_error *err)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(&up, data, size, &off);
    int rc;
    if (r == MSGPACK_UNPACK_NOMEM_ERROR) {
        rc = cs_error_set(err, CS_ENOMEM, "out of memory unpacking %zu bytes", size);
    } else if (r != MSGPACK_UNPACK_SUCCESS || off != size) {
        rc = cs_error_set(err, CS_EPROTO, "malformed msgpack");
    } else {
        struct dec d = {m, err};
        const msgpack_object *body = NULL;
        rc = dec_header(&d, &up.data, &body);
        if (rc == CS_OK && (rc = dec_body(&d, body)))
            cs_error_prefix(err, "%s", msg_type_name(m->h.type));
    }
    msgpack_unpacked_destroy(&up);
    return rc;
}

int msg_decode(struct msg *m, const void *data, size_t size, struct cs_error *err)
{
    memset(m, 0, sizeof *m);
    if (!data || size == 0)
        return cs_error_set(err, CS_EPROTO, "empty message");
    if (size > MSG_MAX_BYTES)
        return cs_error_set(err, CS_EPROTO, "message of %zu bytes exceeds %u", size, MSG_MAX_BYTES);
    const uint8_t *p = data, *end = p + size;
    if (scan_object(&p, end, 0))
        return cs_error_set(err, CS_EPROTO, "malformed msgpack (truncated, oversized length or "
                            "nested deeper than %d)", SCAN_MAX_DEPTH);
    if (p != end)
        return cs_error_set(err, CS_EPROTO, "%zu bytes after the message", (size_t)(end - p));
    int rc = decode_tree(m, data, size, err);
    if (rc == CS_OK)
        rc = msg_validate(m, err);
    if (rc)
        msg_free(m);
    return rc;
}
