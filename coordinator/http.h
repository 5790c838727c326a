/* http.h - the HTTP/1.1 server of the coordinator, on libuv with the Debian
 * http_parser library (no hand-written parsing).
 *
 * It owns connections and their limits: header bytes (431), body bytes (413,
 * checked against Content-Length before the body arrives and while chunked
 * bodies stream in), the time allowed to receive one request (408), the idle
 * time of a keep-alive connection, and the bytes queued towards a slow
 * client. Requests on one connection are handled one at a time (pipelined
 * bytes wait); keep-alive follows http_should_keep_alive.
 *
 * A complete request is handed to the handler callback. The handler answers
 * with http_respond (whole body) or http_stream_start/_send/_end (chunked,
 * for SSE), now or later from any loop callback. If the client goes away
 * before the answer ends, req->on_abort (when set) runs once and the request
 * is freed right after: the handler must drop its pointer there.
 *
 * Everything runs on the loop thread; nothing here blocks. */
#ifndef CS_HTTP_H
#define CS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "common/buf.h"
#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct http_server;
struct http_conn;

struct http_limits {
    size_t max_header_bytes;   /* request line + headers; over: 431 */
    size_t max_body_bytes;     /* over: 413 */
    int request_timeout_ms;    /* from the first byte of a request to its end; over: 408 */
    int idle_timeout_ms;       /* keep-alive connection without a request: closed */
    size_t max_queued_bytes;   /* response bytes waiting for a slow client before sends fail */
    int max_connections;       /* further connections are closed at once */
};

struct http_header {
    char *name;                /* lower case */
    char *value;
};

struct http_request {
    struct http_conn *conn;    /* private */
    const char *method;        /* "GET", "POST", ... */
    char *url;                 /* as received */
    char *path;                /* url without query string */
    struct http_header *headers;
    int n_headers;
    struct buf body;           /* decoded (chunked bodies are joined) */
    bool keep_alive;
    /* Set by the handler: called once when the connection dies before the
     * response ended (client disconnect, write error, server shutdown); the
     * request is freed right after it returns. */
    void (*on_abort)(struct http_request *req);
    void *user;
};

/* Called for each complete request; ctx is the one given at creation. */
typedef void (*http_handler_cb)(struct http_request *req, void *ctx);

/* Limits filled with defaults (64 KiB headers, 8 MiB body, 10 s request,
 * 60 s idle, 8 MiB queued, 1024 connections). */
void http_limits_defaults(struct http_limits *lim);

/* Create a server on loop (not yet listening). CS_OK or CS_ENOMEM. */
int http_server_create(struct http_server **out, uv_loop_t *loop, const struct http_limits *lim,
                       http_handler_cb handler, void *ctx);
/* Bind and listen on host:port (port 0: any free port). CS_EIO with err set. */
int http_server_listen(struct http_server *s, const char *host, int port, struct cs_error *err);
/* The port actually bound (after listen), or -1. */
int http_server_port(const struct http_server *s);
/* Open connections right now (for metrics and leak checks). */
int http_server_connections(const struct http_server *s);
/* Stop listening and close every connection (aborting unanswered requests);
 * done(ctx) runs on the loop once all handles are closed; then
 * http_server_destroy may free the server. */
void http_server_close(struct http_server *s, void (*done)(void *ctx), void *ctx);
void http_server_destroy(struct http_server *s);

/* Value of header name (lower case) or NULL. */
const char *http_request_header(const struct http_request *req, const char *name);

/* Send a complete response and finish req (freed; do not use it after).
 * extra_headers: NULL or "Name: value\r\n" lines. CS_OK, CS_ENOMEM,
 * CS_ECLOSED (connection gone; req freed anyway). */
int http_respond(struct http_request *req, int status, const char *content_type,
                 const char *extra_headers, const char *body, size_t len);
/* Start a streamed response (chunked for HTTP/1.1, close-delimited for 1.0). */
int http_stream_start(struct http_request *req, int status, const char *content_type,
                      const char *extra_headers);
/* Queue len bytes of the stream. CS_EFULL when more than max_queued_bytes
 * already wait for the client (nothing queued: the caller should give up with
 * http_request_abort), CS_ENOMEM. */
int http_stream_send(struct http_request *req, const char *data, size_t len);
/* End the stream and finish req (freed). */
int http_stream_end(struct http_request *req);
/* Give up on req: close its connection without calling on_abort; req freed. */
void http_request_abort(struct http_request *req);
/* Bytes queued towards the client and not yet written. */
size_t http_request_queued_bytes(const struct http_request *req);

/* The reason phrase of a status code ("Not Found"). */
const char *http_status_text(int status);

#ifdef __cplusplus
}
#endif
#endif
