/* engine_pipeline_gen.c - one generation through the pipeline engine on a
 * private libuv loop, for `cmpserve generate --workers N` (see
 * engine_pipeline.h): create the engine (spawn and load the workers), submit
 * one request, run the loop until its done callback, shut down. */
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "../common/log.h"
#include "engine_pipeline.h"

struct gen_ctx {
    bool (*on_token)(void *user, const struct cs_sample_result *tok);
    void *user;
    bool done;
    enum engine_finish finish;
    int status;
    char msg[512];
};

static bool gen_on_token(void *user, const struct cs_sample_result *tok)
{
    struct gen_ctx *g = user;
    return g->on_token(g->user, tok);
}

static void gen_on_done(void *user, enum engine_finish finish, int status, const char *message)
{
    struct gen_ctx *g = user;
    g->done = true;
    g->finish = finish;
    g->status = status;
    snprintf(g->msg, sizeof g->msg, "%s", message ? message : "");
}

int engine_pipeline_generate(const struct cs_config *cfg, const int32_t *prompt, int n_prompt,
                             int max_tokens, const struct cs_sample_params *sp,
                             const int32_t *stop_ids, int n_stop, void (*on_submit)(void *user),
                             bool (*on_token)(void *user, const struct cs_sample_result *tok),
                             void *user, struct cs_error *err)
{
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0)
        return cs_error_set(err, CS_EIO, "cannot create an event loop");
    struct engine *eng = NULL;
    int rc = engine_pipeline_create(&eng, &loop, cfg, err);
    struct gen_ctx g = {.on_token = on_token, .user = user};
    if (rc == CS_OK) {
        struct engine_request r = {.prompt = prompt, .n_prompt = n_prompt,
                                   .max_tokens = max_tokens, .stop_ids = stop_ids,
                                   .n_stop_ids = n_stop, .sample = *sp,
                                   .on_token = gen_on_token, .on_done = gen_on_done, .user = &g};
        if (on_submit)
            on_submit(user);   /* every stage has loaded (engine_pipeline_create waits) */
        rc = engine_submit(eng, &r, NULL, err);
        while (rc == CS_OK && !g.done)
            uv_run(&loop, UV_RUN_ONCE);
        if (rc == CS_OK && g.finish == ENGINE_FINISH_ERROR)
            rc = cs_error_set(err, g.status < 0 ? g.status : CS_EINTERNAL, "%s", g.msg);
        eng->ops->destroy(eng);
    }
    uv_run(&loop, UV_RUN_DEFAULT);   /* the engine's handles close */
    uv_loop_close(&loop);
    return rc;
}
