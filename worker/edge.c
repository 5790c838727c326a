/* edge.c - the shared-memory ring between pipeline stages: creation with
 * stale-segment reclaim, attach with header validation, and the lock-free
 * slot hand-over between one writer and one reader (see edge.h). */
#include "edge.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/gguf.h"
#include "../common/half.h"
#include "../common/log.h"

#define EDGE_PAGE 4096u

enum { SLOT_FREE = 0, SLOT_WRITING = 1, SLOT_READY = 2 };

/* one cache line per slot so writer and reader of different slots do not share */
struct edge_slot_ctl {
    _Atomic uint32_t state;
    uint32_t n_tokens;
    uint64_t step_id;
    _Atomic uint64_t seq;
    uint8_t pad[40];
};

struct edge_shm {
    _Atomic uint32_t magic;    /* written last by the creator */
    uint32_t version;
    uint32_t n_slots;
    uint32_t dtype;
    uint32_t max_tokens;
    uint32_t hidden;
    uint64_t slot_bytes;       /* max_tokens * hidden * value size */
    uint64_t slot_stride;      /* slot_bytes rounded up to a page */
    uint64_t data_offset;      /* first slot, page-aligned */
    uint64_t total_bytes;
    int32_t owner_pid;         /* the creator; the segment is stale once it is dead */
    _Atomic uint32_t cursor;   /* writer: the next slot to acquire */
    uint8_t pad[8];
    struct edge_slot_ctl slots[EDGE_MAX_SLOTS];
};

_Static_assert(sizeof(struct edge_slot_ctl) == 64, "slot control is one cache line");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
               "shared-memory atomics must be lock-free");

struct edge {
    struct edge_shm *shm;
    void *base;
    size_t bytes;
    bool owner;
    struct edge_config cfg;
    struct edge_hooks hooks;
    char name[EDGE_NAME_MAX];
};

int edge_name(char *out, size_t cap, const char *rundir, int index)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (const char *p = rundir; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    int n = snprintf(out, cap, "/cmpserve-%016llx-edge-%d", (unsigned long long)h, index);
    return n < 0 || (size_t)n >= cap ? CS_ERANGE : CS_OK;
}

static size_t value_bytes(uint32_t dtype)
{
    return dtype == CS_DTYPE_F16 ? 2 : 4;
}

static size_t round_page(size_t n)
{
    return (n + EDGE_PAGE - 1) / EDGE_PAGE * EDGE_PAGE;
}

static int config_check(const struct edge_config *c, struct cs_error *err)
{
    if (c->n_slots < 1 || c->n_slots > EDGE_MAX_SLOTS || c->max_tokens < 1 ||
        c->max_tokens > EDGE_MAX_TOKENS || c->hidden < 1 || c->hidden > EDGE_MAX_HIDDEN ||
        (c->dtype != CS_DTYPE_F32 && c->dtype != CS_DTYPE_F16))
        return cs_error_set(err, CS_EINVAL, "edge: bad geometry: %d slots (1..%d), %d tokens "
                            "(1..%d), hidden %d (1..%d), dtype %u (f32 0 or f16 1)", c->n_slots,
                            EDGE_MAX_SLOTS, c->max_tokens, EDGE_MAX_TOKENS, c->hidden,
                            EDGE_MAX_HIDDEN, c->dtype);
    return CS_OK;
}

/* Check a mapped header against the segment size; fills cfg. */
static int header_check(const struct edge_shm *s, size_t size, struct edge_config *cfg)
{
    if (size < sizeof *s || atomic_load(&s->magic) != EDGE_MAGIC || s->version != EDGE_VERSION)
        return CS_EFORMAT;
    *cfg = (struct edge_config){(int)s->n_slots, (int)s->max_tokens, (int)s->hidden, s->dtype};
    if (s->n_slots > EDGE_MAX_SLOTS || s->max_tokens > EDGE_MAX_TOKENS ||
        s->hidden > EDGE_MAX_HIDDEN || config_check(cfg, NULL))
        return CS_EFORMAT;
    uint64_t slot_bytes = (uint64_t)s->max_tokens * s->hidden * value_bytes(s->dtype);
    if (s->slot_bytes != slot_bytes || s->slot_stride != round_page(slot_bytes) ||
        s->data_offset != round_page(sizeof *s) ||
        s->total_bytes != s->data_offset + (uint64_t)s->n_slots * s->slot_stride ||
        s->total_bytes != size)
        return CS_EFORMAT;
    return CS_OK;
}

/* ================================================================
 * Map, create, open, close
 * ================================================================ */

static int map_fd(struct edge *e, int fd, size_t bytes, struct cs_error *err)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return cs_error_set(err, CS_EIO, "edge %s: mmap of %zu bytes: %s", e->name, bytes,
                            strerror(errno));
    e->base = p;
    e->shm = p;
    e->bytes = bytes;
    if (e->hooks.host_register) {
        int rc = e->hooks.host_register(e->hooks.ctx, p, bytes);
        if (rc) {
            munmap(p, bytes);
            e->base = NULL;
            return cs_error_set(err, rc, "edge %s: host registration of %zu bytes failed: %s",
                                e->name, bytes, cs_strerror(rc));
        }
    }
    return CS_OK;
}

/* An existing segment: 1 when it is stale (dead owner or invalid header), 0
 * when in use, negative when it cannot be judged (refuse). */
static int segment_stale(const char *name, int *owner, struct cs_error *err)
{
    *owner = 0;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return errno == ENOENT ? 1 : cs_error_set(err, CS_EINVAL, "edge %s exists and cannot be "
                                                  "opened: %s", name, strerror(errno));
    struct stat st;
    int rc = 1;
    if (fstat(fd, &st) != 0) {
        rc = cs_error_set(err, CS_EIO, "edge %s: fstat: %s", name, strerror(errno));
    } else if (st.st_uid != geteuid()) {
        rc = cs_error_set(err, CS_EINVAL, "edge %s belongs to uid %u", name, (unsigned)st.st_uid);
    } else if ((size_t)st.st_size >= sizeof(struct edge_shm)) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            struct edge_config cfg;
            const struct edge_shm *s = p;
            if (header_check(s, (size_t)st.st_size, &cfg) == CS_OK) {
                *owner = s->owner_pid;
                bool dead = s->owner_pid <= 0 || (kill(s->owner_pid, 0) != 0 && errno == ESRCH);
                rc = dead ? 1 : 0;
            }
            munmap(p, (size_t)st.st_size);
        }
    }
    close(fd);
    return rc;
}

static int create_fd(const char *name, int *fd_out, struct cs_error *err)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            fchmod(fd, 0600); /* whatever the umask */
            *fd_out = fd;
            return CS_OK;
        }
        if (errno != EEXIST)
            return cs_error_set(err, CS_EIO, "edge %s: shm_open: %s", name, strerror(errno));
        int owner, stale = segment_stale(name, &owner, err);
        if (stale < 0)
            return stale;
        if (stale == 0)
            return cs_error_set(err, CS_EINVAL, "edge %s is in use by live pid %d", name, owner);
        LOG_WARN("edge", "reclaiming stale segment %s (owner pid %d %s)", name, owner,
                 owner > 0 ? "is dead" : "unknown, invalid header");
        shm_unlink(name);
    }
    return cs_error_set(err, CS_EIO, "edge %s: could not reclaim the existing segment", name);
}

static int edge_alloc(struct edge **out, const char *name, const struct edge_hooks *hooks,
                      struct cs_error *err)
{
    if (!name || name[0] != '/' || strlen(name) >= EDGE_NAME_MAX || strchr(name + 1, '/'))
        return cs_error_set(err, CS_EINVAL, "edge: bad name \"%s\" (\"/x\", < %d bytes)",
                            name ? name : "", EDGE_NAME_MAX);
    struct edge *e = calloc(1, sizeof *e);
    if (!e)
        return cs_error_set(err, CS_ENOMEM, "edge: out of memory");
    snprintf(e->name, sizeof e->name, "%s", name);
    if (hooks)
        e->hooks = *hooks;
    *out = e;
    return CS_OK;
}

static void header_init(struct edge_shm *s, const struct edge_config *c)
{
    s->version = EDGE_VERSION;
    s->n_slots = (uint32_t)c->n_slots;
    s->dtype = c->dtype;
    s->max_tokens = (uint32_t)c->max_tokens;
    s->hidden = (uint32_t)c->hidden;
    s->slot_bytes = (uint64_t)c->max_tokens * (uint64_t)c->hidden * value_bytes(c->dtype);
    s->slot_stride = round_page(s->slot_bytes);
    s->data_offset = round_page(sizeof *s);
    s->total_bytes = s->data_offset + (uint64_t)c->n_slots * s->slot_stride;
    s->owner_pid = (int32_t)getpid();
    atomic_store(&s->cursor, 0);
    for (int i = 0; i < EDGE_MAX_SLOTS; i++) {
        atomic_store(&s->slots[i].state, SLOT_FREE);
        atomic_store(&s->slots[i].seq, 0);
    }
    atomic_store_explicit(&s->magic, EDGE_MAGIC, memory_order_release);
}

int edge_create(struct edge **out, const char *name, const struct edge_config *cfg,
                const struct edge_hooks *hooks, struct cs_error *err)
{
    *out = NULL;
    struct edge *e = NULL;
    int rc = config_check(cfg, err), fd = -1;
    if (rc || (rc = edge_alloc(&e, name, hooks, err)))
        return rc;
    size_t bytes = round_page(sizeof(struct edge_shm)) +
                   (size_t)cfg->n_slots *
                       round_page((size_t)cfg->max_tokens * cfg->hidden * value_bytes(cfg->dtype));
    if ((rc = create_fd(name, &fd, err))) {
        free(e);
        return rc;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        rc = cs_error_set(err, CS_EIO, "edge %s: ftruncate to %zu bytes: %s", name, bytes,
                          strerror(errno));
    } else {
        rc = map_fd(e, fd, bytes, err);
    }
    close(fd);
    if (rc) {
        shm_unlink(name);
        free(e);
        return rc;
    }
    e->owner = true;
    e->cfg = *cfg;
    header_init(e->shm, cfg);
    *out = e;
    return CS_OK;
}

int edge_open(struct edge **out, const char *name, const struct edge_hooks *hooks,
              struct cs_error *err)
{
    *out = NULL;
    struct edge *e = NULL;
    int rc = edge_alloc(&e, name, hooks, err);
    if (rc)
        return rc;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        int e2 = errno;
        free(e);
        return cs_error_set(err, e2 == ENOENT ? CS_ENOTFOUND : CS_EIO, "edge %s: %s", name,
                            strerror(e2));
    }
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct edge_shm))
        rc = cs_error_set(err, CS_EFORMAT, "edge %s: %lld bytes, too small for a header", name,
                          (long long)st.st_size);
    else
        rc = map_fd(e, fd, (size_t)st.st_size, err);
    close(fd);
    if (rc == CS_OK && header_check(e->shm, e->bytes, &e->cfg) != CS_OK)
        rc = cs_error_set(err, CS_EFORMAT, "edge %s: invalid header (magic, version or geometry "
                          "inconsistent with its %zu bytes)", name, e->bytes);
    if (rc) {
        edge_close(e);
        return rc;
    }
    *out = e;
    return CS_OK;
}

void edge_close(struct edge *e)
{
    if (!e)
        return;
    if (e->base) {
        if (e->hooks.host_unregister)
            e->hooks.host_unregister(e->hooks.ctx, e->base);
        munmap(e->base, e->bytes);
    }
    if (e->owner)
        shm_unlink(e->name);
    free(e);
}

const struct edge_config *edge_config_get(const struct edge *e)
{
    return &e->cfg;
}

size_t edge_slot_bytes(const struct edge *e)
{
    return (size_t)e->shm->slot_bytes;
}

/* ================================================================
 * Slots
 * ================================================================ */

static struct edge_slot_ctl *slot_ctl(struct edge *e, int slot)
{
    return slot >= 0 && slot < e->cfg.n_slots ? &e->shm->slots[slot] : NULL;
}

int edge_slot_acquire(struct edge *e, int *slot)
{
    uint32_t k = atomic_load(&e->shm->cursor) % (uint32_t)e->cfg.n_slots;
    uint32_t expected = SLOT_FREE;
    if (!atomic_compare_exchange_strong_explicit(&e->shm->slots[k].state, &expected, SLOT_WRITING,
                                                 memory_order_acquire, memory_order_relaxed))
        return CS_EAGAIN;
    atomic_store(&e->shm->cursor, (k + 1) % (uint32_t)e->cfg.n_slots);
    *slot = (int)k;
    return CS_OK;
}

void *edge_slot_data(struct edge *e, int slot)
{
    if (!slot_ctl(e, slot))
        return NULL;
    return (uint8_t *)e->base + e->shm->data_offset + (size_t)slot * e->shm->slot_stride;
}

int edge_publish(struct edge *e, int slot, uint64_t step_id, int n_tokens)
{
    struct edge_slot_ctl *c = slot_ctl(e, slot);
    if (!c || n_tokens < 1 || n_tokens > e->cfg.max_tokens ||
        atomic_load_explicit(&c->state, memory_order_relaxed) != SLOT_WRITING)
        return CS_EINVAL;
    c->step_id = step_id;
    c->n_tokens = (uint32_t)n_tokens;
    atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed);
    atomic_store_explicit(&c->state, SLOT_READY, memory_order_release);
    return CS_OK;
}

int edge_slot_abort(struct edge *e, int slot)
{
    struct edge_slot_ctl *c = slot_ctl(e, slot);
    uint32_t expected = SLOT_WRITING;
    if (!c || !atomic_compare_exchange_strong_explicit(&c->state, &expected, SLOT_FREE,
                                                       memory_order_release, memory_order_relaxed))
        return CS_EINVAL;
    return CS_OK;
}

int edge_write(struct edge *e, int slot, uint64_t step_id, const float *hidden, int n_tokens)
{
    struct edge_slot_ctl *c = slot_ctl(e, slot);
    if (!c || !hidden || n_tokens < 1 || n_tokens > e->cfg.max_tokens ||
        atomic_load_explicit(&c->state, memory_order_relaxed) != SLOT_WRITING)
        return CS_EINVAL;
    size_t n = (size_t)n_tokens * (size_t)e->cfg.hidden;
    void *dst = edge_slot_data(e, slot);
    if (e->cfg.dtype == CS_DTYPE_F16) {
        uint16_t *h = dst;
        for (size_t i = 0; i < n; i++)
            h[i] = cs_float_to_half(hidden[i]);
    } else {
        memcpy(dst, hidden, n * sizeof(float));
    }
    return edge_publish(e, slot, step_id, n_tokens);
}

int edge_peek(struct edge *e, int slot, uint64_t step_id, const void **data, int *n_tokens,
              struct cs_error *err)
{
    struct edge_slot_ctl *c = slot_ctl(e, slot);
    if (!c)
        return cs_error_set(err, CS_EINVAL, "edge %s: slot %d out of range [0, %d)", e->name,
                            slot, e->cfg.n_slots);
    if (atomic_load_explicit(&c->state, memory_order_acquire) != SLOT_READY)
        return cs_error_set(err, CS_EPROTO, "edge %s: slot %d is not ready for step %llu",
                            e->name, slot, (unsigned long long)step_id);
    if (c->step_id != step_id || c->n_tokens < 1 || c->n_tokens > (uint32_t)e->cfg.max_tokens)
        return cs_error_set(err, CS_EPROTO, "edge %s: slot %d holds step %llu (%u tokens), "
                            "expected step %llu", e->name, slot, (unsigned long long)c->step_id,
                            c->n_tokens, (unsigned long long)step_id);
    *data = edge_slot_data(e, slot);
    *n_tokens = (int)c->n_tokens;
    return CS_OK;
}

int edge_read(struct edge *e, int slot, uint64_t step_id, float *out, int *n_tokens,
              struct cs_error *err)
{
    const void *src;
    int rc = edge_peek(e, slot, step_id, &src, n_tokens, err);
    if (rc)
        return rc;
    size_t n = (size_t)*n_tokens * (size_t)e->cfg.hidden;
    if (e->cfg.dtype == CS_DTYPE_F16) {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++)
            out[i] = cs_half_to_float(h[i]);
    } else {
        memcpy(out, src, n * sizeof(float));
    }
    return CS_OK;
}

int edge_release(struct edge *e, int slot)
{
    struct edge_slot_ctl *c = slot_ctl(e, slot);
    uint32_t expected = SLOT_READY;
    if (!c || !atomic_compare_exchange_strong_explicit(&c->state, &expected, SLOT_FREE,
                                                       memory_order_release, memory_order_relaxed))
        return CS_EINVAL;
    return CS_OK;
}

uint64_t edge_slot_seq(const struct edge *e, int slot)
{
    if (slot < 0 || slot >= e->cfg.n_slots)
        return 0;
    return atomic_load(&e->shm->slots[slot].seq);
}

void edge_reset(struct edge *e)
{
    for (int i = 0; i < e->cfg.n_slots; i++)
        atomic_store(&e->shm->slots[i].state, SLOT_FREE);
    atomic_store(&e->shm->cursor, 0);
}
