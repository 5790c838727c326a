/* test_edge.c - proves that worker/edge.c carries hidden states intact from
 * a writer process to a reader process through a ring of several slots (in
 * order, with the writer blocked while the ring is full), converts fp32 to
 * fp16 and back exactly as common/half.h does, refuses a wrong step id or a
 * slot that is not ready, reclaims a segment left by a dead creator or with
 * an invalid header while refusing one whose creator lives, unlinks the
 * segment when its creator closes it, calls the host-registration hooks,
 * and carries values written straight into a slot (edge_slot_data, publish)
 * while an aborted slot is never seen by the reader. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/half.h"
#include "tests/test_util.h"
#include "worker/edge.h"

static char name[EDGE_NAME_MAX];

/* the value every writer puts at (step, token, i) */
static float value_at(uint64_t step, int t, int i)
{
    uint32_t h = (uint32_t)(step * 2654435761u) ^ (uint32_t)(t * 40503) ^ (uint32_t)(i * 97);
    return (float)(int32_t)(h % 20001 - 10000) / 128.0f;
}

static int tokens_of(uint64_t step, int max_tokens)
{
    return (int)(step * 7 % (uint64_t)max_tokens) + 1;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static bool shm_exists(const char *n)
{
    int fd = shm_open(n, O_RDONLY, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

/* Writer process: N_STEPS steps through the ring, notifying over a pipe.
 * Returns the number of times it found the ring full, or -1 on failure. */
#define N_STEPS 60
struct note {
    int32_t slot;
    uint64_t step;
};

static int writer_child(int wfd)
{
    struct edge *e;
    struct cs_error err = {0};
    if (edge_open(&e, name, NULL, &err)) {
        fprintf(stderr, "writer: %s\n", err.msg);
        return -1;
    }
    const struct edge_config *c = edge_config_get(e);
    float *buf = malloc((size_t)c->max_tokens * c->hidden * sizeof(float));
    int full = 0;
    for (uint64_t step = 1; step <= N_STEPS; step++) {
        int n = tokens_of(step, c->max_tokens), slot = -1, rc;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < c->hidden; i++)
                buf[(size_t)t * c->hidden + i] = value_at(step, t, i);
        int waited = 0;
        while ((rc = edge_slot_acquire(e, &slot)) == CS_EAGAIN && waited < 5000000) {
            if (waited == 0)
                full++;
            sleep_us(100);
            waited += 100;
        }
        struct note note = {slot, step};
        if (rc || edge_write(e, slot, step, buf, n) || write(wfd, &note, sizeof note) != sizeof note) {
            fprintf(stderr, "writer: step %llu failed\n", (unsigned long long)step);
            return -1;
        }
    }
    free(buf);
    edge_close(e);
    return full;
}

static void test_edge_ring(void)
{
    struct edge *e;
    struct cs_error err = {0};
    struct edge_config cfg = {.n_slots = 3, .max_tokens = 33, .hidden = 40, .dtype = CS_DTYPE_F32};
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_OK);
    if (!e)
        return;
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int full = writer_child(fds[1]);
        struct note end = {-1, (uint64_t)(int64_t)full};
        if (write(fds[1], &end, sizeof end) != sizeof end)
            _exit(2);
        _exit(full < 0 ? 1 : 0);
    }
    close(fds[1]);
    float *out = malloc((size_t)cfg.max_tokens * cfg.hidden * sizeof(float));
    int bad = 0, got = 0, prev_slot = -1;
    for (;;) {
        struct note note;
        if (read(fds[0], &note, sizeof note) != sizeof note)
            break;
        if (note.slot < 0) {
            /* the reader was slow for the first steps: the ring must have filled */
            CHECK((int64_t)note.step >= 1);
            break;
        }
        if (got < 6)
            sleep_us(20000); /* let the writer run into a full ring */
        CHECK_EQ_INT(note.slot, (prev_slot + 1) % cfg.n_slots); /* ring order */
        prev_slot = note.slot;
        int n = 0;
        CHECK_EQ_INT(edge_read(e, note.slot, note.step, out, &n, &err), CS_OK);
        CHECK_EQ_INT(n, tokens_of(note.step, cfg.max_tokens));
        for (int t = 0; t < n; t++)
            for (int i = 0; i < cfg.hidden; i++)
                bad += out[(size_t)t * cfg.hidden + i] != value_at(note.step, t, i);
        /* a wrong step id is refused */
        CHECK_EQ_INT(edge_read(e, note.slot, note.step + 1000, out, &n, &err), CS_EPROTO);
        CHECK(strstr(err.msg, "expected step") != NULL);
        /* (that a released slot can be neither read nor released again is
         * checked in test_edge_direct_and_abort: here the blocked writer may
         * take the slot back and publish the next step in it at once) */
        CHECK_EQ_INT(edge_release(e, note.slot), CS_OK);
        got++;
    }
    CHECK_EQ_INT(got, N_STEPS);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(edge_slot_seq(e, 0), N_STEPS / 3);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fds[0]);
    free(out);
    edge_close(e);
    CHECK(!shm_exists(name)); /* the creator's close unlinks */
}

static void test_edge_fp16(void)
{
    struct edge *e;
    struct cs_error err = {0};
    struct edge_config cfg = {.n_slots = 2, .max_tokens = 4, .hidden = 256, .dtype = CS_DTYPE_F16};
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_OK);
    if (!e)
        return;
    CHECK_EQ_INT(edge_slot_bytes(e), 4 * 256 * 2);
    float in[4 * 256], out[4 * 256];
    for (int i = 0; i < 4 * 256; i++)
        in[i] = (i % 2 ? -1.0f : 1.0f) * (float)i * 0.37f + 1e-3f * (float)(i % 7);
    in[0] = 65504.0f;   /* fp16 max */
    in[1] = 1e-7f;      /* subnormal in fp16 */
    in[2] = 1e6f;       /* overflows to inf */
    int slot, n;
    CHECK_EQ_INT(edge_slot_acquire(e, &slot), CS_OK);
    CHECK_EQ_INT(edge_write(e, slot, 5, in, 4), CS_OK);
    const uint16_t *raw;
    const void *data;
    CHECK_EQ_INT(edge_peek(e, slot, 5, &data, &n, &err), CS_OK);
    raw = data;
    int bad = 0;
    for (int i = 0; i < 4 * 256; i++)
        bad += raw[i] != cs_float_to_half(in[i]);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(edge_read(e, slot, 5, out, &n, &err), CS_OK);
    CHECK_EQ_INT(n, 4);
    bad = 0;
    for (int i = 0; i < 4 * 256; i++) {
        float want = cs_half_to_float(cs_float_to_half(in[i]));
        bad += memcmp(&out[i], &want, 4) != 0;
        if (i >= 3 && fabsf(in[i]) > 1e-2f)
            bad += fabsf(out[i] - in[i]) > fabsf(in[i]) * 1e-3f;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(out[0] == 65504.0f && out[1] > 0.0f && isinf(out[2]));
    /* the second slot is next; the first is busy until released */
    int slot2;
    CHECK_EQ_INT(edge_slot_acquire(e, &slot2), CS_OK);
    CHECK_EQ_INT(slot2, (slot + 1) % 2);
    CHECK_EQ_INT(edge_slot_acquire(e, &slot), CS_EAGAIN);
    CHECK_EQ_INT(edge_write(e, slot2, 6, in, 5), CS_EINVAL); /* more than max_tokens */
    CHECK_EQ_INT(edge_read(e, slot2, 6, out, &n, &err), CS_EPROTO); /* not published */
    edge_reset(e);
    CHECK_EQ_INT(edge_slot_acquire(e, &slot), CS_OK);
    CHECK_EQ_INT(slot, 0);
    edge_close(e);
}

/* The worker's zero-copy path: values written straight into an acquired
 * slot's data area, published, read in place by a second mapping (the
 * reader's), released; a slot whose copy failed is aborted: FREE again,
 * never visible to the reader, and the ring goes on past it. */
static void test_edge_direct_and_abort(void)
{
    struct edge *w, *r;
    struct cs_error err = {0};
    struct edge_config cfg = {.n_slots = 2, .max_tokens = 3, .hidden = 8, .dtype = CS_DTYPE_F32};
    CHECK_EQ_INT(edge_create(&w, name, &cfg, NULL, &err), CS_OK);
    if (!w)
        return;
    CHECK_EQ_INT(edge_open(&r, name, NULL, &err), CS_OK);
    if (!r) {
        edge_close(w);
        return;
    }
    int slot, slot2, n = 0;
    CHECK_EQ_INT(edge_slot_acquire(w, &slot), CS_OK);
    float *dst = edge_slot_data(w, slot);
    for (int i = 0; i < 2 * 8; i++)
        dst[i] = value_at(9, i / 8, i % 8);
    CHECK_EQ_INT(edge_publish(w, slot, 9, 2), CS_OK);
    CHECK_EQ_INT(edge_publish(w, slot, 9, 2), CS_EINVAL);   /* already published */
    const void *data = NULL;
    CHECK_EQ_INT(edge_peek(r, slot, 9, &data, &n, &err), CS_OK);
    CHECK_EQ_INT(n, 2);
    int bad = 0;
    for (int i = 0; data && i < 2 * 8; i++)
        bad += ((const float *)data)[i] != value_at(9, i / 8, i % 8);
    CHECK_EQ_INT(bad, 0);
    /* abort: only a slot being written */
    CHECK_EQ_INT(edge_slot_abort(w, slot), CS_EINVAL);       /* READY: the reader's */
    CHECK_EQ_INT(edge_slot_acquire(w, &slot2), CS_OK);
    CHECK_EQ_INT(slot2, (slot + 1) % 2);
    uint64_t seq = edge_slot_seq(w, slot2);
    CHECK_EQ_INT(edge_slot_abort(w, slot2), CS_OK);
    CHECK_EQ_INT(edge_slot_abort(w, slot2), CS_EINVAL);      /* FREE already */
    CHECK_EQ_INT(edge_slot_abort(w, 7), CS_EINVAL);          /* out of range */
    CHECK(edge_slot_seq(w, slot2) == seq);                   /* never published */
    CHECK_EQ_INT(edge_peek(r, slot2, 10, &data, &n, &err), CS_EPROTO);
    CHECK_EQ_INT(edge_release(r, slot2), CS_EINVAL);
    /* the ring wraps to the slot still held by the reader, then past it once released */
    CHECK_EQ_INT(edge_slot_acquire(w, &slot2), CS_EAGAIN);
    CHECK_EQ_INT(edge_release(r, slot), CS_OK);
    /* a released slot can not be read again nor released twice */
    CHECK_EQ_INT(edge_peek(r, slot, 9, &data, &n, &err), CS_EPROTO);
    CHECK_EQ_INT(edge_release(r, slot), CS_EINVAL);
    CHECK_EQ_INT(edge_slot_acquire(w, &slot2), CS_OK);
    CHECK_EQ_INT(slot2, slot);
    CHECK_EQ_INT(edge_slot_acquire(w, &slot2), CS_OK);       /* the aborted one is FREE */
    CHECK_EQ_INT(slot2, (slot + 1) % 2);
    edge_close(r);
    edge_close(w);
}

static void test_edge_stale_reclaim(void)
{
    struct cs_error err = {0};
    struct edge_config cfg = {.n_slots = 2, .max_tokens = 8, .hidden = 16, .dtype = CS_DTYPE_F32};
    /* a creator that dies without closing */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct edge *e;
        _exit(edge_create(&e, name, &cfg, NULL, NULL) == CS_OK ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(shm_exists(name)); /* left behind */
    struct edge *e = NULL, *e2 = NULL;
    /* attaching still works (the data is there), creating reclaims */
    CHECK_EQ_INT(edge_open(&e2, name, NULL, &err), CS_OK);
    edge_close(e2);
    CHECK(shm_exists(name)); /* a non-owner's close does not unlink */
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_OK);
    /* while its creator lives, a second create is refused */
    CHECK_EQ_INT(edge_create(&e2, name, &cfg, NULL, &err), CS_EINVAL);
    CHECK(strstr(err.msg, "in use by live pid") != NULL);
    edge_close(e);
    CHECK(!shm_exists(name));

    /* a segment with a garbage header */
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 100000) == 0);
    CHECK(write(fd, "garbage", 7) == 7);
    close(fd);
    CHECK_EQ_INT(edge_open(&e2, name, NULL, &err), CS_EFORMAT);
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_OK);
    edge_close(e);
    /* and one too small for a header */
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ_INT(edge_open(&e2, name, NULL, &err), CS_EFORMAT);
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_OK);
    /* mode 0600 */
    fd = shm_open(name, O_RDONLY, 0);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & 0777) == 0600);
    close(fd);
    edge_close(e);
    CHECK_EQ_INT(edge_open(&e2, name, NULL, &err), CS_ENOTFOUND);
}

struct hook_log {
    int registered, unregistered;
    void *ptr;
    size_t bytes;
    int fail;
};

static int hook_register(void *ctx, void *ptr, size_t bytes)
{
    struct hook_log *h = ctx;
    if (h->fail)
        return CS_ECUDA;
    h->registered++;
    h->ptr = ptr;
    h->bytes = bytes;
    return CS_OK;
}

static void hook_unregister(void *ctx, void *ptr)
{
    struct hook_log *h = ctx;
    h->unregistered += ptr == h->ptr;
}

static void test_edge_hooks(void)
{
    struct hook_log log = {0};
    struct edge_hooks hooks = {hook_register, hook_unregister, &log};
    struct edge_config cfg = {.n_slots = 4, .max_tokens = 100, .hidden = 64, .dtype = CS_DTYPE_F32};
    struct cs_error err = {0};
    struct edge *e;
    CHECK_EQ_INT(edge_create(&e, name, &cfg, &hooks, &err), CS_OK);
    CHECK_EQ_INT(log.registered, 1);
    CHECK(log.bytes >= 4 * 100 * 64 * sizeof(float) && log.bytes % 4096 == 0);
    CHECK(edge_slot_data(e, 0) != NULL && edge_slot_data(e, 4) == NULL);
    CHECK((uintptr_t)edge_slot_data(e, 1) % 4096 == 0);
    edge_close(e);
    CHECK_EQ_INT(log.unregistered, 1);
    /* a failing registration fails the create and leaves nothing behind */
    log.fail = 1;
    CHECK_EQ_INT(edge_create(&e, name, &cfg, &hooks, &err), CS_ECUDA);
    CHECK(!shm_exists(name));
    /* bad geometry and names */
    cfg.n_slots = 0;
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_EINVAL);
    cfg.n_slots = 2;
    cfg.dtype = CS_DTYPE_Q8_0;
    CHECK_EQ_INT(edge_create(&e, name, &cfg, NULL, &err), CS_EINVAL);
    cfg.dtype = CS_DTYPE_F32;
    CHECK_EQ_INT(edge_create(&e, "no-slash", &cfg, NULL, &err), CS_EINVAL);
}

static void test_edge_name(void)
{
    char a[EDGE_NAME_MAX], b[EDGE_NAME_MAX], c[EDGE_NAME_MAX];
    CHECK_EQ_INT(edge_name(a, sizeof a, "/run/cmpserve", 0), CS_OK);
    CHECK_EQ_INT(edge_name(b, sizeof b, "/run/cmpserve", 1), CS_OK);
    CHECK_EQ_INT(edge_name(c, sizeof c, "/run/cmpserve2", 0), CS_OK);
    CHECK(strncmp(a, "/cmpserve-", 10) == 0 && strstr(a, "-edge-0") != NULL);
    CHECK(strcmp(a, b) != 0 && strcmp(a, c) != 0);
    CHECK_EQ_INT(edge_name(a, 8, "/run/cmpserve", 0), CS_ERANGE);
}

int main(void)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/test-edge-%d", (int)getpid());
    CHECK_EQ_INT(edge_name(name, sizeof name, dir, 0), CS_OK);
    shm_unlink(name);
    RUN(test_edge_name);
    RUN(test_edge_ring);
    RUN(test_edge_fp16);
    RUN(test_edge_direct_and_abort);
    RUN(test_edge_stale_reclaim);
    RUN(test_edge_hooks);
    shm_unlink(name);
    return test_report();
}
