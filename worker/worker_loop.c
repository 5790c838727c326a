/* worker_loop.c - the life of a worker process (worker.h): connect, HELLO,
 * LOAD -> READY (or a fatal ERROR naming the reason), the poll loop over the
 * control and notify sockets, and the heartbeat thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "../common/log.h"
#include "../proto/transport.h"
#include "load_progress.h"
#include "state.h"
#include "worker.h"

#define WORKER_LOAD_WAIT_MS (10 * 60 * 1000)   /* no LOAD within 10 minutes: give up */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- heartbeat thread: its own DEALER "h<id>" ---- */

static void *hb_main(void *arg)
{
    struct worker *w = arg;
    char ep[TRANSPORT_ENDPOINT_MAX], id[TRANSPORT_PEER_MAX];
    struct cs_error err = {0};
    if (transport_endpoint(ep, sizeof ep, w->o.run_dir, "ctl", &err) != CS_OK)
        return NULL;
    void *s = zmq_socket(w->zctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int zero = 0;
    snprintf(id, sizeof id, "h%d", w->o.id);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
    if (zmq_connect(s, ep) != 0) {
        zmq_close(s);
        return NULL;
    }
    uint64_t seq = 0;
    for (;;) {
        pthread_mutex_lock(&w->hb_mu);
        bool quit = w->hb_quit;
        uint32_t state = w->hb_state;
        pthread_mutex_unlock(&w->hb_mu);
        if (quit)
            break;
        struct msg m;
        msg_init(&m, MSG_HEARTBEAT, 0, w->o.id);
        m.u.heartbeat = (struct msg_heartbeat){.seq = ++seq, .time_us = (uint64_t)now_ms() * 1000u,
                                               .state = state};
        transport_send(s, NULL, &m, 0, &err);   /* a full queue: the next one will do */
        /* sleep a period, or until hb_stop signals (no polling: stopping is immediate) */
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += w->o.heartbeat_ms / 1000;
        dl.tv_nsec += (long)(w->o.heartbeat_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&w->hb_mu);
        while (!w->hb_quit && pthread_cond_timedwait(&w->hb_cv, &w->hb_mu, &dl) == 0)
            ;
        pthread_mutex_unlock(&w->hb_mu);
    }
    zmq_close(s);
    return NULL;
}

static void hb_stop(struct worker *w)
{
    if (!w->hb_started)
        return;
    pthread_mutex_lock(&w->hb_mu);
    w->hb_quit = true;
    pthread_cond_signal(&w->hb_cv);
    pthread_mutex_unlock(&w->hb_mu);
    pthread_join(w->hb_thread, NULL);
    w->hb_started = false;
}

/* ---- HELLO and LOAD ---- */

static int worker_hello(struct worker *w, struct cs_error *err)
{
    size_t free_b = 0, total_b = 0;
    w->be->mem_info(w->be, &free_b, &total_b);
    struct msg m;
    msg_init(&m, MSG_HELLO, 0, w->o.id);
    char name[MSG_MAX_NAME];
    snprintf(name, sizeof name, "%s", w->be->name);
    m.u.hello = (struct msg_hello){.stage = w->o.id, .gpu_index = w->o.gpu, .device_name = name,
                                   .free_bytes = free_b, .total_bytes = total_b,
                                   .capabilities = w->o.gpu >= 0 ? MSG_CAP_CUDA : 0,
                                   .pid = (int32_t)getpid(), .proto_version = CS_PROTO_VERSION};
    if (free_b > total_b)
        m.u.hello.free_bytes = total_b;
    return transport_send(w->ctl, NULL, &m, 5000, err);
}

/* KV pages that fit mem_fraction of the memory (never more than asked). */
static int load_kv_fit(struct worker *w, struct cs_state_config *sc, struct cs_error *err)
{
    int want = sc->kv_pages;
    sc->kv_pages = 1;
    uint64_t base = state_bytes(&w->m, sc);
    sc->kv_pages = 2;
    uint64_t per_page = state_bytes(&w->m, sc) - base;
    sc->kv_pages = want;
    size_t free_b = 0, total_b = 0;
    if (per_page == 0 || w->be->mem_info(w->be, &free_b, &total_b) != CS_OK)
        return CS_OK;
    bool cpu = w->o.gpu < 0;
    double usable = (cpu ? (double)total_b : (double)free_b) * w->cfg.mem_fraction - (double)base;
    long fit = usable > 0 ? (long)(usable / (double)per_page) + 1 : 0;
    if (fit < 1)
        return cs_error_set(err, CS_ENOMEM, "the state needs %.1f MiB, %.1f MiB are usable "
                            "(mem_fraction %.2f)", (double)(base + per_page) / (1 << 20),
                            usable / (1 << 20), w->cfg.mem_fraction);
    if (fit < want) {
        LOG_WARN("worker", "KV cache limited by memory to %ld of %d pages", fit, want);
        sc->kv_pages = (int)fit;
    }
    return CS_OK;
}

/* ---- pinned edges: struct edge_hooks over be->host_register ---- */

/* Pin an edge mapping. A failure is warned about once and reported as
 * success: the edge works unpinned (slower copies), the worker goes on. */
static int edge_pin(void *ctx, void *ptr, size_t bytes)
{
    struct worker *w = ctx;
    int rc = w->be->host_register(w->be, ptr, bytes);
    if (rc) {
        if (!w->pin_warned)
            LOG_WARN("worker", "stage %d: cannot pin a %.1f MiB edge mapping (%s): edges run "
                     "unpinned (slower copies)", w->stage, (double)bytes / (1 << 20),
                     cs_strerror(rc));
        w->pin_warned = true;
        return CS_OK;
    }
    for (int i = 0; i < WORKER_MAX_PINNED; i++)
        if (!w->pinned[i]) {
            w->pinned[i] = ptr;
            LOG_DEBUG("worker", "stage %d: edge mapping of %.1f MiB pinned", w->stage,
                      (double)bytes / (1 << 20));
            return CS_OK;
        }
    w->be->host_unregister(w->be, ptr);   /* no room to remember it: stay unpinned */
    return CS_OK;
}

/* Unpin a mapping edge_pin registered (others were never pinned). */
static void edge_unpin(void *ctx, void *ptr)
{
    struct worker *w = ctx;
    for (int i = 0; i < WORKER_MAX_PINNED; i++)
        if (w->pinned[i] == ptr) {
            w->be->host_unregister(w->be, ptr);
            w->pinned[i] = NULL;
            return;
        }
}

static int load_edges(struct worker *w, const struct msg_load *l, struct cs_error *err)
{
    int rc;
    struct edge_hooks pin = {edge_pin, edge_unpin, w};
    const struct edge_hooks *hooks =
        w->be->host_register && w->be->host_unregister ? &pin : NULL;
    if (w->stage > 0) {
        if ((rc = edge_open(&w->ein, l->edge_in, hooks, err)) ||
            (rc = transport_pull_bind(w->zctx, w->o.run_dir, w->stage - 1, &w->pull, err)))
            return rc;
    }
    if (w->stage < w->n_stages - 1) {
        if ((rc = edge_open(&w->eout, l->edge_out, hooks, err)) ||
            (rc = transport_push_connect(w->zctx, w->o.run_dir, w->stage, &w->push, err)))
            return rc;
        const struct edge_config *ec = edge_config_get(w->eout);
        if (ec->hidden != w->m.hp.n_embd || ec->max_tokens < w->max_tokens)
            return cs_error_set(err, CS_EINVAL, "edge %s: hidden %d x %d tokens, the slice needs "
                                "%d x %d", l->edge_out, ec->hidden, ec->max_tokens, w->m.hp.n_embd,
                                w->max_tokens);
    }
    return CS_OK;
}

static int load_buffers(struct worker *w, struct cs_error *err)
{
    size_t n = (size_t)w->max_tokens * (size_t)w->m.hp.n_embd;
    bool f16 = (w->ein && edge_config_get(w->ein)->dtype == CS_DTYPE_F16) ||
               (w->eout && edge_config_get(w->eout)->dtype == CS_DTYPE_F16);
    if (f16)
        w->host = malloc(n * sizeof(float));   /* fp16 conversion; fp32 edges need none */
    w->results = calloc(MSG_MAX_SEQS, sizeof *w->results);
    if ((f16 && !w->host) || !w->results)
        return cs_error_set(err, CS_ENOMEM, "cannot allocate the step buffers (%zu values)", n);
    return CS_OK;
}

/* Everything a LOAD builds but the weights: state, edges, notify sockets,
 * step buffers. */
static void slice_state_release(struct worker *w)
{
    transport_close(w->pull);
    transport_close(w->push);
    w->pull = w->push = NULL;
    edge_close(w->ein);
    edge_close(w->eout);
    w->ein = w->eout = NULL;
    free(w->host);
    free(w->results);
    w->host = NULL;
    w->results = NULL;
    if (w->st)
        state_destroy(w->st);
    w->st = NULL;
}

static void slice_model_release(struct worker *w)
{
    if (w->model_loaded)
        model_free(&w->m);
    w->model_loaded = false;
    if (w->f)
        gguf_close(w->f);
    w->f = NULL;
    w->loaded_path[0] = '\0';
}

/* The weights of l's slice: kept when already loaded (a LOAD from a new
 * coordinator), else loaded (dropping another slice first). */
static int load_weights(struct worker *w, const struct msg_load *l, struct cs_error *err)
{
    if (w->model_loaded && strcmp(w->loaded_path, l->model_path) == 0 &&
        w->loaded_begin == l->layer_begin && w->loaded_end == l->layer_end) {
        LOG_INFO("worker", "reusing the loaded weights of layers [%d, %d) (no reload)",
                 l->layer_begin, l->layer_end);
        return CS_OK;
    }
    slice_model_release(w);
    int rc;
    if ((rc = gguf_open(&w->f, l->model_path, err)))
        return rc;
    if ((rc = model_load(&w->m, w->f, w->be, l->layer_begin, l->layer_end, load_progress_cb,
                         load_progress_begin(&(struct load_progress){0}), err))) {
        cs_error_prefix(err, "%s", l->model_path);
        return rc;
    }
    w->model_loaded = true;
    snprintf(w->loaded_path, sizeof w->loaded_path, "%s", l->model_path);
    w->loaded_begin = l->layer_begin;
    w->loaded_end = l->layer_end;
    return CS_OK;
}

static int load_slice(struct worker *w, const struct msg_load *l, struct cs_error *err)
{
    int rc;
    slice_state_release(w);
    config_defaults(&w->cfg);
    if (l->config_json[0] &&
        (rc = config_apply_json(&w->cfg, l->config_json, strlen(l->config_json), err)))
        return rc;
    if (w->be->graph_enable)   /* cuda_graphs, from the coordinator's configuration */
        w->be->graph_enable(w->be, w->cfg.cuda_graphs);
    if (w->be->pdl_enable)     /* cuda_pdl, likewise */
        w->be->pdl_enable(w->be, w->cfg.cuda_pdl);
    w->stage = l->stage;
    w->n_stages = l->n_stages;
    w->spin_ms = transport_spin_ms(w->cfg.pipeline_spin_ms, w->n_stages + 1);
    int cpu = w->spin_ms > 0 ? transport_pin_core_for(w->stage) : -1;
    if (cpu >= 0) {
        int n = transport_pin_core(cpu);
        LOG_INFO("worker", "stage %d polls %d ms after a step, on core %d with %d ZeroMQ I/O "
                 "thread(s)", w->stage, w->spin_ms, cpu, n);
    }
    if ((rc = load_weights(w, l, err)))
        return rc;
    if ((w->stage == 0) != w->m.first_stage || (w->stage == w->n_stages - 1) != w->m.last_stage)
        return cs_error_set(err, CS_EINVAL, "bad slice: stage %d of %d has layers [%d, %d) of %d",
                            w->stage, w->n_stages, l->layer_begin, l->layer_end, w->m.hp.n_layer);
    struct cs_state_config sc = l->state;
    w->max_tokens = sc.max_tokens;
    w->page_size = sc.page_size;
    if ((rc = load_kv_fit(w, &sc, err)) || (rc = state_create(&w->st, &w->m, &sc, err)) ||
        (rc = load_edges(w, l, err)) || (rc = load_buffers(w, err)))
        return rc;
    /* After a LOAD nothing this stage wrote before is wanted (a recovery
     * replays with a new epoch), and a slot held by a killed predecessor of
     * this process (it holds its outgoing slot for a whole step) would stay
     * taken for good: the outgoing edge starts empty. */
    if (w->eout)
        edge_reset(w->eout);
    return CS_OK;
}

static int worker_ready_send(struct worker *w, int64_t t0, struct cs_error *err)
{
    struct msg m;
    msg_init(&m, MSG_READY, 0, w->stage);
    const struct cs_state_config *sc = &w->st->cfg;
    m.u.ready = (struct msg_ready){.stage = w->stage, .layer_begin = w->m.layer_begin,
                                   .layer_end = w->m.layer_end,
                                   .kv_tokens = (uint64_t)sc->kv_pages * (uint64_t)sc->page_size,
                                   .n_slots = sc->n_slots, .max_tokens = sc->max_tokens,
                                   .load_ms = (uint32_t)(now_ms() - t0),
                                   .weight_bytes = w->m.weight_bytes,
                                   .state_bytes = state_bytes(&w->m, sc)};
    LOG_INFO("worker", "stage %d of %d ready: layers [%d, %d), %d KV pages, %d slots, %u ms",
             w->stage, w->n_stages, w->m.layer_begin, w->m.layer_end, sc->kv_pages, sc->n_slots,
             m.u.ready.load_ms);
    return transport_send(w->ctl, NULL, &m, 5000, err);
}

/* One LOAD: (re)build the slice, take the epoch, answer READY. A failure is
 * sent as a fatal ERROR. */
static int worker_load_msg(struct worker *w, const struct msg *m, struct cs_error *err)
{
    int64_t t0 = now_ms();
    int rc = load_slice(w, &m->u.load, err);
    if (rc) {
        worker_error_send(w, 0, rc, true, err->msg);
        return rc;
    }
    w->epoch = worker_step_epoch(m->h.step_id);
    w->ctl_seen_ms = 0;   /* silence counts from the coordinator's first heartbeat */
    return worker_ready_send(w, t0, err);
}

/* Wait for LOAD, load, answer READY. A load failure is sent as a fatal ERROR. */
static int worker_load(struct worker *w, struct cs_error *err)
{
    int64_t deadline = now_ms() + WORKER_LOAD_WAIT_MS;
    for (;;) {
        struct msg m;
        int left = (int)(deadline - now_ms());
        if (left <= 0)
            return cs_error_set(err, CS_ETIMEOUT, "no LOAD from the coordinator");
        int rc = transport_recv(w->ctl, NULL, 0, &m, left < 1000 ? left : 1000, err);
        if (rc == CS_ETIMEOUT || rc == CS_EPROTO)
            continue;
        if (rc)
            return rc;
        if (m.h.type == MSG_SHUTDOWN) {
            msg_free(&m);
            return CS_ECLOSED;
        }
        if (m.h.type != MSG_LOAD) {
            msg_free(&m);
            continue;
        }
        rc = worker_load_msg(w, &m, err);
        msg_free(&m);
        return rc;
    }
}

/* ---- serving ---- */

/* Handle one message; *quit on SHUTDOWN. */
static int worker_dispatch(struct worker *w, struct msg *m, bool from_ctl, bool *quit)
{
    switch (m->h.type) {
    case MSG_STEP:
        if (from_ctl != (w->stage == 0)) {
            LOG_WARN("worker", "step %llu on the wrong socket: dropped",
                     (unsigned long long)m->h.step_id);
            return CS_OK;
        }
        return worker_step_run(w, m);
    case MSG_SHUTDOWN:
        *quit = true;
        if (w->be && w->be->graph_stats) {
            struct cs_graph_stats g = {0};
            w->be->graph_stats(w->be, &g);
            LOG_INFO("worker", "stage %d: decode-step graphs %llu recorded, %llu replayed, %llu "
                     "eager, %llu failed", w->stage, (unsigned long long)g.recorded,
                     (unsigned long long)g.replayed, (unsigned long long)g.eager,
                     (unsigned long long)g.failed);
        }
        if (w->model_loaded && w->m.n_forward > 0)
            LOG_INFO("worker", "stage %d: %llu forward passes: %.3f ms queueing ops on the host, "
                     "%.3f ms waiting for the device, a pass", w->stage,
                     (unsigned long long)w->m.n_forward,
                     (double)w->m.submit_us / (double)w->m.n_forward / 1e3,
                     (double)w->m.wait_us / (double)w->m.n_forward / 1e3);
        return CS_OK;
    case MSG_HEARTBEAT:
        if (from_ctl)
            w->ctl_seen_ms = now_ms();
        return CS_OK;
    case MSG_LOAD: {
        struct cs_error err = {0};
        return from_ctl ? worker_load_msg(w, m, &err) : CS_OK;
    }
    default:
        LOG_WARN("worker", "unexpected %s message: dropped", msg_type_name(m->h.type));
        return CS_OK;
    }
}

/* True when the coordinator has been silent for dead_after_ms (counted
 * from its first heartbeat after READY: a coordinator still bringing up
 * other stages sends none yet). */
static bool coordinator_lost(const struct worker *w)
{
    return w->ctl_seen_ms > 0 && w->cfg.dead_after_ms > 0 &&
           now_ms() - w->ctl_seen_ms > w->cfg.dead_after_ms;
}

static int worker_serve(struct worker *w, struct cs_error *err)
{
    bool quit = false;
    while (!quit) {
        if (coordinator_lost(w))
            return CS_EAGAIN;
        zmq_pollitem_t items[2] = {{.socket = w->ctl, .events = ZMQ_POLLIN},
                                   {.socket = w->pull, .events = ZMQ_POLLIN}};
        int n_items = w->pull ? 2 : 1;
        bool spin = w->spin_ms > 0 && now_us() - w->step_seen_us < (uint64_t)w->spin_ms * 1000u;
        int n = zmq_poll(items, n_items, spin ? 0 : 100);
        if (n == 0 && spin)
            sched_yield();   /* the I/O thread pinned beside this one runs at once */
        if (n <= 0)
            continue;   /* nothing yet, or EINTR */
        w->wake_us = now_us();
        for (int i = 0; i < n_items && !quit; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            struct msg m;
            int rc = transport_recv(items[i].socket, NULL, 0, &m, 0, err);
            if (rc == CS_ETIMEOUT || rc == CS_EPROTO)
                continue;
            if (rc)
                return rc;
            rc = worker_dispatch(w, &m, i == 0, &quit);
            msg_free(&m);
            if (rc)
                return rc;
        }
    }
    return CS_OK;
}

static void worker_release(struct worker *w)
{
    hb_stop(w);
    transport_close(w->ctl);
    slice_state_release(w);
    if (w->zctx)
        transport_context_destroy(w->zctx);
    slice_model_release(w);
    if (w->be)
        w->be->destroy(w->be);
    pthread_mutex_destroy(&w->hb_mu);
    pthread_cond_destroy(&w->hb_cv);
}

/* The coordinator went silent: a fresh control socket and HELLO again
 * (weights kept), then wait for its LOAD. */
static int worker_rejoin(struct worker *w, struct cs_error *err)
{
    LOG_WARN("worker", "stage %d: no word from the coordinator for %ld ms: saying HELLO again "
             "(weights kept)", w->stage, w->cfg.dead_after_ms);
    transport_close(w->ctl);
    w->ctl = NULL;
    int rc;
    if ((rc = transport_dealer_connect(w->zctx, w->o.run_dir, w->o.id, &w->ctl, err)) ||
        (rc = worker_hello(w, err)))
        return rc;
    return worker_load(w, err);
}

static int worker_start(struct worker *w, struct cs_error *err)
{
    char dev[16];
    if (w->o.gpu >= 0)
        snprintf(dev, sizeof dev, "%d", w->o.gpu);
    else
        snprintf(dev, sizeof dev, "cpu");
    int rc = cs_backend_create(&w->be, dev, w->o.threads);
    if (rc)
        return cs_error_set(err, rc, "cannot create the backend for device '%s': %s", dev,
                            cs_strerror(rc));
    if ((rc = transport_context_create(&w->zctx, err)) ||
        (rc = transport_dealer_connect(w->zctx, w->o.run_dir, w->o.id, &w->ctl, err)))
        return rc;
    if (pthread_create(&w->hb_thread, NULL, hb_main, w) != 0)
        return cs_error_set(err, CS_ENOMEM, "cannot start the heartbeat thread");
    w->hb_started = true;
    return worker_hello(w, err);
}

int worker_run(const struct worker_opts *o, struct cs_error *err)
{
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    w->o = *o;
    if (w->o.heartbeat_ms < 10)
        w->o.heartbeat_ms = 10;
    w->stage = o->stage;
    pthread_mutex_init(&w->hb_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
    w->hb_state = MSG_STATE_LOADING;
    int rc = worker_start(w, err);
    if (!rc && (rc = worker_load(w, err)) == CS_OK) {
        pthread_mutex_lock(&w->hb_mu);
        w->hb_state = MSG_STATE_READY;
        pthread_mutex_unlock(&w->hb_mu);
        while ((rc = worker_serve(w, err)) == CS_EAGAIN)
            if ((rc = worker_rejoin(w, err)))
                break;
    }
    if (rc == CS_ECLOSED)
        rc = CS_OK;
    worker_release(w);
    free(w);
    return rc;
}
