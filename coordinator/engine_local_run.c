/* engine_local_run.c - the background thread of the in-process engine: it
 * applies cancels and stops, admits waiting requests by free slots and KV
 * pages (oldest first), plans each step with scheduler.h, runs it through
 * model_forward, and posts token and done events for the loop thread.
 *
 * A step's failure fails only the requests of that step (ENGINE_FINISH_ERROR
 * with the message); the thread and the other sequences go on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "engine_local_int.h"

#define EL_RATE_WINDOW_S 1.0

static double el_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void el_req_free(struct el_req *r)
{
    if (!r)
        return;
    free(r->bias_ids);
    free(r->bias_vals);
    free(r->allowed);
    if (r->constraint && r->cops && r->cops->free)
        r->cops->free(r->constraint);
    free(r->cmask);
    free(r->stop_ids);
    free(r->tokens);
    free(r->pages);
    free(r);
}

/* ---- events (mu held) ---- */

/* Append an event, waiting for the loop to drain a full queue; drops it when
 * the engine is being destroyed (nobody would deliver it). */
static void el_post_locked(struct el_engine *e, const struct el_event *ev)
{
    while (e->n_ev == e->cap_ev && !e->quit) {
        uv_async_send(&e->async);
        pthread_cond_wait(&e->cv, &e->mu);
    }
    if (e->quit) {
        free(ev->msg);
        return;
    }
    e->ev[e->n_ev++] = *ev;
    uv_async_send(&e->async);
}

/* Post the done event of r (its last touch by the engine thread). */
static void el_post_done_locked(struct el_engine *e, struct el_req *r, enum engine_finish finish,
                                int status, const char *msg)
{
    struct el_event ev = {.req = r, .done = true, .finish = finish, .status = status};
    if (msg)
        ev.msg = strdup(msg);
    el_post_locked(e, &ev);
}

/* ---- running sequences ---- */

/* Return r's slot and pages and take it off the running list (mu held). */
static void el_seq_release_locked(struct el_engine *e, struct el_req *r)
{
    kv_pages_free(&e->pages, r->pages, r->n_pages);
    r->n_pages = 0;
    e->free_slots[e->n_free_slots++] = r->slot;
    r->slot = -1;
    for (int i = 0; i < e->n_running; i++) {
        if (e->running[i] != r)
            continue;
        memmove(&e->running[i], &e->running[i + 1],
                sizeof e->running[0] * (size_t)(e->n_running - i - 1));
        e->n_running--;
        break;
    }
    e->n_running_pub = e->n_running;
}

static void el_seq_finish(struct el_engine *e, struct el_req *r, enum engine_finish finish,
                          int status, const char *msg)
{
    pthread_mutex_lock(&e->mu);
    el_seq_release_locked(e, r);
    el_post_done_locked(e, r, finish, status, msg);
    pthread_mutex_unlock(&e->mu);
}

/* ---- flags and admission (mu held) ---- */

static void el_waiting_cancel_locked(struct el_engine *e)
{
    struct el_req **pp = &e->wait_head, *prev = NULL;
    while (*pp) {
        struct el_req *r = *pp;
        if (!r->cancel && !r->stop && !e->cancel_all) {
            prev = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (e->wait_tail == r)
            e->wait_tail = prev;
        e->n_waiting--;
        el_post_done_locked(e, r, r->cancel || e->cancel_all ? ENGINE_FINISH_CANCELED
                                                             : ENGINE_FINISH_STOP,
                            r->cancel || e->cancel_all ? CS_ECANCELED : CS_OK,
                            r->cancel || e->cancel_all ? "canceled" : NULL);
    }
}

static void el_running_flags_locked(struct el_engine *e)
{
    for (int i = 0; i < e->n_running;) {
        struct el_req *r = e->running[i];
        if (r->cancel || e->cancel_all) {
            el_seq_release_locked(e, r);
            el_post_done_locked(e, r, ENGINE_FINISH_CANCELED, CS_ECANCELED, "canceled");
        } else if (r->stop) {
            el_seq_release_locked(e, r);
            el_post_done_locked(e, r, ENGINE_FINISH_STOP, CS_OK, NULL);
        } else {
            i++;
        }
    }
}

/* Admit waiting requests in order while a slot and their pages are free. */
static void el_admit_locked(struct el_engine *e)
{
    while (e->wait_head && e->n_free_slots > 0) {
        struct el_req *r = e->wait_head;
        int need = sched_pages_for(r->n_prompt + r->max_tokens, e->page_size);
        if (kv_pages_alloc(&e->pages, r->pages, 0, need) != CS_OK)
            break;
        r->n_pages = need;
        r->slot = e->free_slots[--e->n_free_slots];
        int rc = state_slot_reset(e->st, r->slot);
        e->wait_head = r->next;
        if (!e->wait_head)
            e->wait_tail = NULL;
        r->next = NULL;
        e->n_waiting--;
        e->running[e->n_running++] = r;
        e->n_running_pub = e->n_running;
        if (rc) {
            el_seq_release_locked(e, r);
            el_post_done_locked(e, r, ENGINE_FINISH_ERROR, rc, "cannot reset a state slot");
        }
    }
}

/* ---- one step ---- */

static bool el_is_stop(const struct el_engine *e, const struct el_req *r, int32_t tok)
{
    const int32_t *ids = r->stop_ids ? r->stop_ids : e->stop_default;
    int n = r->stop_ids ? r->n_stop : e->n_stop_default;
    for (int i = 0; i < n; i++)
        if (ids[i] == tok)
            return true;
    return false;
}

/* The constraint's mask for r's next token into r->cmask (ANDed with the
 * request's own mask); on failure only the first stop id. */
static const uint8_t *el_constraint_mask(struct el_engine *e, struct el_req *r)
{
    int n_vocab = e->base.n_vocab;
    size_t bytes = ((size_t)n_vocab + 7) / 8;
    int rc = r->cops->mask(r->constraint, r->cmask, n_vocab);
    if (rc != CS_OK) {
        int32_t stop = r->stop_ids ? r->stop_ids[0] : e->stop_default[0];
        LOG_WARN("engine", "request %llu: constraint mask failed (%s), ending it",
                 (unsigned long long)r->id, cs_strerror(rc));
        memset(r->cmask, 0, bytes);
        r->cmask[stop >> 3] = (uint8_t)(1u << (stop & 7));
        return r->cmask;
    }
    if (r->allowed)
        for (size_t i = 0; i < bytes; i++)
            r->cmask[i] &= r->allowed[i];
    return r->cmask;
}

/* Add entry k of the plan to the batch at token offset t; returns the new offset. */
static int el_batch_add(struct el_engine *e, int k, int t)
{
    struct el_step_buf *sb = &e->sb;
    const struct sched_entry *en = &sb->ent[k];
    struct el_req *r = sb->reqs[en->seq];
    sb->seq_start[k] = t;
    sb->slot[k] = r->slot;
    int32_t *row = sb->page_table + (size_t)k * (size_t)e->max_pages;
    memcpy(row, r->pages, sizeof *row * (size_t)r->n_pages);
    for (int p = r->n_pages; p < e->max_pages; p++)
        row[p] = 0;
    for (int i = 0; i < en->n; i++, t++) {
        sb->tokens[t] = r->tokens[en->first + i];
        sb->pos[t] = en->first + i;
        sb->seq_of[t] = k;
    }
    sb->sample[k] = en->sample;
    struct cs_sample_params *sp = &sb->params[k];
    *sp = r->sp;
    sp->draw = (uint64_t)r->n_gen;
    sp->gen_tokens = r->tokens + r->n_prompt;
    sp->n_gen_tokens = r->n_gen;
    sp->ctx_tokens = r->tokens;
    sp->n_ctx_tokens = r->n_ctx;
    if (en->sample && r->constraint)
        sp->allowed = el_constraint_mask(e, r);
    return t;
}

/* Handle the token sampled for r: script, stop ids, max_tokens. */
static void el_seq_sampled(struct el_engine *e, struct el_req *r, struct cs_sample_result *res)
{
    if (r->script) {
        if (r->n_gen >= r->n_script) {
            el_seq_finish(e, r, ENGINE_FINISH_STOP, CS_OK, NULL);
            return;
        }
        res->token = r->script[r->n_gen];
    }
    if (el_is_stop(e, r, res->token)) {
        el_seq_finish(e, r, ENGINE_FINISH_STOP, CS_OK, NULL);
        return;
    }
    if (r->constraint && r->cops->advance(r->constraint, res->token) != CS_OK)
        LOG_DEBUG("engine", "request %llu: token %d breaks its constraint",
                  (unsigned long long)r->id, (int)res->token);
    r->tokens[r->n_ctx++] = res->token;
    r->n_gen++;
    bool last = r->n_gen >= r->max_tokens;
    pthread_mutex_lock(&e->mu);
    e->gen_tokens_total++;
    struct el_event ev = {.req = r, .done = false, .tok = *res};
    el_post_locked(e, &ev);
    if (last) {
        el_seq_release_locked(e, r);
        el_post_done_locked(e, r, ENGINE_FINISH_LENGTH, CS_OK, NULL);
    }
    pthread_mutex_unlock(&e->mu);
}

static void el_rates_update(struct el_engine *e, int n_prefill, int n_decode, double dt)
{
    pthread_mutex_lock(&e->mu);
    e->prompt_tokens_total += (uint64_t)n_prefill;
    e->win_prefill += n_prefill;
    e->win_decode += n_decode;
    e->win_time += dt;
    if (e->win_time >= EL_RATE_WINDOW_S) {
        e->prefill_tok_s = e->win_prefill / e->win_time;
        e->decode_tok_s = e->win_decode / e->win_time;
        e->win_prefill = e->win_decode = e->win_time = 0;
    }
    pthread_mutex_unlock(&e->mu);
}

static void el_step_fail(struct el_engine *e, int n_ent, int rc)
{
    char msg[160];
    snprintf(msg, sizeof msg, "forward pass failed: %s", cs_strerror(rc));
    LOG_ERROR("engine", "%s (%d sequences fail)", msg, n_ent);
    for (int k = 0; k < n_ent; k++)
        el_seq_finish(e, e->sb.reqs[e->sb.ent[k].seq], ENGINE_FINISH_ERROR, rc, msg);
}

/* Plan and run one step over the running sequences. */
static void el_step(struct el_engine *e)
{
    struct el_step_buf *sb = &e->sb;
    int n_seq = e->n_running;
    for (int i = 0; i < n_seq; i++) {
        struct el_req *r = e->running[i];
        sb->reqs[i] = r;
        sb->sseq[i] = (struct sched_seq){.n_prompt = r->n_prompt, .n_ctx = r->n_ctx,
                                         .n_done = r->n_done};
    }
    struct sched_limits lim = {.step_tokens = e->budget, .prefill_chunk = e->chunk};
    int n_ent = sched_plan(sb->sseq, n_seq, &lim, sb->ent);
    if (n_ent == 0)
        return;
    int t = 0, n_prefill = 0, n_decode = 0;
    for (int k = 0; k < n_ent; k++) {
        t = el_batch_add(e, k, t);
        struct el_req *r = sb->reqs[sb->ent[k].seq];
        if (sb->ent[k].first < r->n_prompt)
            n_prefill += sb->ent[k].n;
        else
            n_decode += sb->ent[k].n;
    }
    sb->seq_start[n_ent] = t;
    struct cs_batch b = {.n_tokens = t, .n_seqs = n_ent, .tokens = sb->tokens, .pos = sb->pos,
                         .seq_of = sb->seq_of, .seq_start = sb->seq_start, .slot = sb->slot,
                         .page_table = sb->page_table, .max_pages = e->max_pages};
    double t0 = el_now_s();
    int rc = model_forward(e->m, e->st, &b, NULL, NULL, sb->sample, sb->params, sb->results);
    el_rates_update(e, rc ? 0 : n_prefill, rc ? 0 : n_decode, el_now_s() - t0);
    if (rc) {
        el_step_fail(e, n_ent, rc);
        return;
    }
    for (int k = 0; k < n_ent; k++) {
        struct el_req *r = sb->reqs[sb->ent[k].seq];
        r->n_done += sb->ent[k].n;
        if (sb->ent[k].sample)
            el_seq_sampled(e, r, &sb->results[k]);
    }
}

void *el_thread_main(void *arg)
{
    struct el_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->quit) {
        el_waiting_cancel_locked(e);
        el_running_flags_locked(e);
        el_admit_locked(e);
        if (e->n_running == 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        el_step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}
