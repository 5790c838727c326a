/* gguf_get.c - typed getters over a parsed GGUF file (see gguf.h): scalar
 * keys by name with type checks and range checks, and array elements by index.
 * Everything they read was validated by gguf_open, so they only check types
 * and bounds. */
#include <stdlib.h>
#include <string.h>

#include "gguf_int.h"

/* ---- typed getters ---- */

static bool type_is_int(uint32_t t)
{
    return gguf__type_is_uint(t) || gguf__type_is_sint(t);
}

static bool type_is_bool(uint32_t t)
{
    return t == GGUF_TYPE_BOOL;
}

static bool type_is_string(uint32_t t)
{
    return t == GGUF_TYPE_STRING;
}

/* Convert an integer value (type t, widened in v) to u32 / i64: CS_ERANGE
 * when it does not fit. */
static int int_to_u32(uint32_t t, const struct gguf_kv *v, uint32_t *out)
{
    if (gguf__type_is_uint(t) ? v->val.u64 > UINT32_MAX : v->val.i64 < 0 || v->val.i64 > UINT32_MAX)
        return CS_ERANGE;
    *out = gguf__type_is_uint(t) ? (uint32_t)v->val.u64 : (uint32_t)v->val.i64;
    return CS_OK;
}

static int int_to_i64(uint32_t t, const struct gguf_kv *v, int64_t *out)
{
    if (gguf__type_is_uint(t) && v->val.u64 > (uint64_t)INT64_MAX)
        return CS_ERANGE;
    *out = gguf__type_is_uint(t) ? (int64_t)v->val.u64 : v->val.i64;
    return CS_OK;
}

/* Find key for a getter and check its type with ok(); fills err and *rc. */
static const struct gguf_kv *getter_find(const struct gguf_file *f, const char *key,
                                         bool (*ok)(uint32_t), const char *expected, int *rc,
                                         struct cs_error *err)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    *rc = CS_OK;
    if (!kv)
        *rc = cs_error_set(err, CS_ENOTFOUND, "%s: key %s not found", f ? f->path : "?", key);
    else if (!ok(kv->type))
        *rc = cs_error_set(err, CS_EFORMAT, "%s: key %s has type %s, expected %s", f->path, key,
                           gguf__meta_type_name(kv->type), expected);
    return *rc == CS_OK ? kv : NULL;
}

static int getter_range(const struct gguf_file *f, const char *key, const struct gguf_kv *kv,
                        const char *expected, struct cs_error *err)
{
    return cs_error_set(err, CS_ERANGE, "%s: key %s (%s) is out of range for %s", f->path, key,
                        gguf__meta_type_name(kv->type), expected);
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct cs_error *err)
{
    int rc;
    const struct gguf_kv *kv = getter_find(f, key, type_is_int, "an integer", &rc, err);
    if (kv && int_to_u32(kv->type, kv, out) != CS_OK)
        return getter_range(f, key, kv, "uint32", err);
    return rc;
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out, struct cs_error *err)
{
    int rc;
    const struct gguf_kv *kv = getter_find(f, key, type_is_int, "an integer", &rc, err);
    if (kv && int_to_i64(kv->type, kv, out) != CS_OK)
        return getter_range(f, key, kv, "int64", err);
    return rc;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct cs_error *err)
{
    int rc;
    const struct gguf_kv *kv = getter_find(f, key, gguf__type_is_float, "float32", &rc, err);
    if (kv)
        *out = (float)kv->val.f64;
    return rc;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct cs_error *err)
{
    int rc;
    const struct gguf_kv *kv = getter_find(f, key, type_is_bool, "bool", &rc, err);
    if (kv)
        *out = kv->val.b;
    return rc;
}

int gguf_get_str(const struct gguf_file *f, const char *key, char **out, struct cs_error *err)
{
    int rc;
    const struct gguf_kv *kv = getter_find(f, key, type_is_string, "string", &rc, err);
    char *s = kv ? malloc(kv->val.str.len + 1) : NULL;
    if (kv && !s)
        return cs_error_set(err, CS_ENOMEM, "%s: key %s: out of memory", f->path, key);
    if (s) {
        memcpy(s, kv->val.str.ptr, kv->val.str.len);
        s[kv->val.str.len] = 0;
        *out = s;
    }
    return rc;
}

/* ---- array elements ---- */

/* Decode scalar element i of an array kv into tmp when ok(element type). */
static int arr_elem(const struct gguf_kv *kv, uint64_t i, bool (*ok)(uint32_t),
                    struct gguf_kv *tmp)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !ok(kv->arr_type))
        return CS_EFORMAT;
    if (i >= kv->arr_len)
        return CS_ERANGE;
    gguf__scalar_decode(kv->arr_data + i * gguf__meta_scalar_size[kv->arr_type], kv->arr_type, tmp);
    return CS_OK;
}

int gguf_arr_u32(const struct gguf_kv *kv, uint64_t i, uint32_t *out)
{
    struct gguf_kv tmp;
    int rc = arr_elem(kv, i, type_is_int, &tmp);
    return rc == CS_OK ? int_to_u32(kv->arr_type, &tmp, out) : rc;
}

int gguf_arr_i64(const struct gguf_kv *kv, uint64_t i, int64_t *out)
{
    struct gguf_kv tmp;
    int rc = arr_elem(kv, i, type_is_int, &tmp);
    return rc == CS_OK ? int_to_i64(kv->arr_type, &tmp, out) : rc;
}

int gguf_arr_f32(const struct gguf_kv *kv, uint64_t i, float *out)
{
    struct gguf_kv tmp;
    int rc = arr_elem(kv, i, gguf__type_is_float, &tmp);
    if (rc == CS_OK)
        *out = (float)tmp.val.f64;
    return rc;
}

int gguf_arr_bool(const struct gguf_kv *kv, uint64_t i, bool *out)
{
    struct gguf_kv tmp;
    int rc = arr_elem(kv, i, type_is_bool, &tmp);
    if (rc == CS_OK)
        *out = tmp.val.b;
    return rc;
}

int gguf_arr_str(const struct gguf_kv *kv, uint64_t i, struct gguf_str *out)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING || !kv->arr_strs)
        return CS_EFORMAT;
    if (i >= kv->arr_len)
        return CS_ERANGE;
    *out = kv->arr_strs[i];
    return CS_OK;
}

int gguf_arr_nested(const struct gguf_kv *kv, uint64_t i, const struct gguf_kv **out)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_ARRAY || !kv->arr_elems)
        return CS_EFORMAT;
    if (i >= kv->arr_len)
        return CS_ERANGE;
    *out = &kv->arr_elems[i];
    return CS_OK;
}
