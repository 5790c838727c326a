/* engine_local_int.h - the inside of the in-process engine, shared by
 * engine_local.c (creation, the loop-thread API and event delivery) and
 * engine_local_run.c (the background thread that schedules and runs steps).
 *
 * Threads and ownership
 * - The loop thread owns the registry of live requests (submitted, done not
 *   yet delivered), runs every callback, and frees a request after its done.
 * - The engine thread owns the running sequences (slots, pages, the model
 *   state) and everything of a request's generation (tokens, counters).
 * - Under mu: the waiting list, the cancel/stop flags of requests, the event
 *   queue, the published counters and the closing/quit flags.
 * - A request's done event is the engine thread's last touch of it: after
 *   posting it the engine has removed it from every list of its own. */
#ifndef CS_ENGINE_LOCAL_INT_H
#define CS_ENGINE_LOCAL_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/gguf.h"
#include "../common/tokenizer.h"
#include "../worker/kv_pages.h"
#include "../worker/model.h"
#include "engine.h"
#include "scheduler.h"
#include "script.h"

#define EL_MAX_DEFAULT_STOP 8
#define EL_MAX_STOP_IDS 256
#define EL_MAX_BIAS 65536

struct el_req {
    struct el_req *next;               /* waiting list (mu) */
    struct el_req *reg_prev, *reg_next;/* registry (loop) */
    uint64_t id, order;
    bool (*on_token)(void *user, const struct cs_sample_result *tok);
    void (*on_done)(void *user, enum engine_finish finish, int status, const char *message);
    void *user;
    struct cs_sample_params sp;        /* bias and mask point at the copies below */
    int32_t *bias_ids;
    float *bias_vals;
    uint8_t *allowed;
    const struct engine_constraint_ops *cops; /* constrained decoding, or NULL */
    void *constraint;                  /* owned (engine thread) */
    uint8_t *cmask;                    /* the step's constraint mask */
    int32_t *stop_ids;                 /* NULL: the engine's defaults */
    int n_stop;
    const int32_t *script;             /* scripted tokens (test only) or NULL */
    int n_script;
    /* generation (engine thread) */
    int32_t *tokens;                   /* prompt + generated, room for n_prompt + max_tokens */
    int n_prompt, n_ctx, n_gen, n_done, max_tokens;
    int slot;
    int32_t *pages;                    /* page table, room for the engine's max_pages */
    int n_pages;
    /* flags (mu) */
    bool cancel;                       /* engine_cancel */
    bool stop;                         /* on_token returned false */
    /* loop only */
    bool muted;                        /* deliver no more tokens */
};

struct el_event {
    struct el_req *req;
    bool done;                         /* false: a token */
    enum engine_finish finish;
    int status;
    char *msg;                         /* malloc'd, or NULL */
    struct cs_sample_result tok;
};

/* Buffers of one step, sized for budget tokens and max_seqs sequences. */
struct el_step_buf {
    int32_t *tokens, *pos, *seq_of, *seq_start, *slot, *page_table;
    bool *sample;
    struct cs_sample_params *params;
    struct cs_sample_result *results;
    struct sched_seq *sseq;
    struct sched_entry *ent;
    struct el_req **reqs;              /* running snapshot of the step */
};

struct el_engine {
    struct engine base;
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t grace_timer;
    int n_open_handles;
    /* model */
    struct gguf_file *f;
    struct tokenizer *tok;
    struct cs_backend *be;
    struct cs_model *m;
    struct cs_state *st;
    struct engine_script *script;
    int32_t stop_default[EL_MAX_DEFAULT_STOP];
    int n_stop_default;
    /* limits */
    int max_seqs, queue_size, page_size, max_pages, budget, chunk;
    /* engine thread */
    pthread_t thread;
    struct kv_pages pages;
    struct el_req **running;           /* admission order */
    int n_running;
    int *free_slots;
    int n_free_slots;
    struct el_step_buf sb;
    /* shared (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct el_req *wait_head, *wait_tail;
    int n_waiting, n_running_pub;
    bool quit, closing, cancel_all;
    struct el_event *ev, *ev_loop;     /* posting side and delivering side */
    int n_ev, cap_ev;
    uint64_t prompt_tokens_total, gen_tokens_total;
    double win_prefill, win_decode, win_time;   /* current rate window */
    double prefill_tok_s, decode_tok_s;         /* last full window */
    /* loop only */
    struct el_req *reg_head;
    int n_live;
    uint64_t next_id, next_order;
    void (*shutdown_done)(void *ctx);
    void *shutdown_ctx;
    bool shutdown_pending;
};

/* engine_local_run.c */
/* The engine thread's main function (arg: struct el_engine *). */
void *el_thread_main(void *arg);
/* Free a request and its copies (any thread that owns it). */
void el_req_free(struct el_req *r);

#endif
