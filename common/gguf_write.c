/* gguf_write.c - GGUF v3 writer for tools and tests (`cmpserve mkmodel`).
 *
 * Owns: collecting metadata (each value kept encoded as in the file, keys in
 * insertion order; setting a key again replaces its value in place) and
 * tensor descriptions (data pointers or fill callbacks, never copies), then
 * streaming the file to PATH.tmp with large buffered writes and renaming it.
 * Offsets are computed up front from the tensor sizes and the alignment, so
 * tensor data goes straight to disk in order. The reader is gguf.c. */
#include "gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define WRITE_BUF_BYTES (8u << 20)

struct wkv {
    char *key;
    uint64_t key_len;
    uint32_t type;
    uint8_t *val; /* encoded value (after the type field) */
    uint64_t val_len;
};

struct wtensor {
    char *name;
    uint64_t name_len;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset;
    const void *data;
    gguf_fill_cb fill;
    void *fill_ctx;
};

struct gguf_writer {
    struct wkv *kv;
    size_t n_kv, cap_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
};

static const uint8_t scalar_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,    [GGUF_TYPE_UINT16] = 2,
    [GGUF_TYPE_INT16] = 2,   [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4,
    [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,    [GGUF_TYPE_UINT64] = 8,
    [GGUF_TYPE_INT64] = 8,   [GGUF_TYPE_FLOAT64] = 8,
};

int gguf_writer_create(struct gguf_writer **out)
{
    if (!out)
        return CS_EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? CS_OK : CS_ENOMEM;
}

void gguf_writer_destroy(struct gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Grow an array of elem-size items so that one more fits. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return CS_OK;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return CS_ENOMEM;
    *arr = p;
    *cap = nc;
    return CS_OK;
}

/* Set key to an encoded value; takes ownership of val (freed on failure). */
static int writer_set(struct gguf_writer *w, const char *key, uint32_t type, uint8_t *val,
                      uint64_t val_len)
{
    if (!w || !key || type >= GGUF_TYPE_COUNT) {
        free(val);
        return CS_EINVAL;
    }
    size_t klen = strlen(key);
    for (size_t i = 0; i < w->n_kv; i++) {
        if (w->kv[i].key_len == klen && memcmp(w->kv[i].key, key, klen) == 0) {
            free(w->kv[i].val);
            w->kv[i].type = type;
            w->kv[i].val = val;
            w->kv[i].val_len = val_len;
            return CS_OK;
        }
    }
    char *k = strdup(key);
    if (!k || grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv) != CS_OK) {
        free(k);
        free(val);
        return CS_ENOMEM;
    }
    w->kv[w->n_kv++] = (struct wkv){k, klen, type, val, val_len};
    return CS_OK;
}

static int set_copy(struct gguf_writer *w, const char *key, uint32_t type, const void *v,
                    uint64_t n)
{
    if (n > SIZE_MAX - 1)
        return CS_ENOMEM;
    uint8_t *val = malloc(n ? n : 1);
    if (!val)
        return CS_ENOMEM;
    if (n)
        memcpy(val, v, n);
    return writer_set(w, key, type, val, n);
}

int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    return set_copy(w, key, GGUF_TYPE_UINT32, &v, 4);
}

int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    return set_copy(w, key, GGUF_TYPE_INT32, &v, 4);
}

int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    return set_copy(w, key, GGUF_TYPE_UINT64, &v, 8);
}

int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    return set_copy(w, key, GGUF_TYPE_FLOAT32, &v, 4);
}

int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return set_copy(w, key, GGUF_TYPE_BOOL, &b, 1);
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return CS_EINVAL;
    uint64_t len = strlen(v);
    uint8_t *val = malloc(8 + len);
    if (!val)
        return CS_ENOMEM;
    memcpy(val, &len, 8);
    memcpy(val + 8, v, len);
    return writer_set(w, key, GGUF_TYPE_STRING, val, 8 + len);
}

int gguf_writer_set_raw(struct gguf_writer *w, const char *key, enum gguf_type type,
                        const void *value, uint64_t n_bytes)
{
    if (!value && n_bytes)
        return CS_EINVAL;
    return set_copy(w, key, type, value, n_bytes);
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                        const void *data, uint64_t n)
{
    if ((unsigned)elem_type >= GGUF_TYPE_COUNT || !scalar_size[elem_type] || (!data && n))
        return CS_EINVAL;
    uint64_t body;
    if (__builtin_mul_overflow(n, (uint64_t)scalar_size[elem_type], &body) || body > SIZE_MAX - 12)
        return CS_ENOMEM;
    uint8_t *val = malloc(12 + body);
    if (!val)
        return CS_ENOMEM;
    uint32_t et = elem_type;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    if (body)
        memcpy(val + 12, data, body);
    return writer_set(w, key, GGUF_TYPE_ARRAY, val, 12 + body);
}

int gguf_writer_set_arr_strn(struct gguf_writer *w, const char *key, const char *const *strs,
                             const uint64_t *lens, uint64_t n)
{
    if (n && (!strs || !lens))
        return CS_EINVAL;
    uint64_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if ((!strs[i] && lens[i]) || __builtin_add_overflow(total, 8 + lens[i], &total))
            return CS_EINVAL;
    }
    if (total > SIZE_MAX)
        return CS_ENOMEM;
    uint8_t *val = malloc(total), *p = val + 12;
    if (!val)
        return CS_ENOMEM;
    uint32_t et = GGUF_TYPE_STRING;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    for (uint64_t i = 0; i < n; i++) {
        memcpy(p, &lens[i], 8);
        if (lens[i])
            memcpy(p + 8, strs[i], lens[i]);
        p += 8 + lens[i];
    }
    return writer_set(w, key, GGUF_TYPE_ARRAY, val, total);
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            uint64_t n)
{
    if (n && !strs)
        return CS_EINVAL;
    uint64_t *lens = malloc((n ? n : 1) * sizeof *lens);
    if (!lens)
        return CS_ENOMEM;
    for (uint64_t i = 0; i < n; i++)
        lens[i] = strs[i] ? strlen(strs[i]) : 0;
    int rc = gguf_writer_set_arr_strn(w, key, strs, lens, n);
    free(lens);
    return rc;
}

int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
    if (!w || !kv || !kv->key.ptr || (unsigned)kv->type >= GGUF_TYPE_COUNT)
        return CS_EINVAL;
    char *key = strndup(kv->key.ptr, kv->key.len);
    if (!key)
        return CS_ENOMEM;
    int rc;
    if (kv->type == GGUF_TYPE_ARRAY) {
        /* the element type and count sit just before the first element */
        const uint8_t *start = kv->arr_data - 12;
        rc = set_copy(w, key, GGUF_TYPE_ARRAY, start, (uint64_t)(kv->arr_end - start));
    } else if (kv->type == GGUF_TYPE_STRING) {
        const uint8_t *start = (const uint8_t *)kv->val.str.ptr - 8;
        rc = set_copy(w, key, GGUF_TYPE_STRING, start, 8 + kv->val.str.len);
    } else {
        /* scalars: narrow the widened value back (little-endian host) */
        uint8_t b;
        float f;
        const void *src = &kv->val.u64;
        if (kv->type == GGUF_TYPE_BOOL) {
            b = kv->val.b ? 1 : 0;
            src = &b;
        } else if (kv->type == GGUF_TYPE_FLOAT32) {
            f = (float)kv->val.f64;
            src = &f;
        }
        rc = set_copy(w, key, kv->type, src, scalar_size[kv->type]);
    }
    free(key);
    return rc;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                           const int64_t *ne, uint32_t n_dims, const void *data,
                           gguf_fill_cb fill, void *fill_ctx)
{
    if (!w || !name || !name[0] || !ne || n_dims < 1 || n_dims > GGUF_MAX_DIMS || (!data && !fill))
        return CS_EINVAL;
    struct wtensor t = {.type = type, .n_dims = n_dims, .data = data, .fill = fill,
                        .fill_ctx = fill_ctx};
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1)
            return CS_EINVAL;
    }
    int rc = gguf_tensor_nbytes(type, t.ne, n_dims, &t.n_bytes);
    if (rc != CS_OK)
        return rc;
    t.name_len = strlen(name);
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].name_len == t.name_len && memcmp(w->t[i].name, name, t.name_len) == 0)
            return CS_EINVAL;
    }
    t.name = strdup(name);
    if (!t.name || grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t) != CS_OK) {
        free(t.name);
        return CS_ENOMEM;
    }
    w->t[w->n_t++] = t;
    return CS_OK;
}

/* ---- output ---- */

struct wout {
    FILE *f;
    uint64_t pos;
    int err; /* errno of the first failed write */
};

static void out_bytes(struct wout *o, const void *p, uint64_t n)
{
    if (o->err || !n)
        return;
    if (fwrite(p, 1, n, o->f) != n)
        o->err = errno ? errno : EIO;
    o->pos += n;
}

static void out_u32(struct wout *o, uint32_t v) { out_bytes(o, &v, 4); }
static void out_u64(struct wout *o, uint64_t v) { out_bytes(o, &v, 8); }

static void out_pad(struct wout *o, uint64_t alignment)
{
    static const uint8_t zeros[256];
    uint64_t rem = o->pos % alignment;
    for (uint64_t n = rem ? alignment - rem : 0; n > 0;) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        out_bytes(o, zeros, k);
        n -= k;
    }
}

static int writer_alignment(const struct gguf_writer *w, uint64_t *out, const char *path,
                            struct cs_error *err)
{
    *out = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0)
            continue;
        uint32_t a = 0;
        if (w->kv[i].type == GGUF_TYPE_UINT32)
            memcpy(&a, w->kv[i].val, 4);
        if (a == 0 || (a & (a - 1)))
            return cs_error_set(err, CS_EINVAL,
                                "%s: general.alignment must be a uint32 power of two", path);
        *out = a;
    }
    return CS_OK;
}

static void write_meta(struct wout *o, const struct gguf_writer *w, uint64_t alignment)
{
    out_bytes(o, "GGUF", 4);
    out_u32(o, 3);
    out_u64(o, w->n_t);
    out_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        out_u64(o, w->kv[i].key_len);
        out_bytes(o, w->kv[i].key, w->kv[i].key_len);
        out_u32(o, w->kv[i].type);
        out_bytes(o, w->kv[i].val, w->kv[i].val_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        out_u64(o, t->name_len);
        out_bytes(o, t->name, t->name_len);
        out_u32(o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            out_u64(o, (uint64_t)t->ne[d]);
        out_u32(o, t->type);
        out_u64(o, t->offset);
    }
    out_pad(o, alignment);
}

/* Write every tensor's data (filling through callbacks) with padding. */
static int write_data(struct wout *o, struct gguf_writer *w, uint64_t alignment, const char *path,
                      struct cs_error *err)
{
    void *buf = NULL;
    uint64_t buf_len = 0;
    int rc = CS_OK;
    for (size_t i = 0; i < w->n_t && rc == CS_OK && !o->err; i++) {
        struct wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (t->n_bytes > buf_len) {
                free(buf);
                buf_len = 0;
                if (t->n_bytes > SIZE_MAX || !(buf = malloc(t->n_bytes))) {
                    rc = cs_error_set(err, CS_ENOMEM, "%s: no memory for tensor %s (%" PRIu64
                                      " bytes)", path, t->name, t->n_bytes);
                    break;
                }
                buf_len = t->n_bytes;
            }
            int frc = t->fill(t->fill_ctx, buf, t->n_bytes);
            if (frc != CS_OK) {
                rc = cs_error_set(err, frc < 0 ? frc : CS_EINTERNAL,
                                  "%s: filling tensor %s failed: %s", path, t->name,
                                  cs_strerror(frc));
                break;
            }
            src = buf;
        }
        out_bytes(o, src, t->n_bytes);
        out_pad(o, alignment);
    }
    free(buf);
    return rc;
}

/* Open tmp, write everything, flush and sync it. */
static int write_tmp(struct gguf_writer *w, const char *tmp, uint64_t alignment,
                     struct cs_error *err)
{
    struct wout o = {.f = fopen(tmp, "wb")};
    if (!o.f)
        return cs_error_set(err, CS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    char *vbuf = malloc(WRITE_BUF_BYTES);
    if (vbuf)
        setvbuf(o.f, vbuf, _IOFBF, WRITE_BUF_BYTES);
    write_meta(&o, w, alignment);
    int rc = write_data(&o, w, alignment, tmp, err);
    if (fflush(o.f) != 0 && !o.err)
        o.err = errno;
    if (!o.err && fsync(fileno(o.f)) != 0)
        o.err = errno;
    if (fclose(o.f) != 0 && !o.err)
        o.err = errno;
    free(vbuf);
    if (rc == CS_OK && o.err)
        rc = cs_error_set(err, CS_EIO, "%s: write failed: %s", tmp, strerror(o.err));
    return rc;
}

int gguf_writer_write(struct gguf_writer *w, const char *path, struct cs_error *err)
{
    if (!w || !path)
        return cs_error_set(err, CS_EINVAL, "gguf_writer_write: no writer or path");
    uint64_t alignment;
    int rc = writer_alignment(w, &alignment, path, err);
    if (rc != CS_OK)
        return rc;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t end, rem;
        w->t[i].offset = off;
        if (__builtin_add_overflow(off, w->t[i].n_bytes, &end))
            return cs_error_set(err, CS_ERANGE, "%s: tensor data exceeds 2^64 bytes", path);
        rem = end % alignment;
        if (rem && __builtin_add_overflow(end, alignment - rem, &end))
            return cs_error_set(err, CS_ERANGE, "%s: tensor data exceeds 2^64 bytes", path);
        off = end;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp)
        return cs_error_set(err, CS_ENOMEM, "%s: out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    rc = write_tmp(w, tmp, alignment, err);
    if (rc == CS_OK && rename(tmp, path) != 0)
        rc = cs_error_set(err, CS_EIO, "%s: cannot rename %s: %s", path, tmp, strerror(errno));
    if (rc != CS_OK)
        unlink(tmp);
    else
        LOG_DEBUG("gguf", "wrote %s: %zu keys, %zu tensors, %" PRIu64 " data bytes", path,
                  w->n_kv, w->n_t, off);
    free(tmp);
    return rc;
}
