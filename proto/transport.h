/* transport.h - ZeroMQ helpers for the control and notify channels, and the
 * run directory they live in (design.md section 1).
 *
 * Channels, all ipc:// endpoints inside the run directory RUNDIR (mode 0700):
 *   ipc://RUNDIR/ctl       coordinator ROUTER (binds) <- worker DEALERs
 *                          (connect, routing id "w<stage>")
 *   ipc://RUNDIR/edge-<i>  stage i PUSH (connects) -> stage i+1 PULL (binds):
 *                          "the hidden states of step S are in slot k"
 * Each ZeroMQ message is one frame holding one encoded struct msg (a ROUTER
 * adds the peer's routing id frame in front). Sockets are not thread-safe:
 * one thread owns each.
 *
 * Event loops (the coordinator's libuv loop): poll transport_fd() with
 * uv_poll for readability. ZMQ_FD is EDGE-triggered and signals only that
 * ZMQ_EVENTS may have changed, not that a message is waiting, so after every
 * wake-up AND after every send on the same socket (a send may consume the
 * edge), call transport_drain() until it reports nothing more; otherwise
 * messages sit unread until some later, unrelated event.
 *
 * A malformed or unknown message is logged with its sender and dropped
 * (CS_EPROTO from transport_recv, skipped by transport_drain); it never
 * crashes the receiver. */
#ifndef CS_PROTO_TRANSPORT_H
#define CS_PROTO_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/status.h"
#include "messages.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRANSPORT_ENDPOINT_MAX 128   /* ipc:// paths are limited to 107 bytes by sun_path */
#define TRANSPORT_PEER_MAX 32        /* routing ids ("w12") */

/* Create the run directory with mode 0700, or accept an existing one that is
 * a real directory (not a symlink) owned by this user, resetting its mode to
 * 0700 if it was looser. Refuses (CS_EINVAL) a directory owned by another
 * user, a symlink or a non-directory; CS_EIO when it cannot be created. The
 * parent must exist. */
int transport_rundir_prepare(const char *path, struct cs_error *err);

/* "ipc://<rundir>/<name>" into out (cap bytes). CS_ERANGE when the socket
 * path would exceed the 107 bytes of sun_path or cap. */
int transport_endpoint(char *out, size_t cap, const char *rundir, const char *name,
                       struct cs_error *err);

/* A ZeroMQ context (*ctx) for all sockets of the process. */
int transport_context_create(void **ctx, struct cs_error *err);
/* Terminates the context; close every socket first. */
void transport_context_destroy(void *ctx);

/* The coordinator's ROUTER bound at ipc://RUNDIR/ctl; a reconnecting worker
 * takes its routing id over (ZMQ_ROUTER_HANDOVER), sends to an unknown peer
 * fail (ZMQ_ROUTER_MANDATORY). */
int transport_router_bind(void *ctx, const char *rundir, void **sock, struct cs_error *err);
/* A worker's DEALER connected to ipc://RUNDIR/ctl with routing id "w<stage>". */
int transport_dealer_connect(void *ctx, const char *rundir, int stage, void **sock,
                             struct cs_error *err);
/* Edge i's notify channel: the downstream stage binds PULL, the upstream one
 * connects PUSH (either may start first: a PUSH whose peer is not bound yet
 * retries every TRANSPORT_PUSH_RECONNECT_MS; messages wait in its queue). */
#define TRANSPORT_PUSH_RECONNECT_MS 2
int transport_pull_bind(void *ctx, const char *rundir, int edge, void **sock, struct cs_error *err);
int transport_push_connect(void *ctx, const char *rundir, int edge, void **sock,
                           struct cs_error *err);
/* Close a socket (pending outgoing messages are dropped: linger 0). NULL is a no-op. */
void transport_close(void *sock);

/* Encode m and send it. peer: the routing id on a ROUTER socket, NULL
 * otherwise. timeout_ms: -1 waits forever, 0 never waits. Returns CS_OK,
 * CS_ETIMEOUT (queue full for that long), CS_ENOTFOUND (ROUTER: no such
 * peer), CS_EPROTO (m is invalid), CS_EIO. */
int transport_send(void *sock, const char *peer, const struct msg *m, int timeout_ms,
                   struct cs_error *err);
/* The same for raw bytes (tests send malformed frames with it). */
int transport_send_bytes(void *sock, const char *peer, const void *data, size_t size,
                         int timeout_ms, struct cs_error *err);

/* Wait up to timeout_ms (-1: forever, 0: do not wait) for one message and
 * decode it into *m (release with msg_free). On a ROUTER the sender's routing
 * id goes to peer (peer_cap bytes, NUL-terminated; may be NULL elsewhere).
 * Returns CS_OK, CS_ETIMEOUT, CS_EPROTO (malformed or unknown: consumed,
 * logged and dropped; err says why, peer is filled), CS_EIO. */
int transport_recv(void *sock, char *peer, size_t peer_cap, struct msg *m, int timeout_ms,
                   struct cs_error *err);

/* How long a pipeline process keeps polling its sockets without sleeping
 * after its last step message (config pipeline_spin_ms): a value >= 0 is
 * taken as is; -1 (auto) gives TRANSPORT_SPIN_AUTO_MS when this host has at
 * least 2 online cores per pipeline process (n_procs: the stages and the
 * coordinator), else 0. Why: a message to a process asleep in poll costs a
 * wake-up of its thread, which on an idle core is tens to hundreds of
 * microseconds; polling keeps that off a decode step's critical path, for
 * one busy core per process while steps flow. */
#define TRANSPORT_SPIN_AUTO_MS 100
int transport_spin_ms(int configured, int n_procs);

/* For a polling process (transport_spin_ms > 0): pins the calling thread
 * and this process's ZeroMQ I/O threads to one core. Why: a message crosses
 * the sender's and the receiver's I/O threads; asleep on an idle core, each
 * costs a wake-up from a deep idle state (~40 us each on the H200 host).
 * Beside a thread that polls (and yields between polls), the core never
 * idles and the I/O thread runs at once: a 300-byte message 61 -> 24 us
 * there (docs/PERF.md, the pipeline section).
 * Returns the number of I/O threads pinned, or a negative status. Linux. */
int transport_pin_core(int cpu);
/* The core a pipeline process pins to: the coordinator the last online
 * core, stage i the one below the coordinator's minus i; -1 when the host
 * has too few. */
int transport_pin_core_for(int stage_or_coord);

/* ZMQ_FD of a socket, for uv_poll (read the edge-trigger rule above). */
int transport_fd(void *sock, int *fd);
/* 1 when a message can be received now (ZMQ_EVENTS has ZMQ_POLLIN), 0 when
 * not, CS_EIO on error. Also re-arms the edge trigger. */
int transport_readable(void *sock);

/* Called by transport_drain for each decoded message; it may keep the
 * message by copying *m and zeroing it (msg_free of a zeroed message is a
 * no-op); otherwise it is freed when the callback returns. */
typedef void (*transport_msg_cb)(void *ctx, const char *peer, struct msg *m);

/* Receive without waiting until no message is left or max_msgs (> 0) were
 * handled, calling cb for each valid one; malformed ones are logged and
 * dropped. *more is set when it stopped at max_msgs with messages left (call
 * again soon: the edge trigger will not fire for them). Returns the number of
 * messages handed to cb, or CS_EIO. */
int transport_drain(void *sock, int max_msgs, transport_msg_cb cb, void *ctx, bool *more);

#ifdef __cplusplus
}
#endif
#endif
