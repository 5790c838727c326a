/* gguf_walk.h - touches everything an opened gguf_file exposes (every key,
 * value, array element, nested array, string byte, tensor info and the first
 * and last byte of every tensor's data), so sanitizers catch any pointer the
 * reader let out of bounds. Shared by test_gguf_corrupt.c and the fuzz target. */
#ifndef CS_TEST_GGUF_WALK_H
#define CS_TEST_GGUF_WALK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"

static uint64_t gguf_walk_bytes(const char *p, uint64_t n)
{
    uint64_t h = 0;
    for (uint64_t i = 0; i < n; i++)
        h = h * 31 + (uint8_t)p[i];
    return h;
}

static uint64_t gguf_walk_array(const struct gguf_kv *kv)
{
    uint64_t h = kv->arr_len;
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        uint32_t u;
        int64_t v;
        float f;
        bool b;
        struct gguf_str s;
        const struct gguf_kv *sub;
        if (gguf_arr_u32(kv, i, &u) == CS_OK)
            h += u;
        if (gguf_arr_i64(kv, i, &v) == CS_OK)
            h += (uint64_t)v;
        if (gguf_arr_f32(kv, i, &f) == CS_OK)
            h += f == f;
        if (gguf_arr_bool(kv, i, &b) == CS_OK)
            h += b;
        if (gguf_arr_str(kv, i, &s) == CS_OK)
            h += gguf_walk_bytes(s.ptr, s.len);
        if (gguf_arr_nested(kv, i, &sub) == CS_OK)
            h += gguf_walk_array(sub);
    }
    if (kv->arr_len)
        h += kv->arr_data[0] + kv->arr_end[-1];
    return h;
}

static uint64_t gguf_walk(const struct gguf_file *f)
{
    uint64_t h = f->version + f->alignment + f->data_offset;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        char key[64];
        uint64_t n = kv->key.len < 63 ? kv->key.len : 63;
        uint32_t u;
        int64_t v;
        float fl;
        bool b;
        char *s = NULL;
        struct cs_error err;
        h += gguf_walk_bytes(kv->key.ptr, kv->key.len);
        memcpy(key, kv->key.ptr, n);
        key[n] = 0;
        if (gguf_get_u32(f, key, &u, &err) == CS_OK)
            h += u;
        if (gguf_get_i64(f, key, &v, &err) == CS_OK)
            h += (uint64_t)v;
        if (gguf_get_f32(f, key, &fl, &err) == CS_OK)
            h += fl == fl;
        if (gguf_get_bool(f, key, &b, &err) == CS_OK)
            h += b;
        if (gguf_get_str(f, key, &s, &err) == CS_OK)
            h += gguf_walk_bytes(s, strlen(s));
        free(s);
        if (kv->type == GGUF_TYPE_STRING)
            h += gguf_walk_bytes(kv->val.str.ptr, kv->val.str.len);
        if (kv->type == GGUF_TYPE_ARRAY)
            h += gguf_walk_array(kv);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        h += gguf_walk_bytes(t->name.ptr, t->name.len) + t->n_dims + t->type + t->offset;
        if (t->n_bytes)
            h += d[0] + d[t->n_bytes - 1];
    }
    return h;
}

#endif
