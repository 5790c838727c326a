/* toolparse.c - the streaming reasoning / content / tool-call splitter.
 * Rules, formats and ownership: toolparse.h.
 *
 * How chunk independence is kept: input bytes go to p->in; run() hands the
 * unconsumed bytes to the step function of the current state, which either
 * consumes a prefix (emitting what it settled) or answers "need more" when
 * only later bytes can decide. A step decides from the bytes it sees and
 * whether the text has ended, never from where a chunk ended, and "need
 * more" is answered only while some continuation could change the decision
 * (with at most a few hundred bytes of lookahead). So every chunking makes
 * the same sequence of decisions, and the deltas concatenate to the same
 * text. The assembled message is built from the emitted deltas themselves.
 *
 * Step functions return the bytes consumed (> 0), 0 for "need more", or a
 * negative status. */
#include "coordinator/toolparse.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/status.h"
#include "coordinator/jsonschema_convert.h"

#define OPEN_WS_MAX 64    /* whitespace between <tool_call> and <function= */
#define FOLLOW_WS_MAX 256 /* whitespace between a closing tag and the next */
#define NAME_MAX_BYTES 256 /* function and parameter names */

enum tp_state { ST_REASONING, ST_CONTENT, ST_CALL_BODY, ST_PARAM_VALUE, ST_AFTER_CALL };
enum { M_NONE, M_PARTIAL, M_FULL };
enum { D_NO, D_YES, D_MORE };

struct tp_call {
    char id[TOOLPARSE_ID_SIZE];
    char *name;
    struct buf args;
};

/* An event of the current feed; text lives in p->arena at off (+ NUL). */
struct tp_event_rec {
    enum toolparse_event_type type;
    size_t index, off, len;
};

struct toolparse {
    cJSON *tools; /* our copy; NULL when there are none */
    toolparse_id_fn make_id;
    void *id_ctx;
    enum tp_state state;
    int failed;
    bool finished;
    bool reasoning_seen; /* a think block was open at some point */
    bool think_dropped;  /* the model's own leading <think> was dropped */
    bool cut_in_reasoning;

    struct buf in; /* unconsumed input starts at pos */
    size_t pos;
    struct buf ws; /* whitespace held back in a text section */
    struct buf reasoning, content;

    struct tp_call *calls;
    size_t n_calls, cap_calls;
    const cJSON *props;  /* properties of the open call's tool, or NULL */
    size_t n_params;     /* parameters emitted in the open call */
    struct buf param_name, value, frag;

    struct tp_event_rec *recs;
    size_t n_recs, cap_recs;
    struct buf arena;
    struct toolparse_event *events;
    size_t cap_events;
    struct toolparse_call *out_calls;
    struct toolparse_result result;
};

/* ---- call ids ---- */

static pthread_once_t id_once = PTHREAD_ONCE_INIT;
static uint64_t id_key[2];
static _Atomic uint64_t id_counter;

/* splitmix64's finalizer: a bijection on 64-bit values. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void id_seed(void)
{
    if (getrandom(id_key, sizeof id_key, 0) != (ssize_t)sizeof id_key) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id_key[0] = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30));
        id_key[1] = mix64(id_key[0] ^ ((uint64_t)getpid() << 17) ^ (uint64_t)(uintptr_t)&ts);
    }
}

void toolparse_id_make(char *out, void *ctx)
{
    (void)ctx;
    pthread_once(&id_once, id_seed);
    uint64_t c = atomic_fetch_add(&id_counter, 1);
    uint64_t lo = mix64(c ^ id_key[1]); /* distinct for distinct c */
    uint32_t hi = (uint32_t)mix64(c + id_key[0]);
    snprintf(out, TOOLPARSE_ID_SIZE, "call_%08x%016llx", (unsigned)hi, (unsigned long long)lo);
}

/* ---- small helpers ---- */

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == ':' || c == '-';
}

/* Does s[0, n) start with lit (FULL), or is it a proper prefix (PARTIAL)? */
static int match(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    if (n >= k)
        return memcmp(s, lit, k) == 0 ? M_FULL : M_NONE;
    return memcmp(s, lit, n) == 0 ? M_PARTIAL : M_NONE;
}

/* The longest prefix of s[0, n) that does not end inside a UTF-8 sequence
 * (a lead byte whose continuation bytes have not arrived). */
static size_t utf8_complete(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 0; back < 4 && back < n; back++) {
        unsigned c = u[n - 1 - back];
        if ((c & 0xC0) == 0x80)
            continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return back + 1 < need ? n - 1 - back : n;
    }
    return n;
}

/* After a closing tag: at most FOLLOW_WS_MAX whitespace bytes, then one of
 * tags (or the end of the text, or a cut-off start of a tag at the end). */
static int follow_check(const char *s, size_t n, bool at_end, const char *const *tags, size_t nt)
{
    size_t i = 0;
    while (i < n && is_ws(s[i])) {
        if (++i > FOLLOW_WS_MAX)
            return D_NO;
    }
    if (i == n)
        return at_end ? D_YES : D_MORE;
    bool partial = false;
    for (size_t t = 0; t < nt; t++) {
        int m = match(s + i, n - i, tags[t]);
        if (m == M_FULL)
            return D_YES;
        partial |= m == M_PARTIAL;
    }
    return partial ? (at_end ? D_YES : D_MORE) : D_NO;
}

/* s starts with "<tool_call>": is it a call opening "<tool_call>" ws
 * "<function=NAME>"? On YES, NAME is s[*name_off, +*name_len) and the
 * opening is *total bytes long. */
static int call_open_check(const char *s, size_t n, bool at_end, size_t *name_off,
                           size_t *name_len, size_t *total)
{
    size_t i = 11;
    while (i < n && is_ws(s[i])) {
        if (++i - 11 > OPEN_WS_MAX)
            return D_NO;
    }
    int m = i < n ? match(s + i, n - i, "<function=") : M_PARTIAL;
    if (m != M_FULL)
        return m == M_PARTIAL && !at_end ? D_MORE : D_NO;
    size_t start = i += 10;
    while (i < n && is_name_char(s[i])) {
        if (++i - start > NAME_MAX_BYTES)
            return D_NO;
    }
    if (i == n)
        return at_end ? D_NO : D_MORE;
    if (s[i] != '>' || i == start)
        return D_NO;
    *name_off = start;
    *name_len = i - start;
    *total = i + 1;
    return D_YES;
}

/* ---- events ---- */

static int ev_add(struct toolparse *p, enum toolparse_event_type type, size_t index, const char *s,
                  size_t n)
{
    struct tp_event_rec *last = p->n_recs ? &p->recs[p->n_recs - 1] : NULL;
    int rc;
    if (last && last->type == type && type != TOOLPARSE_TOOL_CALL_START && last->index == index) {
        buf_truncate(&p->arena, p->arena.len - 1); /* its NUL */
        last->len += n;
    } else {
        if (p->n_recs == p->cap_recs) {
            size_t cap = p->cap_recs ? 2 * p->cap_recs : 16;
            struct tp_event_rec *r = realloc(p->recs, cap * sizeof *r);
            if (!r)
                return CS_ENOMEM;
            p->recs = r, p->cap_recs = cap;
        }
        p->recs[p->n_recs++] = (struct tp_event_rec){type, index, p->arena.len, n};
    }
    if ((rc = buf_append(&p->arena, s, n)) != CS_OK)
        return rc;
    return buf_append_byte(&p->arena, 0);
}

/* Emit text of the current text section, after the held whitespace when
 * the section already has text (else that whitespace is leading: dropped). */
static int section_text(struct toolparse *p, const char *s, size_t n)
{
    bool r = p->state == ST_REASONING;
    struct buf *sec = r ? &p->reasoning : &p->content;
    enum toolparse_event_type type = r ? TOOLPARSE_REASONING_DELTA : TOOLPARSE_CONTENT_DELTA;
    int rc = CS_OK;
    if (sec->len > 0 && p->ws.len > 0) {
        if ((rc = buf_append(sec, p->ws.data, p->ws.len)) == CS_OK)
            rc = ev_add(p, type, 0, p->ws.data, p->ws.len);
    }
    buf_clear(&p->ws);
    if (rc == CS_OK && (rc = buf_append(sec, s, n)) == CS_OK)
        rc = ev_add(p, type, 0, s, n);
    return rc;
}

static int args_emit(struct toolparse *p, const char *s, size_t n)
{
    size_t i = p->n_calls - 1;
    int rc = buf_append(&p->calls[i].args, s, n);
    return rc ? rc : ev_add(p, TOOLPARSE_TOOL_CALL_ARGS_DELTA, i, s, n);
}

/* ---- calls ---- */

static int call_start(struct toolparse *p, const char *name, size_t len)
{
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? 2 * p->cap_calls : 4;
        struct tp_call *c = realloc(p->calls, cap * sizeof *c);
        if (!c)
            return CS_ENOMEM;
        p->calls = c, p->cap_calls = cap;
    }
    struct tp_call *c = &p->calls[p->n_calls];
    memset(c, 0, sizeof *c);
    if (!(c->name = strndup(name, len)))
        return CS_ENOMEM;
    p->make_id(c->id, p->id_ctx);
    c->id[TOOLPARSE_ID_SIZE - 1] = 0;
    p->n_calls++;
    buf_clear(&p->ws);
    p->props = jsonschema_tool_properties(p->tools, name, len);
    p->n_params = 0;
    p->state = ST_CALL_BODY;
    int rc = ev_add(p, TOOLPARSE_TOOL_CALL_START, p->n_calls - 1, "", 0);
    return rc ? rc : args_emit(p, "{", 1);
}

static int call_end(struct toolparse *p)
{
    p->state = ST_AFTER_CALL;
    return args_emit(p, "}", 1);
}

static int param_start(struct toolparse *p, const char *name, size_t len)
{
    buf_clear(&p->param_name);
    buf_clear(&p->value);
    p->state = ST_PARAM_VALUE;
    return buf_append(&p->param_name, name, len);
}

/* The open value is complete: strip one leading and one trailing newline,
 * convert it, and emit `"name": value` (after ", " for all but the first). */
static int param_end(struct toolparse *p)
{
    const char *v = buf_cstr(&p->value);
    size_t n = p->value.len;
    if (n && v[0] == '\n')
        v++, n--;
    if (n && v[n - 1] == '\n')
        n--;
    const cJSON *schema =
        jsonschema_property_find(p->props, buf_cstr(&p->param_name), p->param_name.len);
    buf_clear(&p->frag);
    int rc = p->n_params ? buf_append(&p->frag, ", ", 2) : CS_OK;
    if (rc == CS_OK)
        rc = jsonschema_string_write(&p->frag, buf_cstr(&p->param_name), p->param_name.len);
    if (rc == CS_OK)
        rc = buf_append(&p->frag, ": ", 2);
    if (rc == CS_OK)
        rc = jsonschema_value_convert(&p->frag, schema, v, n);
    p->n_params++;
    p->state = ST_CALL_BODY;
    return rc ? rc : args_emit(p, p->frag.data, p->frag.len);
}

/* ---- steps ---- */

/* s starts with "<tool_call>": start a call, or say it is not one (0 in
 * *consumed with D_NO) or that more input is needed. */
static ptrdiff_t try_call_open(struct toolparse *p, const char *s, size_t n, bool at_end, int *d)
{
    size_t off = 0, len = 0, total = 0;
    *d = call_open_check(s, n, at_end, &off, &len, &total);
    if (*d != D_YES)
        return 0;
    int rc = call_start(p, s + off, len);
    return rc ? rc : (ptrdiff_t)total;
}

static ptrdiff_t step_text_tag(struct toolparse *p, const char *s, size_t n, bool at_end)
{
    bool reasoning = p->state == ST_REASONING, partial = false;
    int m = match(s, n, "</think>");
    if (m == M_FULL) {
        buf_clear(&p->ws);
        if (reasoning)
            p->state = ST_CONTENT;
        return 8;
    }
    partial |= m == M_PARTIAL;
    if ((m = match(s, n, "<think>")) == M_FULL) {
        if (!reasoning) {
            if (!p->reasoning_seen && p->content.len == 0) {
                p->reasoning_seen = p->think_dropped = true;
                p->state = ST_REASONING;
                buf_clear(&p->ws);
            }
            return 7; /* never into content */
        }
        if (!p->think_dropped && p->reasoning.len == 0) {
            p->think_dropped = true;
            buf_clear(&p->ws);
            return 7;
        }
    }
    partial |= m == M_PARTIAL;
    m = p->tools ? match(s, n, "<tool_call>") : M_NONE;
    if (m == M_FULL) {
        int d;
        ptrdiff_t r = try_call_open(p, s, n, at_end, &d);
        if (d != D_NO)
            return r;
    }
    partial |= m == M_PARTIAL;
    if (partial && !at_end)
        return 0;
    int rc = section_text(p, "<", 1);
    return rc ? rc : 1;
}

/* Reasoning and content: words, held whitespace, possible tags. */
static ptrdiff_t step_text(struct toolparse *p, const char *s, size_t n, bool at_end)
{
    size_t k = 1;
    int rc;
    if (is_ws(s[0])) {
        while (k < n && is_ws(s[k]))
            k++;
        rc = buf_append(&p->ws, s, k);
        return rc ? rc : (ptrdiff_t)k;
    }
    if (s[0] == '<')
        return step_text_tag(p, s, n, at_end);
    while (k < n && s[k] != '<' && !is_ws(s[k]))
        k++;
    if (k == n && !at_end && (k = utf8_complete(s, k)) == 0)
        return 0;
    rc = section_text(p, s, k);
    return rc ? rc : (ptrdiff_t)k;
}

/* Bytes up to the next '<' (at least one). */
static size_t run_to_tag(const char *s, size_t n)
{
    size_t k = 1;
    while (k < n && s[k] != '<')
        k++;
    return k;
}

/* Inside <function=...>: parameters, the end of the call; the rest ignored. */
static ptrdiff_t step_call_body(struct toolparse *p, const char *s, size_t n, bool at_end)
{
    if (s[0] != '<')
        return (ptrdiff_t)run_to_tag(s, n);
    int m = match(s, n, "<parameter=");
    if (m == M_FULL) {
        size_t i = 11;
        while (i < n && s[i] != '>' && s[i] != '<' && s[i] != '\n' && i - 11 <= NAME_MAX_BYTES)
            i++;
        if (i - 11 > NAME_MAX_BYTES)
            return 1;
        if (i == n)
            return at_end ? 1 : 0;
        if (s[i] != '>' || i == 11)
            return 1;
        int rc = param_start(p, s + 11, i - 11);
        return rc ? rc : (ptrdiff_t)(i + 1);
    }
    bool partial = m == M_PARTIAL;
    static const char *const ends[] = {"</function>", "</tool_call>"};
    for (size_t t = 0; t < 2; t++) {
        if ((m = match(s, n, ends[t])) == M_FULL) {
            int rc = call_end(p);
            return rc ? rc : (ptrdiff_t)strlen(ends[t]);
        }
        partial |= m == M_PARTIAL;
    }
    return partial && !at_end ? 0 : 1;
}

/* A closing tag that may end a parameter value, and what must follow it. */
struct closer {
    const char *tag;
    const char *const *follow;
    size_t n_follow;
    bool ends_call;
};

static const char *const after_param[] = {"<parameter=", "</function>", "</tool_call>"};
static const char *const after_function[] = {"</tool_call>", "<tool_call>"};
static const char *const after_call[] = {"<tool_call>"};
static const struct closer closers[] = {
    {"</parameter>", after_param, 3, false},
    {"</function>", after_function, 2, true},
    {"</tool_call>", after_call, 1, true},
};

static ptrdiff_t step_param_value(struct toolparse *p, const char *s, size_t n, bool at_end)
{
    int rc;
    if (s[0] != '<') {
        size_t k = run_to_tag(s, n);
        rc = buf_append(&p->value, s, k);
        return rc ? rc : (ptrdiff_t)k;
    }
    bool partial = false;
    for (size_t c = 0; c < sizeof closers / sizeof closers[0]; c++) {
        const struct closer *cl = &closers[c];
        size_t len = strlen(cl->tag);
        int m = match(s, n, cl->tag);
        partial |= m == M_PARTIAL;
        if (m != M_FULL)
            continue;
        int d = follow_check(s + len, n - len, at_end, cl->follow, cl->n_follow);
        if (d == D_MORE)
            return 0;
        if (d == D_NO)
            break; /* not structural: value text */
        if ((rc = param_end(p)) == CS_OK && cl->ends_call)
            rc = call_end(p);
        return rc ? rc : (ptrdiff_t)len;
    }
    if (partial && !at_end)
        return 0;
    rc = buf_append_byte(&p->value, '<');
    return rc ? rc : 1;
}

/* After a call: only a further call counts; other text is dropped. */
static ptrdiff_t step_after_call(struct toolparse *p, const char *s, size_t n, bool at_end)
{
    if (s[0] != '<')
        return (ptrdiff_t)run_to_tag(s, n);
    int m = match(s, n, "<tool_call>");
    if (m == M_PARTIAL)
        return at_end ? 1 : 0;
    if (m == M_NONE)
        return 1;
    int d;
    ptrdiff_t r = try_call_open(p, s, n, at_end, &d);
    return d == D_NO ? 1 : r;
}

/* Consume as much of p->in as can be settled (all of it when at_end). */
static int run(struct toolparse *p, bool at_end)
{
    while (p->pos < p->in.len) {
        const char *s = p->in.data + p->pos;
        size_t n = p->in.len - p->pos;
        ptrdiff_t r;
        switch (p->state) {
        case ST_REASONING:
        case ST_CONTENT: r = step_text(p, s, n, at_end); break;
        case ST_CALL_BODY: r = step_call_body(p, s, n, at_end); break;
        case ST_PARAM_VALUE: r = step_param_value(p, s, n, at_end); break;
        default: r = step_after_call(p, s, n, at_end); break;
        }
        if (r < 0)
            return (int)r;
        if (r == 0)
            return at_end ? CS_EINTERNAL : CS_OK;
        p->pos += (size_t)r;
    }
    return CS_OK;
}

/* Drop the consumed input (the rest is a bounded lookahead). */
static void input_compact(struct toolparse *p)
{
    if (p->pos == 0)
        return;
    size_t rest = p->in.len - p->pos;
    memmove(p->in.data, p->in.data + p->pos, rest);
    buf_truncate(&p->in, rest);
    p->in.data[rest] = 0;
    p->pos = 0;
}

/* Turn this feed's records into public events. */
static int events_publish(struct toolparse *p, const struct toolparse_event **events,
                          size_t *n_events)
{
    if (p->n_recs > p->cap_events) {
        struct toolparse_event *e = realloc(p->events, p->n_recs * sizeof *e);
        if (!e)
            return CS_ENOMEM;
        p->events = e, p->cap_events = p->n_recs;
    }
    for (size_t i = 0; i < p->n_recs; i++) {
        const struct tp_event_rec *r = &p->recs[i];
        struct toolparse_event *e = &p->events[i];
        *e = (struct toolparse_event){.type = r->type, .index = r->index};
        if (r->type == TOOLPARSE_TOOL_CALL_START) {
            e->id = p->calls[r->index].id;
            e->name = p->calls[r->index].name;
        } else {
            e->text = p->arena.data + r->off;
            e->len = r->len;
        }
    }
    if (events)
        *events = p->n_recs ? p->events : NULL;
    if (n_events)
        *n_events = p->n_recs;
    return CS_OK;
}

/* ---- public API ---- */

int toolparse_create(struct toolparse **out, const struct toolparse_options *opt)
{
    *out = NULL;
    if (!opt || (opt->tools && !cJSON_IsArray(opt->tools)))
        return CS_EINVAL;
    struct toolparse *p = calloc(1, sizeof *p);
    if (!p)
        return CS_ENOMEM;
    if (opt->tools && cJSON_GetArraySize(opt->tools) > 0 &&
        !(p->tools = cJSON_Duplicate(opt->tools, 1))) {
        free(p);
        return CS_ENOMEM;
    }
    p->make_id = opt->make_id ? opt->make_id : toolparse_id_make;
    p->id_ctx = opt->id_ctx;
    p->state = opt->thinking ? ST_REASONING : ST_CONTENT;
    p->reasoning_seen = opt->thinking;
    *out = p;
    return CS_OK;
}

void toolparse_destroy(struct toolparse *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        buf_free(&p->calls[i].args);
    }
    free(p->calls);
    struct buf *bufs[] = {&p->in, &p->ws, &p->reasoning, &p->content, &p->param_name,
                          &p->value, &p->frag, &p->arena};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        buf_free(bufs[i]);
    free(p->recs);
    free(p->events);
    free(p->out_calls);
    cJSON_Delete(p->tools);
    free(p);
}

static void events_clear(struct toolparse *p, const struct toolparse_event **events,
                         size_t *n_events)
{
    p->n_recs = 0;
    buf_clear(&p->arena);
    if (events)
        *events = NULL;
    if (n_events)
        *n_events = 0;
}

int toolparse_feed(struct toolparse *p, const char *text, size_t len,
                   const struct toolparse_event **events, size_t *n_events)
{
    events_clear(p, events, n_events);
    if (p->failed)
        return p->failed;
    if (p->finished)
        return CS_EINVAL;
    int rc = buf_append(&p->in, text, len);
    if (rc == CS_OK)
        rc = run(p, false);
    if (rc == CS_OK) {
        input_compact(p);
        rc = events_publish(p, events, n_events);
    }
    if (rc != CS_OK)
        p->failed = rc;
    return rc;
}

/* Close what the end of the text leaves open. */
static int close_open(struct toolparse *p)
{
    int rc = CS_OK;
    if (p->state == ST_PARAM_VALUE)
        rc = param_end(p);
    if (rc == CS_OK && p->state == ST_CALL_BODY)
        rc = call_end(p);
    p->cut_in_reasoning = p->state == ST_REASONING;
    return rc;
}

static int result_build(struct toolparse *p)
{
    if (p->n_calls && !(p->out_calls = calloc(p->n_calls, sizeof *p->out_calls)))
        return CS_ENOMEM;
    for (size_t i = 0; i < p->n_calls; i++) {
        p->out_calls[i] = (struct toolparse_call){p->calls[i].id, p->calls[i].name,
                                                  buf_cstr(&p->calls[i].args),
                                                  p->calls[i].args.len};
    }
    struct toolparse_result *r = &p->result;
    r->reasoning = p->reasoning.len ? p->reasoning.data : NULL;
    r->reasoning_len = p->reasoning.len;
    r->content = p->content.len ? p->content.data : NULL;
    r->content_len = p->content.len;
    r->calls = p->out_calls;
    r->n_calls = p->n_calls;
    r->has_tool_calls = p->n_calls > 0;
    r->cut_in_reasoning = p->cut_in_reasoning;
    return CS_OK;
}

int toolparse_finish(struct toolparse *p, const struct toolparse_event **events,
                     size_t *n_events, const struct toolparse_result **result)
{
    events_clear(p, events, n_events);
    if (result)
        *result = NULL;
    if (p->failed)
        return p->failed;
    if (p->finished)
        return CS_EINVAL;
    p->finished = true;
    int rc = run(p, true);
    if (rc == CS_OK)
        rc = close_open(p);
    if (rc == CS_OK)
        rc = result_build(p);
    if (rc == CS_OK)
        rc = events_publish(p, events, n_events);
    if (rc != CS_OK)
        return p->failed = rc;
    if (result)
        *result = &p->result;
    return CS_OK;
}

int toolparse_parse_text(struct toolparse *p, const char *text, size_t len,
                         const struct toolparse_result **result)
{
    int rc = toolparse_feed(p, text, len, NULL, NULL);
    return rc ? rc : toolparse_finish(p, NULL, NULL, result);
}
