/* fake_engine.c - a test double of coordinator/engine.h: no model, tokens
 * made up on a libuv timer, so the API server can be driven end to end on
 * any machine in milliseconds.
 *
 * Each tick every running sequence produces one token: the next token of
 * its script (config test_script, coordinator/script.h: the k-th submitted
 * request gets script k mod N; an exhausted script or a scripted stop id
 * ends it with ENGINE_FINISH_STOP), else a pseudo-random ordinary token that
 * depends only on (prompt, position, seed when temperature > 0), so seeded
 * and greedy requests are reproducible. A logit_bias >= 50 forces its token.
 * Slots (max_seqs) and the queue (queue_size) behave like the real engine's:
 * CS_EFULL when the queue is full, CS_ERANGE when prompt + max_tokens exceeds
 * ctx_size; a canceled sequence leaves its slot at once and gets its done
 * callback (CS_ECANCELED) on the next tick. */
#include "fake_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/script.h"
#include "kernels/sampler.h"

struct fake_seq {
    struct fake_seq *next;
    uint64_t id, k;
    int32_t *prompt;
    int n_prompt, max_tokens, n_gen;
    int32_t stop_ids[8];
    int n_stop;
    float temperature;
    uint64_t seed, prompt_hash;
    int n_logprobs;
    int32_t forced;           /* logit_bias >= 50, or -1 */
    bool running, canceled;
    bool (*on_token)(void *user, const struct cs_sample_result *tok);
    void (*on_done)(void *user, enum engine_finish finish, int status, const char *message);
    void *user;
    const struct engine_constraint_ops *cops; /* owned constraint (not applied), freed */
    void *constraint;
};

struct fake_engine {
    struct engine base;
    uv_loop_t *loop;
    uv_timer_t tick;
    int tick_ms, max_running, queue_size, n_running, n_queued;
    struct fake_seq *seqs;    /* submit order */
    uint64_t next_id, n_accepted, gen_total, prompt_total;
    struct engine_script *script;
    int32_t token_lo, token_hi;
};

static uint64_t mix(uint64_t a, uint64_t b) { return sampler_splitmix64(a ^ sampler_splitmix64(b)); }

static void seq_unlink_free(struct fake_engine *f, struct fake_seq *s)
{
    for (struct fake_seq **p = &f->seqs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    if (s->constraint && s->cops && s->cops->free)
        s->cops->free(s->constraint);
    free(s->prompt);
    free(s);
}

static void seq_finish(struct fake_engine *f, struct fake_seq *s, enum engine_finish fin, int st,
                       const char *msg)
{
    if (s->running && !s->canceled)
        f->n_running--;
    else if (!s->running && !s->canceled)
        f->n_queued--;
    void (*cb)(void *, enum engine_finish, int, const char *) = s->on_done;
    void *user = s->user;
    seq_unlink_free(f, s);
    cb(user, fin, st, msg);
}

static bool is_stop(const struct fake_seq *s, int32_t t)
{
    for (int i = 0; i < s->n_stop; i++)
        if (s->stop_ids[i] == t)
            return true;
    return false;
}

/* One token for s; returns false when s finished (freed). */
static bool seq_step(struct fake_engine *f, struct fake_seq *s)
{
    int32_t tok;
    if (f->script) {
        int n = 0;
        const int32_t *ids = script_for(f->script, s->k, &n);
        if (s->n_gen >= n || is_stop(s, ids[s->n_gen])) {
            seq_finish(f, s, ENGINE_FINISH_STOP, CS_OK, NULL);
            return false;
        }
        tok = ids[s->n_gen];
    } else {
        uint64_t h = mix(s->prompt_hash, (uint64_t)s->n_gen);
        if (s->temperature > 0)
            h = mix(h, s->seed);
        tok = s->forced >= 0 ? s->forced
                             : f->token_lo + (int32_t)(h % (uint64_t)(f->token_hi - f->token_lo));
    }
    if (s->n_gen >= s->max_tokens) {
        seq_finish(f, s, ENGINE_FINISH_LENGTH, CS_OK, NULL);
        return false;
    }
    struct cs_sample_result r = {.token = tok, .logprob = -0.25f - (float)(tok % 97) / 100.0f};
    int n_top = s->n_logprobs > CS_MAX_TOP_LOGPROBS ? CS_MAX_TOP_LOGPROBS : s->n_logprobs;
    for (int i = 0; i < n_top; i++) {
        r.top_ids[i] = i == 0 ? tok : f->token_lo + (tok + i * 7) % (f->token_hi - f->token_lo);
        r.top_logprobs[i] = r.logprob - 0.5f * (float)i;
    }
    r.n_top = n_top > 0 ? n_top : 0;
    s->n_gen++;
    f->gen_total++;
    if (!s->on_token(s->user, &r)) {
        if (!s->canceled)
            seq_finish(f, s, ENGINE_FINISH_STOP, CS_OK, NULL);
        return false;
    }
    return true;
}

static void tick_cb(uv_timer_t *t)
{
    struct fake_engine *f = t->data;
    /* canceled ones first, then admission, then one token each */
    for (struct fake_seq *s = f->seqs, *nx; s; s = nx) {
        nx = s->next;
        if (s->canceled)
            seq_finish(f, s, ENGINE_FINISH_CANCELED, CS_ECANCELED, "canceled");
    }
    for (struct fake_seq *s = f->seqs; s && f->n_running < f->max_running; s = s->next)
        if (!s->running) {
            s->running = true;
            f->n_running++;
            f->n_queued--;
        }
    uint64_t last = f->next_id;
    for (struct fake_seq *s = f->seqs, *nx; s; s = nx) {
        nx = s->next;
        if (s->running && !s->canceled && s->id < last)
            seq_step(f, s);
        /* seq_step may free s and, through callbacks, cancel others: nx stays valid
         * because cancellation only marks and new submits append */
    }
    if (!f->seqs)
        uv_timer_stop(&f->tick);
}

static int fake_submit(struct engine *e, const struct engine_request *r, uint64_t *id,
                       struct cs_error *err)
{
    struct fake_engine *f = (struct fake_engine *)e;
    if (r->n_prompt < 1 || r->max_tokens < 1)
        return cs_error_set(err, CS_EINVAL, "empty prompt or max_tokens < 1");
    if ((long)r->n_prompt + r->max_tokens > e->ctx_size)
        return cs_error_set(err, CS_ERANGE,
                            "prompt of %d tokens plus max_tokens %d exceeds the context of %d",
                            r->n_prompt, r->max_tokens, e->ctx_size);
    if (f->n_queued >= f->queue_size)
        return cs_error_set(err, CS_EFULL, "queue full (%d)", f->queue_size);
    struct fake_seq *s = calloc(1, sizeof *s);
    if (!s || !(s->prompt = malloc((size_t)r->n_prompt * sizeof *s->prompt))) {
        free(s);
        return CS_ENOMEM;
    }
    memcpy(s->prompt, r->prompt, (size_t)r->n_prompt * sizeof *s->prompt);
    s->n_prompt = r->n_prompt;
    s->prompt_hash = 0x1234;
    for (int i = 0; i < r->n_prompt; i++)
        s->prompt_hash = mix(s->prompt_hash, (uint64_t)r->prompt[i]);
    s->max_tokens = r->max_tokens;
    s->n_stop = r->n_stop_ids < 8 ? r->n_stop_ids : 8;
    memcpy(s->stop_ids, r->stop_ids, (size_t)s->n_stop * sizeof *s->stop_ids);
    s->temperature = r->sample.temperature;
    s->seed = r->sample.seed;
    s->n_logprobs = r->sample.n_logprobs;
    s->forced = -1;
    for (int i = 0; i < r->sample.n_bias; i++)
        if (r->sample.bias_vals[i] >= 50)
            s->forced = r->sample.bias_ids[i];
    s->on_token = r->on_token;
    s->on_done = r->on_done;
    s->user = r->user;
    s->cops = r->constraint_ops;
    s->constraint = r->constraint;
    s->id = f->next_id++;
    s->k = f->n_accepted++;
    struct fake_seq **p = &f->seqs;
    while (*p)
        p = &(*p)->next;
    *p = s;
    f->n_queued++;
    f->prompt_total += (uint64_t)r->n_prompt;
    *id = s->id;
    if (!uv_is_active((uv_handle_t *)&f->tick))
        uv_timer_start(&f->tick, tick_cb, (uint64_t)f->tick_ms, (uint64_t)f->tick_ms);
    return CS_OK;
}

static int fake_cancel(struct engine *e, uint64_t id)
{
    struct fake_engine *f = (struct fake_engine *)e;
    for (struct fake_seq *s = f->seqs; s; s = s->next)
        if (s->id == id && !s->canceled) {
            if (s->running)
                f->n_running--;
            else
                f->n_queued--;
            s->canceled = true;
            if (!uv_is_active((uv_handle_t *)&f->tick))
                uv_timer_start(&f->tick, tick_cb, 0, (uint64_t)f->tick_ms);
            return CS_OK;
        }
    return CS_ENOTFOUND;
}

static void fake_stats(struct engine *e, struct engine_stats *out)
{
    struct fake_engine *f = (struct fake_engine *)e;
    memset(out, 0, sizeof *out);
    out->running = f->n_running;
    out->queued = f->n_queued;
    out->max_running = f->max_running;
    out->queue_size = f->queue_size;
    out->ctx_size = e->ctx_size;
    out->prompt_tokens_total = f->prompt_total;
    out->gen_tokens_total = f->gen_total;
    out->ready = true;
    snprintf(out->state, sizeof out->state, "ready");
}

static void fake_shutdown(struct engine *e, int grace_ms, void (*done)(void *ctx), void *ctx)
{
    struct fake_engine *f = (struct fake_engine *)e;
    while (f->seqs)
        seq_finish(f, f->seqs, ENGINE_FINISH_CANCELED, CS_ECANCELED, "shutting down");
    uv_timer_stop(&f->tick);
    done(ctx);
}

static void tick_closed_cb(uv_handle_t *h)
{
    struct fake_engine *f = h->data;
    script_free(f->script);
    free(f);
}

static void fake_destroy(struct engine *e)
{
    struct fake_engine *f = (struct fake_engine *)e;
    while (f->seqs)
        seq_unlink_free(f, f->seqs);
    uv_close((uv_handle_t *)&f->tick, tick_closed_cb);
}

static const struct engine_ops fake_ops = {
    fake_submit, fake_cancel, fake_stats, fake_shutdown, fake_destroy,
};

int fake_engine_create(struct engine **out, uv_loop_t *loop, const struct cs_config *cfg,
                       const struct tokenizer *tok, int tick_ms, struct cs_error *err)
{
    struct fake_engine *f = calloc(1, sizeof *f);
    if (!f)
        return CS_ENOMEM;
    f->base.ops = &fake_ops;
    f->base.n_vocab = (int)tokenizer_vocab_size(tok);
    f->base.ctx_size = (int)cfg->ctx_size;
    f->loop = loop;
    f->tick_ms = tick_ms > 0 ? tick_ms : 1;
    f->max_running = cfg->max_seqs > 0 ? (int)cfg->max_seqs : 1;
    f->queue_size = (int)cfg->queue_size;
    f->token_lo = 300;
    f->token_hi = f->base.n_vocab > 20000 ? 20000 : 256;
    if (f->token_hi <= f->token_lo)
        f->token_lo = 32, f->token_hi = 127;
    if (cfg->test_script[0]) {
        int rc = script_load(&f->script, cfg->test_script, tok, f->base.n_vocab, err);
        if (rc != CS_OK) {
            free(f);
            return rc;
        }
    }
    uv_timer_init(loop, &f->tick);
    f->tick.data = f;
    *out = &f->base;
    return CS_OK;
}
