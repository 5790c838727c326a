/* engine_pipeline_int.h - the inside of the pipeline engine, shared by
 * engine_pipeline.c (creation, bring-up of the workers, the engine_ops,
 * teardown) and engine_pipeline_sched.c (admission, steps in flight, their
 * results, liveness and failure).
 *
 * Everything runs on the libuv loop thread: no locks. The coordinator owns
 * the token lists (the source of truth a replay would rebuild state from),
 * the page tables and the state slots; every stage uses the same page and
 * slot numbering, so one allocator serves all. A sequence is in at most one
 * step in flight; up to n_stages steps are in flight (micro-batching). */
#ifndef CS_ENGINE_PIPELINE_INT_H
#define CS_ENGINE_PIPELINE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "../proto/messages.h"
#include "../worker/edge.h"
#include "../worker/kv_pages.h"
#include "engine.h"
#include "engine_pipeline.h"
#include "scheduler.h"
#include "supervisor.h"

#define EP_MAX_DEFAULT_STOP 8
#define EP_MAX_STOP_IDS 256

struct ep_req {
    struct ep_req *prev, *next;        /* waiting or running list */
    uint64_t id;
    bool (*on_token)(void *user, const struct cs_sample_result *tok);
    void (*on_done)(void *user, enum engine_finish finish, int status, const char *message);
    void *user;
    struct cs_sample_params sp;
    int32_t *bias_ids;
    float *bias_vals;
    int32_t *stop_ids;                 /* NULL: the engine's defaults */
    uint8_t *allowed;                  /* copy of sample.allowed (ceil(n_vocab/8) bytes) or NULL */
    const struct engine_constraint_ops *cops; /* constrained decoding, or NULL */
    void *constraint;                  /* owned: cops->free in ep_req_free */
    uint8_t *cmask;                    /* the mask sent with this request's sampling step:
                                        * computed when the step is built (mask, ANDed with
                                        * allowed); advance runs when its STEP_DONE arrives,
                                        * never for replayed positions */
    int n_stop;
    int32_t *tokens;                   /* prompt + generated: room for n_prompt + max_tokens */
    int n_prompt, n_ctx, n_gen, n_done, max_tokens;
    int replay_to;                     /* after a recovery: positions [0, replay_to) are
                                        * replayed (same chunks, then one token a step),
                                        * never sampled nor sent to the client */
    int slot;
    int32_t *pages;
    int n_pages;
    bool running;                      /* on the running list (else waiting) */
    bool inflight;                     /* part of a step in flight */
    bool finished;                     /* done delivered; freed once not in flight */
    bool cancel;                       /* engine_cancel: finish at the next tick */
};

/* A step in flight: which sequences, how many tokens each, sampled or not. */
struct ep_step {
    uint64_t id;                       /* 0: this entry is free */
    int n;
    struct ep_req **reqs;              /* [max_seqs] */
    int *n_tok;
    bool *sample;
    int64_t t_send_us;                 /* when it went to stage 0 (CLOCK_MONOTONIC) */
};

/* Sums over the steps completed (engine_pipeline_sched.c, step_timing_add). */
struct ep_timing {
    uint64_t steps;
    uint64_t wall_us, max_wall_us;     /* send to STEP_DONE */
    uint64_t compute_us, copy_us;      /* what the stages report, summed over stages */
    /* Transit of each message (0: coordinator -> stage 0, i: stage i-1 -> i,
     * n_stages: last stage -> coordinator) from the CLOCK_MONOTONIC stamps
     * in the timings, and each stage's own time outside compute and copies
     * (decode, slot waits, encode), summed over steps. */
    uint64_t msg_us[MSG_MAX_STAGES + 1];
    uint64_t stage_other_us;
    uint64_t stage_compute_us[MSG_MAX_STAGES];
    uint64_t stamped_steps;            /* steps whose timings all carried stamps */
};

struct ep_worker {
    int id;                            /* routing id number ("w<id>", "h<id>") */
    int stage;                         /* -1 until assigned */
    int gpu;
    pid_t pid;                         /* spawned child, else 0 */
    pid_t hello_pid;                   /* the pid its HELLO gave */
    bool hello, ready, dead;           /* ready: loaded and serving; dead: being recovered */
    int64_t last_seen_ms;
    struct msg_ready info;
};

struct ep_engine {
    struct engine base;
    uv_loop_t *loop;
    struct cs_config cfg;
    uv_poll_t poll;
    uv_timer_t hb_timer, kick_timer, grace_timer;
    uv_idle_t spin;                    /* polls the router while steps are in flight */
    int spin_ms;                       /* transport_spin_ms; 0: wait in uv_poll only */
    bool spinning;
    int64_t spin_seen_us;              /* a step was last in flight (CLOCK_MONOTONIC) */
    int n_open_handles;
    /* processes and channels */
    char run_dir[256];
    bool own_run_dir;                  /* a per-process subdirectory we remove */
    void *zctx, *router;
    struct sup_plan plan;
    int n_stages;
    struct ep_worker workers[SUP_MAX_STAGES];   /* indexed by stage after bring-up */
    struct edge *edges[SUP_MAX_STAGES];         /* edge i: stage i -> i + 1 */
    char *config_json;
    /* model facts */
    int n_embd, n_layer;
    int32_t stop_default[EP_MAX_DEFAULT_STOP];
    int n_stop_default;
    /* limits and capacity */
    int max_seqs, queue_size, page_size, max_pages, budget, chunk, n_slots;
    struct kv_pages pages;
    int *free_slots;
    int n_free_slots;
    /* requests */
    struct ep_req *wait_head, *wait_tail, *run_head, *run_tail;
    int n_waiting, n_running;
    uint64_t next_id, next_step_id, hb_seq;
    uint32_t epoch;                    /* high 32 bits of step ids; +1 per recovery */
    struct ep_step *steps;             /* [n_stages] */
    int n_inflight;
    int max_inflight;                  /* micro-batches in flight (ep_inflight_limit) */
    /* scratch of one step's message */
    struct sched_seq *sseq;
    struct sched_entry *ent;
    struct ep_req **idle;
    struct msg_seq *mseq;
    uint64_t prompt_tokens_total, gen_tokens_total;
    double decode_tok_s, prefill_tok_s;
    struct ep_timing timing;
    /* recovery (engine_pipeline_recover.c) */
    bool recovering;                   /* a stage is down: steps paused, requests kept */
    int worker_threads;                /* --threads of spawned workers */
    int n_restarts;                    /* restarts since the last completed recovery */
    int64_t recover_t0_ms;             /* when the current recovery began */
    uint64_t n_recoveries;
    /* state */
    bool degraded, closing, shutdown_pending;
    char state[128];
    void (*shutdown_done)(void *ctx);
    void *shutdown_ctx;
};

/* ---- engine_pipeline_start.c ---- */
/* Spawn the workers (or wait for attached ones), pair HELLOs with stages,
 * send LOAD, wait for every READY. A worker's load ERROR or its exit fails
 * with "stage I: <reason>". */
int ep_bringup(struct ep_engine *e, struct cs_error *err);
/* Slots and KV pages: the minimum the stages reported; CS_ENOMEM when one
 * full context does not fit. */
int ep_capacity_set(struct ep_engine *e, struct cs_error *err);

/* Send LOAD to w (its stage's slice; header step_id carries the epoch). */
int ep_load_send(struct ep_engine *e, struct ep_worker *w, struct cs_error *err);
/* Remove what a crashed coordinator left in cfg_run_dir: per-process
 * subdirectories "p<pid>" of dead pids, their sockets and shared-memory
 * edges. */
void ep_rundir_reclaim(const char *run_dir);

/* ---- engine_pipeline_recover.c ---- */
/* Stage w is down (why): pause (drop steps in flight, rewind every running
 * sequence to replay from position 0), kill its process if alive, respawn
 * it (or wait for its HELLO in attach mode). Again while recovering: the
 * recovery restarts. Too many restarts in a row: ep_degrade. */
void ep_recover_begin(struct ep_engine *e, struct ep_worker *w, const char *why);
/* HELLO from w after the bring-up: LOAD it (a worker thought ready is
 * restarted first: it lost its state). */
void ep_recover_on_hello(struct ep_engine *e, struct ep_worker *w, const struct msg *m);
/* READY from w: when every stage is ready again, resume. */
void ep_recover_on_ready(struct ep_engine *e, struct ep_worker *w, const struct msg *m);
/* The scheduler's view of r: while replaying, prompt chunks only, then one
 * token a step. */
struct sched_seq ep_recover_view(const struct ep_req *r);

/* ---- engine_pipeline.c ---- */
/* Stop the workers, free everything but the uv handles and e. */
void ep_release(struct ep_engine *e);

/* ---- engine_pipeline_sched.c ---- */
/* Apply cancels, admit, and send steps while fewer than n_stages are in flight. */
void ep_tick(struct ep_engine *e);
/* Run ep_tick soon (from the loop, never inside the caller). */
void ep_kick(struct ep_engine *e);
/* Handle one message from a worker (peer "w<id>" or "h<id>"). */
void ep_on_message(struct ep_engine *e, const char *peer, struct msg *m);
/* Receive everything waiting on the router (call after every wake-up and send). */
void ep_drain(struct ep_engine *e);
/* The heartbeat timer: send heartbeats, detect silent or exited workers. */
void ep_on_heartbeat(uv_timer_t *t);
/* Finish r with on_done and release its slot and pages. */
void ep_req_finish(struct ep_engine *e, struct ep_req *r, enum engine_finish finish, int status,
                   const char *msg);
/* Free a request's memory. */
void ep_req_free(struct ep_req *r);
/* The worker record of a peer name, or NULL. */
struct ep_worker *ep_worker_of_peer(struct ep_engine *e, const char *peer);
/* Fail every request and refuse new ones: "degraded: <why>". */
void ep_degrade(struct ep_engine *e, const char *why);
/* Log (info) where the steps' time went: stages' compute and copies, and
 * the rest (messages, wake-ups), per step and per hop. */
void ep_timing_log(const struct ep_engine *e);
/* Calls shutdown_done when shutting down and nothing is live. */
void ep_shutdown_check(struct ep_engine *e);

#endif
