/* messages.c - validation and msgpack encoding of the protocol messages, and
 * the conversion of a step into struct cs_batch arrays (see messages.h).
 * Decoding lives in messages_decode.c; both sides share msg_validate, so an
 * encoded message always decodes.
 *
 * Body layouts (positional msgpack arrays; "bin" = little-endian 32-bit values):
 *   HELLO      [stage, gpu_index, device_name, free_bytes, total_bytes, capabilities, pid, proto_version]
 *   LOAD       [model_path, stage, n_stages, layer_begin, layer_end,
 *               [max_tokens, n_slots, kv_pages, page_size, kv_type],
 *               edge_dtype, edge_slots, edge_in, edge_out, notify_in, notify_out, config_json]
 *   READY      [stage, layer_begin, layer_end, kv_tokens, n_slots, max_tokens, load_ms,
 *               weight_bytes, state_bytes]
 *   STEP       [edge_slot, n_tokens, [seq...], [timing...]]
 *     seq      [seq_id, slot, n_past, n_tokens, flags, snapshot_slot, tokens bin, pages bin,
 *               sample | nil]
 *     sample   [temperature, top_k, top_p, min_p, presence, frequency, repetition, seed, draw,
 *               n_logprobs, gen bin, ctx bin, bias_ids bin, bias_vals bin, allowed bin
 *               (bytes; empty: no mask)]
 *     timing   [stage, compute_us, copy_us, recv_us, sent_us]
 *   STEP_DONE  [[sampled...], [timing...]]
 *     sampled  [seq_id, token, logprob, top_ids bin, top_logprobs bin]
 *   SEQ_FREE   [seq_id, slot, pages bin]
 *   SNAPSHOT, RESTORE  [seq_id, src_slot, dst_slot]
 *   HEARTBEAT  [seq, time_us, state]
 *   SHUTDOWN   [drain]
 *   ERROR      [code, fatal, message]
 */
#include "messages.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "../common/gguf.h"

const char *msg_type_name(uint32_t type)
{
    switch (type) {
    case MSG_HELLO: return "hello";
    case MSG_LOAD: return "load";
    case MSG_READY: return "ready";
    case MSG_STEP: return "step";
    case MSG_STEP_DONE: return "step_done";
    case MSG_SEQ_FREE: return "seq_free";
    case MSG_SNAPSHOT: return "snapshot";
    case MSG_RESTORE: return "restore";
    case MSG_HEARTBEAT: return "heartbeat";
    case MSG_SHUTDOWN: return "shutdown";
    case MSG_ERROR: return "error";
    }
    return "unknown";
}

void msg_init(struct msg *m, uint32_t type, uint64_t step_id, int32_t sender)
{
    memset(m, 0, sizeof *m);
    m->h.version = CS_PROTO_VERSION;
    m->h.type = type;
    m->h.step_id = step_id;
    m->h.sender = sender;
}

/* ================================================================
 * Validation
 * ================================================================ */

static int range(struct cs_error *err, const char *what, int64_t v, int64_t lo, int64_t hi)
{
    if (v < lo || v > hi)
        return cs_error_set(err, CS_EPROTO, "%s %lld out of range [%lld, %lld]", what,
                            (long long)v, (long long)lo, (long long)hi);
    return CS_OK;
}

static int finite_in(struct cs_error *err, const char *what, float v, float lo, float hi)
{
    if (!isfinite(v) || v < lo || v > hi)
        return cs_error_set(err, CS_EPROTO, "%s %g out of range [%g, %g]", what, (double)v,
                            (double)lo, (double)hi);
    return CS_OK;
}

static int str_ok(struct cs_error *err, const char *what, const char *s, size_t max)
{
    size_t n = s ? strnlen(s, max + 1) : 0;
    if (n > max)
        return cs_error_set(err, CS_EPROTO, "%s longer than %zu bytes", what, max);
    return CS_OK;
}

/* a list of n ids, each in [lo, hi]; NULL only when n == 0 */
static int ids_ok(struct cs_error *err, const char *what, const int32_t *a, int32_t n,
                  int32_t max_n, int32_t lo, int32_t hi)
{
    int rc = range(err, what, n, 0, max_n);
    if (rc)
        return cs_error_set(err, CS_EPROTO, "%s: length %d out of range [0, %d]", what, n, max_n);
    if (n > 0 && !a)
        return cs_error_set(err, CS_EPROTO, "%s: %d entries but no array", what, n);
    for (int32_t i = 0; i < n; i++)
        if (a[i] < lo || a[i] > hi)
            return cs_error_set(err, CS_EPROTO, "%s[%d] = %d out of range [%d, %d]", what, i,
                                a[i], lo, hi);
    return CS_OK;
}

static int dtype_ok(struct cs_error *err, const char *what, uint32_t t)
{
    if (t != CS_DTYPE_F32 && t != CS_DTYPE_F16)
        return cs_error_set(err, CS_EPROTO, "%s %u is neither f32 (0) nor f16 (1)", what, t);
    return CS_OK;
}

static int validate_hello(const struct msg_hello *b, uint32_t version, struct cs_error *err)
{
    int rc;
    if ((rc = range(err, "stage", b->stage, 0, MSG_MAX_STAGES - 1)) ||
        (rc = range(err, "gpu_index", b->gpu_index, -1, 4095)) ||
        (rc = str_ok(err, "device_name", b->device_name, MSG_MAX_NAME)) ||
        (rc = range(err, "pid", b->pid, 1, INT32_MAX)))
        return rc;
    if (b->free_bytes > b->total_bytes)
        return cs_error_set(err, CS_EPROTO, "free_bytes %llu > total_bytes %llu",
                            (unsigned long long)b->free_bytes, (unsigned long long)b->total_bytes);
    if (b->capabilities & ~MSG_CAP_ALL)
        return cs_error_set(err, CS_EPROTO, "unknown capability bits 0x%x",
                            b->capabilities & ~MSG_CAP_ALL);
    if (b->proto_version != version)
        return cs_error_set(err, CS_EPROTO, "proto_version %u differs from the header's %u",
                            b->proto_version, version);
    return CS_OK;
}

static int edge_names_ok(const char *name, const char *notify, bool none, const char *which,
                         struct cs_error *err)
{
    int rc;
    char what[32];
    snprintf(what, sizeof what, "edge_%s", which);
    if ((rc = str_ok(err, what, name, MSG_MAX_NAME)))
        return rc;
    snprintf(what, sizeof what, "notify_%s", which);
    if ((rc = str_ok(err, what, notify, MSG_MAX_NAME)))
        return rc;
    bool empty = (!name || !*name) && (!notify || !*notify);
    bool full = name && *name && notify && *notify;
    if (none && !empty)
        return cs_error_set(err, CS_EPROTO, "edge_%s given for a stage that has none", which);
    if (!none && !full)
        return cs_error_set(err, CS_EPROTO, "edge_%s or notify_%s missing", which, which);
    return CS_OK;
}

static int validate_load(const struct msg_load *b, struct cs_error *err)
{
    int rc;
    const struct cs_state_config *s = &b->state;
    if (!b->model_path || !*b->model_path)
        return cs_error_set(err, CS_EPROTO, "model_path is empty");
    if ((rc = str_ok(err, "model_path", b->model_path, MSG_MAX_PATH)) ||
        (rc = range(err, "n_stages", b->n_stages, 1, MSG_MAX_STAGES)) ||
        (rc = range(err, "stage", b->stage, 0, b->n_stages - 1)) ||
        (rc = range(err, "layer_begin", b->layer_begin, 0, CS_MAX_LAYERS - 1)) ||
        (rc = range(err, "layer_end", b->layer_end, b->layer_begin + 1, CS_MAX_LAYERS)) ||
        (rc = range(err, "max_tokens", s->max_tokens, 1, MSG_MAX_STEP_TOKENS)) ||
        (rc = range(err, "n_slots", s->n_slots, 1, MSG_MAX_SLOTS)) ||
        (rc = range(err, "kv_pages", s->kv_pages, 0, 1 << 24)) ||
        (rc = range(err, "page_size", s->page_size, 1, 1 << 16)) ||
        (rc = dtype_ok(err, "kv_type", s->kv_type)) ||
        (rc = dtype_ok(err, "edge_dtype", b->edge_dtype)) ||
        (rc = range(err, "edge_slots", b->edge_slots, 1, MSG_MAX_EDGE_SLOTS)) ||
        (rc = edge_names_ok(b->edge_in, b->notify_in, b->stage == 0, "in", err)) ||
        (rc = edge_names_ok(b->edge_out, b->notify_out, b->stage == b->n_stages - 1, "out", err)))
        return rc;
    return str_ok(err, "config_json", b->config_json, MSG_MAX_CONFIG);
}

static int validate_ready(const struct msg_ready *b, struct cs_error *err)
{
    int rc;
    if ((rc = range(err, "stage", b->stage, 0, MSG_MAX_STAGES - 1)) ||
        (rc = range(err, "layer_begin", b->layer_begin, 0, CS_MAX_LAYERS - 1)) ||
        (rc = range(err, "layer_end", b->layer_end, b->layer_begin + 1, CS_MAX_LAYERS)) ||
        (rc = range(err, "n_slots", b->n_slots, 0, MSG_MAX_SLOTS)) ||
        (rc = range(err, "max_tokens", b->max_tokens, 0, MSG_MAX_STEP_TOKENS)))
        return rc;
    return CS_OK;
}

static int validate_sample(const struct msg_sample *p, struct cs_error *err)
{
    int rc;
    if ((rc = finite_in(err, "temperature", p->temperature, 0.0f, 1e6f)) ||
        (rc = range(err, "top_k", p->top_k, 0, INT32_MAX)) ||
        (rc = finite_in(err, "top_p", p->top_p, 0.0f, 1.0f)) ||
        (rc = finite_in(err, "min_p", p->min_p, 0.0f, 1.0f)) ||
        (rc = finite_in(err, "presence_penalty", p->presence_penalty, -1e6f, 1e6f)) ||
        (rc = finite_in(err, "frequency_penalty", p->frequency_penalty, -1e6f, 1e6f)) ||
        (rc = finite_in(err, "repetition_penalty", p->repetition_penalty, 1e-6f, 1e6f)) ||
        (rc = range(err, "n_logprobs", p->n_logprobs, -1, CS_MAX_TOP_LOGPROBS)) ||
        (rc = ids_ok(err, "gen_tokens", p->gen_tokens, p->n_gen_tokens, MSG_MAX_PENALTY_TOKENS, 0,
                     INT32_MAX)) ||
        (rc = ids_ok(err, "ctx_tokens", p->ctx_tokens, p->n_ctx_tokens, MSG_MAX_PENALTY_TOKENS, 0,
                     INT32_MAX)) ||
        (rc = ids_ok(err, "bias_ids", p->bias_ids, p->n_bias, MSG_MAX_BIAS, 0, INT32_MAX)))
        return rc;
    if (p->n_bias > 0 && !p->bias_vals)
        return cs_error_set(err, CS_EPROTO, "bias_vals: %d entries but no array", p->n_bias);
    for (int32_t i = 0; i < p->n_bias; i++)
        if (!isfinite(p->bias_vals[i]))
            return cs_error_set(err, CS_EPROTO, "bias_vals[%d] is not finite", i);
    if ((rc = range(err, "allowed bytes", p->n_allowed, 0, MSG_MAX_ALLOWED_BYTES)))
        return rc;
    if (p->n_allowed > 0 && !p->allowed)
        return cs_error_set(err, CS_EPROTO, "allowed: %d bytes but no array", p->n_allowed);
    return CS_OK;
}

static int validate_seq(const struct msg_seq *q, struct cs_error *err)
{
    int rc;
    if ((rc = range(err, "seq_id", q->seq_id, 0, INT64_MAX)) ||
        (rc = range(err, "slot", q->slot, 0, MSG_MAX_SLOTS - 1)) ||
        (rc = range(err, "n_tokens", q->n_tokens, 1, MSG_MAX_STEP_TOKENS)) ||
        (rc = range(err, "n_past", q->n_past, 0, INT32_MAX - MSG_MAX_STEP_TOKENS)) ||
        (rc = ids_ok(err, "tokens", q->tokens, q->n_tokens, MSG_MAX_STEP_TOKENS, 0, INT32_MAX)) ||
        (rc = ids_ok(err, "pages", q->pages, q->n_pages, MSG_MAX_PAGES, 0, INT32_MAX)))
        return rc;
    if (q->flags & ~MSG_SEQ_FLAGS_ALL)
        return cs_error_set(err, CS_EPROTO, "unknown flag bits 0x%x", q->flags & ~MSG_SEQ_FLAGS_ALL);
    if (q->flags & MSG_SEQ_SNAPSHOT) {
        if ((rc = range(err, "snapshot_slot", q->snapshot_slot, 0, MSG_MAX_SLOTS - 1)))
            return rc;
        if (q->snapshot_slot == q->slot)
            return cs_error_set(err, CS_EPROTO, "snapshot_slot equals slot %d", q->slot);
    } else if (q->snapshot_slot != -1) {
        return cs_error_set(err, CS_EPROTO, "snapshot_slot %d without the snapshot flag",
                            q->snapshot_slot);
    }
    if (q->flags & MSG_SEQ_SAMPLE) {
        rc = validate_sample(&q->sample, err);
        if (rc)
            cs_error_prefix(err, "sample");
    }
    return rc;
}

static int validate_timings(const struct msg_timing *t, int32_t n, struct cs_error *err)
{
    int rc = range(err, "n_timings", n, 0, MSG_MAX_STAGES);
    if (rc)
        return rc;
    if (n > 0 && !t)
        return cs_error_set(err, CS_EPROTO, "timings: %d entries but no array", n);
    for (int32_t i = 0; i < n; i++)
        if ((rc = range(err, "timing stage", t[i].stage, 0, MSG_MAX_STAGES - 1)))
            return rc;
    return CS_OK;
}

static int validate_step(const struct msg_step *b, struct cs_error *err)
{
    int rc;
    if ((rc = range(err, "edge_slot", b->edge_slot, -1, MSG_MAX_EDGE_SLOTS - 1)) ||
        (rc = range(err, "n_seqs", b->n_seqs, 1, MSG_MAX_SEQS)) ||
        (rc = range(err, "n_tokens", b->n_tokens, 1, MSG_MAX_STEP_TOKENS)) ||
        (rc = validate_timings(b->timings, b->n_timings, err)))
        return rc;
    if (!b->seqs)
        return cs_error_set(err, CS_EPROTO, "%d seqs but no array", b->n_seqs);
    uint8_t used[MSG_MAX_SLOTS / 8] = {0};
    int64_t n_tokens = 0, n_pages = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const struct msg_seq *q = &b->seqs[s];
        if ((rc = validate_seq(q, err))) {
            cs_error_prefix(err, "seq %d", s);
            return rc;
        }
        if (used[q->slot >> 3] & (1u << (q->slot & 7)))
            return cs_error_set(err, CS_EPROTO, "seq %d: slot %d used twice in one step", s, q->slot);
        used[q->slot >> 3] |= (uint8_t)(1u << (q->slot & 7));
        n_tokens += q->n_tokens;
        n_pages += q->n_pages;
    }
    if (n_tokens != b->n_tokens)
        return cs_error_set(err, CS_EPROTO, "n_tokens %d but the sequences hold %lld", b->n_tokens,
                            (long long)n_tokens);
    if (n_pages > MSG_MAX_PAGE_ENTRIES)
        return cs_error_set(err, CS_EPROTO, "%lld page table entries, limit %d",
                            (long long)n_pages, MSG_MAX_PAGE_ENTRIES);
    return CS_OK;
}

static int validate_step_done(const struct msg_step_done *b, struct cs_error *err)
{
    int rc;
    if ((rc = range(err, "n_samples", b->n_samples, 0, MSG_MAX_SEQS)) ||
        (rc = validate_timings(b->timings, b->n_timings, err)))
        return rc;
    if (b->n_samples > 0 && !b->samples)
        return cs_error_set(err, CS_EPROTO, "%d samples but no array", b->n_samples);
    for (int32_t i = 0; i < b->n_samples; i++) {
        const struct msg_sampled *s = &b->samples[i];
        if ((rc = range(err, "seq_id", s->seq_id, 0, INT64_MAX)) ||
            (rc = range(err, "token", s->result.token, 0, INT32_MAX)) ||
            (rc = range(err, "n_top", s->result.n_top, 0, CS_MAX_TOP_LOGPROBS))) {
            cs_error_prefix(err, "sample %d", i);
            return rc;
        }
    }
    return CS_OK;
}

static int validate_body(const struct msg *m, struct cs_error *err)
{
    int rc;
    switch (m->h.type) {
    case MSG_HELLO: return validate_hello(&m->u.hello, m->h.version, err);
    case MSG_LOAD: return validate_load(&m->u.load, err);
    case MSG_READY: return validate_ready(&m->u.ready, err);
    case MSG_STEP: return validate_step(&m->u.step, err);
    case MSG_STEP_DONE: return validate_step_done(&m->u.step_done, err);
    case MSG_SEQ_FREE:
        if ((rc = range(err, "seq_id", m->u.seq_free.seq_id, 0, INT64_MAX)) ||
            (rc = range(err, "slot", m->u.seq_free.slot, -1, MSG_MAX_SLOTS - 1)))
            return rc;
        return ids_ok(err, "pages", m->u.seq_free.pages, m->u.seq_free.n_pages, MSG_MAX_PAGES, 0,
                      INT32_MAX);
    case MSG_SNAPSHOT:
    case MSG_RESTORE:
        if ((rc = range(err, "seq_id", m->u.slot_copy.seq_id, 0, INT64_MAX)) ||
            (rc = range(err, "src_slot", m->u.slot_copy.src_slot, 0, MSG_MAX_SLOTS - 1)) ||
            (rc = range(err, "dst_slot", m->u.slot_copy.dst_slot, 0, MSG_MAX_SLOTS - 1)))
            return rc;
        if (m->u.slot_copy.src_slot == m->u.slot_copy.dst_slot)
            return cs_error_set(err, CS_EPROTO, "src_slot equals dst_slot %d",
                                m->u.slot_copy.src_slot);
        return CS_OK;
    case MSG_HEARTBEAT:
        return range(err, "state", m->u.heartbeat.state, MSG_STATE_LOADING, MSG_STATE_BUSY);
    case MSG_SHUTDOWN: return CS_OK;
    case MSG_ERROR:
        if ((rc = range(err, "code", m->u.error.code, -1000, -1)))
            return rc;
        return str_ok(err, "message", m->u.error.message, MSG_MAX_TEXT);
    }
    return cs_error_set(err, CS_EPROTO, "unknown message type %u", m->h.type);
}

int msg_validate(const struct msg *m, struct cs_error *err)
{
    uint32_t version = m->h.version ? m->h.version : CS_PROTO_VERSION;
    if (version != CS_PROTO_VERSION)
        return cs_error_set(err, CS_EPROTO, "protocol version %u, expected %d", version,
                            CS_PROTO_VERSION);
    if (m->h.type < MSG_TYPE_FIRST || m->h.type > MSG_TYPE_LAST)
        return cs_error_set(err, CS_EPROTO, "unknown message type %u", m->h.type);
    if (m->h.sender < MSG_SENDER_COORD || m->h.sender >= MSG_MAX_STAGES)
        return cs_error_set(err, CS_EPROTO, "sender %d out of range [-1, %d]", m->h.sender,
                            MSG_MAX_STAGES - 1);
    int rc = validate_body(m, err);
    if (rc)
        cs_error_prefix(err, "%s", msg_type_name(m->h.type));
    return rc;
}

/* ================================================================
 * Encoding
 * ================================================================ */

static int pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s ? s : "", n);
}

/* n 32-bit words as one bin, little-endian */
static int pack_words(msgpack_packer *pk, const void *a, int32_t n)
{
    int rc = msgpack_pack_bin(pk, (size_t)n * 4);
    const uint8_t *src = a;
    uint8_t tmp[1024];
    for (int32_t i = 0; i < n;) {
        int32_t k = n - i < 256 ? n - i : 256;
        for (int32_t j = 0; j < k; j++) {
            uint32_t w;
            memcpy(&w, src + (size_t)(i + j) * 4, 4);
            tmp[4 * j] = (uint8_t)w;
            tmp[4 * j + 1] = (uint8_t)(w >> 8);
            tmp[4 * j + 2] = (uint8_t)(w >> 16);
            tmp[4 * j + 3] = (uint8_t)(w >> 24);
        }
        rc |= msgpack_pack_bin_body(pk, tmp, (size_t)k * 4);
        i += k;
    }
    return rc;
}

static int pack_timings(msgpack_packer *pk, const struct msg_timing *t, int32_t n)
{
    int rc = msgpack_pack_array(pk, (size_t)n);
    for (int32_t i = 0; i < n; i++)
        rc |= msgpack_pack_array(pk, 5) | msgpack_pack_int32(pk, t[i].stage) |
              msgpack_pack_uint32(pk, t[i].compute_us) | msgpack_pack_uint32(pk, t[i].copy_us) |
              msgpack_pack_uint64(pk, t[i].recv_us) | msgpack_pack_uint64(pk, t[i].sent_us);
    return rc;
}

static int pack_hello(msgpack_packer *pk, const struct msg_hello *b)
{
    return msgpack_pack_array(pk, 8) | msgpack_pack_int32(pk, b->stage) |
           msgpack_pack_int32(pk, b->gpu_index) | pack_str(pk, b->device_name) |
           msgpack_pack_uint64(pk, b->free_bytes) | msgpack_pack_uint64(pk, b->total_bytes) |
           msgpack_pack_uint32(pk, b->capabilities) | msgpack_pack_int32(pk, b->pid) |
           msgpack_pack_uint32(pk, b->proto_version);
}

static int pack_load(msgpack_packer *pk, const struct msg_load *b)
{
    const struct cs_state_config *s = &b->state;
    return msgpack_pack_array(pk, 13) | pack_str(pk, b->model_path) |
           msgpack_pack_int32(pk, b->stage) | msgpack_pack_int32(pk, b->n_stages) |
           msgpack_pack_int32(pk, b->layer_begin) | msgpack_pack_int32(pk, b->layer_end) |
           msgpack_pack_array(pk, 5) | msgpack_pack_int32(pk, s->max_tokens) |
           msgpack_pack_int32(pk, s->n_slots) | msgpack_pack_int32(pk, s->kv_pages) |
           msgpack_pack_int32(pk, s->page_size) | msgpack_pack_uint32(pk, s->kv_type) |
           msgpack_pack_uint32(pk, b->edge_dtype) | msgpack_pack_int32(pk, b->edge_slots) |
           pack_str(pk, b->edge_in) | pack_str(pk, b->edge_out) | pack_str(pk, b->notify_in) |
           pack_str(pk, b->notify_out) | pack_str(pk, b->config_json);
}

static int pack_ready(msgpack_packer *pk, const struct msg_ready *b)
{
    return msgpack_pack_array(pk, 9) | msgpack_pack_int32(pk, b->stage) |
           msgpack_pack_int32(pk, b->layer_begin) | msgpack_pack_int32(pk, b->layer_end) |
           msgpack_pack_uint64(pk, b->kv_tokens) | msgpack_pack_int32(pk, b->n_slots) |
           msgpack_pack_int32(pk, b->max_tokens) | msgpack_pack_uint32(pk, b->load_ms) |
           msgpack_pack_uint64(pk, b->weight_bytes) | msgpack_pack_uint64(pk, b->state_bytes);
}

static int pack_sample(msgpack_packer *pk, const struct msg_sample *p)
{
    return msgpack_pack_array(pk, 15) | msgpack_pack_float(pk, p->temperature) |
           msgpack_pack_int32(pk, p->top_k) | msgpack_pack_float(pk, p->top_p) |
           msgpack_pack_float(pk, p->min_p) | msgpack_pack_float(pk, p->presence_penalty) |
           msgpack_pack_float(pk, p->frequency_penalty) |
           msgpack_pack_float(pk, p->repetition_penalty) | msgpack_pack_uint64(pk, p->seed) |
           msgpack_pack_uint64(pk, p->draw) | msgpack_pack_int32(pk, p->n_logprobs) |
           pack_words(pk, p->gen_tokens, p->n_gen_tokens) |
           pack_words(pk, p->ctx_tokens, p->n_ctx_tokens) |
           pack_words(pk, p->bias_ids, p->n_bias) | pack_words(pk, p->bias_vals, p->n_bias) |
           msgpack_pack_bin(pk, (size_t)p->n_allowed) |
           (p->n_allowed ? msgpack_pack_bin_body(pk, p->allowed, (size_t)p->n_allowed) : 0);
}

static int pack_step(msgpack_packer *pk, const struct msg_step *b)
{
    int rc = msgpack_pack_array(pk, 4) | msgpack_pack_int32(pk, b->edge_slot) |
             msgpack_pack_int32(pk, b->n_tokens) | msgpack_pack_array(pk, (size_t)b->n_seqs);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const struct msg_seq *q = &b->seqs[s];
        rc |= msgpack_pack_array(pk, 9) | msgpack_pack_int64(pk, q->seq_id) |
              msgpack_pack_int32(pk, q->slot) | msgpack_pack_int32(pk, q->n_past) |
              msgpack_pack_int32(pk, q->n_tokens) | msgpack_pack_uint32(pk, q->flags) |
              msgpack_pack_int32(pk, q->snapshot_slot) | pack_words(pk, q->tokens, q->n_tokens) |
              pack_words(pk, q->pages, q->n_pages);
        rc |= (q->flags & MSG_SEQ_SAMPLE) ? pack_sample(pk, &q->sample) : msgpack_pack_nil(pk);
    }
    return rc | pack_timings(pk, b->timings, b->n_timings);
}

static int pack_step_done(msgpack_packer *pk, const struct msg_step_done *b)
{
    int rc = msgpack_pack_array(pk, 2) | msgpack_pack_array(pk, (size_t)b->n_samples);
    for (int32_t i = 0; i < b->n_samples; i++) {
        const struct msg_sampled *s = &b->samples[i];
        rc |= msgpack_pack_array(pk, 5) | msgpack_pack_int64(pk, s->seq_id) |
              msgpack_pack_int32(pk, s->result.token) | msgpack_pack_float(pk, s->result.logprob) |
              pack_words(pk, s->result.top_ids, s->result.n_top) |
              pack_words(pk, s->result.top_logprobs, s->result.n_top);
    }
    return rc | pack_timings(pk, b->timings, b->n_timings);
}

static int pack_body(msgpack_packer *pk, const struct msg *m)
{
    const struct msg_slot_copy *c = &m->u.slot_copy;
    switch (m->h.type) {
    case MSG_HELLO: return pack_hello(pk, &m->u.hello);
    case MSG_LOAD: return pack_load(pk, &m->u.load);
    case MSG_READY: return pack_ready(pk, &m->u.ready);
    case MSG_STEP: return pack_step(pk, &m->u.step);
    case MSG_STEP_DONE: return pack_step_done(pk, &m->u.step_done);
    case MSG_SEQ_FREE:
        return msgpack_pack_array(pk, 3) | msgpack_pack_int64(pk, m->u.seq_free.seq_id) |
               msgpack_pack_int32(pk, m->u.seq_free.slot) |
               pack_words(pk, m->u.seq_free.pages, m->u.seq_free.n_pages);
    case MSG_SNAPSHOT:
    case MSG_RESTORE:
        return msgpack_pack_array(pk, 3) | msgpack_pack_int64(pk, c->seq_id) |
               msgpack_pack_int32(pk, c->src_slot) | msgpack_pack_int32(pk, c->dst_slot);
    case MSG_HEARTBEAT:
        return msgpack_pack_array(pk, 3) | msgpack_pack_uint64(pk, m->u.heartbeat.seq) |
               msgpack_pack_uint64(pk, m->u.heartbeat.time_us) |
               msgpack_pack_uint32(pk, m->u.heartbeat.state);
    case MSG_SHUTDOWN:
        return msgpack_pack_array(pk, 1) |
               (m->u.shutdown.drain ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    case MSG_ERROR:
        return msgpack_pack_array(pk, 3) | msgpack_pack_int32(pk, m->u.error.code) |
               (m->u.error.fatal ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) |
               pack_str(pk, m->u.error.message);
    }
    return -1;
}

int msg_encode(const struct msg *m, void **data, size_t *size, struct cs_error *err)
{
    *data = NULL;
    *size = 0;
    int rc = msg_validate(m, err);
    if (rc)
        return rc;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int bad = msgpack_pack_array(&pk, 5) | msgpack_pack_uint32(&pk, CS_PROTO_VERSION) |
              msgpack_pack_uint32(&pk, m->h.type) | msgpack_pack_uint64(&pk, m->h.step_id) |
              msgpack_pack_int32(&pk, m->h.sender) | pack_body(&pk, m);
    if (bad) {
        msgpack_sbuffer_destroy(&sb);
        return cs_error_set(err, CS_ENOMEM, "%s: out of memory encoding", msg_type_name(m->h.type));
    }
    if (sb.size > MSG_MAX_BYTES) {
        msgpack_sbuffer_destroy(&sb);
        return cs_error_set(err, CS_EPROTO, "%s: encoded size %zu exceeds %u bytes",
                            msg_type_name(m->h.type), sb.size, MSG_MAX_BYTES);
    }
    *size = sb.size;
    *data = msgpack_sbuffer_release(&sb);
    return CS_OK;
}

/* ================================================================
 * Step -> struct cs_batch
 * ================================================================ */

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static int batch_pages_check(const struct msg_step *step, int page_size, struct cs_error *err)
{
    for (int32_t s = 0; s < step->n_seqs && page_size > 0; s++) {
        const struct msg_seq *q = &step->seqs[s];
        int64_t need = ((int64_t)q->n_past + q->n_tokens + page_size - 1) / page_size;
        if (q->n_pages < need)
            return cs_error_set(err, CS_EPROTO, "step: seq %d: %d pages of %d tokens do not "
                                "cover position %d", s, q->n_pages, page_size,
                                q->n_past + q->n_tokens - 1);
    }
    return CS_OK;
}

static void batch_fill_params(struct cs_sample_params *p, const struct msg_sample *s)
{
    p->temperature = s->temperature;
    p->top_k = s->top_k;
    p->top_p = s->top_p;
    p->min_p = s->min_p;
    p->presence_penalty = s->presence_penalty;
    p->frequency_penalty = s->frequency_penalty;
    p->repetition_penalty = s->repetition_penalty;
    p->seed = s->seed;
    p->draw = s->draw;
    p->n_logprobs = s->n_logprobs;
    p->gen_tokens = s->gen_tokens;
    p->n_gen_tokens = s->n_gen_tokens;
    p->ctx_tokens = s->ctx_tokens;
    p->n_ctx_tokens = s->n_ctx_tokens;
    p->bias_ids = s->bias_ids;
    p->bias_vals = s->bias_vals;
    p->n_bias = s->n_bias;
    p->allowed = s->n_allowed > 0 ? s->allowed : NULL;
}

int msg_step_to_batch(struct msg_batch *out, const struct msg_step *step, int page_size,
                      struct cs_error *err)
{
    memset(out, 0, sizeof *out);
    struct msg m = {.h = {CS_PROTO_VERSION, MSG_STEP, 0, MSG_SENDER_COORD}};
    m.u.step = *step;
    int rc = msg_validate(&m, err);
    if (rc || (rc = batch_pages_check(step, page_size, err)))
        return rc;
    int32_t nt = step->n_tokens, ns = step->n_seqs, mp = 1;
    for (int32_t s = 0; s < ns; s++)
        mp = step->seqs[s].n_pages > mp ? step->seqs[s].n_pages : mp;
    size_t i32 = align8((size_t)nt * 4), seqs32 = align8((size_t)ns * 4);
    size_t bytes = 3 * i32 + 2 * seqs32 + align8((size_t)(ns + 1) * 4) +
                   align8((size_t)ns * (size_t)mp * 4) + align8((size_t)ns) +
                   (size_t)ns * sizeof(struct cs_sample_params);
    uint8_t *p = calloc(1, bytes);
    if (!p)
        return cs_error_set(err, CS_ENOMEM, "step: out of memory for a batch of %d tokens", nt);
    out->mem = p;
    int32_t *tokens = (int32_t *)p, *pos = (int32_t *)(p + i32), *seq_of = (int32_t *)(p + 2 * i32);
    p += 3 * i32;
    int32_t *slot = (int32_t *)p;
    p += seqs32;
    int32_t *start = (int32_t *)p;
    p += align8((size_t)(ns + 1) * 4);
    int32_t *pages = (int32_t *)p;
    p += align8((size_t)ns * (size_t)mp * 4);
    out->sample = (bool *)p;
    p += align8((size_t)ns);
    out->params = (struct cs_sample_params *)p;
    int32_t t = 0;
    for (int32_t s = 0; s < ns; s++) {
        const struct msg_seq *q = &step->seqs[s];
        start[s] = t;
        slot[s] = q->slot;
        for (int32_t i = 0; i < q->n_tokens; i++, t++) {
            tokens[t] = q->tokens[i];
            pos[t] = q->n_past + i;
            seq_of[t] = s;
        }
        for (int32_t i = 0; i < mp; i++)
            pages[(size_t)s * mp + i] = i < q->n_pages ? q->pages[i] : -1;
        out->sample[s] = (q->flags & MSG_SEQ_SAMPLE) != 0;
        if (out->sample[s])
            batch_fill_params(&out->params[s], &q->sample);
    }
    start[ns] = t;
    out->batch = (struct cs_batch){.n_tokens = nt, .n_seqs = ns, .tokens = tokens, .pos = pos,
                                   .seq_of = seq_of, .seq_start = start, .slot = slot,
                                   .page_table = pages, .max_pages = mp};
    return CS_OK;
}

void msg_batch_free(struct msg_batch *b)
{
    free(b->mem);
    memset(b, 0, sizeof *b);
}
