/* engine_pipeline_sched.c - the running side of the pipeline engine (see
 * engine_pipeline_int.h): cancels, admission by state slots and KV pages,
 * building each step with the shared policy of scheduler.h over the
 * sequences not already in flight, sending it to stage 0, handling
 * STEP_DONE / ERROR, heartbeats and the detection of a dead stage.
 *
 * A dead stage starts a recovery (engine_pipeline_recover.c): steps pause,
 * each sequence's token list (kept here) is replayed once the stage is back. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "../proto/transport.h"
#include "engine_pipeline_int.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- lists ---- */

static void list_remove(struct ep_req **head, struct ep_req **tail, struct ep_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        *tail = r->prev;
    r->prev = r->next = NULL;
}

static void list_append(struct ep_req **head, struct ep_req **tail, struct ep_req *r)
{
    r->prev = *tail;
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

void ep_req_free(struct ep_req *r)
{
    if (!r)
        return;
    free(r->bias_ids);
    free(r->bias_vals);
    free(r->stop_ids);
    free(r->allowed);
    free(r->cmask);
    if (r->constraint && r->cops && r->cops->free)
        r->cops->free(r->constraint);
    free(r->tokens);
    free(r->pages);
    free(r);
}

void ep_shutdown_check(struct ep_engine *e)
{
    if (!e->shutdown_pending || e->n_waiting + e->n_running > 0)
        return;
    e->shutdown_pending = false;
    uv_timer_stop(&e->grace_timer);
    if (e->shutdown_done)
        e->shutdown_done(e->shutdown_ctx);
}

void ep_req_finish(struct ep_engine *e, struct ep_req *r, enum engine_finish finish, int status,
                   const char *msg)
{
    if (r->finished)
        return;
    if (r->running) {
        list_remove(&e->run_head, &e->run_tail, r);
        e->n_running--;
        kv_pages_free(&e->pages, r->pages, r->n_pages);
        r->n_pages = 0;
        e->free_slots[e->n_free_slots++] = r->slot;
        r->slot = -1;
    } else {
        list_remove(&e->wait_head, &e->wait_tail, r);
        e->n_waiting--;
    }
    r->finished = true;
    r->on_done(r->user, finish, status, msg);
    if (!r->inflight)
        ep_req_free(r);
    ep_shutdown_check(e);
}

/* ---- cancels and admission ---- */

static void sched_cancels(struct ep_engine *e)
{
    struct ep_req *lists[2] = {e->wait_head, e->run_head};
    for (int l = 0; l < 2; l++)
        for (struct ep_req *r = lists[l], *next; r; r = next) {
            next = r->next;
            if (r->cancel)
                ep_req_finish(e, r, ENGINE_FINISH_CANCELED, CS_ECANCELED, "canceled");
        }
}

static void sched_admit(struct ep_engine *e)
{
    while (e->wait_head && e->n_free_slots > 0) {
        struct ep_req *r = e->wait_head;
        int need = sched_pages_for(r->n_prompt + r->max_tokens, e->page_size);
        if (kv_pages_alloc(&e->pages, r->pages, 0, need) != CS_OK)
            break;
        r->n_pages = need;
        r->slot = e->free_slots[--e->n_free_slots];
        list_remove(&e->wait_head, &e->wait_tail, r);
        e->n_waiting--;
        list_append(&e->run_head, &e->run_tail, r);
        e->n_running++;
        r->running = true;
    }
}

/* ---- building and sending a step ---- */

static bool penalties_on(const struct cs_sample_params *sp)
{
    return sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f ||
           (sp->repetition_penalty != 1.0f && sp->repetition_penalty > 0.0f);
}

static float clampf(float v, float lo, float hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* r->cmask for r's next token: the constraint's mask ANDed with the
 * request's own allowed mask; a failing mask allows only the first stop id
 * (the sequence ends). Runs once per sampling step, before the send. */
static void seq_mask_fill(const struct ep_engine *e, struct ep_req *r)
{
    size_t bytes = ((size_t)e->base.n_vocab + 7) / 8;
    int rc = CS_OK;
    if (r->constraint)
        rc = r->cops->mask(r->constraint, r->cmask, e->base.n_vocab);
    else
        memset(r->cmask, 0xff, bytes);
    if (rc != CS_OK) {
        int32_t stop = r->stop_ids ? r->stop_ids[0] : e->stop_default[0];
        LOG_WARN("pipeline", "request %llu: constraint mask failed (%s), ending it",
                 (unsigned long long)r->id, cs_strerror(rc));
        memset(r->cmask, 0, bytes);
        r->cmask[stop >> 3] = (uint8_t)(1u << (stop & 7));
        return;
    }
    if (r->allowed)
        for (size_t i = 0; i < bytes; i++)
            r->cmask[i] &= r->allowed[i];
}

static void seq_fill(const struct ep_engine *e, struct msg_seq *q, struct ep_req *r,
                     const struct sched_entry *en)
{
    const struct cs_sample_params *sp = &r->sp;
    *q = (struct msg_seq){.seq_id = (int64_t)r->id, .slot = r->slot, .n_past = en->first,
                          .n_tokens = en->n, .snapshot_slot = -1,
                          .tokens = r->tokens + en->first, .pages = r->pages,
                          .n_pages = r->n_pages};
    q->flags = (en->sample ? MSG_SEQ_SAMPLE : 0) | (en->first == 0 ? MSG_SEQ_RESET : 0);
    if (!en->sample)
        return;
    struct msg_sample *s = &q->sample;
    s->temperature = sp->temperature > 0 ? sp->temperature : 0;
    s->top_k = sp->top_k > 0 ? sp->top_k : 0;
    s->top_p = clampf(sp->top_p, 0, 1);
    s->min_p = clampf(sp->min_p, 0, 1);
    s->presence_penalty = sp->presence_penalty;
    s->frequency_penalty = sp->frequency_penalty;
    s->repetition_penalty = sp->repetition_penalty > 0 ? sp->repetition_penalty : 1.0f;
    s->seed = sp->seed;
    s->draw = (uint64_t)r->n_gen;
    s->n_logprobs = sp->n_logprobs;
    if (penalties_on(sp)) {
        s->gen_tokens = r->tokens + r->n_prompt;
        s->n_gen_tokens = r->n_gen;
        s->ctx_tokens = r->tokens;
        s->n_ctx_tokens = r->n_ctx;
    }
    s->bias_ids = r->bias_ids;
    s->bias_vals = r->bias_vals;
    s->n_bias = r->sp.n_bias;
    if (r->cmask) {
        seq_mask_fill(e, r);
        s->allowed = r->cmask;
        s->n_allowed = (int32_t)(((size_t)e->base.n_vocab + 7) / 8);
    }
}

static struct ep_step *step_free_entry(struct ep_engine *e)
{
    for (int i = 0; i < e->n_stages; i++)
        if (e->steps[i].id == 0)
            return &e->steps[i];
    return NULL;
}

static void step_fail(struct ep_engine *e, struct ep_step *st, int status, const char *msg);

/* Plan one step over the running sequences not in flight and send it.
 * Returns 1 when sent, 0 when there was nothing to send, -1 when the send
 * failed (the step's requests are failed). */
static int sched_step_send(struct ep_engine *e)
{
    struct ep_step *st = step_free_entry(e);
    if (!st)
        return 0;
    int n_idle = 0;
    for (struct ep_req *r = e->run_head; r; r = r->next)
        if (!r->inflight && !r->cancel) {
            e->idle[n_idle] = r;
            e->sseq[n_idle++] = ep_recover_view(r);
        }
    struct sched_limits lim = {.step_tokens = e->budget, .prefill_chunk = e->chunk};
    int n_ent = sched_plan(e->sseq, n_idle, &lim, e->ent);
    if (n_ent == 0)
        return 0;
    struct msg m;
    e->next_step_id = (e->next_step_id + 1) & 0xffffffffu;
    msg_init(&m, MSG_STEP, ((uint64_t)e->epoch << 32) | e->next_step_id, MSG_SENDER_COORD);
    int n_tok = 0;
    for (int k = 0; k < n_ent; k++) {
        struct ep_req *r = e->idle[e->ent[k].seq];
        bool replay = e->ent[k].first < r->replay_to;
        if (replay)
            e->ent[k].sample = false;   /* replayed positions: no new token */
        seq_fill(e, &e->mseq[k], r, &e->ent[k]);
        n_tok += e->ent[k].n;
        st->reqs[k] = r;
        st->n_tok[k] = e->ent[k].n;
        st->sample[k] = e->ent[k].sample;
        r->inflight = true;
        if (e->ent[k].first < r->n_prompt && !replay)
            e->prompt_tokens_total += (uint64_t)e->ent[k].n;
    }
    m.u.step = (struct msg_step){.edge_slot = -1, .n_tokens = n_tok, .n_seqs = n_ent,
                                 .seqs = e->mseq};
    st->id = m.h.step_id;
    st->n = n_ent;
    st->t_send_us = now_us();
    e->n_inflight++;
    char peer[TRANSPORT_PEER_MAX];
    snprintf(peer, sizeof peer, "w%d", e->workers[0].id);
    struct cs_error err = {0};
    int rc = transport_send(e->router, peer, &m, 1000, &err);
    if (rc) {
        LOG_ERROR("pipeline", "cannot send step %llu to stage 0: %s",
                  (unsigned long long)m.h.step_id, err.msg);
        step_fail(e, st, rc, "cannot send the step to stage 0");
    }
    return rc == CS_OK ? 1 : -1;
}

/* While steps are in flight (and up to spin_ms after the last one came
 * back) the loop polls the router on every turn instead of sleeping in
 * uv_poll: an active idle handle makes uv_run poll its descriptors with a
 * zero timeout. The STEP_DONE is then read without a thread wake-up. */
static void on_spin(uv_idle_t *h)
{
    struct ep_engine *e = h->data;
    ep_drain(e);
    sched_yield();   /* the I/O thread pinned beside the loop runs at once */
    if (e->n_inflight > 0)
        e->spin_seen_us = now_us();
    else if (now_us() - e->spin_seen_us > (int64_t)e->spin_ms * 1000) {
        uv_idle_stop(h);
        e->spinning = false;
    }
}

void ep_tick(struct ep_engine *e)
{
    sched_cancels(e);
    if (e->degraded || e->recovering)
        return;
    sched_admit(e);
    bool sent = false;
    int rc = 1;
    while (rc > 0 && e->n_inflight < e->max_inflight) {
        rc = sched_step_send(e);
        sent = sent || rc != 0;
    }
    if (sent)
        ep_drain(e);   /* a send, even a failed one, may consume the ZMQ_FD edge */
    if (sent && e->spin_ms > 0 && !e->spinning) {
        e->spinning = true;
        uv_idle_start(&e->spin, on_spin);
    }
}

static void on_kick(uv_timer_t *t)
{
    ep_tick(t->data);
}

void ep_kick(struct ep_engine *e)
{
    if (!uv_is_active((uv_handle_t *)&e->kick_timer))
        uv_timer_start(&e->kick_timer, on_kick, 0, 0);
}

/* ---- results ---- */

static struct ep_step *step_find(struct ep_engine *e, uint64_t id)
{
    for (int i = 0; id && i < e->n_stages; i++)
        if (e->steps[i].id == id)
            return &e->steps[i];
    return NULL;
}

/* Take the step's sequences out of flight; free those finished meanwhile. */
static void step_release(struct ep_engine *e, struct ep_step *st)
{
    st->id = 0;
    e->n_inflight--;
    for (int k = 0; k < st->n; k++) {
        struct ep_req *r = st->reqs[k];
        r->inflight = false;
        if (r->finished) {
            ep_req_free(r);
            st->reqs[k] = NULL;
        }
    }
}

static void step_fail(struct ep_engine *e, struct ep_step *st, int status, const char *msg)
{
    int n = st->n;
    step_release(e, st);
    for (int k = 0; k < n; k++)
        if (st->reqs[k])
            ep_req_finish(e, st->reqs[k], ENGINE_FINISH_ERROR, status, msg);
}

static bool is_stop(const struct ep_engine *e, const struct ep_req *r, int32_t tok)
{
    const int32_t *ids = r->stop_ids ? r->stop_ids : e->stop_default;
    int n = r->stop_ids ? r->n_stop : e->n_stop_default;
    for (int i = 0; i < n; i++)
        if (ids[i] == tok)
            return true;
    return false;
}

static void seq_sampled(struct ep_engine *e, struct ep_req *r, const struct cs_sample_result *res)
{
    if (is_stop(e, r, res->token)) {
        ep_req_finish(e, r, ENGINE_FINISH_STOP, CS_OK, NULL);
        return;
    }
    if (r->constraint && r->cops->advance(r->constraint, res->token) != CS_OK)
        LOG_DEBUG("pipeline", "request %llu: token %d breaks its constraint",
                  (unsigned long long)r->id, (int)res->token);
    r->tokens[r->n_ctx++] = res->token;
    r->n_gen++;
    e->gen_tokens_total++;
    if (r->on_token && !r->on_token(r->user, res)) {
        ep_req_finish(e, r, ENGINE_FINISH_STOP, CS_OK, NULL);
        return;
    }
    if (r->n_gen >= r->max_tokens)
        ep_req_finish(e, r, ENGINE_FINISH_LENGTH, CS_OK, NULL);
}

/* Each message's transit, from the stamps of a STEP_DONE whose every stage
 * reported them in order (a restarted stage or another host may not). */
static void step_transit_add(struct ep_timing *t, int64_t sent, int64_t now,
                             const struct msg_step_done *d)
{
    int n = d->n_timings;
    if (n < 1 || n > MSG_MAX_STAGES)
        return;
    uint64_t prev = (uint64_t)sent, msg[MSG_MAX_STAGES + 1], other = 0;
    for (int i = 0; i < n; i++) {
        const struct msg_timing *g = &d->timings[i];
        uint64_t busy = (uint64_t)g->compute_us + g->copy_us;
        if (g->recv_us < prev || g->sent_us < g->recv_us + busy)
            return;
        msg[i] = g->recv_us - prev;
        other += g->sent_us - g->recv_us - busy;
        prev = g->sent_us;
    }
    if ((uint64_t)now < prev)
        return;
    msg[n] = (uint64_t)now - prev;
    for (int i = 0; i <= n; i++)
        t->msg_us[i] += msg[i];
    for (int i = 0; i < n; i++)
        t->stage_compute_us[i] += d->timings[i].compute_us;
    t->stage_other_us += other;
    t->stamped_steps++;
}

/* Where a step's wall time went: from its send to its STEP_DONE, against the
 * time the stages report (compute, edge copies); the rest is messages,
 * wake-ups, and waiting behind other steps in flight (ep_timing_log prints
 * the sums). */
static void step_timing_add(struct ep_engine *e, const struct ep_step *st,
                            const struct msg_step_done *d)
{
    struct ep_timing *t = &e->timing;
    int64_t wall = now_us() - st->t_send_us;
    t->steps++;
    t->wall_us += (uint64_t)(wall > 0 ? wall : 0);
    if ((uint64_t)wall > t->max_wall_us)
        t->max_wall_us = (uint64_t)wall;
    for (int i = 0; i < d->n_timings; i++) {
        t->compute_us += d->timings[i].compute_us;
        t->copy_us += d->timings[i].copy_us;
    }
    step_transit_add(t, st->t_send_us, now_us(), d);
}

void ep_timing_log(const struct ep_engine *e)
{
    const struct ep_timing *t = &e->timing;
    if (t->steps == 0)
        return;
    double n = (double)t->steps, wall = (double)t->wall_us / n / 1e3;
    double comp = (double)t->compute_us / n / 1e3, copy = (double)t->copy_us / n / 1e3;
    LOG_INFO("pipeline", "%llu steps over %d stages: %.3f ms a step from send to STEP_DONE "
             "(max %.3f), stages compute %.3f ms, edge copies %.3f ms, the rest (%d messages, "
             "wake-ups, queueing) %.3f ms", (unsigned long long)t->steps, e->n_stages, wall,
             (double)t->max_wall_us / 1e3, comp, copy, e->n_stages + 1, wall - comp - copy);
    if (t->stamped_steps == 0)
        return;
    char line[512];
    size_t len = 0;
    double ns = (double)t->stamped_steps;
    for (int i = 0; i <= e->n_stages && i <= MSG_MAX_STAGES && len < sizeof line; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, "%s%.3f", i ? " / " : "",
                                (double)t->msg_us[i] / ns / 1e3);
    LOG_INFO("pipeline", "message transit (coordinator -> stage 0 / ... / last stage -> "
             "coordinator, %llu steps): %s ms; stages outside compute and copies %.3f ms a step",
             (unsigned long long)t->stamped_steps, line, (double)t->stage_other_us / ns / 1e3);
    len = 0;
    for (int i = 0; i < e->n_stages && i < MSG_MAX_STAGES && len < sizeof line; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, "%s%.3f", i ? " / " : "",
                                (double)t->stage_compute_us[i] / ns / 1e3);
    LOG_INFO("pipeline", "compute per stage (0 / ... / last): %s ms a step", line);
}

static void on_step_done(struct ep_engine *e, const struct msg *m)
{
    struct ep_step *st = step_find(e, m->h.step_id);
    if (!st) {
        LOG_WARN("pipeline", "STEP_DONE for unknown step %llu: dropped",
                 (unsigned long long)m->h.step_id);
        return;
    }
    const struct msg_step_done *d = &m->u.step_done;
    step_timing_add(e, st, d);
    int n = st->n, j = 0;
    step_release(e, st);
    for (int k = 0; k < n; k++) {
        struct ep_req *r = st->reqs[k];
        if (!r)
            continue;
        r->n_done += st->n_tok[k];
        if (!st->sample[k])
            continue;
        while (j < d->n_samples && d->samples[j].seq_id != (int64_t)r->id)
            j++;
        if (j == d->n_samples) {
            ep_req_finish(e, r, ENGINE_FINISH_ERROR, CS_EPROTO, "the last stage sent no token");
            j = 0;
            continue;
        }
        seq_sampled(e, r, &d->samples[j].result);
    }
    ep_tick(e);
}

static void on_error(struct ep_engine *e, struct ep_worker *w, const struct msg *m)
{
    const struct msg_error *er = &m->u.error;
    LOG_ERROR("pipeline", "stage %d: %s", w->stage, er->message);
    struct ep_step *st = step_find(e, m->h.step_id);
    char text[MSG_MAX_TEXT + 32];
    snprintf(text, sizeof text, "%s", er->message);
    if (st)
        step_fail(e, st, er->code < 0 ? er->code : CS_EINTERNAL, text);
    if (er->fatal) {
        snprintf(text, sizeof text, "stage %d failed: %s", w->stage, er->message);
        if (w->ready) {
            ep_recover_begin(e, w, text);   /* it can no longer serve: restart it */
        } else {
            w->dead = true;                 /* it cannot load: give up */
            ep_degrade(e, text);
        }
    }
    ep_kick(e);
}

struct ep_worker *ep_worker_of_peer(struct ep_engine *e, const char *peer)
{
    int id;
    if (!peer || (peer[0] != 'w' && peer[0] != 'h') || sscanf(peer + 1, "%d", &id) != 1)
        return NULL;
    for (int i = 0; i < e->n_stages; i++)
        if (e->workers[i].id == id)
            return &e->workers[i];
    return NULL;
}

void ep_on_message(struct ep_engine *e, const char *peer, struct msg *m)
{
    struct ep_worker *w = ep_worker_of_peer(e, peer);
    if (!w) {
        LOG_WARN("pipeline", "%s from unknown peer %s: dropped", msg_type_name(m->h.type), peer);
        return;
    }
    w->last_seen_ms = now_ms();
    switch (m->h.type) {
    case MSG_HEARTBEAT: break;
    case MSG_HELLO:
        if (peer[0] == 'w')
            ep_recover_on_hello(e, w, m);
        break;
    case MSG_READY: ep_recover_on_ready(e, w, m); break;
    case MSG_STEP_DONE: on_step_done(e, m); break;
    case MSG_ERROR: on_error(e, w, m); break;
    default:
        LOG_WARN("pipeline", "unexpected %s from stage %d: dropped", msg_type_name(m->h.type),
                 w->stage);
    }
}

static void drain_cb(void *ctx, const char *peer, struct msg *m)
{
    ep_on_message(ctx, peer, m);
}

void ep_drain(struct ep_engine *e)
{
    bool more = true;
    while (more && e->router) {
        more = false;
        if (transport_drain(e->router, 256, drain_cb, e, &more) < 0)
            break;
    }
}

/* ---- liveness ---- */

void ep_degrade(struct ep_engine *e, const char *why)
{
    if (!e->degraded) {
        e->degraded = true;
        snprintf(e->state, sizeof e->state, "degraded: %s", why);
        LOG_ERROR("pipeline", "%s: failing every request", e->state);
    }
    for (int i = 0; i < e->n_stages; i++)
        if (e->steps[i].id)
            step_fail(e, &e->steps[i], CS_EIO, e->state);
    while (e->run_head)
        ep_req_finish(e, e->run_head, ENGINE_FINISH_ERROR, CS_EIO, e->state);
    while (e->wait_head)
        ep_req_finish(e, e->wait_head, ENGINE_FINISH_ERROR, CS_EIO, e->state);
}

static void check_worker(struct ep_engine *e, struct ep_worker *w, int64_t now)
{
    char why[160], st[64];
    int status;
    if (w->pid > 0 && sup_reaped(w->pid, &status)) {
        sup_status_text(st, sizeof st, status);
        snprintf(why, sizeof why, "stage %d down (pid %d %s)", w->stage, (int)w->pid, st);
        w->pid = 0;
    } else if ((w->ready || w->pid > 0) && now - w->last_seen_ms > e->cfg.dead_after_ms) {
        snprintf(why, sizeof why, "stage %d down (pid %d, no heartbeat for %lld ms)", w->stage,
                 (int)w->pid, (long long)(now - w->last_seen_ms));
    } else {
        return;
    }
    ep_recover_begin(e, w, why);
}

void ep_on_heartbeat(uv_timer_t *t)
{
    struct ep_engine *e = t->data;
    int64_t now = now_ms();
    for (int i = 0; i < e->n_stages; i++) {
        struct ep_worker *w = &e->workers[i];
        if (e->degraded)
            break;
        check_worker(e, w, now);
        struct msg m;
        msg_init(&m, MSG_HEARTBEAT, 0, MSG_SENDER_COORD);
        m.u.heartbeat = (struct msg_heartbeat){.seq = ++e->hb_seq, .time_us = (uint64_t)now * 1000u,
                                               .state = MSG_STATE_READY};
        char peer[TRANSPORT_PEER_MAX];
        snprintf(peer, sizeof peer, "w%d", w->id);
        transport_send(e->router, peer, &m, 0, NULL);
    }
    ep_drain(e);
}
