/* engine_harness.c - see engine_harness.h. */
#include "engine_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/commands.h"

const char *eh_device = "cpu";

int eh_model_ensure(const char *path)
{
    if (access(path, R_OK) == 0)
        return 0;
    char *argv[] = {"mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                    "--out", (char *)path, NULL};
    return mkmodel_main(9, argv);
}

void eh_config(struct cs_config *cfg, const char *model, int ctx_size, int max_seqs,
               int prefill_chunk, int step_tokens, int queue_size)
{
    config_defaults(cfg);
    snprintf(cfg->model, sizeof cfg->model, "%s", model);
    snprintf(cfg->gpus, sizeof cfg->gpus, "%s", eh_device);
    snprintf(cfg->kv_type, sizeof cfg->kv_type, "f32");
    cfg->ctx_size = ctx_size;
    cfg->max_seqs = max_seqs;
    cfg->prefill_chunk = prefill_chunk;
    cfg->step_tokens = step_tokens;
    cfg->queue_size = queue_size;
    cfg->kv_page_size = 16;
    cfg->threads = 2;
}

struct cs_sample_params eh_greedy(void)
{
    return (struct cs_sample_params){.temperature = 0.0f, .top_p = 1.0f,
                                     .repetition_penalty = 1.0f, .n_logprobs = 0};
}

/* Run ctx[first, first + n) of slot 0; sample into *res when asked. */
static int ref_forward(struct cli_session *s, const int32_t *ctx, int first, int n, bool sample,
                       const struct cs_sample_params *sp, struct cs_sample_result *res)
{
    struct cli_batch cb;
    int rc = cli_batch_init(&cb, ctx + first, n, first, s->max_pages);
    if (rc)
        return rc;
    bool want = sample;
    rc = model_forward(s->m, s->st, &cb.b, NULL, NULL, &want, sp, res);
    cli_batch_free(&cb);
    return rc;
}

static bool ref_is_stop(const int32_t *stop, int n_stop, int32_t t)
{
    for (int i = 0; i < n_stop; i++)
        if (stop[i] == t)
            return true;
    return false;
}

int eh_reference(struct cli_session *s, const int32_t *prompt, int n_prompt, int max_tokens,
                 const struct cs_sample_params *sp_in, const int32_t *stop, int n_stop, int chunk,
                 struct eh_gen *out)
{
    struct cs_error err = {0};
    int rc = cli_session_state(s, chunk, n_prompt + max_tokens + 1, &err);
    if (rc)
        return rc;
    int32_t ctx[1024];
    memcpy(ctx, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int n_ctx = n_prompt, n_done = 0;
    memset(out, 0, sizeof *out);
    for (;;) {
        struct cs_sample_result res = {0};
        struct cs_sample_params sp = *sp_in;
        sp.draw = (uint64_t)out->n;
        sp.gen_tokens = ctx + n_prompt;
        sp.n_gen_tokens = out->n;
        sp.ctx_tokens = ctx;
        sp.n_ctx_tokens = n_ctx;
        while (n_done < n_ctx) {
            int k = chunk - n_done % chunk;
            if (k > n_ctx - n_done)
                k = n_ctx - n_done;
            if ((rc = ref_forward(s, ctx, n_done, k, n_done + k == n_ctx, &sp, &res)))
                return rc;
            n_done += k;
        }
        if (ref_is_stop(stop, n_stop, res.token)) {
            out->finish = ENGINE_FINISH_STOP;
            break;
        }
        ctx[n_ctx++] = res.token;
        out->toks[out->n] = res.token;
        out->logprobs[out->n++] = res.logprob;
        if (out->n >= max_tokens) {
            out->finish = ENGINE_FINISH_LENGTH;
            break;
        }
    }
    out->n_done = 1;
    return 0;
}

static bool eh_on_token(void *user, const struct cs_sample_result *tok)
{
    struct eh_gen *g = user;
    if (g->n < EH_MAX_GEN) {
        g->toks[g->n] = tok->token;
        g->logprobs[g->n] = tok->logprob;
    }
    g->n++;
    if (g->cancel_after && g->n == g->cancel_after)
        engine_cancel(g->e, g->id);
    return !(g->stop_after && g->n == g->stop_after);
}

static void eh_on_done(void *user, enum engine_finish finish, int status, const char *message)
{
    struct eh_gen *g = user;
    g->n_done++;
    g->finish = finish;
    g->status = status;
    snprintf(g->msg, sizeof g->msg, "%s", message ? message : "");
}

struct engine_request eh_request(struct eh_gen *g, const int32_t *prompt, int n_prompt,
                                 int max_tokens, const struct cs_sample_params *sp)
{
    return (struct engine_request){.prompt = prompt, .n_prompt = n_prompt,
                                   .max_tokens = max_tokens, .sample = *sp,
                                   .on_token = eh_on_token, .on_done = eh_on_done, .user = g};
}

int eh_submit(struct engine *e, struct eh_gen *g, const struct engine_request *r,
              struct cs_error *err)
{
    g->e = e;
    return engine_submit(e, r, &g->id, err);
}

struct eh_wait {
    struct eh_gen *gens;
    int n;
    bool all;
};

static bool eh_all_done(const struct eh_wait *w)
{
    for (int i = 0; i < w->n; i++)
        if (w->gens[i].n_done < 1)
            return false;
    return true;
}

static void eh_poll(uv_timer_t *t)
{
    struct eh_wait *w = t->data;
    if ((w->all = eh_all_done(w)))
        uv_stop(t->loop);
}

static void eh_deadline(uv_timer_t *t) { uv_stop(t->loop); }

static void eh_close_noop(uv_handle_t *h) { (void)h; }

bool eh_wait_done(uv_loop_t *loop, struct eh_gen *gens, int n, int timeout_ms)
{
    struct eh_wait w = {.gens = gens, .n = n};
    uv_timer_t poll, deadline;
    uv_timer_init(loop, &poll);
    uv_timer_init(loop, &deadline);
    poll.data = &w;
    uv_timer_start(&poll, eh_poll, 0, 2);
    uv_timer_start(&deadline, eh_deadline, (uint64_t)timeout_ms, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&poll, eh_close_noop);
    uv_close((uv_handle_t *)&deadline, eh_close_noop);
    uv_run(loop, UV_RUN_NOWAIT);
    return eh_all_done(&w);
}

void eh_run_for(uv_loop_t *loop, int ms)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, eh_deadline, (uint64_t)ms, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, eh_close_noop);
    uv_run(loop, UV_RUN_NOWAIT);
}

void eh_engine_destroy(uv_loop_t *loop, struct engine *e)
{
    if (!e)
        return;
    e->ops->destroy(e);
    uv_run(loop, UV_RUN_DEFAULT);
}
