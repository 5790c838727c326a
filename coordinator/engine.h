/* engine.h - what the HTTP/API layer asks of the generation engine.
 *
 * The API layer turns a request into token ids and a struct engine_request,
 * submits it, and receives tokens and the end through callbacks that always
 * run on the coordinator's libuv loop thread. The engine owns scheduling
 * (continuous batching of decodes, chunked prefill), capacity (KV pages, GDN
 * state slots) and the bounded queue.
 *
 * Implementations: engine_local.c runs the model in this process on a
 * background thread (one backend, all layers); the pipeline engine drives
 * worker processes over ZeroMQ. Both satisfy this contract:
 * - engine_submit never blocks; it fails with CS_EFULL when the queue is full
 *   (API: 429 with Retry-After) and CS_ERANGE when the prompt plus max_tokens
 *   cannot fit the context (API: 400 with both numbers, checked before work).
 * - After a successful submit exactly one done callback follows, after every
 *   token callback of that request; engine_cancel makes it come promptly with
 *   CS_ECANCELED and frees the request's slot and pages at once.
 * - Determinism: with temperature 0, or with a seed, the tokens do not depend
 *   on what else runs (the ops are batch invariant; the RNG is counter based). */
#ifndef CS_ENGINE_H
#define CS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/config.h"
#include "../common/status.h"
#include "../kernels/ops.h"

struct uv_loop_s;

#ifdef __cplusplus
extern "C" {
#endif

enum engine_finish {
    ENGINE_FINISH_STOP = 0,     /* an end-of-generation token (not reported as a token) */
    ENGINE_FINISH_LENGTH = 1,   /* max_tokens reached or the context is full */
    ENGINE_FINISH_CANCELED = 2, /* engine_cancel */
    ENGINE_FINISH_ERROR = 3,    /* see the status of the done callback */
};

/* Constrained decoding (optional, per request; e.g. json_constrain.h).
 * Before every sampling step of the request the engine calls
 * mask(c, mask, n_vocab) to fill a vocab bitmask (LSB first) of the ids
 * allowed next, and samples only among those (and sample.allowed when that
 * is set too); after every sampled token that is not a stop id it calls
 * advance(c, token). A failing mask makes the engine allow only the
 * request's first stop id (the sequence ends). Both are called one at a time
 * for a request, on the thread that schedules steps: the in-process engine's
 * own thread, or the loop thread for the pipeline engine (which sends the
 * mask in STEP); either keeps the order mask for step k, then advance with
 * the token of step k. Ownership: on a successful engine_submit the engine owns
 * c and calls free(c) once when the request ends (after its last mask or
 * advance); on a failed submit the caller keeps it. */
struct engine_constraint_ops {
    int (*mask)(void *c, uint8_t *mask, int n_vocab);
    int (*advance)(void *c, int32_t token);
    void (*free)(void *c);
};

struct engine_request {
    const int32_t *prompt;          /* copied by engine_submit */
    int n_prompt;
    int max_tokens;                 /* > 0 */
    const int32_t *stop_ids;        /* end-of-generation ids (copied); empty: the model's */
    int n_stop_ids;
    struct cs_sample_params sample; /* gen_tokens/ctx_tokens are filled by the engine; bias arrays and allowed mask copied */
    /* Called for each generated token (stop ids excluded). Return false to
     * stop the request (e.g. a stop string matched): the engine then finishes
     * it with ENGINE_FINISH_STOP. */
    bool (*on_token)(void *user, const struct cs_sample_result *tok);
    void (*on_done)(void *user, enum engine_finish finish, int status, const char *message);
    void *user;
    const struct engine_constraint_ops *constraint_ops; /* NULL: unconstrained */
    void *constraint;                                   /* passed to constraint_ops */
};

struct engine_stats {
    int running;            /* sequences being processed */
    int queued;             /* waiting for a slot */
    int max_running;
    int queue_size;
    int ctx_size;           /* max tokens per sequence */
    uint64_t prompt_tokens_total, gen_tokens_total;
    double prefill_tok_s, decode_tok_s;   /* recent rates */
    bool ready;             /* model loaded, every stage up */
    char state[128];        /* "ready", "loading", "degraded: stage 1 down" */
};

struct engine;

struct engine_ops {
    int (*submit)(struct engine *e, const struct engine_request *r, uint64_t *id, struct cs_error *err);
    int (*cancel)(struct engine *e, uint64_t id);
    void (*stats)(struct engine *e, struct engine_stats *out);
    /* Stop accepting, finish or cancel in-flight work within grace_ms, then
     * call done (on the loop thread). */
    void (*shutdown)(struct engine *e, int grace_ms, void (*done)(void *ctx), void *ctx);
    /* Free everything; no callback follows. Handles on the loop are closed
     * asynchronously: run the loop once more (uv_run) before uv_loop_close. */
    void (*destroy)(struct engine *e);
};

struct engine {
    const struct engine_ops *ops;
    int n_vocab;
    int ctx_size;
};

static inline int engine_submit(struct engine *e, const struct engine_request *r, uint64_t *id,
                                struct cs_error *err)
{
    return e->ops->submit(e, r, id, err);
}
static inline int engine_cancel(struct engine *e, uint64_t id) { return e->ops->cancel(e, id); }
static inline void engine_stats(struct engine *e, struct engine_stats *out) { e->ops->stats(e, out); }

/* Checks every engine applies at submit (engine_request.c): callbacks, prompt
 * ids in [0, n_vocab), prompt + max_tokens <= ctx_size (CS_ERANGE, message with
 * the numbers), list sizes within the engine's limits, a non-empty allowed
 * mask, complete constraint ops, at most CS_MAX_TOP_LOGPROBS logprobs. */
int engine_request_check(const struct engine_request *r, int n_vocab, int ctx_size,
                         int max_stop_ids, int max_bias, struct cs_error *err);
/* malloc'd copy of bytes (NULL when bytes is 0); sets *fail on ENOMEM. */
void *engine_dup_bytes(const void *src, size_t bytes, bool *fail);

/* The in-process engine (engine_local.c): loads cfg->model on cfg->gpus
 * ("cpu" or one device index) and runs it on a background thread; callbacks
 * are delivered on loop. */
int engine_local_create(struct engine **out, struct uv_loop_s *loop, const struct cs_config *cfg,
                        struct cs_error *err);

#ifdef __cplusplus
}
#endif
#endif
