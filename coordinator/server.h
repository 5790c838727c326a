/* server.h - the API server: routes, authentication, CORS and the life of a
 * completion request (api.md), gluing http.c, openai.c, the template and
 * tokenizer (prompt.c), the output parser (toolparse.c) and an engine.
 *
 * Request life: parse and validate (400) -> model check (404) -> prompt
 * (template, directives, tokenization) -> context check (400 with both
 * numbers) -> one engine submit per choice (n) (429 + Retry-After when the
 * queue is full) -> tokens flow through the incremental decoder, the stop
 * string matcher and the tool/reasoning parser into SSE chunks or the final
 * response. A client that goes away cancels every choice at once; the
 * request's memory lives until the last engine done callback.
 *
 * Constrained decoding is limited (the engine takes one static token mask):
 * tool_choice required/named is enforced by starting the assistant turn with
 * the call's opening tags (thinking off); response_format json_object is
 * accepted without a constraint; json_schema is refused with 400. */
#ifndef CS_SERVER_H
#define CS_SERVER_H

#include <uv.h>

#include "common/config.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"
#include "coordinator/template.h"

#ifdef __cplusplus
extern "C" {
#endif

struct server;

/* Makes the engine once the loop exists (engine_local_create, or a test double). */
typedef int (*server_engine_create_fn)(struct engine **out, uv_loop_t *loop,
                                       const struct cs_config *cfg, struct cs_error *err);

struct server_model {
    const struct tokenizer *tok;        /* lives as long as the server */
    struct template_variant variant;
    char name[256];                     /* model id reported by the API */
};

/* Create the server on loop over engine (not owned) and start listening on
 * cfg->host:cfg->port. CS_OK, CS_EIO (err: cannot listen), CS_ENOMEM. */
int server_create(struct server **out, uv_loop_t *loop, const struct cs_config *cfg,
                  const struct server_model *model, struct engine *engine, struct cs_error *err);
/* The TCP port listened on. */
int server_port(const struct server *s);
/* Stop accepting, drop every connection (canceling their generations);
 * done(ctx) runs when the HTTP side is closed. */
void server_close(struct server *s, void (*done)(void *ctx), void *ctx);
/* Free the server after server_close's done, once no engine callback can
 * reach it (after the engine's shutdown). */
void server_destroy(struct server *s);

/* The whole `serve` process on a fresh loop: create the engine with create,
 * listen, print "cmpserve: listening on http://HOST:PORT" and a curl line to
 * stdout, run until SIGINT/SIGTERM, then shut down within
 * cfg->shutdown_grace_ms. Returns the process exit status (0, or 1 after
 * logging the error). */
int server_run(const struct cs_config *cfg, const struct server_model *model,
               server_engine_create_fn create);

#ifdef __cplusplus
}
#endif
#endif
