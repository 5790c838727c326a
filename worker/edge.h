/* edge.h - the shared-memory ring that carries hidden states from pipeline
 * stage i to stage i+1 (design.md section 4).
 *
 * Layout of a POSIX shared-memory segment (mode 0600):
 *   header  magic, version, slot count, max tokens per slot, hidden size,
 *           dtype (f32 or f16), owner pid, the writer's ring cursor, and per
 *           slot a control block {state, step id, n_tokens, sequence counter}
 *   slots   n_slots data areas of max_tokens * hidden values, page-aligned
 *
 * Who creates it: the COORDINATOR (it knows the sizes from the GGUF and the
 * config, and it outlives the workers), before spawning the workers; the
 * workers attach with edge_open. So a worker that crashes and is respawned
 * finds the same segment, and the coordinator resets it (edge_reset) before
 * replaying. The creator unlinks the segment on edge_close; a segment left by
 * a crashed run (its owner pid is dead, or its header is invalid) is unlinked
 * and recreated by the next edge_create. Names derive from the run
 * directory, so two servers with different run dirs never collide.
 *
 * Ownership of a slot (lock-free, C11 atomics in the shared header):
 *   FREE --edge_slot_acquire (writer)--> WRITING --edge_publish--> READY
 *   WRITING --edge_slot_abort (writer)--> FREE
 *   READY --edge_release (reader)--> FREE
 * The writer takes slots in ring order, so several steps can be in flight
 * (the copy of chunk k overlaps the compute of chunk k+1) and the reader sees
 * them in order. edge_publish is a release store made after the data is in
 * host memory (on a GPU worker: after the device-to-host copy's event has
 * completed); only then does the writer notify the reader over ZeroMQ with
 * the slot and step id. Each publish increments the slot's sequence counter.
 *
 * CUDA: edge.c does not depend on it. A GPU worker passes hooks that
 * cudaHostRegister the mapping through its backend (be->host_register), so
 * the device-to-host copy goes straight into a slot and the host-to-device
 * copy straight out of one, as DMA from pinned memory; they unregister it
 * before unmapping. A hook's failure fails edge_create/edge_open; the
 * worker's hook instead warns once and reports success (the edge then works
 * unpinned). */
#ifndef CS_WORKER_EDGE_H
#define CS_WORKER_EDGE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EDGE_MAGIC 0x45475343u  /* "CSGE" */
#define EDGE_VERSION 1
#define EDGE_MAX_SLOTS 64
#define EDGE_MAX_HIDDEN 65536
#define EDGE_MAX_TOKENS 65536
#define EDGE_NAME_MAX 64

struct edge_config {
    int n_slots;        /* 1..EDGE_MAX_SLOTS (2 or more to overlap copy and compute) */
    int max_tokens;     /* tokens one slot holds: the largest step */
    int hidden;         /* values per token (n_embd) */
    uint32_t dtype;     /* CS_DTYPE_F32 or CS_DTYPE_F16 */
};

/* Optional registration of the mapping (e.g. cudaHostRegister); NULL: none. */
struct edge_hooks {
    int (*host_register)(void *ctx, void *ptr, size_t bytes);  /* CS_OK or a status */
    void (*host_unregister)(void *ctx, void *ptr);
    void *ctx;
};

struct edge;

/* "/cmpserve-<hash of rundir>-edge-<index>" into out. CS_ERANGE if cap is short. */
int edge_name(char *out, size_t cap, const char *rundir, int index);

/* Create the segment `name` with cfg (mode 0600) and map it. An existing
 * segment whose owner pid is dead or whose header is invalid is unlinked and
 * recreated (logged); one owned by a live process is refused with CS_EINVAL,
 * as is one of another user. CS_EINVAL for a bad cfg, CS_EIO on system errors,
 * or the host_register hook's status (the segment is then removed). */
int edge_create(struct edge **out, const char *name, const struct edge_config *cfg,
                const struct edge_hooks *hooks, struct cs_error *err);

/* Attach to an existing segment after validating its header against its size.
 * CS_ENOTFOUND when absent, CS_EFORMAT when its header is invalid. */
int edge_open(struct edge **out, const char *name, const struct edge_hooks *hooks,
              struct cs_error *err);

/* Unregister and unmap; the creator also unlinks the name. NULL is a no-op. */
void edge_close(struct edge *e);

/* The geometry read from the header. */
const struct edge_config *edge_config_get(const struct edge *e);
/* Bytes of one value (4 or 2) and of one slot's data area. */
size_t edge_slot_bytes(const struct edge *e);

/* ---- writer ---- */

/* Take the next slot in ring order into *slot. CS_EAGAIN while the reader
 * still holds it (or it is being written): wait for a release and retry. */
int edge_slot_acquire(struct edge *e, int *slot);
/* The data area of a slot (max_tokens * hidden values of the edge dtype), for
 * copying into directly (cudaMemcpyAsync to pinned memory). */
void *edge_slot_data(struct edge *e, int slot);
/* Copy n_tokens * hidden fp32 values into an acquired slot, converting to
 * fp16 when the edge is f16, then publish it for step_id. */
int edge_write(struct edge *e, int slot, uint64_t step_id, const float *hidden, int n_tokens);
/* Publish an acquired slot whose data was written through edge_slot_data.
 * CS_EINVAL when the slot is not being written or n_tokens is out of range. */
int edge_publish(struct edge *e, int slot, uint64_t step_id, int n_tokens);

/* Give back an acquired slot without publishing it (its data could not be
 * written); the writer's next acquire moves on in ring order. CS_EINVAL when
 * the slot is not being written. */
int edge_slot_abort(struct edge *e, int slot);

/* ---- reader ---- */

/* A published slot's data, without copying: checks it is READY and holds
 * step_id (CS_EPROTO otherwise, err naming what it holds; CS_EINVAL for a
 * slot out of range). */
int edge_peek(struct edge *e, int slot, uint64_t step_id, const void **data, int *n_tokens,
              struct cs_error *err);
/* Copy a published slot's values into out as fp32 ([n_tokens][hidden], room
 * for max_tokens * hidden), same checks as edge_peek. */
int edge_read(struct edge *e, int slot, uint64_t step_id, float *out, int *n_tokens,
              struct cs_error *err);
/* Give a READY slot back to the writer. */
int edge_release(struct edge *e, int slot);

/* Sequence counter of a slot: how many times it was published. */
uint64_t edge_slot_seq(const struct edge *e, int slot);
/* Mark every slot FREE and rewind the cursor (the coordinator, after a worker
 * died, with no writer or reader running). */
void edge_reset(struct edge *e);

#ifdef __cplusplus
}
#endif
#endif
