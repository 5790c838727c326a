/* worker.h - one pipeline worker process (design.md section 3): one backend
 * (a GPU or the CPU), one layer slice, driven by the coordinator over
 * ZeroMQ.
 *
 * Life: connect a DEALER to ipc://RUNDIR/ctl (routing id "w<id>"), say HELLO,
 * wait for LOAD, load the slice and its state, answer READY (or ERROR with
 * the reason, then exit 1), then serve steps until SHUTDOWN:
 *   stage 0 receives STEP from the coordinator; stage i > 0 receives the
 *   forwarded STEP on its edge's notify PULL socket and uploads the hidden
 *   states straight from the shared-memory edge slot it names, releasing
 *   the slot once the upload has returned; each stage runs model_forward
 *   over its slice; a middle stage downloads its output straight into its
 *   outgoing edge slot (publish after a host fence) BEFORE forwarding the
 *   step with its timing appended; the last stage samples and answers
 *   STEP_DONE. A GPU worker pins both edge mappings (be->host_register) so
 *   these copies are DMA; a failed pin is warned about once and the edge
 *   works unpinned. fp16 edges go through the host buffer for conversion.
 * A second thread sends HEARTBEATs on its own DEALER ("h<id>") every
 * heartbeat_ms, so a long step never looks like a dead worker; a stopped or
 * crashed process stops them (the coordinator detects that).
 *
 * Coordinator silence: a worker that hears nothing from the coordinator for
 * dead_after_ms (it sends heartbeats) reconnects and says HELLO again, keeping
 * its weights; a later LOAD of the same model and layers reuses them (only
 * the state, edges and sockets are rebuilt), so a new coordinator needs no
 * reload over the slow bus.
 *
 * worker_loop.c: connection, HELLO/LOAD/READY, the poll loop, heartbeats.
 * worker_step.c: one step (edge in, forward, edge out or STEP_DONE). */
#ifndef CS_WORKER_WORKER_H
#define CS_WORKER_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/config.h"
#include "../common/gguf.h"
#include "../common/status.h"
#include "../proto/messages.h"
#include "edge.h"
#include "model.h"

#define WORKER_MAX_PINNED 2     /* the incoming and the outgoing edge */

struct worker_opts {
    char run_dir[256];
    int id;              /* routing id number: the stage when spawned, else the GPU index */
    int stage;           /* -1: assigned by the coordinator's LOAD (attach mode) */
    int gpu;             /* -1: CPU backend */
    int threads;         /* CPU backend threads, 0: all cores */
    int heartbeat_ms;
};

struct worker {
    struct worker_opts o;
    struct cs_config cfg;       /* from LOAD's config_json */
    void *zctx, *ctl, *pull, *push;
    struct edge *ein, *eout;
    struct gguf_file *f;
    struct cs_backend *be;
    struct cs_model m;
    bool model_loaded;
    struct cs_state *st;
    int stage, n_stages, max_tokens, page_size;
    /* Recovery epoch (the high 32 bits of step ids): set by LOAD's header,
     * raised by a newer step. A step of an older epoch is stale (sent before
     * a stage died): dropped. Adopting a newer epoch resets the outgoing edge
     * (slots held by stale steps are garbage). */
    uint32_t epoch;
    int64_t ctl_seen_ms;        /* last message from the coordinator */
    uint64_t wake_us;           /* CLOCK_MONOTONIC us when the poll last saw a message */
    uint64_t step_seen_us;      /* ... when a step last arrived or finished */
    int spin_ms;                /* poll without sleeping this long after it (transport_spin_ms) */
    char loaded_path[4096];     /* the model whose slice is loaded (kept across LOADs) */
    int loaded_begin, loaded_end;
    float *host;                /* host [max_tokens][E]: fp16 edges only (conversion);
                                 * fp32 edges are copied straight from/to their slots */
    void *pinned[WORKER_MAX_PINNED];  /* edge mappings registered with the backend */
    bool pin_warned;            /* a failed registration was reported */
    struct cs_sample_result *results;  /* [MSG_MAX_SEQS] */
    /* heartbeat thread */
    pthread_t hb_thread;
    bool hb_started;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;       /* wakes the heartbeat thread to quit (CLOCK_MONOTONIC) */
    bool hb_quit;
    uint32_t hb_state;          /* enum msg_worker_state */
};

/* Run the worker until SHUTDOWN (CS_OK) or a fatal error (err says why; an
 * ERROR message has been sent to the coordinator when it could be). */
int worker_run(const struct worker_opts *o, struct cs_error *err);

/* worker_step.c: run one STEP message (decoded; its memory stays the
 * caller's). A failure is reported to the coordinator as a non-fatal ERROR
 * for that step; returns CS_OK unless the process cannot continue. */
int worker_step_run(struct worker *w, struct msg *m);

/* The epoch of a step id (its high 32 bits). */
static inline uint32_t worker_step_epoch(uint64_t step_id) { return (uint32_t)(step_id >> 32); }

/* Send an ERROR (code, fatal, message) about step_id on the control socket. */
void worker_error_send(struct worker *w, uint64_t step_id, int code, bool fatal, const char *msg);

#endif
