/* toolparse_check.c - run/reassemble/compare helpers for the toolparse tests
 * (see toolparse_check.h). The event rules checked: call starts come with
 * indexes 0, 1, 2, ... with a valid id and a name; argument deltas belong to
 * the last started call; reasoning never follows content or a call; content
 * never follows a call; deltas are non-empty, NUL-terminated and (for valid
 * UTF-8 input) valid UTF-8 each; ids are unique within the response. */
#include "tests/toolparse/toolparse_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

struct acc {
    struct buf reasoning, content, args[TPC_MAX_CALLS];
    char *ids[TPC_MAX_CALLS], *names[TPC_MAX_CALLS];
    size_t n_calls;
    bool utf8;
    char *err;
};

bool tpc_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i], cp, len, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2, min = 0x80, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3, min = 0x800, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4, min = 0x10000, cp = c & 0x07;
        else
            return false;
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((u[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

bool tpc_id_valid(const char *id)
{
    if (!id || strncmp(id, "call_", 5) != 0 || strlen(id) != 29)
        return false;
    for (size_t i = 5; i < 29; i++) {
        if (!strchr("0123456789abcdef", id[i]))
            return false;
    }
    return true;
}

static void fail(struct acc *a, const char *what)
{
    if (!*a->err)
        snprintf(a->err, 160, "%s", what);
}

static void acc_delta(struct acc *a, const struct toolparse_event *e)
{
    if (!e->text || e->len == 0 || e->text[e->len] != 0)
        fail(a, "delta without text or NUL");
    else if (a->utf8 && !tpc_utf8_valid(e->text, e->len))
        fail(a, "delta cuts a UTF-8 character");
    if (!e->text)
        return;
    if (e->type == TOOLPARSE_REASONING_DELTA) {
        if (a->content.len || a->n_calls)
            fail(a, "reasoning after content or a call");
        buf_append(&a->reasoning, e->text, e->len);
    } else if (e->type == TOOLPARSE_CONTENT_DELTA) {
        if (a->n_calls)
            fail(a, "content after a call");
        buf_append(&a->content, e->text, e->len);
    } else if (a->n_calls == 0 || e->index != a->n_calls - 1) {
        fail(a, "arguments for a call that is not the open one");
    } else {
        buf_append(&a->args[e->index], e->text, e->len);
    }
}

static void acc_start(struct acc *a, const struct toolparse_event *e)
{
    if (e->index != a->n_calls || a->n_calls >= TPC_MAX_CALLS) {
        fail(a, "call start out of order (or too many calls for the harness)");
        return;
    }
    if (!tpc_id_valid(e->id) || !e->name || !*e->name)
        fail(a, "call start without a valid id and name");
    for (size_t i = 0; i < a->n_calls; i++) {
        if (e->id && strcmp(a->ids[i], e->id) == 0)
            fail(a, "duplicate call id in one response");
    }
    a->ids[a->n_calls] = strdup(e->id ? e->id : "");
    a->names[a->n_calls] = strdup(e->name ? e->name : "");
    a->n_calls++;
}

static void acc_events(struct acc *a, const struct toolparse_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type == TOOLPARSE_TOOL_CALL_START)
            acc_start(a, &ev[i]);
        else
            acc_delta(a, &ev[i]);
    }
}

static char *dup_or_null(const char *s, size_t n)
{
    if (!s)
        return NULL;
    char *d = malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void message_from_result(struct tpc_message *m, const struct toolparse_result *res)
{
    m->reasoning = dup_or_null(res->reasoning, res->reasoning_len);
    m->content = dup_or_null(res->content, res->content_len);
    m->n_calls = res->n_calls < TPC_MAX_CALLS ? res->n_calls : TPC_MAX_CALLS;
    for (size_t i = 0; i < m->n_calls; i++) {
        m->ids[i] = strdup(res->calls[i].id);
        m->names[i] = strdup(res->calls[i].name);
        m->args[i] = dup_or_null(res->calls[i].arguments, res->calls[i].arguments_len);
    }
    m->cut_in_reasoning = res->cut_in_reasoning;
    m->has_tool_calls = res->has_tool_calls;
}

static void message_from_acc(struct tpc_message *m, struct acc *a, const struct tpc_message *fin)
{
    m->reasoning = a->reasoning.len ? buf_detach(&a->reasoning, NULL) : NULL;
    m->content = a->content.len ? buf_detach(&a->content, NULL) : NULL;
    m->n_calls = a->n_calls;
    for (size_t i = 0; i < a->n_calls; i++) {
        m->ids[i] = a->ids[i];
        m->names[i] = a->names[i];
        m->args[i] = buf_detach(&a->args[i], NULL);
    }
    m->cut_in_reasoning = fin->cut_in_reasoning;
    m->has_tool_calls = a->n_calls > 0;
}

void tpc_run_chunks(struct tpc_run *r, const struct toolparse_options *opt, const char *text,
                    size_t len, const size_t *cuts, size_t n_cuts, bool check_utf8)
{
    memset(r, 0, sizeof *r);
    struct acc a = {.utf8 = check_utf8, .err = r->protocol_error};
    struct toolparse *p = NULL;
    const struct toolparse_event *ev;
    const struct toolparse_result *res = NULL;
    size_t n_ev, at = 0;
    if ((r->status = toolparse_create(&p, opt)) != 0)
        return;
    for (size_t c = 0; c <= n_cuts && r->status == 0; c++) {
        size_t end = c < n_cuts ? cuts[c] : len;
        r->status = toolparse_feed(p, text + at, end - at, &ev, &n_ev);
        if (r->status == 0)
            acc_events(&a, ev, n_ev);
        at = end;
    }
    if (r->status == 0)
        r->status = toolparse_finish(p, &ev, &n_ev, &res);
    if (r->status == 0) {
        acc_events(&a, ev, n_ev);
        message_from_result(&r->final, res);
    }
    message_from_acc(&r->streamed, &a, &r->final);
    for (size_t i = 0; i < TPC_MAX_CALLS; i++)
        buf_free(&a.args[i]);
    buf_free(&a.reasoning);
    buf_free(&a.content);
    toolparse_destroy(p);
}

static void message_free(struct tpc_message *m)
{
    free(m->reasoning);
    free(m->content);
    for (size_t i = 0; i < m->n_calls; i++) {
        free(m->ids[i]);
        free(m->names[i]);
        free(m->args[i]);
    }
    memset(m, 0, sizeof *m);
}

void tpc_run_free(struct tpc_run *r)
{
    message_free(&r->final);
    message_free(&r->streamed);
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

const char *tpc_message_diff(const struct tpc_message *a, const struct tpc_message *b)
{
    if (!str_eq(a->reasoning, b->reasoning))
        return "reasoning differs";
    if (!str_eq(a->content, b->content))
        return "content differs";
    if (a->n_calls != b->n_calls)
        return "number of calls differs";
    for (size_t i = 0; i < a->n_calls; i++) {
        if (!str_eq(a->names[i], b->names[i]))
            return "call name differs";
        if (!str_eq(a->args[i], b->args[i]))
            return "call arguments differ";
    }
    if (a->cut_in_reasoning != b->cut_in_reasoning)
        return "cut_in_reasoning differs";
    if (a->has_tool_calls != b->has_tool_calls)
        return "has_tool_calls differs";
    return NULL;
}
