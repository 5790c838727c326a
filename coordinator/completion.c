/* completion.c - the life of one completion request (completion.h): the
 * engine submits (one per choice), the token stream through the decoder, stop
 * strings and the reasoning/tool parser, and the answer as SSE chunks or one
 * JSON body. The request checks and the prompt are in completion_prompt.c;
 * the structs both share in completion_int.h.
 *
 * Memory: struct completion lives while the HTTP request is unanswered or any
 * choice still runs in the engine (refs counts our own stack frames, so an
 * engine that calls back synchronously cannot free it under us). */
#define _GNU_SOURCE /* memmem */
#include "completion_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordinator/json_constrain.h"
#include "coordinator/toolparse.h"
#include "kernels/sampler.h"

static void completion_release(struct completion *c);
static void choice_emit(struct choice *ch, const char *s, size_t n);

/* ---- errors and small helpers ---- */

void completion_send_error(struct completion_ctx *cx, struct http_request *req,
                           const struct oai_error *e, const char *extra)
{
    char *body = oai_error_body(e);
    struct buf h = {0};
    buf_append_str(&h, cx->extra_headers);
    if (extra)
        buf_append_str(&h, extra);
    metrics_count_status(cx->metrics, e->status);
    http_respond(req, e->status, "application/json", buf_cstr(&h), body ? body : "{}",
                 body ? strlen(body) : 2);
    buf_free(&h);
    free(body);
}

static void make_id(char *out, size_t cap, const char *prefix)
{
    char call[TOOLPARSE_ID_SIZE];
    toolparse_id_make(call, NULL);
    snprintf(out, cap, "%s%s", prefix, call + 5); /* the 24 hex digits after "call_" */
}

static uint64_t random_seed(void)
{
    char call[TOOLPARSE_ID_SIZE];
    toolparse_id_make(call, NULL);
    return strtoull(call + 5 + 8, NULL, 16) ^ uv_hrtime();
}

/* ---- sending ---- */

/* Queue one SSE event; on a stalled or gone client give the request up. */
static void sse_send(struct completion *c, const char *json)
{
    if (!c->http || !json)
        return;
    struct buf b = {0};
    buf_append_str(&b, "data: ");
    buf_append_str(&b, json);
    buf_append_str(&b, "\n\n");
    int rc = http_stream_send(c->http, b.data, b.len);
    buf_free(&b);
    if (rc == CS_OK)
        return;
    LOG_WARN("api", "%s: client too slow or gone (%s), canceling", c->id, cs_strerror(rc));
    c->cx->metrics->canceled_total++;
    http_request_abort(c->http);
    c->http = NULL;
    for (int i = 0; i < c->n_ch; i++)
        if (c->ch[i].running)
            engine_cancel(c->cx->engine, c->ch[i].engine_id);
}

static void send_chat_delta(struct choice *ch, const struct oai_delta *d, const char *finish)
{
    struct completion *c = ch->c;
    struct oai_meta m = {c->id, c->created, c->cx->model->name};
    int n = ch->n_lp - ch->lp_sent;
    char *json = oai_chat_chunk(&m, ch->index, d, finish, ch->lp + ch->lp_sent, n,
                                c->req.logprobs);
    ch->lp_sent = ch->n_lp;
    sse_send(c, json);
    free(json);
}

static void send_text_delta(struct choice *ch, const char *text, const char *finish)
{
    struct completion *c = ch->c;
    struct oai_meta m = {c->id, c->created, c->cx->model->name};
    int n = ch->n_lp - ch->lp_sent;
    char *json = oai_text_chunk(&m, ch->index, text, finish, ch->lp + ch->lp_sent, n,
                                c->req.logprobs);
    ch->lp_sent = ch->n_lp;
    sse_send(c, json);
    free(json);
}

/* One toolparse event as a chat delta. */
static void send_event(struct choice *ch, const struct toolparse_event *ev)
{
    struct oai_delta d = {0};
    cJSON *calls = NULL;
    if (ev->type == TOOLPARSE_CONTENT_DELTA) {
        d.content = ev->text;
    } else if (ev->type == TOOLPARSE_REASONING_DELTA) {
        d.reasoning = ev->text;
    } else {
        calls = cJSON_CreateArray();
        cJSON *tc = cJSON_CreateObject();
        cJSON_AddNumberToObject(tc, "index", (double)ev->index);
        cJSON *fn;
        if (ev->type == TOOLPARSE_TOOL_CALL_START) {
            cJSON_AddStringToObject(tc, "id", ev->id);
            cJSON_AddStringToObject(tc, "type", "function");
            fn = cJSON_AddObjectToObject(tc, "function");
            cJSON_AddStringToObject(fn, "name", ev->name);
            cJSON_AddStringToObject(fn, "arguments", "");
        } else {
            fn = cJSON_AddObjectToObject(tc, "function");
            cJSON_AddStringToObject(fn, "arguments", ev->text);
        }
        cJSON_AddItemToArray(calls, tc);
        d.tool_calls = calls;
    }
    send_chat_delta(ch, &d, NULL);
    cJSON_Delete(calls);
}

static void send_events(struct choice *ch, const struct toolparse_event *ev, size_t n)
{
    if (!ch->c->req.stream)
        return;
    for (size_t i = 0; i < n && ch->c->http; i++)
        send_event(ch, &ev[i]);
}

/* ---- the token path: decoder -> stop strings -> parser / text ---- */

static void choice_emit(struct choice *ch, const char *s, size_t n)
{
    struct completion *c = ch->c;
    if (n == 0)
        return;
    if (c->req.kind == OAI_COMPLETION) {
        buf_append(&ch->text, s, n);
        if (c->req.stream) {
            char *t = strndup(s, n);
            send_text_delta(ch, t ? t : "", NULL);
            free(t);
        }
        return;
    }
    const struct toolparse_event *ev = NULL;
    size_t n_ev = 0;
    if (toolparse_feed(ch->tp, s, n, &ev, &n_ev) == CS_OK)
        send_events(ch, ev, n_ev);
}

/* Length of the longest suffix of s that is a proper prefix of a stop string. */
static size_t stop_holdback(const struct oai_request *r, const char *s, size_t n)
{
    size_t best = 0;
    for (int i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        for (size_t k = sl - 1 < n ? sl - 1 : n; k > best; k--)
            if (memcmp(s + n - k, r->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* Take newly decoded text: match stop strings, pass on what is settled. */
static void choice_take_text(struct choice *ch, const char *s, size_t n)
{
    const struct oai_request *r = &ch->c->req;
    if (ch->stop_hit || n == 0)
        return;
    if (r->n_stop == 0) {
        choice_emit(ch, s, n);
        return;
    }
    buf_append(&ch->hold, s, n);
    const char *h = buf_cstr(&ch->hold);
    size_t cut = ch->hold.len;
    for (int i = 0; i < r->n_stop; i++) {
        const char *m = memmem(h, ch->hold.len, r->stop[i], strlen(r->stop[i]));
        if (m && (size_t)(m - h) < cut) {
            cut = (size_t)(m - h);
            ch->stop_hit = true;
        }
    }
    if (!ch->stop_hit)
        cut = ch->hold.len - stop_holdback(r, h, ch->hold.len);
    choice_emit(ch, h, cut);
    if (ch->stop_hit) {
        buf_clear(&ch->hold);
        return;
    }
    size_t rest = ch->hold.len - cut;
    memmove(ch->hold.data, ch->hold.data + cut, rest);
    buf_truncate(&ch->hold, rest);
}

static void choice_record_logprob(struct choice *ch, const struct cs_sample_result *tok)
{
    if (ch->n_lp == ch->cap_lp) {
        int cap = ch->cap_lp ? ch->cap_lp * 2 : 64;
        void *p = realloc(ch->lp, (size_t)cap * sizeof *ch->lp);
        if (!p)
            return;
        ch->lp = p;
        ch->cap_lp = cap;
    }
    const struct tokenizer *tk = ch->c->cx->model->tok;
    struct oai_logprob *e = &ch->lp[ch->n_lp++];
    memset(e, 0, sizeof *e);
    e->tok.bytes = tokenizer_token_bytes(tk, tok->token, &e->tok.len);
    e->tok.logprob = tok->logprob;
    int n_top = tok->n_top < ch->c->req.top_logprobs ? tok->n_top : ch->c->req.top_logprobs;
    for (int k = 0; k < n_top; k++) {
        e->top[k].bytes = tokenizer_token_bytes(tk, tok->top_ids[k], &e->top[k].len);
        e->top[k].logprob = tok->top_logprobs[k];
    }
    e->n_top = n_top;
    e->text_offset = ch->text.len + ch->hold.len;
}

static bool on_token(void *user, const struct cs_sample_result *tok)
{
    struct choice *ch = user;
    struct completion *c = ch->c;
    struct metrics *m = c->cx->metrics;
    uint64_t now = uv_hrtime();
    if (ch->n_tokens == 0)
        metrics_histogram_observe(&m->ttft, (double)(now - c->t_submit_ns) * 1e-9);
    else
        metrics_histogram_observe(&m->itl, (double)(now - ch->t_last_ns) * 1e-9);
    ch->t_last_ns = now;
    ch->n_tokens++;
    m->completion_tokens_total++;
    if (ch->in_reasoning) {
        ch->n_reasoning++;
        if (tok->token == c->cx->think_end_id)
            ch->in_reasoning = false;
    }
    if (!c->http || ch->stop_hit)
        return false;
    c->refs++;
    if (c->req.logprobs)
        choice_record_logprob(ch, tok);
    const char *text = NULL;
    size_t len = 0;
    if (tokenizer_decoder_feed(&ch->dec, tok->token, &text, &len) == CS_OK)
        choice_take_text(ch, text, len);
    bool go_on = c->http && !ch->stop_hit;
    c->refs--;
    completion_release(c);
    return go_on;
}

/* ---- finishing ---- */

static const char *finish_reason(const struct choice *ch)
{
    if (ch->finish == ENGINE_FINISH_LENGTH && !ch->stop_hit)
        return "length";
    if (ch->result && ch->result->has_tool_calls)
        return "tool_calls";
    return "stop";
}

/* End of a choice's text: flush the decoder, the stop holdback, the parser. */
static void choice_flush(struct choice *ch)
{
    const char *text = NULL;
    size_t len = 0;
    if (tokenizer_decoder_flush(&ch->dec, &text, &len) == CS_OK)
        choice_take_text(ch, text, len);
    if (!ch->stop_hit && ch->hold.len) {
        choice_emit(ch, ch->hold.data, ch->hold.len);
        buf_clear(&ch->hold);
    }
    if (ch->tp) {
        const struct toolparse_event *ev = NULL;
        size_t n_ev = 0;
        if (toolparse_finish(ch->tp, &ev, &n_ev, &ch->result) == CS_OK)
            send_events(ch, ev, n_ev);
    }
}

static void usage_fill(const struct completion *c, struct oai_usage *u)
{
    memset(u, 0, sizeof *u);
    u->prompt_tokens = c->n_prompt;
    for (int i = 0; i < c->n_ch; i++) {
        u->completion_tokens += c->ch[i].n_tokens;
        u->reasoning_tokens += c->ch[i].n_reasoning;
    }
}

static cJSON *tool_calls_json(const struct toolparse_result *res)
{
    if (!res || !res->n_calls)
        return NULL;
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < res->n_calls; i++) {
        cJSON *tc = cJSON_CreateObject();
        cJSON_AddStringToObject(tc, "id", res->calls[i].id);
        cJSON_AddStringToObject(tc, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(tc, "function");
        cJSON_AddStringToObject(fn, "name", res->calls[i].name);
        cJSON_AddStringToObject(fn, "arguments", res->calls[i].arguments);
        cJSON_AddItemToArray(arr, tc);
    }
    return arr;
}

static void respond_whole(struct completion *c, const struct oai_usage *u)
{
    struct oai_meta m = {c->id, c->created, c->cx->model->name};
    struct oai_choice *oc = calloc((size_t)c->n_ch, sizeof *oc);
    char **strs = calloc((size_t)c->n_ch * 2, sizeof *strs);
    if (!oc || !strs) {
        free(oc);
        free(strs);
        http_request_abort(c->http);
        return;
    }
    for (int i = 0; i < c->n_ch; i++) {
        struct choice *ch = &c->ch[i];
        const struct toolparse_result *res = ch->result;
        if (c->req.kind == OAI_COMPLETION) {
            oc[i].content = buf_cstr(&ch->text);
        } else if (res) {
            strs[2 * i] = res->content ? strndup(res->content, res->content_len) : NULL;
            strs[2 * i + 1] = res->reasoning ? strndup(res->reasoning, res->reasoning_len) : NULL;
            oc[i].content = strs[2 * i];
            oc[i].reasoning = strs[2 * i + 1];
            oc[i].tool_calls = tool_calls_json(res);
        }
        oc[i].finish_reason = finish_reason(ch);
        static const struct oai_logprob no_lp;
        oc[i].lp = c->req.logprobs ? (ch->lp ? ch->lp : &no_lp) : NULL;
        oc[i].n_lp = ch->n_lp;
    }
    char *body = c->req.kind == OAI_CHAT ? oai_chat_response(&m, oc, c->n_ch, u)
                                         : oai_text_response(&m, oc, c->n_ch, u);
    metrics_count_status(c->cx->metrics, 200);
    http_respond(c->http, 200, "application/json", c->cx->extra_headers, body ? body : "{}",
                 body ? strlen(body) : 2);
    free(body);
    for (int i = 0; i < c->n_ch; i++) {
        cJSON_Delete(oc[i].tool_calls);
        free(strs[2 * i]);
        free(strs[2 * i + 1]);
    }
    free(oc);
    free(strs);
}

/* Every choice is done: answer (if the client is still there). */
static void completion_answer(struct completion *c)
{
    if (!c->http)
        return;
    struct oai_error e;
    const struct choice *bad = NULL;
    for (int i = 0; i < c->n_ch; i++)
        if (c->ch[i].finish == ENGINE_FINISH_ERROR || c->ch[i].finish == ENGINE_FINISH_CANCELED)
            bad = &c->ch[i];
    if (bad)
        oai_error_set(&e, 500, "server_error", NULL, "generation failed: %s", bad->errmsg);
    struct oai_usage u;
    usage_fill(c, &u);
    if (!c->streaming) {
        if (bad)
            completion_send_error(c->cx, c->http, &e, NULL);
        else
            respond_whole(c, &u);
        c->http = NULL;
        return;
    }
    if (bad) {
        char *json = oai_error_body(&e);
        sse_send(c, json);
        free(json);
    } else if (c->req.include_usage) {
        struct oai_meta m = {c->id, c->created, c->cx->model->name};
        char *json = oai_usage_chunk(&m, c->req.kind == OAI_CHAT, &u);
        sse_send(c, json);
        free(json);
    }
    if (c->http && !bad)
        http_stream_send(c->http, "data: [DONE]\n\n", 14);
    if (c->http)
        http_stream_end(c->http);
    c->http = NULL;
}

static void on_done(void *user, enum engine_finish finish, int status, const char *message)
{
    struct choice *ch = user;
    struct completion *c = ch->c;
    c->refs++;
    ch->running = false;
    c->n_running--;
    ch->finish = finish;
    ch->status = status;
    snprintf(ch->errmsg, sizeof ch->errmsg, "%s", message ? message : cs_strerror(status));
    if (c->http && finish != ENGINE_FINISH_ERROR && finish != ENGINE_FINISH_CANCELED) {
        choice_flush(ch);
        if (c->streaming && c->http) {
            if (c->req.kind == OAI_CHAT) {
                struct oai_delta d = {0};
                send_chat_delta(ch, &d, finish_reason(ch));
            } else {
                send_text_delta(ch, "", finish_reason(ch));
            }
        }
    }
    if (c->n_running == 0)
        completion_answer(c);
    c->refs--;
    completion_release(c);
}

static void completion_free(struct completion *c)
{
    for (int i = 0; i < c->n_ch; i++) {
        struct choice *ch = &c->ch[i];
        tokenizer_decoder_free(&ch->dec);
        toolparse_destroy(ch->tp);
        buf_free(&ch->hold);
        buf_free(&ch->text);
        free(ch->lp);
    }
    free(c->ch);
    free(c->prompt);
    oai_request_free(&c->req);
    c->cx->metrics->active_requests--;
    free(c);
}

static void completion_release(struct completion *c)
{
    if (c->refs == 0 && c->n_running == 0 && !c->http)
        completion_free(c);
}

/* The client went away: cancel every running choice now. */
static void on_abort(struct http_request *req)
{
    struct completion *c = req->user;
    c->http = NULL;
    c->refs++;
    c->cx->metrics->canceled_total++;
    LOG_INFO("api", "%s: client disconnected, canceling", c->id);
    for (int i = 0; i < c->n_ch; i++)
        if (c->ch[i].running)
            engine_cancel(c->cx->engine, c->ch[i].engine_id);
    c->refs--;
    completion_release(c);
}

/* ---- starting: choices, constraints, submits (the prompt: completion_prompt.c) ---- */

static int choices_init(struct completion *c, struct oai_error *e)
{
    c->n_ch = c->req.n;
    c->ch = calloc((size_t)c->n_ch, sizeof *c->ch);
    if (!c->ch)
        goto nomem;
    const cJSON *tools = c->req.tool_choice == OAI_TOOL_NONE ? NULL : c->req.tools;
    for (int i = 0; i < c->n_ch; i++) {
        struct choice *ch = &c->ch[i];
        ch->c = c;
        ch->index = i;
        ch->in_reasoning = c->thinking;
        tokenizer_decoder_init(&ch->dec, c->cx->model->tok, false);
        if (c->req.kind != OAI_CHAT)
            continue;
        struct toolparse_options opt = {.thinking = c->thinking, .tools = tools};
        if (toolparse_create(&ch->tp, &opt) != CS_OK)
            goto nomem;
    }
    return CS_OK;
nomem:
    oai_error_set(e, 500, "server_error", NULL, "out of memory");
    return CS_ENOMEM;
}

/* The choice's decoding constraint (json_constrain.h): a forced tool call,
 * or the response_format's JSON; *out NULL when the output is free. */
static int constraint_make(struct completion *c, struct jc_constraint **out, struct oai_error *e)
{
    const struct oai_request *r = &c->req;
    *out = NULL;
    bool tools = c->forced[0] != 0;
    if (!tools && r->format == OAI_FORMAT_TEXT)
        return CS_OK;
    const struct tokenizer *tok = c->cx->model->tok;
    const struct jc_vocab *v = jc_vocab_shared(tok, c->cx->engine->n_vocab);
    if (!v) {
        oai_error_set(e, 500, "server_error", NULL, "cannot build the constrained-decoding index");
        return CS_ENOMEM;
    }
    struct cs_error err = {0};
    int32_t end_id = c->cx->n_eos > 0 ? c->cx->eos_ids[0] : -1;
    int rc = tools ? jc_constraint_tools(out, v, r->tools,
                                         r->tool_choice == OAI_TOOL_NAMED ? r->tool_name : NULL,
                                         r->parallel_tool_calls, end_id, &err)
                   : jc_constraint_json(out, v, r->format == OAI_FORMAT_JSON_SCHEMA ? r->json_schema
                                                                                  : NULL,
                                        end_id, &err);
    if (rc == CS_ENOMEM)
        oai_error_set(e, 500, "server_error", NULL, "out of memory");
    else if (rc != CS_OK)
        oai_error_set(e, 400, "invalid_request_error", tools ? "tools" : "response_format",
                      "%s: %s", tools ? "'tools' cannot be enforced" :
                      "'response_format.json_schema.schema' is not supported", err.msg);
    return rc;
}

static int submit_choice(struct completion *c, struct choice *ch, int max_tokens,
                         struct oai_error *e)
{
    const struct oai_request *r = &c->req;
    struct engine_request er = {
        .prompt = c->prompt,
        .n_prompt = c->n_prompt,
        .max_tokens = max_tokens,
        .stop_ids = c->cx->eos_ids,
        .n_stop_ids = c->cx->n_eos,
        .on_token = on_token,
        .on_done = on_done,
        .user = ch,
    };
    struct cs_sample_params *p = &er.sample;
    p->temperature = r->temperature;
    p->top_k = r->top_k > 0 ? r->top_k : 0;
    p->top_p = r->top_p;
    p->min_p = r->min_p;
    p->presence_penalty = r->presence_penalty;
    p->frequency_penalty = r->frequency_penalty;
    p->repetition_penalty = r->repetition_penalty;
    p->seed = r->has_seed ? r->seed + (uint64_t)ch->index : random_seed();
    p->n_logprobs = r->logprobs ? r->top_logprobs : -1;
    p->bias_ids = r->bias_ids;
    p->bias_vals = r->bias_vals;
    p->n_bias = r->n_bias;
    struct jc_constraint *jc = NULL;
    int rc = constraint_make(c, &jc, e);
    if (rc != CS_OK)
        return rc;
    er.constraint_ops = jc ? &jc_engine_ops : NULL;
    er.constraint = jc;
    struct cs_error err = {0};
    rc = engine_submit(c->cx->engine, &er, &ch->engine_id, &err);
    if (rc != CS_OK)
        jc_constraint_free(jc);
    if (rc == CS_OK) {
        ch->running = true;
        c->n_running++;
    } else if (rc == CS_EFULL) {
        c->cx->metrics->rejected_full_total++;
        oai_error_set(e, 429, "server_error", NULL, "the server is busy (queue full): retry later");
        snprintf(e->code, sizeof e->code, "queue_full");
    } else if (rc == CS_ERANGE) {
        oai_error_set(e, 400, "invalid_request_error", "messages", "%s", err.msg);
        snprintf(e->code, sizeof e->code, "context_length_exceeded");
    } else if (rc == CS_EINVAL || rc == CS_EUNSUPPORTED) {
        /* the engine refused the request itself (a parameter it cannot honour) */
        oai_error_set(e, 400, "invalid_request_error", NULL, "%s",
                      err.msg[0] ? err.msg : cs_strerror(rc));
    } else {
        oai_error_set(e, 500, "server_error", NULL, "cannot start generation: %s",
                      err.msg[0] ? err.msg : cs_strerror(rc));
    }
    return rc;
}

/* Stream start: headers, the role chunk of each choice, the forced call opening. */
static void completion_begin(struct completion *c)
{
    if (c->req.stream) {
        struct buf h = {0};
        buf_append_str(&h, "Cache-Control: no-cache\r\n");
        buf_append_str(&h, c->cx->extra_headers);
        metrics_count_status(c->cx->metrics, 200);
        http_stream_start(c->http, 200, "text/event-stream", buf_cstr(&h));
        buf_free(&h);
        c->streaming = true;
    }
    for (int i = 0; i < c->n_ch && c->http; i++) {
        struct choice *ch = &c->ch[i];
        if (c->streaming && c->req.kind == OAI_CHAT) {
            struct oai_delta d = {.role = true, .content = ""};
            send_chat_delta(ch, &d, NULL);
        }
        if (c->forced[0] && ch->tp) {
            const struct toolparse_event *ev = NULL;
            size_t n_ev = 0;
            if (toolparse_feed(ch->tp, c->forced, strlen(c->forced), &ev, &n_ev) == CS_OK)
                send_events(ch, ev, n_ev);
        }
    }
}

void completion_handle(struct completion_ctx *cx, struct http_request *req, enum oai_kind kind)
{
    struct completion *c = calloc(1, sizeof *c);
    struct oai_error e = {0};
    if (!c) {
        oai_error_set(&e, 500, "server_error", NULL, "out of memory");
        completion_send_error(cx, req, &e, NULL);
        return;
    }
    c->cx = cx;
    c->created = (long)time(NULL);
    cx->metrics->active_requests++;
    cx->metrics->requests_total[kind == OAI_CHAT ? 0 : 1]++;
    make_id(c->id, sizeof c->id, kind == OAI_CHAT ? "chatcmpl-" : "cmpl-");
    int max_tokens = 0;
    int rc = oai_request_parse(&c->req, kind, req->body.data ? req->body.data : "", req->body.len, &e);
    if (rc == CS_OK)
        rc = completion_check_request(c, &e);
    if (rc == CS_OK)
        rc = kind == OAI_CHAT ? completion_build_chat_prompt(c, &e)
                             : completion_build_text_prompt(c, &e);
    if (rc == CS_OK)
        rc = completion_check_context(c, &max_tokens, &e);
    if (rc == CS_OK)
        rc = choices_init(c, &e);
    c->t_submit_ns = uv_hrtime();
    for (int i = 0; rc == CS_OK && i < c->n_ch; i++)
        rc = submit_choice(c, &c->ch[i], max_tokens, &e);
    if (rc != CS_OK) {
        LOG_DEBUG("api", "%s: %d %s", c->id, e.status, e.message);
        completion_send_error(cx, req, &e, rc == CS_EFULL ? "Retry-After: 1\r\n" : NULL);
        c->refs++;
        for (int i = 0; i < c->n_ch; i++)
            if (c->ch[i].running)
                engine_cancel(cx->engine, c->ch[i].engine_id);
        c->refs--;
        completion_release(c);
        return;
    }
    cx->metrics->prompt_tokens_total += (uint64_t)c->n_prompt;
    c->http = req;
    req->user = c;
    req->on_abort = on_abort;
    LOG_DEBUG("api", "%s: %d prompt tokens, max_tokens %d, n %d, stream %d", c->id, c->n_prompt,
              max_tokens, c->n_ch, c->req.stream);
    completion_begin(c);
}
