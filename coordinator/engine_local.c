/* engine_local.c - the in-process engine of engine.h: the whole model on one
 * backend in this process, a background thread that schedules and runs the
 * steps (engine_local_run.c), and the loop-thread side: engine creation,
 * submit / cancel / stats / shutdown / destroy, and delivery of the token
 * and done events the thread posts (uv_async), so callbacks always run on
 * the libuv loop thread.
 *
 * Capacity: max_seqs GDN slots; KV pages for ctx_size tokens of every slot,
 * or fewer when the backend's memory (mem_fraction of it) cannot hold them
 * (never fewer than one full context). A request reserves the pages of
 * n_prompt + max_tokens tokens when admitted, so it can never run out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../worker/load_progress.h"
#include "engine_local_int.h"

#define EL_MAX_SEQS 4096

/* ---- event delivery (loop thread) ---- */

static void el_registry_remove(struct el_engine *e, struct el_req *r)
{
    if (r->reg_prev)
        r->reg_prev->reg_next = r->reg_next;
    else
        e->reg_head = r->reg_next;
    if (r->reg_next)
        r->reg_next->reg_prev = r->reg_prev;
    r->reg_prev = r->reg_next = NULL;
    e->n_live--;
}

static void el_shutdown_check(struct el_engine *e)
{
    if (!e->shutdown_pending || e->n_live > 0)
        return;
    e->shutdown_pending = false;
    uv_timer_stop(&e->grace_timer);
    if (e->shutdown_done)
        e->shutdown_done(e->shutdown_ctx);
}

static void el_deliver(struct el_engine *e, struct el_event *ev)
{
    struct el_req *r = ev->req;
    if (!ev->done) {
        if (r->muted || !r->on_token || r->on_token(r->user, &ev->tok))
            return;
        r->muted = true;
        pthread_mutex_lock(&e->mu);
        r->stop = true;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        return;
    }
    el_registry_remove(e, r);
    r->on_done(r->user, ev->finish, ev->status, ev->msg);
    free(ev->msg);
    ev->msg = NULL;
    el_req_free(r);
}

static void el_on_async(uv_async_t *h)
{
    struct el_engine *e = h->data;
    pthread_mutex_lock(&e->mu);
    struct el_event *evs = e->ev;
    int n = e->n_ev;
    e->ev = e->ev_loop;
    e->ev_loop = evs;
    e->n_ev = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < n; i++)
        el_deliver(e, &evs[i]);
    el_shutdown_check(e);
}

/* ---- the engine_ops (loop thread) ---- */

/* The shared submit checks (engine_request.c) with this engine's limits. */
static int el_request_check(const struct el_engine *e, const struct engine_request *r,
                            struct cs_error *err)
{
    return engine_request_check(r, e->base.n_vocab, e->base.ctx_size, EL_MAX_STOP_IDS,
                                EL_MAX_BIAS, err);
}

/* A request with private copies of everything it points at; NULL on ENOMEM. */
static struct el_req *el_req_new(const struct el_engine *e, const struct engine_request *in)
{
    struct el_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    bool fail = false;
    const struct cs_sample_params *sp = &in->sample;
    r->tokens = malloc(sizeof(int32_t) * ((size_t)in->n_prompt + (size_t)in->max_tokens));
    r->pages = malloc(sizeof(int32_t) * (size_t)e->max_pages);
    r->stop_ids = engine_dup_bytes(in->stop_ids, sizeof(int32_t) * (size_t)in->n_stop_ids, &fail);
    r->bias_ids = engine_dup_bytes(sp->bias_ids, sizeof(int32_t) * (size_t)sp->n_bias, &fail);
    r->bias_vals = engine_dup_bytes(sp->bias_vals, sizeof(float) * (size_t)sp->n_bias, &fail);
    if (sp->allowed)
        r->allowed = engine_dup_bytes(sp->allowed, ((size_t)e->base.n_vocab + 7) / 8, &fail);
    if (in->constraint && in->constraint_ops)
        r->cmask = malloc(((size_t)e->base.n_vocab + 7) / 8);
    if (fail || !r->tokens || !r->pages || (in->constraint && in->constraint_ops && !r->cmask)) {
        el_req_free(r);
        return NULL;
    }
    r->cops = in->constraint ? in->constraint_ops : NULL;
    r->constraint = r->cops ? in->constraint : NULL;
    memcpy(r->tokens, in->prompt, sizeof(int32_t) * (size_t)in->n_prompt);
    r->n_prompt = r->n_ctx = in->n_prompt;
    r->max_tokens = in->max_tokens;
    r->n_stop = in->n_stop_ids;
    r->on_token = in->on_token;
    r->on_done = in->on_done;
    r->user = in->user;
    r->slot = -1;
    r->sp = *sp;
    r->sp.bias_ids = r->bias_ids;
    r->sp.bias_vals = r->bias_vals;
    r->sp.allowed = r->allowed;
    r->sp.gen_tokens = r->sp.ctx_tokens = NULL;
    return r;
}

static int el_submit(struct engine *base, const struct engine_request *in, uint64_t *id,
                     struct cs_error *err)
{
    struct el_engine *e = (struct el_engine *)base;
    int rc = el_request_check(e, in, err);
    if (rc)
        return rc;
    struct el_req *r = el_req_new(e, in);
    if (!r)
        return cs_error_set(err, CS_ENOMEM, "out of memory for the request");
    pthread_mutex_lock(&e->mu);
    if (e->closing)
        rc = cs_error_set(err, CS_ECLOSED, "the server is shutting down");
    else if (e->n_waiting >= e->queue_size + (e->max_seqs - e->n_running_pub))
        rc = cs_error_set(err, CS_EFULL, "the queue is full (%d requests waiting, %d running)",
                          e->n_waiting, e->n_running_pub);
    if (rc) {
        pthread_mutex_unlock(&e->mu);
        r->constraint = NULL; /* a failed submit leaves it to the caller */
        el_req_free(r);
        return rc;
    }
    r->id = ++e->next_id;
    r->order = e->next_order++;
    if (e->script)
        r->script = script_for(e->script, r->order, &r->n_script);
    if (e->wait_tail)
        e->wait_tail->next = r;
    else
        e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    r->reg_next = e->reg_head;
    if (e->reg_head)
        e->reg_head->reg_prev = r;
    e->reg_head = r;
    e->n_live++;
    if (id)
        *id = r->id;
    return CS_OK;
}

static int el_cancel(struct engine *base, uint64_t id)
{
    struct el_engine *e = (struct el_engine *)base;
    struct el_req *r = e->reg_head;
    while (r && r->id != id)
        r = r->reg_next;
    if (!r)
        return CS_ENOTFOUND;
    r->muted = true;
    pthread_mutex_lock(&e->mu);
    r->cancel = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return CS_OK;
}

static void el_stats(struct engine *base, struct engine_stats *out)
{
    struct el_engine *e = (struct el_engine *)base;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    out->running = e->n_running_pub;
    out->queued = e->n_waiting;
    out->prompt_tokens_total = e->prompt_tokens_total;
    out->gen_tokens_total = e->gen_tokens_total;
    bool have_window = e->prefill_tok_s > 0 || e->decode_tok_s > 0 || e->win_time <= 0;
    out->prefill_tok_s = have_window ? e->prefill_tok_s : e->win_prefill / e->win_time;
    out->decode_tok_s = have_window ? e->decode_tok_s : e->win_decode / e->win_time;
    out->ready = !e->closing;
    snprintf(out->state, sizeof out->state, "%s", e->closing ? "shutting down" : "ready");
    pthread_mutex_unlock(&e->mu);
    out->max_running = e->max_seqs;
    out->queue_size = e->queue_size;
    out->ctx_size = e->base.ctx_size;
}

static void el_on_grace(uv_timer_t *t)
{
    struct el_engine *e = t->data;
    LOG_INFO("engine", "shutdown grace over: canceling %d requests", e->n_live);
    pthread_mutex_lock(&e->mu);
    e->cancel_all = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void el_shutdown(struct engine *base, int grace_ms, void (*done)(void *ctx), void *ctx)
{
    struct el_engine *e = (struct el_engine *)base;
    pthread_mutex_lock(&e->mu);
    e->closing = true;
    pthread_mutex_unlock(&e->mu);
    e->shutdown_done = done;
    e->shutdown_ctx = ctx;
    e->shutdown_pending = true;
    if (grace_ms > 0)
        uv_timer_start(&e->grace_timer, el_on_grace, (uint64_t)grace_ms, 0);
    else
        el_on_grace(&e->grace_timer);
    uv_async_send(&e->async);   /* checks for "nothing live" on the loop */
}

/* ---- teardown ---- */

static void el_on_close(uv_handle_t *h)
{
    struct el_engine *e = h->data;
    if (--e->n_open_handles == 0)
        free(e);
}

static void el_step_buf_free(struct el_step_buf *sb)
{
    free(sb->tokens);
    free(sb->pos);
    free(sb->seq_of);
    free(sb->seq_start);
    free(sb->slot);
    free(sb->page_table);
    free(sb->sample);
    free(sb->params);
    free(sb->results);
    free(sb->sseq);
    free(sb->ent);
    free(sb->reqs);
}

/* Free everything but the uv handles and e itself (the thread is not running). */
static void el_release(struct el_engine *e)
{
    while (e->reg_head) {
        struct el_req *r = e->reg_head;
        el_registry_remove(e, r);
        el_req_free(r);
    }
    for (int i = 0; e->ev && i < e->n_ev; i++)
        free(e->ev[i].msg);
    free(e->ev);
    free(e->ev_loop);
    el_step_buf_free(&e->sb);
    free(e->running);
    free(e->free_slots);
    kv_pages_deinit(&e->pages);
    script_free(e->script);
    if (e->st)
        state_destroy(e->st);
    if (e->m) {
        model_free(e->m);
        free(e->m);
    }
    if (e->be)
        e->be->destroy(e->be);
    if (e->tok)
        tokenizer_destroy(e->tok);
    if (e->f)
        gguf_close(e->f);
}

static void el_destroy(struct engine *base)
{
    struct el_engine *e = (struct el_engine *)base;
    pthread_mutex_lock(&e->mu);
    e->quit = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    el_release(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    uv_close((uv_handle_t *)&e->async, el_on_close);
    uv_close((uv_handle_t *)&e->grace_timer, el_on_close);
}

static const struct engine_ops el_ops = {
    .submit = el_submit,
    .cancel = el_cancel,
    .stats = el_stats,
    .shutdown = el_shutdown,
    .destroy = el_destroy,
};

/* ---- creation ---- */

/* The backend of cfg->gpus: "cpu"; "auto" (device 0 when this build and
 * machine have one, else the CPU); or a device list, of which the first. */
static int el_backend_create(struct el_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    const char *g = cfg->gpus[0] ? cfg->gpus : "auto";
    int threads = (int)cfg->threads, rc;
    if (strcmp(g, "auto") == 0) {
#ifdef CS_HAVE_CUDA
        if (cs_backend_create(&e->be, "0", threads) == CS_OK)
            return CS_OK;
        LOG_INFO("engine", "no usable CUDA device: running on the CPU");
#endif
        g = "cpu";
    }
    char dev[32];
    size_t n = strcspn(g, ",");
    if (n >= sizeof dev)
        return cs_error_set(err, CS_EINVAL, "gpus: bad device '%s'", g);
    memcpy(dev, g, n);
    dev[n] = '\0';
    if (g[n] == ',')
        LOG_WARN("engine", "the in-process engine uses one device: %s (of %s)", dev, g);
    if ((rc = cs_backend_create(&e->be, dev, threads)))
        return cs_error_set(err, rc, "cannot create the backend for device '%s': %s", dev,
                            cs_strerror(rc));
    return CS_OK;
}

static int el_model_load(struct el_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    int rc = gguf_open(&e->f, cfg->model, err);
    if (rc)
        return rc;
    struct cs_hparams hp;
    if ((rc = model_hparams_read(&hp, e->f, err))) {
        cs_error_prefix(err, "%s", cfg->model);
        return rc;
    }
    struct cs_error terr = {0};
    if (tokenizer_create_from_gguf(&e->tok, e->f, &terr) != CS_OK)
        LOG_WARN("engine", "%s: no tokenizer (%s); default stop ids from the GGUF only",
                 cfg->model, terr.msg);
    if ((rc = el_backend_create(e, cfg, err)))
        return rc;
    if (e->be->graph_enable)   /* cuda_graphs: decode steps as recorded graphs */
        e->be->graph_enable(e->be, cfg->cuda_graphs);
    if (e->be->pdl_enable)     /* cuda_pdl: programmatic dependent launches */
        e->be->pdl_enable(e->be, cfg->cuda_pdl);
    e->m = calloc(1, sizeof *e->m);
    if (!e->m)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    struct load_progress lp;
    if ((rc = model_load(e->m, e->f, e->be, 0, hp.n_layer, load_progress_cb,
                         load_progress_begin(&lp), err))) {
        cs_error_prefix(err, "%s", cfg->model);
        free(e->m);
        e->m = NULL;
        return rc;
    }
    e->base.n_vocab = hp.n_vocab;
    LOG_INFO("engine", "loaded %s on %s: %d layers, %.1f MiB of weights", cfg->model, e->be->name,
             hp.n_layer, (double)e->m->weight_bytes / (1 << 20));
    return CS_OK;
}

static void el_stop_add(struct el_engine *e, int32_t id)
{
    if (id < 0 || id >= e->base.n_vocab || e->n_stop_default >= EL_MAX_DEFAULT_STOP)
        return;
    for (int i = 0; i < e->n_stop_default; i++)
        if (e->stop_default[i] == id)
            return;
    e->stop_default[e->n_stop_default++] = id;
}

/* Default stop ids: tokenizer.ggml.eos_token_id, <|im_end|>, <|endoftext|>. */
static void el_stop_defaults(struct el_engine *e)
{
    uint32_t eos;
    if (gguf_get_u32(e->f, "tokenizer.ggml.eos_token_id", &eos, NULL) == CS_OK)
        el_stop_add(e, (int32_t)eos);
    if (e->tok) {
        el_stop_add(e, tokenizer_token_find(e->tok, "<|im_end|>", 10));
        el_stop_add(e, tokenizer_token_find(e->tok, "<|endoftext|>", 13));
    }
}

/* KV pages: ctx_size tokens for each slot, within mem_fraction of the memory. */
static int el_state_create(struct el_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    bool cpu = strcmp(e->be->name, "cpu") == 0;
    uint32_t kv_type = cpu ? CS_DTYPE_F32 : CS_DTYPE_F16;
    if (strcmp(cfg->kv_type, "f32") == 0)
        kv_type = CS_DTYPE_F32;
    else if (strcmp(cfg->kv_type, "f16") == 0)
        kv_type = CS_DTYPE_F16;
    else if (strcmp(cfg->kv_type, "auto") != 0)
        return cs_error_set(err, CS_EINVAL, "kv_type '%s' is not f32, f16 or auto", cfg->kv_type);
    struct cs_state_config sc = {.max_tokens = e->budget, .n_slots = e->max_seqs, .kv_pages = 1,
                                 .page_size = e->page_size, .kv_type = kv_type};
    uint64_t base = state_bytes(e->m, &sc);
    sc.kv_pages = 2;
    uint64_t per_page = state_bytes(e->m, &sc) - base;
    long want = (long)e->max_pages * e->max_seqs;
    size_t free_b = 0, total_b = 0;
    if (per_page > 0 && e->be->mem_info(e->be, &free_b, &total_b) == CS_OK) {
        double usable = (cpu ? (double)total_b : (double)free_b) * cfg->mem_fraction - (double)base;
        long fit = usable > 0 ? (long)(usable / (double)per_page) + 1 : 0;
        if (fit < e->max_pages)
            return cs_error_set(err, CS_ENOMEM,
                                "KV cache: one context of %ld tokens needs %.1f MiB, %.1f MiB are "
                                "usable (mem_fraction %.2f)",
                                (long)e->base.ctx_size,
                                (double)(base + per_page * (uint64_t)e->max_pages) / (1 << 20),
                                usable / (1 << 20), cfg->mem_fraction);
        if (fit < want) {
            LOG_WARN("engine", "KV cache limited by memory to %ld of %ld pages", fit, want);
            want = fit;
        }
    }
    sc.kv_pages = (int)want;
    int rc = state_create(&e->st, e->m, &sc, err);
    if (rc)
        return rc;
    LOG_INFO("engine", "state: %d slots, %d KV pages of %d tokens (%s), steps of %d tokens",
             sc.n_slots, sc.kv_pages, sc.page_size, gguf_type_name(kv_type), sc.max_tokens);
    return kv_pages_init(&e->pages, sc.kv_pages);
}

static int el_buffers_create(struct el_engine *e)
{
    struct el_step_buf *sb = &e->sb;
    size_t T = (size_t)e->budget, S = (size_t)e->max_seqs;
    sb->tokens = malloc(T * sizeof(int32_t));
    sb->pos = malloc(T * sizeof(int32_t));
    sb->seq_of = malloc(T * sizeof(int32_t));
    sb->seq_start = malloc((S + 1) * sizeof(int32_t));
    sb->slot = malloc(S * sizeof(int32_t));
    sb->page_table = malloc(S * (size_t)e->max_pages * sizeof(int32_t));
    sb->sample = malloc(S * sizeof(bool));
    sb->params = calloc(S, sizeof *sb->params);
    sb->results = calloc(S, sizeof *sb->results);
    sb->sseq = malloc(S * sizeof *sb->sseq);
    sb->ent = malloc(S * sizeof *sb->ent);
    sb->reqs = malloc(S * sizeof *sb->reqs);
    e->running = malloc(S * sizeof *e->running);
    e->free_slots = malloc(S * sizeof *e->free_slots);
    e->cap_ev = 2 * e->max_seqs + 64;
    e->ev = malloc((size_t)e->cap_ev * sizeof *e->ev);
    e->ev_loop = malloc((size_t)e->cap_ev * sizeof *e->ev_loop);
    if (!sb->tokens || !sb->pos || !sb->seq_of || !sb->seq_start || !sb->slot || !sb->page_table ||
        !sb->sample || !sb->params || !sb->results || !sb->sseq || !sb->ent || !sb->reqs ||
        !e->running || !e->free_slots || !e->ev || !e->ev_loop)
        return CS_ENOMEM;
    for (int i = 0; i < e->max_seqs; i++)
        e->free_slots[i] = e->max_seqs - 1 - i;
    e->n_free_slots = e->max_seqs;
    return CS_OK;
}

static int el_limits_set(struct el_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    if (!cfg->model[0])
        return cs_error_set(err, CS_EINVAL, "no model given (model / --model)");
    if (cfg->test_script[0] && !cfg->allow_test_options)
        return cs_error_set(err, CS_EINVAL,
                            "test_script is a test-only option: it is refused unless "
                            "allow_test_options (--allow-test-options) is set");
    if (cfg->ctx_size < 2 || cfg->ctx_size > (1L << 24))
        return cs_error_set(err, CS_EINVAL, "ctx_size = %ld out of range (2..%ld)", cfg->ctx_size,
                            1L << 24);
    if (cfg->max_seqs < 1 || cfg->max_seqs > EL_MAX_SEQS)
        return cs_error_set(err, CS_EINVAL, "max_seqs = %ld out of range (1..%d)", cfg->max_seqs,
                            EL_MAX_SEQS);
    if (cfg->queue_size < 0 || cfg->queue_size > (1L << 20))
        return cs_error_set(err, CS_EINVAL, "queue_size = %ld out of range (0..%ld)",
                            cfg->queue_size, 1L << 20);
    if (cfg->prefill_chunk < 1 || cfg->prefill_chunk > 65536 || cfg->step_tokens < 1 ||
        cfg->step_tokens > 65536)
        return cs_error_set(err, CS_EINVAL,
                            "prefill_chunk = %ld, step_tokens = %ld out of range (1..65536)",
                            cfg->prefill_chunk, cfg->step_tokens);
    if (cfg->kv_page_size < 1 || cfg->kv_page_size > 65536)
        return cs_error_set(err, CS_EINVAL, "kv_page_size = %ld out of range (1..65536)",
                            cfg->kv_page_size);
    e->base.ctx_size = (int)cfg->ctx_size;
    e->max_seqs = (int)cfg->max_seqs;
    e->queue_size = (int)cfg->queue_size;
    e->chunk = (int)cfg->prefill_chunk;
    e->page_size = (int)cfg->kv_page_size;
    e->max_pages = sched_pages_for(e->base.ctx_size, e->page_size);
    e->budget = sched_step_budget((int)cfg->step_tokens, e->chunk, e->max_seqs);
    if (e->budget != cfg->step_tokens)
        LOG_WARN("engine", "step_tokens raised from %ld to %d (max_seqs - 1 + prefill_chunk)",
                 cfg->step_tokens, e->budget);
    return CS_OK;
}

static int el_setup(struct el_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    int rc;
    if ((rc = el_limits_set(e, cfg, err)) || (rc = el_model_load(e, cfg, err)))
        return rc;
    el_stop_defaults(e);
    if ((rc = el_state_create(e, cfg, err)))
        return rc;
    if (cfg->test_script[0]) {
        if ((rc = script_load(&e->script, cfg->test_script, e->tok, e->base.n_vocab, err)))
            return rc;
        LOG_WARN("engine", "TEST ONLY: generated tokens are replaced by the %d scripts of %s",
                 e->script->n, cfg->test_script);
    }
    if ((rc = el_buffers_create(e)))
        return cs_error_set(err, rc, "out of memory for the step buffers");
    return CS_OK;
}

int engine_local_create(struct engine **out, struct uv_loop_s *loop, const struct cs_config *cfg,
                        struct cs_error *err)
{
    *out = NULL;
    struct el_engine *e = calloc(1, sizeof *e);
    if (!e)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    e->base.ops = &el_ops;
    e->loop = loop;
    int rc = el_setup(e, cfg, err);
    if (rc) {
        if (err && !err->msg[0])
            cs_error_set(err, rc, "engine: %s", cs_strerror(rc));
        el_release(e);
        free(e);
        return rc;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    uv_async_init(loop, &e->async, el_on_async);
    uv_timer_init(loop, &e->grace_timer);
    e->async.data = e->grace_timer.data = e;
    e->n_open_handles = 2;
    if (pthread_create(&e->thread, NULL, el_thread_main, e) != 0) {
        el_release(e);
        uv_close((uv_handle_t *)&e->async, el_on_close);
        uv_close((uv_handle_t *)&e->grace_timer, el_on_close);
        return cs_error_set(err, CS_ENOMEM, "cannot start the engine thread");
    }
    *out = &e->base;
    return CS_OK;
}
