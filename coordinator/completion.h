/* completion.h - one /v1/chat/completions or /v1/completions request from
 * body to last byte (the lifecycle described in server.h), and the error
 * answer every route shares. Internal to the API server (server.c). */
#ifndef CS_COMPLETION_H
#define CS_COMPLETION_H

#include <stdint.h>

#include "common/config.h"
#include "coordinator/engine.h"
#include "coordinator/http.h"
#include "coordinator/metrics.h"
#include "coordinator/openai.h"
#include "coordinator/prompt.h"
#include "coordinator/server.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a completion needs from the server; lives as long as the server. */
struct completion_ctx {
    const struct cs_config *cfg;
    struct engine *engine;
    const struct server_model *model;
    struct prompt_specials specials;
    int32_t eos_ids[4];
    int n_eos;
    int32_t think_end_id;          /* </think>, or -1 */
    struct metrics *metrics;
    const char *extra_headers;     /* CORS lines, or "" */
};

/* Answer req with e's status and OpenAI error body; extra header lines
 * (may be NULL) are added after the context's own. */
void completion_send_error(struct completion_ctx *cx, struct http_request *req,
                           const struct oai_error *e, const char *extra);

/* Handle a POST of kind: answers now (errors) or later (engine callbacks). */
void completion_handle(struct completion_ctx *cx, struct http_request *req, enum oai_kind kind);

#ifdef __cplusplus
}
#endif
#endif
