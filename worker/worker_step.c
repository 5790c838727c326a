/* worker_step.c - one step on one stage (worker.h): read the incoming edge
 * slot (stage > 0), run the slice, then either write the outgoing edge slot
 * and forward the step descriptor downstream, or (last stage) answer
 * STEP_DONE with the sampled tokens and every stage's timing. A sampled
 * sequence's allowed-token mask (constrained decoding) is checked against
 * the vocabulary and handed to the sampler as cs_sample_params.allowed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "../proto/transport.h"
#include "worker.h"

#define EDGE_ACQUIRE_WAIT_US 30000000L   /* a downstream stage holding every slot for 30 s is stuck */

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void worker_error_send(struct worker *w, uint64_t step_id, int code, bool fatal, const char *text)
{
    if (!w->ctl)
        return;
    struct msg m;
    msg_init(&m, MSG_ERROR, step_id, w->stage >= 0 ? w->stage : w->o.id);
    m.u.error.code = code < 0 ? code : CS_EINTERNAL;
    m.u.error.fatal = fatal;
    char buf[MSG_MAX_TEXT];
    snprintf(buf, sizeof buf, "%s", text && *text ? text : cs_strerror(code));
    m.u.error.message = buf;
    struct cs_error err = {0};
    if (transport_send(w->ctl, NULL, &m, 1000, &err) != CS_OK)
        LOG_ERROR("worker", "cannot report an error to the coordinator: %s", err.msg);
}

/* The incoming hidden states of a step (stage > 0): the slot itself (fp32
 * edges, read by the step's asynchronous upload) or w->host after a
 * conversion (fp16). The slot is released after the step (edge_in_done). */
static int edge_in_take(struct worker *w, const struct msg *m, const float **in,
                        struct cs_error *err)
{
    const struct msg_step *s = &m->u.step;
    const void *src = NULL;
    int n = 0;
    int rc = edge_peek(w->ein, s->edge_slot, m->h.step_id, &src, &n, err);
    if (rc)
        return rc;
    if (n != s->n_tokens)
        rc = cs_error_set(err, CS_EPROTO, "edge slot %d holds %d tokens, the step has %d",
                          s->edge_slot, n, s->n_tokens);
    if (!rc && edge_config_get(w->ein)->dtype == CS_DTYPE_F16) {
        rc = edge_read(w->ein, s->edge_slot, m->h.step_id, w->host, &n, err);
        src = w->host;
    }
    if (rc)
        edge_release(w->ein, s->edge_slot);
    *in = rc ? NULL : src;
    return rc;
}

/* Give the incoming slot back, only while it still holds this step: after
 * a recovery upstream may have reset its edge and refilled the slot. */
static void edge_in_done(struct worker *w, const struct msg *m)
{
    const void *data;
    int n;
    if (edge_peek(w->ein, m->u.step.edge_slot, m->h.step_id, &data, &n, NULL) == CS_OK)
        edge_release(w->ein, m->u.step.edge_slot);
}

/* Take the next outgoing slot, waiting while downstream still holds it. */
static int step_slot_acquire(struct worker *w, int *slot, struct cs_error *err)
{
    uint64_t t0 = now_us();
    for (;;) {
        int rc = edge_slot_acquire(w->eout, slot);
        if (rc != CS_EAGAIN)
            return rc ? cs_error_set(err, rc, "edge: cannot take a slot") : CS_OK;
        if (now_us() - t0 > (uint64_t)EDGE_ACQUIRE_WAIT_US)
            return cs_error_set(err, CS_ETIMEOUT, "the next stage has held every edge slot for "
                                "%ld s", EDGE_ACQUIRE_WAIT_US / 1000000L);
        usleep(50);
    }
}

/* Middle stage, after the step's fence: the outgoing slot (downloaded into
 * in place for fp32, converted from w->host for fp16) is published and the
 * step goes downstream with edge_slot set and this stage's timing. */
static int step_forward(struct worker *w, struct msg *m, int slot, const struct msg_timing *mine,
                        struct cs_error *err)
{
    struct msg_step *s = &m->u.step;
    bool f16 = edge_config_get(w->eout)->dtype == CS_DTYPE_F16;
    uint64_t t0 = now_us();
    int rc = f16 ? edge_write(w->eout, slot, m->h.step_id, w->host, s->n_tokens)
                 : edge_publish(w->eout, slot, m->h.step_id, s->n_tokens);
    if (rc) {
        edge_slot_abort(w->eout, slot);
        return cs_error_set(err, rc, "edge: cannot publish slot %d", slot);
    }
    struct msg_timing tim[MSG_MAX_STAGES];
    int nt = s->n_timings < MSG_MAX_STAGES - 1 ? s->n_timings : MSG_MAX_STAGES - 1;
    memcpy(tim, s->timings, sizeof tim[0] * (size_t)nt);
    tim[nt] = *mine;
    tim[nt].copy_us += (uint32_t)(now_us() - t0);
    tim[nt++].sent_us = now_us();
    struct msg_timing *saved_t = s->timings;
    int saved_n = s->n_timings, saved_slot = s->edge_slot;
    int32_t saved_sender = m->h.sender;
    s->timings = tim;
    s->n_timings = nt;
    s->edge_slot = slot;
    m->h.sender = w->stage;
    rc = transport_send(w->push, NULL, m, -1, err);
    s->timings = saved_t;
    s->n_timings = saved_n;
    s->edge_slot = saved_slot;
    m->h.sender = saved_sender;
    return rc;
}

/* Last stage: the sampled tokens and the timings to the coordinator. */
static int step_done_send(struct worker *w, const struct msg *m, const struct msg_timing *mine,
                          struct cs_error *err)
{
    const struct msg_step *s = &m->u.step;
    struct msg d;
    msg_init(&d, MSG_STEP_DONE, m->h.step_id, w->stage);
    struct msg_sampled *smp = calloc((size_t)s->n_seqs, sizeof *smp);
    struct msg_timing tim[MSG_MAX_STAGES];
    if (!smp)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    int n = 0;
    for (int k = 0; k < s->n_seqs; k++)
        if (s->seqs[k].flags & MSG_SEQ_SAMPLE)
            smp[n++] = (struct msg_sampled){.seq_id = s->seqs[k].seq_id, .result = w->results[k]};
    int nt = s->n_timings < MSG_MAX_STAGES - 1 ? s->n_timings : MSG_MAX_STAGES - 1;
    memcpy(tim, s->timings, sizeof tim[0] * (size_t)nt);
    tim[nt] = *mine;
    tim[nt++].sent_us = now_us();
    d.u.step_done = (struct msg_step_done){.n_samples = n, .samples = smp, .n_timings = nt,
                                           .timings = tim};
    int rc = transport_send(w->ctl, NULL, &d, -1, err);
    free(smp);
    return rc;
}

/* Reset (new sequence) before, snapshot after. */
static int step_slots_reset(struct worker *w, const struct msg_step *s, struct cs_error *err)
{
    for (int k = 0; k < s->n_seqs; k++)
        if (s->seqs[k].flags & MSG_SEQ_RESET) {
            int rc = state_slot_reset(w->st, s->seqs[k].slot);
            if (rc)
                return cs_error_set(err, rc, "cannot reset state slot %d", s->seqs[k].slot);
        }
    return CS_OK;
}

static int step_snapshots(struct worker *w, const struct msg_step *s, struct cs_error *err)
{
    for (int k = 0; k < s->n_seqs; k++)
        if (s->seqs[k].flags & MSG_SEQ_SNAPSHOT) {
            int rc = state_slot_copy(w->st, s->seqs[k].snapshot_slot, s->seqs[k].slot);
            if (rc)
                return cs_error_set(err, rc, "cannot snapshot slot %d", s->seqs[k].slot);
        }
    return CS_OK;
}

/* Allowed-token masks (constrained decoding) must cover exactly this
 * model's vocabulary: ceil(n_vocab / 8) bytes, or be absent. */
static int step_masks_check(const struct worker *w, const struct msg_step *s, struct cs_error *err)
{
    int32_t want = (w->m.hp.n_vocab + 7) / 8;
    for (int k = 0; k < s->n_seqs; k++) {
        const struct msg_seq *q = &s->seqs[k];
        if ((q->flags & MSG_SEQ_SAMPLE) && q->sample.n_allowed != 0 && q->sample.n_allowed != want)
            return cs_error_set(err, CS_EPROTO, "seq %d: allowed mask of %d bytes, the vocabulary "
                                "of %d ids needs %d", k, q->sample.n_allowed, w->m.hp.n_vocab, want);
    }
    return CS_OK;
}

/* One step: the incoming slot and the outgoing slot are handed to the
 * forward pass as host memory, so the upload, the layers and the download
 * run as one queue with one fence at its end (the host-side fence before
 * the notify); then publish and forward, or answer STEP_DONE. compute_us
 * covers that queue (the copies included); copy_us the host-side edge work
 * (slot waits, fp16 conversions, publish). */
static int step_execute(struct worker *w, struct msg *m, struct cs_error *err)
{
    const struct msg_step *s = &m->u.step;
    bool first = w->stage == 0, last = w->stage == w->n_stages - 1;
    if (s->n_tokens > w->max_tokens)
        return cs_error_set(err, CS_ERANGE, "step of %d tokens, this stage holds %d", s->n_tokens,
                            w->max_tokens);
    if (first != (s->edge_slot < 0))
        return cs_error_set(err, CS_EPROTO, "edge_slot %d on stage %d", s->edge_slot, w->stage);
    struct msg_batch mb;
    int rc = step_masks_check(w, s, err);
    if (rc || (rc = msg_step_to_batch(&mb, s, w->page_size, err)))
        return rc;
    uint64_t t0 = now_us();
    struct model_io io = {.in_host = true, .out_host = true};
    int out_slot = -1;
    if (!first && (rc = edge_in_take(w, m, &io.in, err))) {
        msg_batch_free(&mb);
        return rc;
    }
    if (!last && (rc = step_slot_acquire(w, &out_slot, err)) == CS_OK)
        io.out = edge_config_get(w->eout)->dtype == CS_DTYPE_F16
                     ? w->host : (float *)edge_slot_data(w->eout, out_slot);
    uint64_t t1 = now_us();
    if (!rc)
        rc = step_slots_reset(w, s, err);
    if (!rc) {
        rc = model_forward_io(&w->m, w->st, &mb.batch, &io, mb.sample, mb.params, w->results);
        if (rc)
            cs_error_set(err, rc, "forward pass failed: %s", cs_strerror(rc));
    }
    if (!rc)
        rc = step_snapshots(w, s, err);
    uint64_t t2 = now_us();
    msg_batch_free(&mb);
    if (!first)
        edge_in_done(w, m);   /* the fence above: the upload has read it */
    if (rc) {
        if (out_slot >= 0)
            edge_slot_abort(w->eout, out_slot);
        return rc;
    }
    struct msg_timing mine = {.stage = w->stage, .compute_us = (uint32_t)(t2 - t1),
                              .copy_us = (uint32_t)(t1 - t0), .recv_us = w->wake_us};
    return last ? step_done_send(w, m, &mine, err) : step_forward(w, m, out_slot, &mine, err);
}

/* A step of an older epoch: give its incoming slot back (only when it still
 * holds this step) and drop it. A newer epoch: adopt it, resetting the
 * outgoing edge, whose slots can only hold stale steps. False: drop. */
static bool step_epoch_check(struct worker *w, const struct msg *m)
{
    uint32_t ep = worker_step_epoch(m->h.step_id);
    if (ep < w->epoch) {
        const void *data;
        int n;
        if (w->ein && m->u.step.edge_slot >= 0 &&
            edge_peek(w->ein, m->u.step.edge_slot, m->h.step_id, &data, &n, NULL) == CS_OK)
            edge_release(w->ein, m->u.step.edge_slot);
        LOG_DEBUG("worker", "stale step %llx (epoch %u < %u): dropped",
                  (unsigned long long)m->h.step_id, ep, w->epoch);
        return false;
    }
    if (ep > w->epoch) {
        LOG_INFO("worker", "stage %d: epoch %u -> %u", w->stage, w->epoch, ep);
        w->epoch = ep;
        if (w->eout)
            edge_reset(w->eout);
    }
    return true;
}

int worker_step_run(struct worker *w, struct msg *m)
{
    struct cs_error err = {0};
    w->step_seen_us = w->wake_us;
    if (!step_epoch_check(w, m))
        return CS_OK;
    pthread_mutex_lock(&w->hb_mu);
    w->hb_state = MSG_STATE_BUSY;
    pthread_mutex_unlock(&w->hb_mu);
    int rc = step_execute(w, m, &err);
    w->step_seen_us = now_us();
    pthread_mutex_lock(&w->hb_mu);
    w->hb_state = MSG_STATE_READY;
    pthread_mutex_unlock(&w->hb_mu);
    if (rc == CS_OK)
        return CS_OK;
    char text[600];
    snprintf(text, sizeof text, "stage %d, step %llu: %s", w->stage,
             (unsigned long long)m->h.step_id, err.msg[0] ? err.msg : cs_strerror(rc));
    LOG_ERROR("worker", "%s", text);
    worker_error_send(w, m->h.step_id, rc, false, text);
    return CS_OK;
}
