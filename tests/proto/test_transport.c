/* test_transport.c - proves that proto/transport.c prepares the run dir
 * safely (created 0700, a loose mode fixed, symlinks, files and other users'
 * dirs refused, overlong ipc paths refused) and that a coordinator process
 * and a forked worker process exchange messages over ipc:// sockets in it:
 * HELLO/LOAD/READY over ROUTER/DEALER with routing id "w1", a STEP over the
 * edge PUSH/PULL channel, malformed frames dropped without harm, heartbeats
 * drained through the edge-triggered ZMQ_FD as an event loop would, receive
 * timeouts and sends to unknown peers reported, and a PUSH connected before
 * its PULL is bound delivers within a few ms of the bind. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/transport.h"
#include "tests/proto/msg_testlib.h"
#include "tests/test_util.h"

static char tmp_base[64];

static int64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_transport_rundir(void)
{
    char run[128], path[160];
    struct cs_error err = {0};
    struct stat st;
    snprintf(run, sizeof run, "%s/run", tmp_base);
    CHECK_EQ_INT(transport_rundir_prepare(run, &err), CS_OK);
    CHECK(stat(run, &st) == 0 && (st.st_mode & 07777) == 0700);
    /* a loose mode on our own dir is fixed */
    chmod(run, 0755);
    CHECK_EQ_INT(transport_rundir_prepare(run, &err), CS_OK);
    CHECK(stat(run, &st) == 0 && (st.st_mode & 07777) == 0700);
    /* a symlink to it is refused */
    snprintf(path, sizeof path, "%s/link", tmp_base);
    CHECK(symlink(run, path) == 0);
    CHECK_EQ_INT(transport_rundir_prepare(path, &err), CS_EINVAL);
    CHECK(strstr(err.msg, "symlink") != NULL);
    /* a regular file is refused */
    snprintf(path, sizeof path, "%s/file", tmp_base);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    CHECK_EQ_INT(transport_rundir_prepare(path, &err), CS_EINVAL);
    CHECK(strstr(err.msg, "not a directory") != NULL);
    /* another user's dir is refused (needs root to make one) */
    if (geteuid() == 0) {
        snprintf(path, sizeof path, "%s/other", tmp_base);
        CHECK(mkdir(path, 0700) == 0 && chown(path, 65534, 65534) == 0);
        CHECK_EQ_INT(transport_rundir_prepare(path, &err), CS_EINVAL);
        CHECK(strstr(err.msg, "owned by uid 65534") != NULL);
    }
    /* a missing parent is an I/O error, not a crash */
    snprintf(path, sizeof path, "%s/no/such", tmp_base);
    CHECK_EQ_INT(transport_rundir_prepare(path, &err), CS_EIO);
    /* ipc paths are bounded by sun_path */
    char ep[TRANSPORT_ENDPOINT_MAX], longdir[200];
    memset(longdir, 'd', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = 0;
    CHECK_EQ_INT(transport_endpoint(ep, sizeof ep, longdir, "ctl", &err), CS_ERANGE);
    CHECK_EQ_INT(transport_endpoint(ep, sizeof ep, "/run/x", "ctl", &err), CS_OK);
    CHECK(strcmp(ep, "ipc:///run/x/ctl") == 0);
}

/* ---- the worker side, in a child process: returns its failure count ---- */

#define STEP_SEED 77
#define N_HEARTBEATS 5

static int worker_child(const char *run)
{
    void *ctx = NULL, *ctl = NULL, *push = NULL;
    struct cs_error err = {0};
    struct msg m;
    int fails = 0;
    if (transport_context_create(&ctx, &err) || transport_dealer_connect(ctx, run, 1, &ctl, &err) ||
        transport_push_connect(ctx, run, 0, &push, &err)) {
        fprintf(stderr, "child: %s\n", err.msg);
        return 1;
    }
    msg_init(&m, MSG_HELLO, 0, 1);
    m.u.hello = (struct msg_hello){.stage = 1, .gpu_index = -1, .device_name = "cpu",
                                   .free_bytes = 1, .total_bytes = 2, .pid = (int32_t)getpid(),
                                   .proto_version = CS_PROTO_VERSION};
    fails += transport_send(ctl, NULL, &m, 5000, &err) != CS_OK;
    /* LOAD */
    fails += transport_recv(ctl, NULL, 0, &m, 10000, &err) != CS_OK;
    fails += m.h.type != MSG_LOAD || !m.u.load.model_path ||
             strcmp(m.u.load.model_path, "/models/x.gguf") != 0;
    msg_free(&m);
    /* a malformed frame, then READY */
    fails += transport_send_bytes(ctl, NULL, "\xc1garbage", 8, 5000, &err) != CS_OK;
    msg_init(&m, MSG_READY, 0, 1);
    m.u.ready = (struct msg_ready){.stage = 1, .layer_begin = 4, .layer_end = 8, .n_slots = 3};
    fails += transport_send(ctl, NULL, &m, 5000, &err) != CS_OK;
    /* a step down the edge */
    struct rnd r;
    rnd_init(&r, STEP_SEED);
    rnd_msg(&r, &m, MSG_STEP, 2);
    fails += transport_send(push, NULL, &m, 5000, &err) != CS_OK;
    rnd_release(&r);
    /* heartbeats with garbage in between, for the drain */
    for (int i = 0; i < N_HEARTBEATS; i++) {
        fails += transport_send_bytes(ctl, NULL, "\x95\x07", 2, 5000, &err) != CS_OK;
        msg_init(&m, MSG_HEARTBEAT, 0, 1);
        m.u.heartbeat = (struct msg_heartbeat){.seq = (uint64_t)i, .state = MSG_STATE_READY};
        fails += transport_send(ctl, NULL, &m, 5000, &err) != CS_OK;
    }
    /* SHUTDOWN ends it */
    fails += transport_recv(ctl, NULL, 0, &m, 10000, &err) != CS_OK || m.h.type != MSG_SHUTDOWN;
    msg_free(&m);
    if (fails)
        fprintf(stderr, "child: %d failures, last error: %s\n", fails, err.msg);
    transport_close(push);
    transport_close(ctl);
    transport_context_destroy(ctx);
    return fails;
}

struct drained {
    int n;
    uint64_t seqs[16];
};

static void drain_cb(void *ctx, const char *peer, struct msg *m)
{
    struct drained *d = ctx;
    CHECK(strcmp(peer, "w1") == 0);
    CHECK_EQ_INT(m->h.type, MSG_HEARTBEAT);
    if (d->n < 16)
        d->seqs[d->n] = m->u.heartbeat.seq;
    d->n++;
}

/* An event loop's view: poll ZMQ_FD, then drain (two at a time to exercise
 * the "more" flag) until nothing is left. */
static void drain_heartbeats(void *router, struct drained *d)
{
    int fd = -1;
    CHECK_EQ_INT(transport_fd(router, &fd), CS_OK);
    int64_t deadline = ms_now() + 10000;
    while (d->n < N_HEARTBEATS && ms_now() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 100);
        bool more = true;
        while (more) {
            int n = transport_drain(router, 2, drain_cb, d, &more);
            CHECK(n >= 0 && n <= 2);
            if (n < 0)
                return;
        }
    }
}

static void test_transport_exchange(void)
{
    char run[128];
    snprintf(run, sizeof run, "%s/run2", tmp_base);
    struct cs_error err = {0};
    CHECK_EQ_INT(transport_rundir_prepare(run, &err), CS_OK);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(worker_child(run) ? 1 : 0);
    void *ctx = NULL, *router = NULL, *pull = NULL;
    CHECK_EQ_INT(transport_context_create(&ctx, &err), CS_OK);
    CHECK_EQ_INT(transport_router_bind(ctx, run, &router, &err), CS_OK);
    CHECK_EQ_INT(transport_pull_bind(ctx, run, 0, &pull, &err), CS_OK);
    char peer[TRANSPORT_PEER_MAX];
    struct msg m;
    /* HELLO from w1 */
    CHECK_EQ_INT(transport_recv(router, peer, sizeof peer, &m, 10000, &err), CS_OK);
    CHECK(strcmp(peer, "w1") == 0);
    CHECK_EQ_INT(m.h.type, MSG_HELLO);
    CHECK_EQ_INT(m.u.hello.pid, pid);
    CHECK(m.u.hello.device_name && strcmp(m.u.hello.device_name, "cpu") == 0);
    msg_free(&m);
    /* LOAD to w1 */
    msg_init(&m, MSG_LOAD, 0, MSG_SENDER_COORD);
    m.u.load = (struct msg_load){.model_path = "/models/x.gguf", .stage = 1, .n_stages = 2,
                                 .layer_begin = 4, .layer_end = 8,
                                 .state = {.max_tokens = 512, .n_slots = 3, .kv_pages = 8,
                                           .page_size = 256, .kv_type = 0},
                                 .edge_dtype = 1, .edge_slots = 2, .edge_in = "/cmpserve-x-edge-0",
                                 .notify_in = "ipc:///run/edge-0", .config_json = "{}"};
    CHECK_EQ_INT(transport_send(router, "w1", &m, 5000, &err), CS_OK);
    /* an unknown peer is reported */
    CHECK_EQ_INT(transport_send(router, "w9", &m, 100, &err), CS_ENOTFOUND);
    /* the malformed frame is reported and dropped, READY follows */
    CHECK_EQ_INT(transport_recv(router, peer, sizeof peer, &m, 10000, &err), CS_EPROTO);
    CHECK(strcmp(peer, "w1") == 0);
    CHECK_EQ_INT(transport_recv(router, peer, sizeof peer, &m, 10000, &err), CS_OK);
    CHECK_EQ_INT(m.h.type, MSG_READY);
    CHECK_EQ_INT(m.u.ready.layer_end, 8);
    msg_free(&m);
    /* the step over the edge equals what the child generated */
    struct rnd r;
    struct msg want;
    rnd_init(&r, STEP_SEED);
    rnd_msg(&r, &want, MSG_STEP, 2);
    CHECK_EQ_INT(transport_recv(pull, NULL, 0, &m, 10000, &err), CS_OK);
    CHECK(msg_equal(&want, &m, NULL));
    msg_free(&m);
    rnd_release(&r);
    /* heartbeats through the edge-triggered fd, garbage skipped */
    struct drained d = {0};
    drain_heartbeats(router, &d);
    CHECK_EQ_INT(d.n, N_HEARTBEATS);
    for (int i = 0; i < N_HEARTBEATS && i < d.n; i++)
        CHECK_EQ_INT(d.seqs[i], i);
    /* nothing more: a bounded wait times out */
    int64_t t0 = ms_now();
    CHECK_EQ_INT(transport_recv(router, peer, sizeof peer, &m, 50, &err), CS_ETIMEOUT);
    CHECK(ms_now() - t0 >= 45);
    msg_init(&m, MSG_SHUTDOWN, 0, MSG_SENDER_COORD);
    CHECK_EQ_INT(transport_send(router, "w1", &m, 5000, &err), CS_OK);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    transport_close(pull);
    transport_close(router);
    transport_context_destroy(ctx);
}

/* A PUSH that connects before its PULL is bound (the next stage still
 * loading) retries within a few ms: the queued step arrives soon after the
 * bind, not after libzmq's default 100-200 ms reconnect interval. */
static void test_transport_push_before_bind(void)
{
    char run[128];
    snprintf(run, sizeof run, "%s/run3", tmp_base);
    struct cs_error err = {0};
    CHECK_EQ_INT(transport_rundir_prepare(run, &err), CS_OK);
    void *ctx = NULL, *push = NULL, *pull = NULL;
    CHECK_EQ_INT(transport_context_create(&ctx, &err), CS_OK);
    CHECK_EQ_INT(transport_push_connect(ctx, run, 3, &push, &err), CS_OK);
    struct msg m, got;
    msg_init(&m, MSG_SHUTDOWN, 7, 2);
    CHECK_EQ_INT(transport_send(push, NULL, &m, 1000, &err), CS_OK);   /* queued */
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);   /* the first connect attempt has failed by now */
    CHECK_EQ_INT(transport_pull_bind(ctx, run, 3, &pull, &err), CS_OK);
    int64_t t0 = ms_now();
    CHECK_EQ_INT(transport_recv(pull, NULL, 0, &got, 5000, &err), CS_OK);
    int64_t took = ms_now() - t0;
    CHECK(took < 60);
    if (took >= 60)
        fprintf(stderr, "  the queued message arrived %lld ms after the bind\n", (long long)took);
    CHECK_EQ_INT(got.h.type, MSG_SHUTDOWN);
    CHECK(got.h.step_id == 7);
    msg_free(&got);
    transport_close(push);
    transport_close(pull);
    transport_context_destroy(ctx);
}

int main(void)
{
    snprintf(tmp_base, sizeof tmp_base, "/tmp/cs-transport-XXXXXX");
    if (!mkdtemp(tmp_base)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_transport_rundir);
    RUN(test_transport_exchange);
    RUN(test_transport_push_before_bind);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_base);
    return test_report();
}
