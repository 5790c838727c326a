/* transport.c - ZeroMQ sockets for control and notify channels, framing of
 * encoded messages, timeouts with zmq_poll, non-blocking drains for event
 * loops, and the 0700 run directory (see transport.h). */
#define _GNU_SOURCE   /* pthread_setaffinity_np, sched_setaffinity, CPU_SET */
#include "transport.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "../common/log.h"

/* ================================================================
 * Run directory and endpoints
 * ================================================================ */

int transport_rundir_prepare(const char *path, struct cs_error *err)
{
    if (!path || !*path)
        return cs_error_set(err, CS_EINVAL, "run dir: empty path");
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return cs_error_set(err, CS_EIO, "run dir %s: cannot create: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        return cs_error_set(err, CS_EINVAL, "run dir %s is a symlink, refused", path);
    /* open without following a symlink, then check and fix through the fd */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return cs_error_set(err, CS_EINVAL, "run dir %s: %s", path,
                            errno == ELOOP ? "is a symlink, refused"
                            : errno == ENOTDIR ? "is not a directory" : strerror(errno));
    int rc = CS_OK;
    if (fstat(fd, &st) != 0) {
        rc = cs_error_set(err, CS_EIO, "run dir %s: %s", path, strerror(errno));
    } else if (st.st_uid != geteuid()) {
        rc = cs_error_set(err, CS_EINVAL, "run dir %s is owned by uid %u, not by us (uid %u)",
                          path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if ((st.st_mode & 07777) != 0700) {
        if (fchmod(fd, 0700) != 0)
            rc = cs_error_set(err, CS_EIO, "run dir %s: cannot set mode 0700: %s", path,
                              strerror(errno));
        else
            LOG_WARN("transport", "run dir %s had mode %04o, set to 0700", path,
                     (unsigned)(st.st_mode & 07777));
    }
    close(fd);
    return rc;
}

int transport_endpoint(char *out, size_t cap, const char *rundir, const char *name,
                       struct cs_error *err)
{
    size_t sun = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    int n = snprintf(out, cap, "ipc://%s/%s", rundir, name);
    if (n < 0 || (size_t)n >= cap || (size_t)n - 6 > sun)
        return cs_error_set(err, CS_ERANGE, "endpoint %s/%s: the socket path exceeds %zu bytes",
                            rundir, name, sun);
    return CS_OK;
}

/* ================================================================
 * Context and sockets
 * ================================================================ */

int transport_context_create(void **ctx, struct cs_error *err)
{
    *ctx = zmq_ctx_new();
    if (!*ctx)
        return cs_error_set(err, CS_EIO, "zmq_ctx_new: %s", zmq_strerror(errno));
    return CS_OK;
}

void transport_context_destroy(void *ctx)
{
    if (ctx)
        zmq_ctx_term(ctx);
}

void transport_close(void *sock)
{
    if (sock)
        zmq_close(sock);
}

static int sock_open(void *ctx, int type, const char *rundir, const char *name, bool bind,
                     const char *routing_id, void **out, struct cs_error *err)
{
    char ep[TRANSPORT_ENDPOINT_MAX];
    int rc = transport_endpoint(ep, sizeof ep, rundir, name, err);
    if (rc)
        return rc;
    void *s = zmq_socket(ctx, type);
    if (!s)
        return cs_error_set(err, CS_EIO, "zmq_socket: %s", zmq_strerror(errno));
    int zero = 0, one = 1;
    int64_t max_size = (int64_t)MSG_MAX_BYTES + 64; /* peers sending more are disconnected */
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size);
    if (type == ZMQ_ROUTER) {
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    }
    if (type == ZMQ_PUSH) {
        /* the next stage binds its PULL while loading, maybe after we connect:
         * retry every few ms, not after libzmq's default 100-200 ms (which the
         * first step through the pipeline would wait) */
        int ivl = TRANSPORT_PUSH_RECONNECT_MS;
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    }
    if (routing_id && zmq_setsockopt(s, ZMQ_ROUTING_ID, routing_id, strlen(routing_id)) != 0) {
        zmq_close(s);
        return cs_error_set(err, CS_EIO, "routing id %s: %s", routing_id, zmq_strerror(errno));
    }
    if ((bind ? zmq_bind(s, ep) : zmq_connect(s, ep)) != 0) {
        int e = errno;
        zmq_close(s);
        return cs_error_set(err, CS_EIO, "%s %s: %s", bind ? "bind" : "connect", ep,
                            zmq_strerror(e));
    }
    *out = s;
    return CS_OK;
}

int transport_router_bind(void *ctx, const char *rundir, void **sock, struct cs_error *err)
{
    return sock_open(ctx, ZMQ_ROUTER, rundir, "ctl", true, NULL, sock, err);
}

int transport_dealer_connect(void *ctx, const char *rundir, int stage, void **sock,
                             struct cs_error *err)
{
    char id[TRANSPORT_PEER_MAX];
    if (stage < 0 || stage >= MSG_MAX_STAGES)
        return cs_error_set(err, CS_EINVAL, "stage %d out of range [0, %d)", stage, MSG_MAX_STAGES);
    snprintf(id, sizeof id, "w%d", stage);
    return sock_open(ctx, ZMQ_DEALER, rundir, "ctl", false, id, sock, err);
}

int transport_pull_bind(void *ctx, const char *rundir, int edge, void **sock, struct cs_error *err)
{
    char name[32];
    snprintf(name, sizeof name, "edge-%d", edge);
    return sock_open(ctx, ZMQ_PULL, rundir, name, true, NULL, sock, err);
}

int transport_push_connect(void *ctx, const char *rundir, int edge, void **sock,
                           struct cs_error *err)
{
    char name[32];
    snprintf(name, sizeof name, "edge-%d", edge);
    return sock_open(ctx, ZMQ_PUSH, rundir, name, false, NULL, sock, err);
}

/* ================================================================
 * Send and receive
 * ================================================================ */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int sock_type(void *sock)
{
    int type = -1;
    size_t len = sizeof type;
    zmq_getsockopt(sock, ZMQ_TYPE, &type, &len);
    return type;
}

/* Wait until events are possible on sock or the deadline (-1: none) passes. */
static int wait_events(void *sock, short events, int64_t deadline)
{
    for (;;) {
        long t = deadline < 0 ? -1 : (long)(deadline - now_ms());
        if (deadline >= 0 && t < 0)
            t = 0;
        zmq_pollitem_t it = {.socket = sock, .events = events};
        int n = zmq_poll(&it, 1, t);
        if (n > 0)
            return CS_OK;
        if (n < 0 && errno != EINTR)
            return CS_EIO;
        if (n == 0 && deadline >= 0 && now_ms() >= deadline)
            return CS_ETIMEOUT;
    }
}

int transport_send_bytes(void *sock, const char *peer, const void *data, size_t size,
                         int timeout_ms, struct cs_error *err)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        /* a ROUTER's first frame addresses the peer; both frames go or neither */
        int rc = peer ? zmq_send(sock, peer, strlen(peer), ZMQ_SNDMORE | ZMQ_DONTWAIT) : 0;
        if (rc >= 0 && zmq_send(sock, data, size, ZMQ_DONTWAIT) >= 0)
            return CS_OK;
        int e = errno;
        if (e == EHOSTUNREACH)
            return cs_error_set(err, CS_ENOTFOUND, "send: no peer %s", peer ? peer : "?");
        if (e != EAGAIN && e != EINTR)
            return cs_error_set(err, CS_EIO, "send: %s", zmq_strerror(e));
        if (deadline >= 0 && now_ms() >= deadline)
            return cs_error_set(err, CS_ETIMEOUT, "send to %s: queue full for %d ms",
                                peer ? peer : "peer", timeout_ms);
        if (peer) {
            /* ROUTER's POLLOUT does not say which peer can take it: back off */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        } else if (wait_events(sock, ZMQ_POLLOUT, deadline) == CS_EIO) {
            return cs_error_set(err, CS_EIO, "send: poll: %s", zmq_strerror(errno));
        }
    }
}

int transport_send(void *sock, const char *peer, const struct msg *m, int timeout_ms,
                   struct cs_error *err)
{
    void *data;
    size_t size;
    int rc = msg_encode(m, &data, &size, err);
    if (rc)
        return rc;
    rc = transport_send_bytes(sock, peer, data, size, timeout_ms, err);
    free(data);
    return rc;
}

/* Receive one frame into a zmq_msg_t; returns 1 if more frames follow. */
static int recv_frame(void *sock, zmq_msg_t *f, int *more)
{
    zmq_msg_init(f);
    if (zmq_msg_recv(f, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(f);
        return errno == EAGAIN ? CS_EAGAIN : CS_EIO;
    }
    *more = zmq_msg_more(f);
    return CS_OK;
}

static void drop_rest(void *sock, int more)
{
    while (more) {
        zmq_msg_t f;
        if (recv_frame(sock, &f, &more))
            return;
        zmq_msg_close(&f);
    }
}

/* Read [routing id] + payload frames (already waiting) and decode. */
static int recv_now(void *sock, char *peer, size_t peer_cap, struct msg *m, struct cs_error *err)
{
    int more = 0, rc;
    zmq_msg_t f;
    if (peer && peer_cap)
        peer[0] = 0;
    if (sock_type(sock) == ZMQ_ROUTER) {
        if ((rc = recv_frame(sock, &f, &more)))
            return rc == CS_EAGAIN ? CS_ETIMEOUT : cs_error_set(err, CS_EIO, "recv failed");
        size_t n = zmq_msg_size(&f);
        if (peer && peer_cap) {
            n = n < peer_cap - 1 ? n : peer_cap - 1;
            memcpy(peer, zmq_msg_data(&f), n);
            peer[n] = 0;
        }
        zmq_msg_close(&f);
        if (!more)
            return cs_error_set(err, CS_EPROTO, "routing id without a payload");
    }
    if ((rc = recv_frame(sock, &f, &more)))
        return rc == CS_EAGAIN ? CS_ETIMEOUT : cs_error_set(err, CS_EIO, "recv failed");
    if (more) {
        drop_rest(sock, more);
        rc = cs_error_set(err, CS_EPROTO, "a message of several frames");
    } else {
        rc = msg_decode(m, zmq_msg_data(&f), zmq_msg_size(&f), err);
    }
    zmq_msg_close(&f);
    return rc;
}

int transport_recv(void *sock, char *peer, size_t peer_cap, struct msg *m, int timeout_ms,
                   struct cs_error *err)
{
    memset(m, 0, sizeof *m);
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    int rc = wait_events(sock, ZMQ_POLLIN, deadline);
    if (rc == CS_ETIMEOUT)
        return cs_error_set(err, CS_ETIMEOUT, "no message within %d ms", timeout_ms);
    if (rc)
        return cs_error_set(err, CS_EIO, "poll: %s", zmq_strerror(errno));
    struct cs_error local = {0};
    struct cs_error *e = err ? err : &local;
    rc = recv_now(sock, peer, peer_cap, m, e);
    if (rc == CS_EPROTO)
        LOG_WARN("transport", "dropped a malformed message from %s: %s",
                 peer && peer[0] ? peer : "peer", e->msg);
    return rc;
}

/* ================================================================
 * Event-loop helpers
 * ================================================================ */

int transport_fd(void *sock, int *fd)
{
    size_t len = sizeof *fd;
    return zmq_getsockopt(sock, ZMQ_FD, fd, &len) == 0 ? CS_OK : CS_EIO;
}

int transport_readable(void *sock)
{
    int events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &len) != 0)
        return CS_EIO;
    return (events & ZMQ_POLLIN) ? 1 : 0;
}

int transport_drain(void *sock, int max_msgs, transport_msg_cb cb, void *ctx, bool *more)
{
    int handled = 0;
    if (more)
        *more = false;
    for (int i = 0; i < max_msgs; i++) {
        int r = transport_readable(sock);
        if (r < 0)
            return CS_EIO;
        if (r == 0)
            return handled;
        char peer[TRANSPORT_PEER_MAX];
        struct msg m;
        struct cs_error err = {0};
        int rc = recv_now(sock, peer, sizeof peer, &m, &err);
        if (rc == CS_EPROTO || rc == CS_ENOMEM) {
            LOG_WARN("transport", "dropped a malformed message from %s: %s",
                     peer[0] ? peer : "peer", err.msg);
            continue;
        }
        if (rc == CS_ETIMEOUT) /* raced: nothing after all */
            return handled;
        if (rc)
            return CS_EIO;
        cb(ctx, peer, &m);
        msg_free(&m);
        handled++;
    }
    if (more) {
        int r = transport_readable(sock);
        *more = r > 0;
    }
    return handled;
}

int transport_spin_ms(int configured, int n_procs)
{
    if (configured >= 0)
        return configured;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return n_procs > 0 && cores >= 2L * n_procs ? TRANSPORT_SPIN_AUTO_MS : 0;
}

int transport_pin_core_for(int stage_or_coord)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long cpu = cores - 2 - stage_or_coord;   /* coordinator: -1 -> the last core */
    return cpu >= 0 && cpu < cores && cpu < CPU_SETSIZE ? (int)cpu : -1;
}

int transport_pin_core(int cpu)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return CS_EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
        return CS_EIO;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return CS_EIO;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], comm[32] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (!fgets(comm, sizeof comm, f))
            comm[0] = 0;
        fclose(f);
        /* libzmq names its I/O threads "ZMQbg/IO/<n>" */
        if (strncmp(comm, "ZMQbg/IO", 8) == 0 &&
            sched_setaffinity((pid_t)atoi(de->d_name), sizeof set, &set) == 0)
            n++;
    }
    closedir(d);
    return n;
}
