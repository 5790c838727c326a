/* http.c - HTTP/1.1 connections on libuv, parsed by http_parser (http.h).
 *
 * Connection states: READING (parser fed with incoming bytes; the timer is
 * the idle timeout before a request's first byte, the request timeout after
 * it) and HANDLING (a complete request is with the handler; bytes that
 * arrive meanwhile are kept in `pending`, bounded, and reading continues so
 * that a disconnect is seen at once). When the answer ends, a 0 ms timer
 * resumes parsing of the pending bytes outside the handler's stack.
 *
 * Writes: each uv_write owns one heap block; queued_bytes counts what the
 * client has not taken yet. A connection to close waits for its writes. */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

#include "common/log.h"

#define HTTP_MAX_HEADERS 128
#define HTTP_MAX_PENDING (256 * 1024)

enum conn_state { CONN_READING, CONN_HANDLING };

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    struct http_server *srv;
    struct http_conn *prev, *next;
    http_parser parser;
    enum conn_state state;
    struct http_request *req;   /* being parsed or handled */
    size_t header_bytes;
    bool in_value;              /* last header callback was a value */
    struct buf hname, hvalue;
    struct buf pending;         /* bytes received while HANDLING */
    bool started;               /* the current request has begun */
    bool dispatch;              /* message complete: hand to the handler */
    bool streaming, chunked;
    bool closing, close_after_write;
    bool rejecting;             /* answered an error: drain input, then close */
    uv_shutdown_t shutdown_req;
    int n_writes;
    size_t queued_bytes;
    int n_closed;               /* handles closed (2: free) */
    int error_status;           /* set by a callback that rejects the request */
};

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    bool listening;
    struct http_limits lim;
    http_handler_cb handler;
    void *ctx;
    struct http_conn *conns;
    int n_conns;
    int port;
    bool closing;
    void (*close_done)(void *);
    void *close_ctx;
};

struct write_block {
    uv_write_t wr;
    struct http_conn *conn;
    size_t len;
    char data[];
};

static void conn_close(struct http_conn *c);
static void conn_linger(struct http_conn *c);
static void conn_resume_cb(uv_timer_t *t);
static void conn_feed(struct http_conn *c, const char *data, size_t len);

/* ---- small helpers ---- */

const char *http_status_text(int status)
{
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
    }
}

void http_limits_defaults(struct http_limits *lim)
{
    lim->max_header_bytes = 64 * 1024;
    lim->max_body_bytes = 8 * 1024 * 1024;
    lim->request_timeout_ms = 10000;
    lim->idle_timeout_ms = 60000;
    lim->max_queued_bytes = 8 * 1024 * 1024;
    lim->max_connections = 1024;
}

static void request_free(struct http_request *req)
{
    if (!req)
        return;
    for (int i = 0; i < req->n_headers; i++) {
        free(req->headers[i].name);
        free(req->headers[i].value);
    }
    free(req->headers);
    free(req->url);
    free(req->path);
    buf_free(&req->body);
    free(req);
}

const char *http_request_header(const struct http_request *req, const char *name)
{
    for (int i = 0; i < req->n_headers; i++)
        if (strcmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

size_t http_request_queued_bytes(const struct http_request *req)
{
    return req->conn ? req->conn->queued_bytes : 0;
}

/* ---- writing ---- */

static void write_done_cb(uv_write_t *wr, int status)
{
    struct write_block *b = (struct write_block *)wr;
    struct http_conn *c = b->conn;
    c->queued_bytes -= b->len;
    c->n_writes--;
    free(b);
    if (status < 0 && !c->closing) {
        LOG_DEBUG("http", "write failed: %s", uv_strerror(status));
        conn_close(c);
        return;
    }
    if (c->n_writes == 0 && c->rejecting)
        conn_linger(c);
    else if (c->n_writes == 0 && (c->close_after_write || c->closing))
        conn_close(c);
}

static int conn_write(struct http_conn *c, const char *data, size_t len)
{
    if (c->closing)
        return CS_ECLOSED;
    if (len == 0)
        return CS_OK;
    struct write_block *b = malloc(sizeof *b + len);
    if (!b)
        return CS_ENOMEM;
    b->conn = c;
    b->len = len;
    memcpy(b->data, data, len);
    uv_buf_t ub = uv_buf_init(b->data, (unsigned)len);
    int rc = uv_write(&b->wr, (uv_stream_t *)&c->tcp, &ub, 1, write_done_cb);
    if (rc < 0) {
        /* closed by the caller's next step (finish without keep-alive or abort) */
        free(b);
        c->close_after_write = true;
        return CS_ECLOSED;
    }
    c->queued_bytes += len;
    c->n_writes++;
    return CS_OK;
}

static int write_head(struct http_conn *c, int status, const char *content_type,
                      const char *extra, long content_length, bool keep_alive, bool chunked)
{
    struct buf h = {0};
    int rc = buf_printf(&h, "HTTP/1.1 %d %s\r\n", status, http_status_text(status));
    if (rc == CS_OK && content_type)
        rc = buf_printf(&h, "Content-Type: %s\r\n", content_type);
    if (rc == CS_OK && content_length >= 0)
        rc = buf_printf(&h, "Content-Length: %ld\r\n", content_length);
    if (rc == CS_OK && chunked)
        rc = buf_append_str(&h, "Transfer-Encoding: chunked\r\n");
    if (rc == CS_OK)
        rc = buf_append_str(&h, keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    if (rc == CS_OK && extra)
        rc = buf_append_str(&h, extra);
    if (rc == CS_OK)
        rc = buf_append_str(&h, "\r\n");
    if (rc == CS_OK)
        rc = conn_write(c, h.data, h.len);
    buf_free(&h);
    return rc;
}

/* The answer to the current request is complete: free it and go on. */
static void conn_request_finish(struct http_conn *c, bool keep_alive)
{
    request_free(c->req);
    c->req = NULL;
    c->streaming = false;
    c->state = CONN_READING;
    if (!keep_alive || c->srv->closing) {
        c->close_after_write = true;
        uv_read_stop((uv_stream_t *)&c->tcp);
        if (c->n_writes == 0)
            conn_close(c);
        return;
    }
    /* resume parsing outside the handler's stack */
    uv_timer_start(&c->timer, conn_resume_cb, 0, 0);
}

int http_respond(struct http_request *req, int status, const char *content_type,
                 const char *extra_headers, const char *body, size_t len)
{
    struct http_conn *c = req->conn;
    bool ka = req->keep_alive;
    int rc = write_head(c, status, content_type, extra_headers, (long)len, ka, false);
    if (rc == CS_OK)
        rc = conn_write(c, body, len);
    if (c->req == req)
        conn_request_finish(c, ka && rc == CS_OK);
    return rc;
}

int http_stream_start(struct http_request *req, int status, const char *content_type,
                      const char *extra_headers)
{
    struct http_conn *c = req->conn;
    c->chunked = c->parser.http_major == 1 && c->parser.http_minor >= 1;
    if (!c->chunked)
        req->keep_alive = false;
    c->streaming = true;
    return write_head(c, status, content_type, extra_headers, -1, req->keep_alive, c->chunked);
}

int http_stream_send(struct http_request *req, const char *data, size_t len)
{
    struct http_conn *c = req->conn;
    if (c->closing)
        return CS_ECLOSED;
    if (c->queued_bytes > c->srv->lim.max_queued_bytes)
        return CS_EFULL;
    if (len == 0)
        return CS_OK;
    if (!c->chunked)
        return conn_write(c, data, len);
    char head[32];
    int n = snprintf(head, sizeof head, "%zx\r\n", len);
    struct buf b = {0};
    int rc = buf_append(&b, head, (size_t)n);
    if (rc == CS_OK)
        rc = buf_append(&b, data, len);
    if (rc == CS_OK)
        rc = buf_append(&b, "\r\n", 2);
    if (rc == CS_OK)
        rc = conn_write(c, b.data, b.len);
    buf_free(&b);
    return rc;
}

int http_stream_end(struct http_request *req)
{
    struct http_conn *c = req->conn;
    int rc = CS_OK;
    if (c->chunked)
        rc = conn_write(c, "0\r\n\r\n", 5);
    bool ka = req->keep_alive && rc == CS_OK;
    if (c->req == req)
        conn_request_finish(c, ka);
    return rc;
}

void http_request_abort(struct http_request *req)
{
    struct http_conn *c = req->conn;
    req->on_abort = NULL;
    conn_close(c);
}

/* An error the HTTP layer answers itself. The connection then lingers: its
 * write side is shut down and unread input is drained (up to 1 s) before
 * closing, so the client reads the answer instead of a reset. */
static void conn_reject(struct http_conn *c, int status, const char *message)
{
    char body[512];
    int n = snprintf(body, sizeof body,
                     "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\","
                     "\"param\":null,\"code\":null}}",
                     message);
    uv_timer_stop(&c->timer);
    c->rejecting = true;
    if (write_head(c, status, "application/json", NULL, n, false, false) == CS_OK)
        conn_write(c, body, (size_t)n);
    if (c->n_writes == 0)
        conn_linger(c);
}

static void linger_timer_cb(uv_timer_t *t) { conn_close(t->data); }

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    struct http_conn *c = req->data;
    if (status < 0 && !c->closing)
        conn_close(c);
}

static void conn_linger(struct http_conn *c)
{
    if (c->closing)
        return;
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, shutdown_cb) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, linger_timer_cb, 1000, 0);
}

/* ---- closing ---- */

static void conn_handle_closed_cb(uv_handle_t *h)
{
    struct http_conn *c = h->data;
    if (++c->n_closed < 2)
        return;
    struct http_server *s = c->srv;
    buf_free(&c->hname);
    buf_free(&c->hvalue);
    buf_free(&c->pending);
    free(c);
    if (s->closing && s->n_conns == 0 && !s->listening && s->close_done) {
        void (*done)(void *) = s->close_done;
        s->close_done = NULL;
        done(s->close_ctx);
    }
}

static void conn_close(struct http_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    struct http_request *req = c->req;
    c->req = NULL;
    if (req) {
        if (req->on_abort && c->state == CONN_HANDLING)
            req->on_abort(req);
        request_free(req);
    }
    struct http_server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed_cb);
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed_cb);
}

/* ---- parser callbacks ---- */

static int header_count(struct http_conn *c, size_t len)
{
    c->header_bytes += len;
    if (c->header_bytes > c->srv->lim.max_header_bytes) {
        c->error_status = 431;
        return -1;
    }
    return 0;
}

static int on_message_begin(http_parser *p)
{
    struct http_conn *c = p->data;
    c->req = calloc(1, sizeof *c->req);
    if (!c->req) {
        c->error_status = 500;
        return -1;
    }
    c->req->conn = c;
    c->header_bytes = 0;
    c->in_value = false;
    buf_clear(&c->hname);
    buf_clear(&c->hvalue);
    c->started = true;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    if (header_count(c, len))
        return -1;
    struct buf u = {0};
    if (c->req->url && buf_append_str(&u, c->req->url) != CS_OK)
        return -1;
    if (buf_append(&u, at, len) != CS_OK) {
        buf_free(&u);
        return -1;
    }
    free(c->req->url);
    c->req->url = buf_detach(&u, NULL);
    return c->req->url ? 0 : -1;
}

static int header_push(struct http_conn *c)
{
    struct http_request *r = c->req;
    if (r->n_headers >= HTTP_MAX_HEADERS) {
        c->error_status = 431;
        return -1;
    }
    if (r->n_headers % 16 == 0) {
        void *nh = realloc(r->headers, (size_t)(r->n_headers + 16) * sizeof *r->headers);
        if (!nh)
            return -1;
        r->headers = nh;
    }
    for (size_t i = 0; i < c->hname.len; i++)
        if (c->hname.data[i] >= 'A' && c->hname.data[i] <= 'Z')
            c->hname.data[i] = (char)(c->hname.data[i] - 'A' + 'a');
    char *name = strdup(buf_cstr(&c->hname));
    char *value = strdup(buf_cstr(&c->hvalue));
    if (!name || !value) {
        free(name);
        free(value);
        return -1;
    }
    r->headers[r->n_headers].name = name;
    r->headers[r->n_headers].value = value;
    r->n_headers++;
    buf_clear(&c->hname);
    buf_clear(&c->hvalue);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    if (header_count(c, len))
        return -1;
    if (c->in_value && header_push(c))
        return -1;
    c->in_value = false;
    return buf_append(&c->hname, at, len) == CS_OK ? 0 : -1;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    if (header_count(c, len))
        return -1;
    c->in_value = true;
    return buf_append(&c->hvalue, at, len) == CS_OK ? 0 : -1;
}

static int on_headers_complete(http_parser *p)
{
    struct http_conn *c = p->data;
    if (c->in_value && header_push(c))
        return -1;
    c->in_value = false;
    struct http_request *r = c->req;
    r->method = http_method_str((enum http_method)p->method);
    const char *url = r->url ? r->url : "/";
    size_t plen = strcspn(url, "?#");
    r->path = strndup(url, plen);
    if (!r->path)
        return -1;
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->srv->lim.max_body_bytes) {
        c->error_status = 413;
        return -1;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    if (c->req->body.len + len > c->srv->lim.max_body_bytes) {
        c->error_status = 413;
        return -1;
    }
    return buf_append(&c->req->body, at, len) == CS_OK ? 0 : -1;
}

static int on_message_complete(http_parser *p)
{
    struct http_conn *c = p->data;
    c->req->keep_alive = http_should_keep_alive(p) != 0;
    c->dispatch = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- reading ---- */

static void conn_timer_cb(uv_timer_t *t);

static void conn_arm_timer(struct http_conn *c)
{
    const struct http_limits *lim = &c->srv->lim;
    if (c->started)
        uv_timer_start(&c->timer, conn_timer_cb, (uint64_t)lim->request_timeout_ms, 0);
    else
        uv_timer_start(&c->timer, conn_timer_cb, (uint64_t)lim->idle_timeout_ms, 0);
}

static void conn_dispatch(struct http_conn *c)
{
    c->dispatch = false;
    c->started = false;
    c->state = CONN_HANDLING;
    uv_timer_stop(&c->timer);
    struct http_request *req = c->req;
    c->srv->handler(req, c->srv->ctx);
}

/* Feed bytes to the parser; stops at a complete request (kept in pending). */
static void conn_feed(struct http_conn *c, const char *data, size_t len)
{
    bool was_started = c->started;
    size_t used = http_parser_execute(&c->parser, &parser_settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_PAUSED) {
        http_parser_pause(&c->parser, 0);
        if (used < len)
            buf_append(&c->pending, data + used, len - used);
    } else if (e != HPE_OK) {
        int status = c->error_status ? c->error_status : 400;
        const char *msg = status == 413   ? "request body too large"
                          : status == 431 ? "request headers too large"
                          : status == 500 ? "out of memory"
                                          : http_errno_description(e);
        LOG_DEBUG("http", "rejecting request: %d %s", status, msg);
        conn_reject(c, status, msg);
        return;
    }
    if (c->dispatch) {
        conn_dispatch(c);
        return;
    }
    if (c->started && !was_started)
        conn_arm_timer(c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    b->base = malloc(suggested);
    b->len = b->base ? suggested : 0;
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct http_conn *c = st->data;
    if (nread < 0) {
        free(b->base);
        if (!c->closing) {
            LOG_DEBUG("http", "connection closed by peer: %s", uv_strerror((int)nread));
            conn_close(c);
        }
        return;
    }
    if (c->closing || nread == 0 || c->rejecting) {
        free(b->base);
        return;
    }
    if (c->state == CONN_HANDLING || c->pending.len > 0) {
        if (c->pending.len + (size_t)nread > HTTP_MAX_PENDING)
            uv_read_stop(st);
        else
            buf_append(&c->pending, b->base, (size_t)nread);
    } else {
        conn_feed(c, b->base, (size_t)nread);
    }
    free(b->base);
}

/* Timeouts, and the resumption of parsing after an answer (0 ms). */
static void conn_timer_cb(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    if (c->closing || c->state == CONN_HANDLING || c->rejecting)
        return;
    if (c->started) {
        LOG_DEBUG("http", "request timeout");
        conn_reject(c, 408, "request not received in time");
        return;
    }
    conn_close(c);
}

static void conn_resume_cb(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    if (c->closing || c->state != CONN_READING)
        return;
    conn_arm_timer(c);
    if (c->pending.len > 0) {
        struct buf p = c->pending;
        buf_init(&c->pending);
        conn_feed(c, p.data, p.len);
        buf_free(&p);
    }
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

/* ---- accepting ---- */

static void on_connection(uv_stream_t *ls, int status)
{
    struct http_server *s = ls->data;
    if (status < 0)
        return;
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0 || s->n_conns > s->lim.max_connections ||
        s->closing) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    conn_arm_timer(c);
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

/* ---- server ---- */

int http_server_create(struct http_server **out, uv_loop_t *loop, const struct http_limits *lim,
                       http_handler_cb handler, void *ctx)
{
    struct http_server *s = calloc(1, sizeof *s);
    if (!s)
        return CS_ENOMEM;
    s->loop = loop;
    if (lim)
        s->lim = *lim;
    else
        http_limits_defaults(&s->lim);
    s->handler = handler;
    s->ctx = ctx;
    s->port = -1;
    *out = s;
    return CS_OK;
}

int http_server_listen(struct http_server *s, const char *host, int port, struct cs_error *err)
{
    struct sockaddr_storage addr;
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc < 0)
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    if (rc < 0)
        return cs_error_set(err, CS_EINVAL, "bad listen address '%s'", host);
    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    s->listening = true;
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc < 0)
        return cs_error_set(err, CS_EIO, "cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
    struct sockaddr_storage bound;
    int len = sizeof bound;
    if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len) == 0) {
        if (bound.ss_family == AF_INET)
            s->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
        else
            s->port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    }
    return CS_OK;
}

int http_server_port(const struct http_server *s) { return s->port; }

int http_server_connections(const struct http_server *s) { return s->n_conns; }

static void listener_closed_cb(uv_handle_t *h)
{
    struct http_server *s = h->data;
    s->listening = false;
    if (s->n_conns == 0 && s->close_done) {
        void (*done)(void *) = s->close_done;
        s->close_done = NULL;
        done(s->close_ctx);
    }
}

void http_server_close(struct http_server *s, void (*done)(void *ctx), void *ctx)
{
    s->closing = true;
    s->close_done = done;
    s->close_ctx = ctx;
    while (s->conns)
        conn_close(s->conns);
    if (s->listening) {
        uv_close((uv_handle_t *)&s->listener, listener_closed_cb);
    } else if (done) {
        s->close_done = NULL;
        done(ctx);
    }
}

void http_server_destroy(struct http_server *s) { free(s); }
