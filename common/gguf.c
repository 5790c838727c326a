/* gguf.c - GGUF v3 reader over mmap (or a caller's buffer).
 *
 * Owns: parsing and validating the header, metadata (every value type,
 * arrays of arrays up to GGUF_MAX_NEST deep), tensor infos and the data
 * section; name lookup (open-addressing hash tables over keys and tensor
 * names); ggml type sizes. Typed getters live in gguf_get.c, the writer in
 * gguf_write.c.
 *
 * Invariants: every read goes through a cursor that checks the bytes left
 * before touching them, with overflow-safe arithmetic; counts read from the
 * file are checked against the bytes left before anything is allocated for
 * them, so allocations stay proportional to the file size. After a successful
 * open every pointer the file exposes lies inside the mapping. Multi-byte
 * values are little-endian, as on every host we target (x86-64, aarch64). */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_int.h"
#include "log.h"

#define GGUF_MAX_NEST 8 /* arrays of arrays nested deeper than this are refused */
#define MIN_KV_BYTES 13 /* key length u64 + type u32 + a one-byte value */
#define MIN_TENSOR_INFO_BYTES 24 /* name length u64 + n_dims u32 + type u32 + offset u64 */

/* ---- type tables ---- */

struct ggml_type_info {
    const char *name;
    uint32_t block;       /* values per block */
    uint32_t block_bytes; /* bytes per block */
};

static const struct ggml_type_info ggml_types[] = {
    [0] = {"f32", 1, 4},        [1] = {"f16", 1, 2},        [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},     [6] = {"q5_0", 32, 22},     [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},     [9] = {"q8_1", 32, 36},     [10] = {"q2_k", 256, 84},
    [11] = {"q3_k", 256, 110},  [12] = {"q4_k", 256, 144},  [13] = {"q5_k", 256, 176},
    [14] = {"q6_k", 256, 210},  [15] = {"q8_k", 256, 292},  [20] = {"iq4_nl", 32, 18},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},       [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},       [27] = {"i64", 1, 8},       [28] = {"f64", 1, 8},
    [30] = {"bf16", 1, 2},
};

static const struct ggml_type_info *ggml_type_get(uint32_t t)
{
    if (t >= sizeof ggml_types / sizeof ggml_types[0] || !ggml_types[t].name)
        return NULL;
    return &ggml_types[t];
}

const uint8_t gguf__meta_scalar_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,    [GGUF_TYPE_UINT16] = 2,
    [GGUF_TYPE_INT16] = 2,   [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4,
    [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,    [GGUF_TYPE_UINT64] = 8,
    [GGUF_TYPE_INT64] = 8,   [GGUF_TYPE_FLOAT64] = 8,
};

static const char *const meta_type_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

const char *gguf__meta_type_name(uint32_t t)
{
    return t < GGUF_TYPE_COUNT ? meta_type_names[t] : "unknown";
}

bool gguf__type_is_uint(uint32_t t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

bool gguf__type_is_sint(uint32_t t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

bool gguf__type_is_float(uint32_t t)
{
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

const char *gguf_type_name(uint32_t ggml_type)
{
    const struct ggml_type_info *ti = ggml_type_get(ggml_type);
    return ti ? ti->name : "unknown";
}

int gguf_tensor_nbytes(uint32_t type, const int64_t *ne, uint32_t n_dims, uint64_t *out)
{
    const struct ggml_type_info *ti = ggml_type_get(type);
    if (!ti)
        return CS_EUNSUPPORTED;
    if (n_dims > GGUF_MAX_DIMS)
        return CS_ERANGE;
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return CS_ERANGE;
        if (d == 0) {
            if ((uint64_t)ne[0] % ti->block)
                return CS_ERANGE;
            if (__builtin_mul_overflow((uint64_t)ne[0] / ti->block, (uint64_t)ti->block_bytes, &n))
                return CS_ERANGE;
        } else if (__builtin_mul_overflow(n, (uint64_t)ne[d], &n)) {
            return CS_ERANGE;
        }
    }
    if (n_dims == 0 && ti->block != 1)
        return CS_ERANGE;
    if (n_dims == 0)
        n = ti->block_bytes;
    *out = n;
    return CS_OK;
}

/* ---- name index: open addressing, FNV-1a, slot = entry index + 1 ---- */

struct name_index {
    uint64_t mask;
    uint64_t *slots;
};

static uint64_t name_hash(const char *s, uint64_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int name_index_init(struct name_index *ix, uint64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? CS_OK : CS_ENOMEM;
}

/* Find name; names[i] gives entry i's name (a stride walk over kv or tensors). */
#define NAME_AT(base, stride, i) ((const struct gguf_str *)((const char *)(base) + (stride) * (i)))

static uint64_t *name_index_probe(const struct name_index *ix, const void *base, size_t stride,
                                  const char *s, uint64_t len)
{
    uint64_t h = name_hash(s, len) & ix->mask;
    for (;;) {
        uint64_t *slot = &ix->slots[h];
        if (!*slot)
            return slot;
        const struct gguf_str *n = NAME_AT(base, stride, *slot - 1);
        if (n->len == len && memcmp(n->ptr, s, len) == 0)
            return slot;
        h = (h + 1) & ix->mask;
    }
}

/* ---- the file object ---- */

struct gguf_impl {
    struct gguf_file pub; /* first: a gguf_file pointer is a gguf_impl pointer */
    bool owns_map;
    struct name_index kv_index;
    struct name_index tensor_index;
};

static void kv_free_arrays(struct gguf_kv *kv)
{
    if (kv->type != GGUF_TYPE_ARRAY)
        return;
    free((void *)kv->arr_strs);
    if (kv->arr_type == GGUF_TYPE_ARRAY && kv->arr_elems) {
        for (uint64_t i = 0; i < kv->arr_len; i++)
            kv_free_arrays((struct gguf_kv *)&kv->arr_elems[i]);
    }
    free((void *)kv->arr_elems);
}

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    struct gguf_impl *im = (struct gguf_impl *)f;
    if (f->kv) {
        for (uint64_t i = 0; i < f->n_kv; i++)
            kv_free_arrays(&f->kv[i]);
    }
    free(f->kv);
    free(f->tensors);
    free(im->kv_index.slots);
    free(im->tensor_index.slots);
    if (im->owns_map && f->map && f->size)
        munmap((void *)f->map, f->size);
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(im);
}

/* ---- cursor ---- */

struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *name;
    struct cs_error *err;
    char what[160]; /* what is being read, for truncation messages */
};

static int cur_truncated(struct cursor *c, uint64_t need)
{
    return cs_error_set(c->err, CS_EFORMAT,
                        "%s: truncated at byte %" PRIu64 " (reading %s: %" PRIu64
                        " bytes needed, %" PRIu64 " left)",
                        c->name, c->pos, c->what, need, c->size - c->pos);
}

static int cur_take(struct cursor *c, uint64_t n, const uint8_t **out)
{
    if (n > c->size - c->pos)
        return cur_truncated(c, n);
    *out = c->base + c->pos;
    c->pos += n;
    return CS_OK;
}

static int cur_u32(struct cursor *c, uint32_t *v)
{
    const uint8_t *p = NULL;
    int rc = cur_take(c, 4, &p);
    if (rc == CS_OK)
        memcpy(v, p, 4);
    return rc;
}

static int cur_u64(struct cursor *c, uint64_t *v)
{
    const uint8_t *p = NULL;
    int rc = cur_take(c, 8, &p);
    if (rc == CS_OK)
        memcpy(v, p, 8);
    return rc;
}

static int cur_str(struct cursor *c, struct gguf_str *s)
{
    uint64_t len;
    const uint8_t *p = NULL;
    int rc = cur_u64(c, &len);
    if (rc == CS_OK)
        rc = cur_take(c, len, &p);
    if (rc == CS_OK) {
        s->ptr = (const char *)p;
        s->len = len;
    }
    return rc;
}

/* Printable length for names from the file in messages. */
static int show_len(uint64_t len)
{
    return len > 80 ? 80 : (int)len;
}

/* ---- metadata values ---- */

/* Decode one scalar of type t at p into kv->val (widened). */
void gguf__scalar_decode(const uint8_t *p, uint32_t t, struct gguf_kv *kv)
{
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    float f32;
    switch (t) {
    case GGUF_TYPE_UINT8: memcpy(&u8, p, 1); kv->val.u64 = u8; break;
    case GGUF_TYPE_INT8: memcpy(&i8, p, 1); kv->val.i64 = i8; break;
    case GGUF_TYPE_UINT16: memcpy(&u16, p, 2); kv->val.u64 = u16; break;
    case GGUF_TYPE_INT16: memcpy(&i16, p, 2); kv->val.i64 = i16; break;
    case GGUF_TYPE_UINT32: memcpy(&u32, p, 4); kv->val.u64 = u32; break;
    case GGUF_TYPE_INT32: memcpy(&i32, p, 4); kv->val.i64 = i32; break;
    case GGUF_TYPE_FLOAT32: memcpy(&f32, p, 4); kv->val.f64 = f32; break;
    case GGUF_TYPE_BOOL: kv->val.b = p[0] != 0; break;
    case GGUF_TYPE_UINT64: memcpy(&kv->val.u64, p, 8); break;
    case GGUF_TYPE_INT64: memcpy(&kv->val.i64, p, 8); break;
    case GGUF_TYPE_FLOAT64: memcpy(&kv->val.f64, p, 8); break;
    default: break;
    }
}

static int parse_array(struct cursor *c, struct gguf_kv *kv, int depth);

static int parse_str_elems(struct cursor *c, struct gguf_kv *kv)
{
    if (kv->arr_len > (c->size - c->pos) / 8)
        return cur_truncated(c, kv->arr_len);
    struct gguf_str *strs = calloc(kv->arr_len ? kv->arr_len : 1, sizeof *strs);
    if (!strs)
        return cs_error_set(c->err, CS_ENOMEM, "%s: out of memory (%s)", c->name, c->what);
    kv->arr_strs = strs;
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        int rc = cur_str(c, &strs[i]);
        if (rc != CS_OK)
            return rc;
    }
    return CS_OK;
}

static int parse_nested_elems(struct cursor *c, struct gguf_kv *kv, int depth)
{
    if (depth + 1 >= GGUF_MAX_NEST)
        return cs_error_set(c->err, CS_EFORMAT, "%s: %s: arrays nested deeper than %d",
                            c->name, c->what, GGUF_MAX_NEST);
    if (kv->arr_len > (c->size - c->pos) / 12)
        return cur_truncated(c, kv->arr_len);
    struct gguf_kv *elems = calloc(kv->arr_len ? kv->arr_len : 1, sizeof *elems);
    if (!elems)
        return cs_error_set(c->err, CS_ENOMEM, "%s: out of memory (%s)", c->name, c->what);
    kv->arr_elems = elems;
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        elems[i].type = GGUF_TYPE_ARRAY;
        int rc = parse_array(c, &elems[i], depth + 1);
        if (rc != CS_OK) {
            kv->arr_len = i + 1; /* free only what was parsed */
            return rc;
        }
    }
    return CS_OK;
}

/* Parse an array value (element type, count, elements) into kv. On failure
 * kv may hold partial allocations; kv_free_arrays releases them. */
static int parse_array(struct cursor *c, struct gguf_kv *kv, int depth)
{
    uint32_t et;
    uint64_t n;
    int rc = cur_u32(c, &et);
    if (rc == CS_OK)
        rc = cur_u64(c, &n);
    if (rc != CS_OK)
        return rc;
    if (et >= GGUF_TYPE_COUNT)
        return cs_error_set(c->err, CS_EFORMAT, "%s: %s: array of unknown value type %" PRIu32,
                            c->name, c->what, et);
    kv->arr_type = et;
    kv->arr_len = n;
    kv->arr_data = c->base + c->pos;
    if (et == GGUF_TYPE_STRING) {
        rc = parse_str_elems(c, kv);
    } else if (et == GGUF_TYPE_ARRAY) {
        rc = parse_nested_elems(c, kv, depth);
    } else {
        uint64_t sz = gguf__meta_scalar_size[et];
        const uint8_t *p = NULL;
        if (n > (c->size - c->pos) / sz)
            return cur_truncated(c, n);
        rc = cur_take(c, n * sz, &p);
    }
    kv->arr_end = c->base + c->pos;
    return rc;
}

static int parse_value(struct cursor *c, struct gguf_kv *kv)
{
    const uint8_t *p = NULL;
    int rc;
    switch (kv->type) {
    case GGUF_TYPE_STRING:
        return cur_str(c, &kv->val.str);
    case GGUF_TYPE_ARRAY:
        return parse_array(c, kv, 0);
    default:
        rc = cur_take(c, gguf__meta_scalar_size[kv->type], &p);
        if (rc == CS_OK)
            gguf__scalar_decode(p, kv->type, kv);
        return rc;
    }
}

/* ---- header, metadata, tensor infos ---- */

static int parse_header(struct cursor *c, struct gguf_file *f)
{
    const uint8_t *m;
    snprintf(c->what, sizeof c->what, "the header");
    int rc = cur_take(c, 4, &m);
    if (rc != CS_OK)
        return rc;
    if (memcmp(m, "GGUF", 4) != 0)
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: bad magic 0x%02x%02x%02x%02x (expected 0x47475546, \"GGUF\")",
                            c->name, m[0], m[1], m[2], m[3]);
    if ((rc = cur_u32(c, &f->version)) != CS_OK)
        return rc;
    if (f->version != 3)
        return cs_error_set(c->err, CS_EUNSUPPORTED,
                            "%s: unsupported GGUF version %" PRIu32 " (only version 3 is read)",
                            c->name, f->version);
    if ((rc = cur_u64(c, &f->n_tensors)) != CS_OK || (rc = cur_u64(c, &f->n_kv)) != CS_OK)
        return rc;
    uint64_t left = c->size - c->pos;
    if (f->n_tensors > left / MIN_TENSOR_INFO_BYTES)
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: header claims %" PRIu64 " tensors, which cannot fit in the %" PRIu64
                            " bytes left",
                            c->name, f->n_tensors, left);
    left -= f->n_tensors * MIN_TENSOR_INFO_BYTES;
    if (f->n_kv > left / MIN_KV_BYTES)
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: header claims %" PRIu64 " key/value pairs, which cannot fit in the %"
                            PRIu64 " bytes left",
                            c->name, f->n_kv, left);
    return CS_OK;
}

static int parse_kvs(struct cursor *c, struct gguf_impl *im)
{
    struct gguf_file *f = &im->pub;
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    if (!f->kv || name_index_init(&im->kv_index, f->n_kv) != CS_OK)
        return cs_error_set(c->err, CS_ENOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        uint32_t type;
        snprintf(c->what, sizeof c->what, "key/value %" PRIu64, i);
        int rc = cur_str(c, &kv->key);
        if (rc != CS_OK)
            return rc;
        snprintf(c->what, sizeof c->what, "key/value %" PRIu64 " '%.*s'", i,
                 show_len(kv->key.len), kv->key.ptr);
        if ((rc = cur_u32(c, &type)) != CS_OK)
            return rc;
        if (type >= GGUF_TYPE_COUNT)
            return cs_error_set(c->err, CS_EFORMAT, "%s: %s has unknown value type %" PRIu32,
                                c->name, c->what, type);
        kv->type = type;
        if ((rc = parse_value(c, kv)) != CS_OK)
            return rc;
        uint64_t *slot = name_index_probe(&im->kv_index, f->kv, sizeof *kv, kv->key.ptr,
                                          kv->key.len);
        if (*slot)
            return cs_error_set(c->err, CS_EFORMAT, "%s: duplicate key '%.*s' (%s)", c->name,
                                show_len(kv->key.len), kv->key.ptr, c->what);
        *slot = i + 1;
    }
    return CS_OK;
}

static int read_alignment(struct cursor *c, struct gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv)
        return CS_OK;
    if (gguf__type_is_uint(kv->type))
        f->alignment = kv->val.u64;
    else if (gguf__type_is_sint(kv->type) && kv->val.i64 > 0)
        f->alignment = (uint64_t)kv->val.i64;
    else if (!gguf__type_is_sint(kv->type))
        return cs_error_set(c->err, CS_EFORMAT, "%s: general.alignment has type %s, expected an integer",
                            c->name, gguf__meta_type_name(kv->type));
    else
        f->alignment = 0;
    if (f->alignment == 0 || (f->alignment & (f->alignment - 1)))
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: general.alignment %" PRIu64 " is not a nonzero power of two",
                            c->name, f->alignment);
    return CS_OK;
}

/* Validate shape and type of tensor t (already read) and compute n_bytes. */
static int check_tensor_shape(struct cursor *c, struct gguf_tensor *t)
{
    int nl = show_len(t->name.len);
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] <= 0)
            return cs_error_set(c->err, CS_EFORMAT,
                                "%s: tensor %.*s dimension %" PRIu32 " is %" PRId64
                                " (dimensions must be positive)",
                                c->name, nl, t->name.ptr, d, t->ne[d]);
    }
    const struct ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti)
        return cs_error_set(c->err, CS_EUNSUPPORTED, "%s: tensor %.*s has unsupported type %" PRIu32,
                            c->name, nl, t->name.ptr, t->type);
    if ((uint64_t)t->ne[0] % ti->block)
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: tensor %.*s of type %s: row length %" PRId64
                            " is not a multiple of the block size %" PRIu32,
                            c->name, nl, t->name.ptr, ti->name, t->ne[0], ti->block);
    if (gguf_tensor_nbytes(t->type, t->ne, t->n_dims ? t->n_dims : 1, &t->n_bytes) != CS_OK)
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: tensor %.*s: size of shape [%" PRId64 ", %" PRId64 ", %" PRId64
                            ", %" PRId64 "] overflows 64 bits",
                            c->name, nl, t->name.ptr, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    return CS_OK;
}

static int parse_tensor_info(struct cursor *c, struct gguf_file *f, uint64_t i)
{
    struct gguf_tensor *t = &f->tensors[i];
    snprintf(c->what, sizeof c->what, "tensor info %" PRIu64, i);
    int rc = cur_str(c, &t->name);
    if (rc != CS_OK)
        return rc;
    snprintf(c->what, sizeof c->what, "tensor info %" PRIu64 " '%.*s'", i,
             show_len(t->name.len), t->name.ptr);
    if ((rc = cur_u32(c, &t->n_dims)) != CS_OK)
        return rc;
    if (t->n_dims > GGUF_MAX_DIMS)
        return cs_error_set(c->err, CS_EFORMAT, "%s: tensor %.*s has n_dims %" PRIu32
                            " (at most %d)", c->name, show_len(t->name.len), t->name.ptr,
                            t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->n_dims && (rc = cur_u64(c, &v)) != CS_OK)
            return rc;
        memcpy(&t->ne[d], &v, 8); /* values above INT64_MAX read as negative */
    }
    if ((rc = cur_u32(c, &t->type)) != CS_OK || (rc = cur_u64(c, &t->offset)) != CS_OK)
        return rc;
    if ((rc = check_tensor_shape(c, t)) != CS_OK)
        return rc;
    if (t->offset % f->alignment)
        return cs_error_set(c->err, CS_EFORMAT,
                            "%s: tensor %.*s offset %" PRIu64
                            " is not a multiple of the alignment %" PRIu64,
                            c->name, show_len(t->name.len), t->name.ptr, t->offset, f->alignment);
    return CS_OK;
}

static int parse_tensor_infos(struct cursor *c, struct gguf_impl *im)
{
    struct gguf_file *f = &im->pub;
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors || name_index_init(&im->tensor_index, f->n_tensors) != CS_OK)
        return cs_error_set(c->err, CS_ENOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        int rc = parse_tensor_info(c, f, i);
        if (rc != CS_OK)
            return rc;
        struct gguf_tensor *t = &f->tensors[i];
        uint64_t *slot = name_index_probe(&im->tensor_index, f->tensors, sizeof *t, t->name.ptr,
                                          t->name.len);
        if (*slot)
            return cs_error_set(c->err, CS_EFORMAT,
                                "%s: duplicate tensor name %.*s (tensor infos %" PRIu64
                                " and %" PRIu64 ")",
                                c->name, show_len(t->name.len), t->name.ptr, *slot - 1, i);
        *slot = i + 1;
    }
    return CS_OK;
}

/* Place the data section and check every tensor lies inside the file. */
static int place_tensor_data(struct cursor *c, struct gguf_file *f)
{
    uint64_t rem = c->pos % f->alignment;
    uint64_t start = c->pos;
    if (rem && __builtin_add_overflow(c->pos, f->alignment - rem, &start))
        start = UINT64_MAX;
    f->data_offset = start;
    uint64_t avail = start < c->size ? c->size - start : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset > avail || t->n_bytes > avail - t->offset)
            return cs_error_set(c->err, CS_EFORMAT,
                                "%s: tensor %.*s (offset %" PRIu64 ", %" PRIu64
                                " bytes) extends past end of file (size %" PRIu64
                                ", data section at %" PRIu64 ")",
                                c->name, show_len(t->name.len), t->name.ptr, t->offset,
                                t->n_bytes, c->size, start);
        t->data = c->base + start + t->offset;
    }
    return CS_OK;
}

static int parse_all(struct gguf_impl *im, struct cursor *c)
{
    struct gguf_file *f = &im->pub;
    int rc = parse_header(c, f);
    if (rc == CS_OK)
        rc = parse_kvs(c, im);
    if (rc == CS_OK)
        rc = read_alignment(c, f);
    if (rc == CS_OK)
        rc = parse_tensor_infos(c, im);
    if (rc == CS_OK)
        rc = place_tensor_data(c, f);
    return rc;
}

/* Create the object over (map, size) and parse it; on failure it is closed. */
static int gguf_parse(struct gguf_file **out, const uint8_t *map, uint64_t size, const char *name,
                      int fd, bool owns_map, struct cs_error *err)
{
    struct gguf_impl *im = calloc(1, sizeof *im);
    char *path = strdup(name ? name : "(buffer)");
    if (!im || !path) {
        free(im);
        free(path);
        if (owns_map && size)
            munmap((void *)map, size);
        if (fd >= 0)
            close(fd);
        return cs_error_set(err, CS_ENOMEM, "%s: out of memory", name ? name : "(buffer)");
    }
    struct gguf_file *f = &im->pub;
    f->path = path;
    f->fd = fd;
    f->map = map;
    f->size = size;
    im->owns_map = owns_map;
    struct cursor c = {.base = map, .size = size, .name = path, .err = err};
    int rc = parse_all(im, &c);
    if (rc != CS_OK) {
        f->n_kv = f->kv ? f->n_kv : 0;
        gguf_close(f);
        return rc;
    }
    LOG_DEBUG("gguf", "opened %s: %" PRIu64 " bytes, %" PRIu64 " keys, %" PRIu64
              " tensors, data at %" PRIu64, path, size, f->n_kv, f->n_tensors, f->data_offset);
    *out = f;
    return CS_OK;
}

int gguf_open_buffer(struct gguf_file **out, const void *buf, size_t size, const char *name,
                     struct cs_error *err)
{
    if (!out || (!buf && size))
        return cs_error_set(err, CS_EINVAL, "%s: no buffer", name ? name : "(buffer)");
    return gguf_parse(out, buf, size, name, -1, false, err);
}

int gguf_open(struct gguf_file **out, const char *path, struct cs_error *err)
{
    if (!out || !path)
        return cs_error_set(err, CS_EINVAL, "gguf_open: no path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cs_error_set(err, errno == ENOENT ? CS_ENOTFOUND : CS_EIO, "%s: cannot open: %s",
                            path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cs_error_set(err, CS_EIO, "%s: not a regular file", path);
    }
    const uint8_t *map = NULL;
    uint64_t size = (uint64_t)st.st_size;
    if (size) {
        void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return cs_error_set(err, CS_EIO, "%s: mmap of %" PRIu64 " bytes failed: %s", path,
                                size, strerror(e));
        }
        map = m;
    }
    return gguf_parse(out, map, size, path, fd, true, err);
}

/* ---- lookups ---- */

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key)
{
    const struct gguf_impl *im = (const struct gguf_impl *)f;
    if (!f || !key || !im->kv_index.slots)
        return NULL;
    uint64_t *slot = name_index_probe(&im->kv_index, f->kv, sizeof *f->kv, key, strlen(key));
    return *slot ? &f->kv[*slot - 1] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    const struct gguf_impl *im = (const struct gguf_impl *)f;
    if (!f || !name || !im->tensor_index.slots)
        return NULL;
    uint64_t *slot = name_index_probe(&im->tensor_index, f->tensors, sizeof *f->tensors, name,
                                      strlen(name));
    return *slot ? &f->tensors[*slot - 1] : NULL;
}

