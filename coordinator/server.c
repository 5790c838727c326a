/* server.c - routes, API key, CORS, the small endpoints (/health,
 * /metrics, /v1/models), and the serve process lifecycle (server.h). The
 * completion endpoints are in completion.c. */
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/log.h"
#include "coordinator/completion.h"
#include "coordinator/http.h"
#include "coordinator/metrics.h"

struct server {
    uv_loop_t *loop;
    const struct cs_config *cfg;
    struct server_model model;
    struct engine *engine;
    struct http_server *http;
    struct metrics metrics;
    struct completion_ctx cx;
    char cors[512];
    long created;
    bool draining;   /* SIGTERM: new completions get 503 while in-flight ones finish */
};

/* ---- small endpoints ---- */

static void respond_json(struct server *s, struct http_request *req, int status, char *body)
{
    metrics_count_status(&s->metrics, status);
    http_respond(req, status, "application/json", s->cors, body ? body : "{}",
                 body ? strlen(body) : 2);
    free(body);
}

static void error_simple(struct server *s, struct http_request *req, int status,
                         const char *type, const char *code, const char *msg, const char *extra)
{
    struct oai_error e;
    oai_error_set(&e, status, type, NULL, "%s", msg);
    if (code)
        snprintf(e.code, sizeof e.code, "%s", code);
    completion_send_error(&s->cx, req, &e, extra);
}

static void handle_health(struct server *s, struct http_request *req)
{
    struct engine_stats st;
    memset(&st, 0, sizeof st);
    engine_stats(s->engine, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", st.ready ? "ok" : "unavailable");
    cJSON_AddStringToObject(o, "state", st.state);
    cJSON_AddNumberToObject(o, "running", st.running);
    cJSON_AddNumberToObject(o, "queued", st.queued);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    respond_json(s, req, st.ready ? 200 : 503, body);
}

static void handle_metrics(struct server *s, struct http_request *req)
{
    struct engine_stats st;
    memset(&st, 0, sizeof st);
    engine_stats(s->engine, &st);
    struct buf b = {0};
    metrics_render(&s->metrics, &st, http_server_connections(s->http), &b);
    metrics_count_status(&s->metrics, 200);
    http_respond(req, 200, "text/plain; version=0.0.4", s->cors, buf_cstr(&b), b.len);
    buf_free(&b);
}

static void handle_models(struct server *s, struct http_request *req)
{
    respond_json(s, req, 200, oai_models_body(s->model.name, s->created, s->engine->ctx_size));
}

/* CORS preflight. */
static void handle_options(struct server *s, struct http_request *req)
{
    char h[768];
    snprintf(h, sizeof h,
             "%sAccess-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
             "Access-Control-Allow-Headers: Authorization, Content-Type\r\n"
             "Access-Control-Max-Age: 86400\r\n",
             s->cors);
    metrics_count_status(&s->metrics, 204);
    http_respond(req, 204, NULL, h, "", 0);
}

/* ---- routing ---- */

static bool authorized(const struct server *s, const struct http_request *req)
{
    if (!s->cfg->api_key[0])
        return true;
    const char *h = http_request_header(req, "authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    const char *key = h + 7;
    while (*key == ' ')
        key++;
    /* compare without an early exit on the first differing byte */
    size_t a = strlen(key), b = strlen(s->cfg->api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < a && i < b; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)s->cfg->api_key[i];
    return diff == 0;
}

struct route {
    const char *path;
    const char *method;
    int id;
};

enum { R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };

static const struct route routes[] = {
    {"/v1/chat/completions", "POST", R_CHAT},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/v1/models", "GET", R_MODELS},
    {"/health", "GET", R_HEALTH},
    {"/metrics", "GET", R_METRICS},
};

static void dispatch(struct server *s, struct http_request *req, int id)
{
    switch (id) {
    case R_CHAT: completion_handle(&s->cx, req, OAI_CHAT); break;
    case R_COMPLETIONS: completion_handle(&s->cx, req, OAI_COMPLETION); break;
    case R_MODELS: handle_models(s, req); break;
    case R_HEALTH: handle_health(s, req); break;
    default: handle_metrics(s, req); break;
    }
}

/* GET /v1/models/{id}: the model object, or 404 for another id. */
static bool handle_model_retrieve(struct server *s, struct http_request *req)
{
    static const char prefix[] = "/v1/models/";
    if (strncmp(req->path, prefix, sizeof prefix - 1) != 0 || strcmp(req->method, "GET") != 0)
        return false;
    if (!authorized(s, req)) {
        error_simple(s, req, 401, "invalid_request_error", "invalid_api_key",
                     "Missing or invalid API key (Authorization: Bearer KEY)",
                     "WWW-Authenticate: Bearer\r\n");
        return true;
    }
    if (strcmp(req->path + sizeof prefix - 1, s->model.name) != 0) {
        error_simple(s, req, 404, "invalid_request_error", "model_not_found",
                     "The model does not exist", NULL);
        return true;
    }
    char *list = oai_models_body(s->model.name, s->created, s->engine->ctx_size);
    cJSON *o = cJSON_Parse(list ? list : "");
    cJSON *m = cJSON_DetachItemFromArray(cJSON_GetObjectItem(o, "data"), 0);
    respond_json(s, req, 200, m ? cJSON_PrintUnformatted(m) : NULL);
    cJSON_Delete(m);
    cJSON_Delete(o);
    free(list);
    return true;
}

static void on_request(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    LOG_DEBUG("api", "%s %s", req->method, req->url ? req->url : "");
    if (handle_model_retrieve(s, req))
        return;
    const struct route *found = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(req->path, routes[i].path) == 0)
            found = &routes[i];
    if (!found) {
        char msg[300];
        snprintf(msg, sizeof msg, "Unknown route %.200s", req->path);
        error_simple(s, req, 404, "invalid_request_error", "not_found", msg, NULL);
        return;
    }
    if (strcmp(req->method, "OPTIONS") == 0 && s->cfg->cors_origin[0]) {
        handle_options(s, req);
        return;
    }
    if (strcmp(req->method, found->method) != 0) {
        char msg[300], allow[64];
        snprintf(msg, sizeof msg, "Method %s is not allowed on %s", req->method, found->path);
        snprintf(allow, sizeof allow, "Allow: %s\r\n", found->method);
        error_simple(s, req, 405, "invalid_request_error", "method_not_allowed", msg, allow);
        return;
    }
    if (s->draining && (found->id == R_CHAT || found->id == R_COMPLETIONS)) {
        error_simple(s, req, 503, "server_error", "shutting_down",
                     "The server is shutting down", "Retry-After: 1\r\n");
        return;
    }
    if (found->id != R_HEALTH && !authorized(s, req)) {
        error_simple(s, req, 401, "invalid_request_error", "invalid_api_key",
                     "Missing or invalid API key (Authorization: Bearer KEY)",
                     "WWW-Authenticate: Bearer\r\n");
        return;
    }
    dispatch(s, req, found->id);
}

/* ---- creation ---- */

static void eos_ids_fill(struct completion_ctx *cx, const struct tokenizer *tok)
{
    cx->n_eos = (int)tokenizer_eos_ids(tok, cx->eos_ids, 4);
    if (cx->n_eos > 4)
        cx->n_eos = 4;
    cx->think_end_id = tokenizer_token_find(tok, "</think>", 8);
}

int server_create(struct server **out, uv_loop_t *loop, const struct cs_config *cfg,
                  const struct server_model *model, struct engine *engine, struct cs_error *err)
{
    struct server *s = calloc(1, sizeof *s);
    if (!s)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    s->loop = loop;
    s->cfg = cfg;
    s->model = *model;
    s->engine = engine;
    s->created = (long)time(NULL);
    metrics_init(&s->metrics);
    if (cfg->cors_origin[0])
        snprintf(s->cors, sizeof s->cors, "Access-Control-Allow-Origin: %.400s\r\nVary: Origin\r\n",
                 cfg->cors_origin);
    s->cx.cfg = cfg;
    s->cx.engine = engine;
    s->cx.model = &s->model;
    s->cx.metrics = &s->metrics;
    s->cx.extra_headers = s->cors;
    eos_ids_fill(&s->cx, model->tok);
    int rc = prompt_specials_init(&s->cx.specials, model->tok);
    struct http_limits lim;
    http_limits_defaults(&lim);
    lim.max_body_bytes = cfg->max_body_bytes > 0 ? (size_t)cfg->max_body_bytes : lim.max_body_bytes;
    lim.request_timeout_ms = cfg->header_timeout_ms > 0 ? (int)cfg->header_timeout_ms : 10000;
    if (rc == CS_OK)
        rc = http_server_create(&s->http, loop, &lim, on_request, s);
    if (rc == CS_OK)
        rc = http_server_listen(s->http, cfg->host, (int)cfg->port, err);
    if (rc != CS_OK) {
        if (s->http)
            http_server_close(s->http, NULL, NULL);
        cs_error_set(err, rc, "%s", err && err->msg[0] ? err->msg : cs_strerror(rc));
        *out = s;   /* the caller closes and destroys it after the loop ran the closes */
        return rc;
    }
    *out = s;
    return CS_OK;
}

int server_port(const struct server *s) { return http_server_port(s->http); }

void server_close(struct server *s, void (*done)(void *ctx), void *ctx)
{
    http_server_close(s->http, done, ctx);
}

void server_destroy(struct server *s)
{
    if (!s)
        return;
    http_server_destroy(s->http);
    prompt_specials_free(&s->cx.specials);
    free(s);
}

/* ---- the serve process ---- */

struct run_state {
    uv_loop_t *loop;
    struct server *srv;
    struct engine *engine;
    uv_signal_t sigint, sigterm;
    bool stopping;
    int grace_ms;
};

static void http_closed_cb(void *ctx)
{
    struct run_state *rs = ctx;
    uv_stop(rs->loop);
}

/* The engine finished (or canceled at the grace deadline) its requests:
 * close the HTTP side (their last bytes are already queued). */
static void engine_down_cb(void *ctx)
{
    struct run_state *rs = ctx;
    server_close(rs->srv, http_closed_cb, rs);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct run_state *rs = h->data;
    if (rs->stopping)
        return;
    rs->stopping = true;
    LOG_INFO("api", "signal %d: shutting down", signum);
    uv_signal_stop(&rs->sigint);
    uv_signal_stop(&rs->sigterm);
    /* graceful: refuse new completions, let the engine finish the running
     * ones within grace_ms (then it cancels them), then close HTTP */
    rs->srv->draining = true;
    if (rs->engine->ops->shutdown)
        rs->engine->ops->shutdown(rs->engine, rs->grace_ms, engine_down_cb, rs);
    else
        engine_down_cb(rs);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int server_run(const struct cs_config *cfg, const struct server_model *model,
               server_engine_create_fn create)
{
    signal(SIGPIPE, SIG_IGN);
    struct run_state rs = {.grace_ms = (int)cfg->shutdown_grace_ms};
    uv_loop_t loop;
    uv_loop_init(&loop);
    rs.loop = &loop;
    struct cs_error err = {0};
    int rc = create(&rs.engine, &loop, cfg, &err);
    if (rc != CS_OK) {
        LOG_ERROR("api", "cannot start the engine: %s", err.msg[0] ? err.msg : cs_strerror(rc));
        uv_loop_close(&loop);
        return 1;
    }
    rc = server_create(&rs.srv, &loop, cfg, model, rs.engine, &err);
    if (rc == CS_OK) {
        printf("cmpserve: listening on http://%s:%d (model %s)\n", cfg->host, server_port(rs.srv),
               model->name);
        printf("try: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' "
               "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'\n",
               cfg->host, server_port(rs.srv));
        fflush(stdout);
        uv_signal_init(&loop, &rs.sigint);
        uv_signal_init(&loop, &rs.sigterm);
        rs.sigint.data = rs.sigterm.data = &rs;
        uv_signal_start(&rs.sigint, on_signal, SIGINT);
        uv_signal_start(&rs.sigterm, on_signal, SIGTERM);
        uv_run(&loop, UV_RUN_DEFAULT);
    } else {
        LOG_ERROR("api", "%s", err.msg);
    }
    if (rs.engine->ops->destroy)
        rs.engine->ops->destroy(rs.engine);
    uv_walk(&loop, close_walk_cb, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    server_destroy(rs.srv);
    uv_loop_close(&loop);
    return rc == CS_OK ? 0 : 1;
}
