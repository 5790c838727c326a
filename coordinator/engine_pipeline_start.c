/* engine_pipeline_start.c - bring-up of the pipeline's workers (see
 * engine_pipeline_int.h): spawn them (or wait for attached ones and assign
 * stages in GPU-index order), answer each HELLO with LOAD, wait for every
 * READY, and turn the reported capacities into the coordinator's allocators.
 * Runs before the loop does, blocking with bounded waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/log.h"
#include "../proto/transport.h"
#include "engine_pipeline_int.h"

#define EP_BRINGUP_MS (10 * 60 * 1000)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint32_t kv_type_of(const struct ep_engine *e, int gpu)
{
    if (strcmp(e->cfg.kv_type, "f32") == 0)
        return CS_DTYPE_F32;
    if (strcmp(e->cfg.kv_type, "f16") == 0)
        return CS_DTYPE_F16;
    return gpu < 0 ? CS_DTYPE_F32 : CS_DTYPE_F16;
}

int ep_load_send(struct ep_engine *e, struct ep_worker *w, struct cs_error *err)
{
    int s = w->stage;
    char ein[EDGE_NAME_MAX] = "", eout[EDGE_NAME_MAX] = "";
    char nin[TRANSPORT_ENDPOINT_MAX] = "", nout[TRANSPORT_ENDPOINT_MAX] = "", ename[32];
    if (s > 0) {
        snprintf(ename, sizeof ename, "edge-%d", s - 1);
        edge_name(ein, sizeof ein, e->run_dir, s - 1);
        transport_endpoint(nin, sizeof nin, e->run_dir, ename, NULL);
    }
    if (s < e->n_stages - 1) {
        snprintf(ename, sizeof ename, "edge-%d", s);
        edge_name(eout, sizeof eout, e->run_dir, s);
        transport_endpoint(nout, sizeof nout, e->run_dir, ename, NULL);
    }
    struct msg m;
    msg_init(&m, MSG_LOAD, (uint64_t)e->epoch << 32, MSG_SENDER_COORD);
    m.u.load = (struct msg_load){
        .model_path = e->cfg.model, .stage = s, .n_stages = e->n_stages,
        .layer_begin = e->plan.layer_begin[s], .layer_end = e->plan.layer_end[s],
        .state = {.max_tokens = e->budget, .n_slots = e->max_seqs,
                  .kv_pages = e->max_pages * e->max_seqs, .page_size = e->page_size,
                  .kv_type = kv_type_of(e, w->gpu)},
        .edge_dtype = strcmp(e->cfg.hidden_type, "f16") == 0 ? CS_DTYPE_F16 : CS_DTYPE_F32,
        .edge_slots = e->n_stages + 1 < EDGE_MAX_SLOTS ? e->n_stages + 1 : EDGE_MAX_SLOTS,
        .edge_in = ein, .edge_out = eout, .notify_in = nin, .notify_out = nout,
        .config_json = e->config_json};
    char peer[TRANSPORT_PEER_MAX];
    snprintf(peer, sizeof peer, "w%d", w->id);
    LOG_INFO("pipeline", "stage %d (%s %d): layers [%d, %d), %.1f MiB of weights", s,
             w->gpu < 0 ? "cpu" : "gpu", w->gpu < 0 ? 0 : w->gpu, m.u.load.layer_begin,
             m.u.load.layer_end, (double)e->plan.bytes[s] / (1 << 20));
    int rc = transport_send(e->router, peer, &m, 5000, err);
    if (rc)
        cs_error_prefix(err, "stage %d: LOAD", s);
    return rc;
}

/* Attach mode: all expected workers said HELLO; stages in GPU-index order
 * (then routing id order, for CPU workers started with --stage). */
static int assign_stages(struct ep_engine *e, int n, struct cs_error *err)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (e->workers[j].gpu < e->workers[j - 1].gpu ||
                                  (e->workers[j].gpu == e->workers[j - 1].gpu &&
                                   e->workers[j].id < e->workers[j - 1].id)); j--) {
            struct ep_worker t = e->workers[j];
            e->workers[j] = e->workers[j - 1];
            e->workers[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        e->workers[i].stage = i;
        int rc = ep_load_send(e, &e->workers[i], err);
        if (rc)
            return rc;
    }
    return CS_OK;
}

struct bringup {
    struct ep_engine *e;
    struct cs_error *err;
    int rc;
    int n_hello, n_ready;
};

static struct ep_worker *peer_worker(struct ep_engine *e, const char *peer)
{
    int id;
    if (!peer || (peer[0] != 'w' && peer[0] != 'h') || sscanf(peer + 1, "%d", &id) != 1)
        return NULL;
    for (int i = 0; i < SUP_MAX_STAGES; i++)
        if ((e->workers[i].hello || e->workers[i].pid > 0) && e->workers[i].id == id)
            return &e->workers[i];
    return NULL;
}

static void on_hello(struct bringup *b, const char *peer, const struct msg *m)
{
    struct ep_engine *e = b->e;
    const struct msg_hello *h = &m->u.hello;
    if (peer[0] != 'w')
        return;
    struct ep_worker *w = peer_worker(e, peer);
    if (e->cfg.attach && !w) {
        if (b->n_hello >= e->n_stages) {
            LOG_WARN("pipeline", "HELLO from an extra worker %s (gpu %d): ignored", peer,
                     (int)h->gpu_index);
            return;
        }
        w = &e->workers[b->n_hello];
        *w = (struct ep_worker){.id = atoi(peer + 1), .stage = -1, .gpu = h->gpu_index};
    }
    if (!w || w->hello)
        return;
    w->hello = true;
    w->hello_pid = h->pid;
    w->last_seen_ms = now_ms();
    b->n_hello++;
    LOG_INFO("pipeline", "worker %s: %s, pid %d, protocol %u", peer, h->device_name, (int)h->pid,
             h->proto_version);
    if (!e->cfg.attach)
        b->rc = ep_load_send(e, w, b->err);
    else if (b->n_hello == e->n_stages)
        b->rc = assign_stages(e, e->n_stages, b->err);
}

static void bringup_cb(void *ctx, const char *peer, struct msg *m)
{
    struct bringup *b = ctx;
    if (b->rc)
        return;
    if (m->h.type == MSG_HELLO) {
        on_hello(b, peer, m);
        return;
    }
    struct ep_worker *w = peer_worker(b->e, peer);
    if (!w)
        return;
    w->last_seen_ms = now_ms();
    if (m->h.type == MSG_ERROR) {
        b->rc = cs_error_set(b->err, m->u.error.code < 0 ? m->u.error.code : CS_EINTERNAL,
                             "stage %d: %s", w->stage, m->u.error.message);
    } else if (m->h.type == MSG_READY && !w->ready && w->stage == m->u.ready.stage) {
        w->ready = true;
        w->info = m->u.ready;
        b->n_ready++;
    }
}

/* A spawned worker that exited before READY (after reading its last words). */
static int check_children(struct bringup *b)
{
    struct ep_engine *e = b->e;
    for (int i = 0; i < e->n_stages; i++) {
        struct ep_worker *w = &e->workers[i];
        int status;
        if (w->pid <= 0 || !sup_reaped(w->pid, &status))
            continue;
        w->pid = 0;
        usleep(20000);
        bool more = false;
        transport_drain(e->router, 64, bringup_cb, b, &more);
        if (b->rc)
            return b->rc;
        char st[64];
        sup_status_text(st, sizeof st, status);
        return cs_error_set(b->err, CS_EIO, "stage %d: the worker %s before it was ready",
                            w->stage, st);
    }
    return CS_OK;
}

static int spawn_all(struct ep_engine *e, struct cs_error *err)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = (int)e->cfg.threads;
    if (threads <= 0)
        threads = ncpu > e->n_stages ? (int)(ncpu / e->n_stages) : 1;
    e->worker_threads = threads;
    for (int s = 0; s < e->n_stages; s++) {
        struct ep_worker *w = &e->workers[s];
        *w = (struct ep_worker){.id = s, .stage = s, .gpu = e->plan.gpu[s]};
        int rc = sup_spawn(&w->pid, e->run_dir, s, w->gpu, threads, e->cfg.log_level,
                           (int)e->cfg.heartbeat_ms, err);
        if (rc)
            return rc;
    }
    return CS_OK;
}

int ep_bringup(struct ep_engine *e, struct cs_error *err)
{
    int rc;
    if (!e->cfg.attach && (rc = spawn_all(e, err)))
        return rc;
    if (e->cfg.attach)
        LOG_INFO("pipeline", "waiting for %d workers in %s", e->n_stages, e->run_dir);
    struct bringup b = {.e = e, .err = err};
    int64_t deadline = now_ms() + EP_BRINGUP_MS;
    while (b.n_ready < e->n_stages) {
        if (now_ms() > deadline)
            return cs_error_set(err, CS_ETIMEOUT, "%d of %d workers ready after %d s", b.n_ready,
                                e->n_stages, EP_BRINGUP_MS / 1000);
        struct msg m;
        char peer[TRANSPORT_PEER_MAX] = "";
        struct cs_error rerr = {0};
        rc = transport_recv(e->router, peer, sizeof peer, &m, 100, &rerr);
        if (rc == CS_EPROTO && strstr(rerr.msg, "protocol version"))
            return cs_error_set(err, CS_EPROTO, "worker %s refused: %s", peer, rerr.msg);
        if (rc == CS_OK) {
            bringup_cb(&b, peer, &m);
            msg_free(&m);
        } else if (rc != CS_ETIMEOUT && rc != CS_EPROTO) {
            return cs_error_set(err, rc, "control socket: %s", cs_strerror(rc));
        }
        if (b.rc)
            return b.rc;
        if ((rc = check_children(&b)))
            return rc;
    }
    return CS_OK;
}

int ep_capacity_set(struct ep_engine *e, struct cs_error *err)
{
    long pages = -1;
    int slots = e->max_seqs;
    for (int s = 0; s < e->n_stages; s++) {
        const struct msg_ready *r = &e->workers[s].info;
        long p = (long)(r->kv_tokens / (uint64_t)e->page_size);
        if (pages < 0 || p < pages)
            pages = p;
        if (r->n_slots < slots)
            slots = r->n_slots;
    }
    if (pages < e->max_pages || slots < 1)
        return cs_error_set(err, CS_ENOMEM, "KV cache: the stages hold %ld pages of %d tokens and "
                            "%d state slots; one context of %d tokens needs %d pages", pages,
                            e->page_size, slots, e->base.ctx_size, e->max_pages);
    e->n_slots = slots;
    e->free_slots = malloc(sizeof(int) * (size_t)slots);
    if (!e->free_slots || kv_pages_init(&e->pages, (int)pages) != CS_OK)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    for (int i = 0; i < slots; i++)
        e->free_slots[i] = slots - 1 - i;
    e->n_free_slots = slots;
    if (slots < e->max_seqs)
        e->max_seqs = slots;
    return CS_OK;
}

/* A "p<pid>" name whose process is gone: its pid, else 0. */
static int dead_owner(const char *name)
{
    char *end;
    if (name[0] != 'p' || !name[1])
        return 0;
    long pid = strtol(name + 1, &end, 10);
    if (*end || pid <= 1 || pid == (long)getpid())
        return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH ? (int)pid : 0;
}

void ep_rundir_reclaim(const char *run_dir)
{
    DIR *d = opendir(run_dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        int pid = dead_owner(de->d_name);
        if (!pid)
            continue;
        char sub[512], path[1024], shm[EDGE_NAME_MAX];
        snprintf(sub, sizeof sub, "%s/%s", run_dir, de->d_name);
        int n_shm = 0;
        for (int i = 0; i < SUP_MAX_STAGES; i++)
            if (edge_name(shm, sizeof shm, sub, i) == CS_OK && shm_unlink(shm) == 0)
                n_shm++;
        DIR *sd = opendir(sub);
        struct dirent *f;
        while (sd && (f = readdir(sd)))
            if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
                unlink(path);
            }
        if (sd)
            closedir(sd);
        rmdir(sub);
        LOG_WARN("pipeline", "reclaimed %s of a crashed coordinator (pid %d): %d shared-memory "
                 "edges", sub, pid, n_shm);
    }
    closedir(d);
}
