/* engine_pipeline_recover.c - recovery of the pipeline engine after a stage
 * dies or hangs (design.md section 5; see engine_pipeline_int.h).
 *
 * Pause: the steps in flight are forgotten (their results, if any still
 * come, are dropped as unknown steps), every running sequence is rewound to
 * replay from position 0, nothing is scheduled. The dead stage's process is
 * killed if still there (a hung one) and respawned, or, in attach mode,
 * awaited (systemd restarts it; it says HELLO). The worker gets LOAD; when
 * every stage is READY the pipeline resumes: each sequence replays its
 * prompt in the same chunks, then each generated token but the last one a
 * step, without sampling and without sending anything to its client; its
 * last token is then fed by the next normal step. Every stage rebuilds its
 * state (the first replay step carries the reset flag), so a step half-way
 * through the pipeline when the stage died leaves nothing behind. With
 * batch-invariant math the continuation equals an uninterrupted run.
 *
 * Stale steps: every recovery raises the epoch, the high 32 bits of step
 * ids; workers drop steps of an older epoch (worker_step.c), so a step still
 * queued towards the restarted stage never touches the rebuilt state. New
 * requests queue meanwhile; a death during the recovery restarts it. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "../common/log.h"
#include "engine_pipeline_int.h"

#define EP_MAX_RESTARTS 8   /* restarts without one completed recovery: degrade */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct sched_seq ep_recover_view(const struct ep_req *r)
{
    struct sched_seq s = {.n_prompt = r->n_prompt, .n_ctx = r->n_ctx, .n_done = r->n_done};
    if (r->n_done < r->replay_to)
        s.n_ctx = r->n_done < r->n_prompt ? r->n_prompt : r->n_done + 1;
    return s;
}

/* Forget the steps in flight; free the requests finished meanwhile. */
static void steps_forget(struct ep_engine *e)
{
    for (int i = 0; i < e->n_stages; i++) {
        struct ep_step *st = &e->steps[i];
        if (!st->id)
            continue;
        st->id = 0;
        e->n_inflight--;
        for (int k = 0; k < st->n; k++) {
            struct ep_req *r = st->reqs[k];
            if (!r)
                continue;
            r->inflight = false;
            if (r->finished)
                ep_req_free(r);
            st->reqs[k] = NULL;
        }
    }
}

/* Every running sequence replays from position 0 up to its last token. */
static void requests_rewind(struct ep_engine *e)
{
    for (struct ep_req *r = e->run_head; r; r = r->next) {
        r->n_done = 0;
        r->replay_to = r->n_gen > 0 ? r->n_ctx - 1 : 0;
    }
}

/* Kill w's process if it is still there (hung), then respawn it (attach
 * mode: systemd does; we wait for its HELLO). */
static int worker_restart(struct ep_engine *e, struct ep_worker *w, struct cs_error *err)
{
    if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        int st;
        waitpid(w->pid, &st, 0);
        w->pid = 0;
    } else if (e->cfg.attach && w->hello_pid > 1 && w->ready) {
        kill(w->hello_pid, SIGKILL);   /* a hung attached worker: its unit restarts it */
    }
    w->hello = w->ready = false;
    w->dead = true;
    w->last_seen_ms = now_ms();
    if (e->cfg.attach)
        return CS_OK;
    return sup_spawn(&w->pid, e->run_dir, w->stage, w->gpu, e->worker_threads, e->cfg.log_level,
                     (int)e->cfg.heartbeat_ms, err);
}

void ep_recover_begin(struct ep_engine *e, struct ep_worker *w, const char *why)
{
    if (e->degraded)
        return;
    int64_t now = now_ms();
    if (!e->recovering)
        e->recover_t0_ms = now;
    e->recovering = true;
    e->epoch++;
    snprintf(e->state, sizeof e->state, "degraded: %s; recovering", why);
    LOG_WARN("pipeline", "%s: pausing %d sequences (%d queued) and restarting stage %d", e->state,
             e->n_running, e->n_waiting, w->stage);
    if (++e->n_restarts > EP_MAX_RESTARTS) {
        ep_degrade(e, why);
        return;
    }
    steps_forget(e);
    requests_rewind(e);
    struct cs_error err = {0};
    if (worker_restart(e, w, &err) != CS_OK) {
        char text[600];
        snprintf(text, sizeof text, "stage %d cannot be restarted: %s", w->stage, err.msg);
        ep_degrade(e, text);
    }
}

void ep_recover_on_hello(struct ep_engine *e, struct ep_worker *w, const struct msg *m)
{
    if (e->degraded || e->closing)
        return;
    if (w->ready) {
        char why[128];
        snprintf(why, sizeof why, "stage %d restarted (a new HELLO)", w->stage);
        ep_recover_begin(e, w, why);
        if (e->degraded)
            return;
    }
    if (w->hello)
        return;   /* LOAD already sent */
    w->hello = true;
    w->hello_pid = m->u.hello.pid;
    w->last_seen_ms = now_ms();
    LOG_INFO("pipeline", "stage %d is back (pid %d): loading", w->stage, (int)m->u.hello.pid);
    struct cs_error err = {0};
    if (ep_load_send(e, w, &err) != CS_OK) {
        char text[600];
        snprintf(text, sizeof text, "stage %d: %s", w->stage, err.msg);
        ep_recover_begin(e, w, text);
    }
}

/* The stage came back with at least the capacity the allocators assume. */
static bool capacity_kept(const struct ep_engine *e, const struct msg_ready *r)
{
    return (long)(r->kv_tokens / (uint64_t)e->page_size) >= e->pages.n_pages &&
           r->n_slots >= e->n_slots;
}

void ep_recover_on_ready(struct ep_engine *e, struct ep_worker *w, const struct msg *m)
{
    if (w->ready || !w->hello || m->u.ready.stage != w->stage || e->degraded)
        return;
    if (!capacity_kept(e, &m->u.ready)) {
        char text[160];
        snprintf(text, sizeof text, "stage %d came back with less KV cache or fewer slots",
                 w->stage);
        ep_degrade(e, text);
        return;
    }
    w->ready = true;
    w->dead = false;
    w->info = m->u.ready;
    LOG_INFO("pipeline", "stage %d ready again (load %u ms)", w->stage, m->u.ready.load_ms);
    for (int i = 0; i < e->n_stages; i++)
        if (!e->workers[i].ready)
            return;
    int n_replay = 0;
    for (struct ep_req *r = e->run_head; r; r = r->next)
        n_replay += r->replay_to > 0 || r->n_done == 0;
    e->recovering = false;
    e->n_restarts = 0;
    e->n_recoveries++;
    snprintf(e->state, sizeof e->state, "ready");
    LOG_WARN("pipeline", "recovered in %lld ms: replaying %d sequences, %d queued",
             (long long)(now_ms() - e->recover_t0_ms), n_replay, e->n_waiting);
    ep_kick(e);
    ep_shutdown_check(e);
}
