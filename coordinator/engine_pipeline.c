/* engine_pipeline.c - the pipeline engine's creation and its engine_ops (see
 * engine_pipeline.h): limits, the model facts the coordinator needs (from
 * the GGUF: layers, width, stop ids), the run directory, the ROUTER and the
 * shared-memory edges, the workers' bring-up (spawn or attach, HELLO, LOAD,
 * READY), capacity as the minimum over the stages, and teardown (SHUTDOWN,
 * then signals; edges and sockets removed). Scheduling is in
 * engine_pipeline_sched.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/tokenizer.h"
#include "../proto/transport.h"
#include "../worker/model.h"
#include "engine_pipeline_int.h"

#define EP_MAX_SEQS 1024             /* MSG_MAX_SEQS */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool engine_pipeline_wanted(const struct cs_config *cfg)
{
    return cfg->workers > 0 || cfg->attach || strchr(cfg->gpus, ',') != NULL;
}

/* ---- engine_ops ---- */

static int ep_request_check(const struct ep_engine *e, const struct engine_request *r,
                            struct cs_error *err)
{
    return engine_request_check(r, e->base.n_vocab, e->base.ctx_size, EP_MAX_STOP_IDS,
                                MSG_MAX_BIAS, err);
}

static struct ep_req *ep_req_new(const struct ep_engine *e, const struct engine_request *in)
{
    struct ep_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    bool fail = false;
    const struct cs_sample_params *sp = &in->sample;
    r->tokens = malloc(sizeof(int32_t) * ((size_t)in->n_prompt + (size_t)in->max_tokens));
    r->pages = malloc(sizeof(int32_t) * (size_t)e->max_pages);
    r->stop_ids = engine_dup_bytes(in->stop_ids, sizeof(int32_t) * (size_t)in->n_stop_ids, &fail);
    r->bias_ids = engine_dup_bytes(sp->bias_ids, sizeof(int32_t) * (size_t)sp->n_bias, &fail);
    r->bias_vals = engine_dup_bytes(sp->bias_vals, sizeof(float) * (size_t)sp->n_bias, &fail);
    size_t mask_bytes = ((size_t)e->base.n_vocab + 7) / 8;
    if (sp->allowed)
        r->allowed = engine_dup_bytes(sp->allowed, mask_bytes, &fail);
    bool constrained = in->constraint && in->constraint_ops;
    if (constrained || sp->allowed)
        r->cmask = malloc(mask_bytes);
    if (fail || !r->tokens || !r->pages || ((constrained || sp->allowed) && !r->cmask)) {
        ep_req_free(r);
        return NULL;
    }
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
    r->sp.allowed = NULL;          /* sent per step as cmask */
    r->cops = constrained ? in->constraint_ops : NULL;   /* owned from here: submit succeeds */
    r->constraint = constrained ? in->constraint : NULL;
    return r;
}

static int ep_submit(struct engine *base, const struct engine_request *in, uint64_t *id,
                     struct cs_error *err)
{
    struct ep_engine *e = (struct ep_engine *)base;
    int rc = ep_request_check(e, in, err);
    if (rc)
        return rc;
    if (e->closing)
        return cs_error_set(err, CS_ECLOSED, "the server is shutting down");
    if (e->degraded)
        return cs_error_set(err, CS_EIO, "the pipeline is %s", e->state);
    if (e->n_waiting >= e->queue_size + (e->max_seqs - e->n_running))
        return cs_error_set(err, CS_EFULL, "the queue is full (%d requests waiting, %d running)",
                            e->n_waiting, e->n_running);
    struct ep_req *r = ep_req_new(e, in);
    if (!r)
        return cs_error_set(err, CS_ENOMEM, "out of memory for the request");
    r->id = ++e->next_id;
    r->prev = e->wait_tail;
    if (e->wait_tail)
        e->wait_tail->next = r;
    else
        e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    if (id)
        *id = r->id;
    ep_kick(e);
    return CS_OK;
}

static int ep_cancel(struct engine *base, uint64_t id)
{
    struct ep_engine *e = (struct ep_engine *)base;
    struct ep_req *lists[2] = {e->wait_head, e->run_head};
    for (int l = 0; l < 2; l++)
        for (struct ep_req *r = lists[l]; r; r = r->next)
            if (r->id == id && !r->finished) {
                r->cancel = true;
                ep_kick(e);
                return CS_OK;
            }
    return CS_ENOTFOUND;
}

static void ep_stats(struct engine *base, struct engine_stats *out)
{
    struct ep_engine *e = (struct ep_engine *)base;
    memset(out, 0, sizeof *out);
    out->running = e->n_running;
    out->queued = e->n_waiting;
    out->max_running = e->max_seqs;
    out->queue_size = e->queue_size;
    out->ctx_size = e->base.ctx_size;
    out->prompt_tokens_total = e->prompt_tokens_total;
    out->gen_tokens_total = e->gen_tokens_total;
    out->ready = !e->closing && !e->degraded && !e->recovering;
    snprintf(out->state, sizeof out->state, "%s",
             e->degraded || e->recovering ? e->state : e->closing ? "shutting down" : "ready");
}

static void ep_on_grace(uv_timer_t *t)
{
    struct ep_engine *e = t->data;
    LOG_INFO("pipeline", "shutdown grace over: canceling %d requests", e->n_running + e->n_waiting);
    for (struct ep_req *r = e->wait_head; r; r = r->next)
        r->cancel = true;
    for (struct ep_req *r = e->run_head; r; r = r->next)
        r->cancel = true;
    ep_tick(e);
    ep_shutdown_check(e);
}

static void ep_shutdown(struct engine *base, int grace_ms, void (*done)(void *ctx), void *ctx)
{
    struct ep_engine *e = (struct ep_engine *)base;
    e->closing = true;
    e->shutdown_done = done;
    e->shutdown_ctx = ctx;
    e->shutdown_pending = true;
    if (grace_ms > 0)
        uv_timer_start(&e->grace_timer, ep_on_grace, (uint64_t)grace_ms, 0);
    else
        ep_on_grace(&e->grace_timer);
    ep_shutdown_check(e);
}

/* ---- teardown ---- */

static void ep_on_close(uv_handle_t *h)
{
    struct ep_engine *e = h->data;
    if (--e->n_open_handles == 0)
        free(e);
}

/* SHUTDOWN to every worker, then wait and signal the children. */
static void ep_workers_stop(struct ep_engine *e)
{
    pid_t pids[SUP_MAX_STAGES];
    for (int i = 0; i < SUP_MAX_STAGES; i++) {
        struct ep_worker *w = &e->workers[i];
        pids[i] = w->pid;
        if (!e->router || (!w->hello && w->pid <= 0))
            continue;
        struct msg m;
        msg_init(&m, MSG_SHUTDOWN, 0, MSG_SENDER_COORD);
        char peer[TRANSPORT_PEER_MAX];
        snprintf(peer, sizeof peer, "w%d", w->id);
        transport_send(e->router, peer, &m, 0, NULL);
    }
    sup_stop_all(pids, SUP_MAX_STAGES, 2000);
}

/* Everything but the uv handles and e itself. */
void ep_release(struct ep_engine *e)
{
    ep_timing_log(e);
    ep_workers_stop(e);
    for (int s = 0; s < SUP_MAX_STAGES; s++)
        if (e->steps && s < e->n_stages)
            e->steps[s].id = 0;
    struct ep_req *lists[2] = {e->wait_head, e->run_head};
    for (int l = 0; l < 2; l++)
        for (struct ep_req *r = lists[l], *next; r; r = next) {
            next = r->next;
            ep_req_free(r);
        }
    e->wait_head = e->run_head = NULL;
    for (int i = 0; i < SUP_MAX_STAGES; i++)
        edge_close(e->edges[i]);
    transport_close(e->router);
    e->router = NULL;
    if (e->zctx)
        transport_context_destroy(e->zctx);
    if (e->own_run_dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/ctl", e->run_dir);
        unlink(path);
        for (int i = 0; i < e->n_stages; i++) {
            snprintf(path, sizeof path, "%s/edge-%d", e->run_dir, i);
            unlink(path);
        }
        rmdir(e->run_dir);
    }
    for (int s = 0; e->steps && s < e->n_stages; s++) {
        free(e->steps[s].reqs);
        free(e->steps[s].n_tok);
        free(e->steps[s].sample);
    }
    free(e->steps);
    free(e->sseq);
    free(e->ent);
    free(e->idle);
    free(e->mseq);
    free(e->free_slots);
    free(e->config_json);
    kv_pages_deinit(&e->pages);
}

static void ep_destroy(struct engine *base)
{
    struct ep_engine *e = (struct ep_engine *)base;
    uv_poll_stop(&e->poll);
    uv_idle_stop(&e->spin);
    ep_release(e);
    uv_close((uv_handle_t *)&e->poll, ep_on_close);
    uv_close((uv_handle_t *)&e->hb_timer, ep_on_close);
    uv_close((uv_handle_t *)&e->kick_timer, ep_on_close);
    uv_close((uv_handle_t *)&e->grace_timer, ep_on_close);
    uv_close((uv_handle_t *)&e->spin, ep_on_close);
}

static const struct engine_ops ep_ops = {
    .submit = ep_submit,
    .cancel = ep_cancel,
    .stats = ep_stats,
    .shutdown = ep_shutdown,
    .destroy = ep_destroy,
};

/* ---- creation: limits and model facts ---- */

static int ep_limits_set(struct ep_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    if (!cfg->model[0])
        return cs_error_set(err, CS_EINVAL, "no model given (model / --model)");
    if (cfg->test_script[0])
        return cs_error_set(err, CS_EUNSUPPORTED, "test_script is not supported by the pipeline");
    if (cfg->ctx_size < 2 || cfg->ctx_size > (1L << 24))
        return cs_error_set(err, CS_EINVAL, "ctx_size = %ld out of range (2..%ld)", cfg->ctx_size,
                            1L << 24);
    if (cfg->max_seqs < 1 || cfg->max_seqs > EP_MAX_SEQS)
        return cs_error_set(err, CS_EINVAL, "max_seqs = %ld out of range (1..%d)", cfg->max_seqs,
                            EP_MAX_SEQS);
    if (cfg->queue_size < 0 || cfg->queue_size > (1L << 20))
        return cs_error_set(err, CS_EINVAL, "queue_size = %ld out of range (0..%ld)",
                            cfg->queue_size, 1L << 20);
    if (cfg->prefill_chunk < 1 || cfg->prefill_chunk > 65536 || cfg->step_tokens < 1 ||
        cfg->step_tokens > 65536 || cfg->kv_page_size < 1 || cfg->kv_page_size > 65536)
        return cs_error_set(err, CS_EINVAL, "prefill_chunk = %ld, step_tokens = %ld, kv_page_size "
                            "= %ld out of range (1..65536)", cfg->prefill_chunk, cfg->step_tokens,
                            cfg->kv_page_size);
    if (cfg->heartbeat_ms < 10 || cfg->dead_after_ms <= cfg->heartbeat_ms)
        return cs_error_set(err, CS_EINVAL, "heartbeat_ms = %ld must be >= 10 and below "
                            "dead_after_ms = %ld", cfg->heartbeat_ms, cfg->dead_after_ms);
    e->base.ctx_size = (int)cfg->ctx_size;
    e->max_seqs = (int)cfg->max_seqs;
    e->queue_size = (int)cfg->queue_size;
    e->chunk = (int)cfg->prefill_chunk;
    e->page_size = (int)cfg->kv_page_size;
    e->max_pages = sched_pages_for(e->base.ctx_size, e->page_size);
    e->budget = sched_step_budget((int)cfg->step_tokens, e->chunk, e->max_seqs);
    if (e->budget > MSG_MAX_STEP_TOKENS)
        e->budget = MSG_MAX_STEP_TOKENS;
    return CS_OK;
}

static void ep_stop_add(struct ep_engine *e, int32_t id)
{
    if (id < 0 || id >= e->base.n_vocab || e->n_stop_default >= EP_MAX_DEFAULT_STOP)
        return;
    for (int i = 0; i < e->n_stop_default; i++)
        if (e->stop_default[i] == id)
            return;
    e->stop_default[e->n_stop_default++] = id;
}

/* Shape, stop ids and the stage plan from the GGUF. */
static int ep_model_read(struct ep_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, cfg->model, err);
    if (rc)
        return rc;
    struct cs_hparams hp;
    if ((rc = model_hparams_read(&hp, f, err))) {
        cs_error_prefix(err, "%s", cfg->model);
        gguf_close(f);
        return rc;
    }
    e->base.n_vocab = hp.n_vocab;
    e->n_embd = hp.n_embd;
    e->n_layer = hp.n_layer;
    uint32_t eos;
    if (gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &eos, NULL) == CS_OK)
        ep_stop_add(e, (int32_t)eos);
    struct tokenizer *tok = NULL;
    struct cs_error terr = {0};
    if (tokenizer_create_from_gguf(&tok, f, &terr) == CS_OK) {
        ep_stop_add(e, tokenizer_token_find(tok, "<|im_end|>", 10));
        ep_stop_add(e, tokenizer_token_find(tok, "<|endoftext|>", 13));
        tokenizer_destroy(tok);
    }
    if (!(rc = sup_plan_devices(&e->plan, cfg, err)))
        rc = sup_plan_slices(&e->plan, f, hp.n_layer, cfg->layer_split, err);
    gguf_close(f);
    e->n_stages = e->plan.n_stages;
    return rc;
}

/* ---- creation: channels ---- */

static int ep_channels_open(struct ep_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    int rc;
    if (cfg->attach) {
        snprintf(e->run_dir, sizeof e->run_dir, "%s", cfg->run_dir);
    } else {
        if ((rc = transport_rundir_prepare(cfg->run_dir, err)))
            return rc;
        ep_rundir_reclaim(cfg->run_dir);
        if ((size_t)snprintf(e->run_dir, sizeof e->run_dir, "%s/p%d", cfg->run_dir, (int)getpid()) >=
            sizeof e->run_dir)
            return cs_error_set(err, CS_ERANGE, "run_dir '%s' is too long", cfg->run_dir);
        e->own_run_dir = true;
    }
    if ((rc = transport_rundir_prepare(e->run_dir, err)) ||
        (rc = transport_context_create(&e->zctx, err)) ||
        (rc = transport_router_bind(e->zctx, e->run_dir, &e->router, err)))
        return rc;
    bool f16 = strcmp(cfg->hidden_type, "f16") == 0;
    if (!f16 && strcmp(cfg->hidden_type, "f32") != 0)
        return cs_error_set(err, CS_EINVAL, "hidden_type '%s' is not f32 or f16", cfg->hidden_type);
    struct edge_config ec = {.n_slots = e->n_stages + 1 < EDGE_MAX_SLOTS ? e->n_stages + 1 : EDGE_MAX_SLOTS,
                             .max_tokens = e->budget, .hidden = e->n_embd,
                             .dtype = f16 ? CS_DTYPE_F16 : CS_DTYPE_F32};
    for (int i = 0; i + 1 < e->n_stages; i++) {
        char name[EDGE_NAME_MAX];
        if ((rc = edge_name(name, sizeof name, e->run_dir, i)))
            return cs_error_set(err, rc, "edge name for %s", e->run_dir);
        if ((rc = edge_create(&e->edges[i], name, &ec, NULL, err)))
            return rc;
    }
    return CS_OK;
}

/* ---- creation ---- */

static int ep_buffers_create(struct ep_engine *e)
{
    size_t S = (size_t)e->max_seqs;
    e->steps = calloc((size_t)e->n_stages, sizeof *e->steps);
    e->sseq = malloc(S * sizeof *e->sseq);
    e->ent = malloc(S * sizeof *e->ent);
    e->idle = malloc(S * sizeof *e->idle);
    e->mseq = calloc(S, sizeof *e->mseq);
    if (!e->steps || !e->sseq || !e->ent || !e->idle || !e->mseq)
        return CS_ENOMEM;
    for (int s = 0; s < e->n_stages; s++) {
        e->steps[s].reqs = calloc(S, sizeof *e->steps[s].reqs);
        e->steps[s].n_tok = calloc(S, sizeof *e->steps[s].n_tok);
        e->steps[s].sample = calloc(S, sizeof *e->steps[s].sample);
        if (!e->steps[s].reqs || !e->steps[s].n_tok || !e->steps[s].sample)
            return CS_ENOMEM;
    }
    return CS_OK;
}

static int ep_setup(struct ep_engine *e, const struct cs_config *cfg, struct cs_error *err)
{
    int rc;
    e->cfg = *cfg;
    if ((rc = ep_limits_set(e, cfg, err)) || (rc = ep_model_read(e, cfg, err)))
        return rc;
    if ((rc = ep_buffers_create(e)))
        return cs_error_set(err, rc, "out of memory for the step buffers");
    e->config_json = config_to_json(cfg, false);
    if (!e->config_json)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    if ((rc = ep_channels_open(e, cfg, err)) || (rc = ep_bringup(e, err)))
        return rc;
    return ep_capacity_set(e, err);
}

/* Micro-batches in flight. With one device per stage, P stages compute P
 * steps at once. Stages that share a GPU do not run in parallel (their
 * kernels time-slice the device), so there a second step in flight only
 * splits the sequences into smaller batches: one step, all ready sequences
 * batched, is faster. pipeline_inflight overrides. */
static int ep_inflight_limit(const struct ep_engine *e)
{
    if (e->cfg.pipeline_inflight > 0)
        return e->cfg.pipeline_inflight < e->n_stages ? e->cfg.pipeline_inflight : e->n_stages;
    for (int i = 0; i < e->n_stages; i++)
        for (int j = i + 1; j < e->n_stages; j++)
            if (e->workers[i].gpu >= 0 && e->workers[i].gpu == e->workers[j].gpu)
                return 1;
    return e->n_stages;
}

static void ep_on_poll(uv_poll_t *p, int status, int events)
{
    ep_drain(p->data);
}

int engine_pipeline_create(struct engine **out, struct uv_loop_s *loop, const struct cs_config *cfg,
                           struct cs_error *err)
{
    *out = NULL;
    struct ep_engine *e = calloc(1, sizeof *e);
    if (!e)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    e->base.ops = &ep_ops;
    e->loop = loop;
    snprintf(e->state, sizeof e->state, "ready");
    /* epochs grow across coordinator restarts too: a worker that outlived
     * the last coordinator drops that one's steps still in its pipes */
    e->epoch = (uint32_t)time(NULL);
    int rc = ep_setup(e, cfg, err);
    int fd = -1;
    if (!rc && transport_fd(e->router, &fd) != CS_OK)
        rc = cs_error_set(err, CS_EIO, "cannot get the control socket's descriptor");
    if (rc) {
        if (err && !err->msg[0])
            cs_error_set(err, rc, "pipeline: %s", cs_strerror(rc));
        ep_release(e);
        free(e);
        return rc;
    }
    uv_poll_init(loop, &e->poll, fd);
    uv_timer_init(loop, &e->hb_timer);
    uv_timer_init(loop, &e->kick_timer);
    uv_timer_init(loop, &e->grace_timer);
    uv_idle_init(loop, &e->spin);
    e->poll.data = e->hb_timer.data = e->kick_timer.data = e->grace_timer.data = e->spin.data = e;
    e->n_open_handles = 5;
    e->spin_ms = transport_spin_ms(cfg->pipeline_spin_ms, e->n_stages + 1);
    int cpu = e->spin_ms > 0 ? transport_pin_core_for(-1) : -1;
    if (cpu >= 0)
        LOG_INFO("pipeline", "the loop thread polls while steps flow, on core %d with %d ZeroMQ "
                 "I/O thread(s)", cpu, transport_pin_core(cpu));
    uv_poll_start(&e->poll, UV_READABLE, ep_on_poll);
    uv_timer_start(&e->hb_timer, ep_on_heartbeat, (uint64_t)cfg->heartbeat_ms,
                   (uint64_t)cfg->heartbeat_ms);
    int64_t now = now_ms();
    for (int i = 0; i < e->n_stages; i++)
        e->workers[i].last_seen_ms = now;
    e->max_inflight = ep_inflight_limit(e);
    LOG_INFO("pipeline", "%d stages ready: %d sequences, %d KV pages of %d tokens, steps of %d "
             "tokens, %d in flight, polling without sleep %d ms after a step", e->n_stages,
             e->n_slots, e->pages.n_pages, e->page_size, e->budget, e->max_inflight, e->spin_ms);
    *out = &e->base;
    ep_drain(e);
    return CS_OK;
}
