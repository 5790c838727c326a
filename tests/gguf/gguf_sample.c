/* gguf_sample.c - the sample GGUF shared by the gguf tests and the fuzz seed
 * writer (see gguf_sample.h). */
#include "gguf_sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sample_strs[SAMPLE_N_STRS] = {
    "hello", "", "nul\0inside", "\xff\xfe" " bytes", "\xc4\xa0" "caf\xc3\xa9", "\n\t\"quote\\",
};
const uint64_t sample_str_lens[SAMPLE_N_STRS] = {5, 0, 10, 8, 7, 10};

const struct sample_tensor sample_tensors[SAMPLE_N_TENSORS] = {
    {"token_embd.weight", CS_DTYPE_Q8_0, 2, {64, 3, 1, 1}},
    {"blk.0.attn_q.weight", CS_DTYPE_F16, 2, {8, 4, 1, 1}},
    {"blk.0.attn_norm.weight", CS_DTYPE_F32, 1, {7, 1, 1, 1}},
    {"blk.0.ssm_a", CS_DTYPE_BF16, 3, {2, 3, 4, 1}},
    {"blk.0.ffn_up.weight", 2 /* q4_0 */, 4, {32, 2, 1, 2}},
    {"output.weight", 14 /* q6_k */, 2, {256, 1, 1, 1}},
    {"ids", 26 /* i32 */, 1, {5, 1, 1, 1}},
    {"big", 28 /* f64 */, 2, {3, 3, 1, 1}},
    {"blk.1.attn_k.weight", 24 /* i8 */, 1, {33, 1, 1, 1}},
};

void sample_pattern(uint8_t *dst, uint64_t n, uint32_t seed)
{
    for (uint64_t i = 0; i < n; i++)
        dst[i] = (uint8_t)(i * 131u + seed * 17u + (i >> 8) + 1);
}

static int sample_fill(void *ctx, void *dst, uint64_t n)
{
    sample_pattern(dst, n, (uint32_t)(uintptr_t)ctx);
    return 0;
}

/* A growable byte buffer to encode the nested array by hand. */
struct enc {
    uint8_t b[256];
    size_t n;
};

static void enc_put(struct enc *e, const void *p, size_t n)
{
    memcpy(e->b + e->n, p, n);
    e->n += n;
}

static void enc_arr_head(struct enc *e, uint32_t type, uint64_t count)
{
    enc_put(e, &type, 4);
    enc_put(e, &count, 8);
}

/* [[1,2,3] (uint32), ["a","b\0c"] (string), [[] (int8)] (array)] */
static void sample_nested(struct enc *e)
{
    static const uint32_t u[3] = {1, 2, 3};
    uint64_t l1 = 1, l3 = 3;
    enc_arr_head(e, GGUF_TYPE_ARRAY, 3);
    enc_arr_head(e, GGUF_TYPE_UINT32, 3);
    enc_put(e, u, sizeof u);
    enc_arr_head(e, GGUF_TYPE_STRING, 2);
    enc_put(e, &l1, 8);
    enc_put(e, "a", 1);
    enc_put(e, &l3, 8);
    enc_put(e, "b\0c", 3);
    enc_arr_head(e, GGUF_TYPE_ARRAY, 1);
    enc_arr_head(e, GGUF_TYPE_INT8, 0);
}

static int sample_scalars(struct gguf_writer *w)
{
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -5000000000LL;
    double f64 = 3.25e100;
    int rc = gguf_writer_set_str(w, "general.architecture", "qwen35");
    rc = rc ? rc : gguf_writer_set_u32(w, "test.u32", 4000000000u);
    rc = rc ? rc : gguf_writer_set_i32(w, "test.i32", -7);
    rc = rc ? rc : gguf_writer_set_u64(w, "test.u64", 1ull << 40);
    rc = rc ? rc : gguf_writer_set_f32(w, "test.f32", 0.125f);
    rc = rc ? rc : gguf_writer_set_bool(w, "test.bool", true);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.u8", GGUF_TYPE_UINT8, &u8, 1);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.i8", GGUF_TYPE_INT8, &i8, 1);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.u16", GGUF_TYPE_UINT16, &u16, 2);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.i16", GGUF_TYPE_INT16, &i16, 2);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.i64", GGUF_TYPE_INT64, &i64, 8);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.f64", GGUF_TYPE_FLOAT64, &f64, 8);
    return rc;
}

static int sample_arrays(struct gguf_writer *w)
{
    static const int32_t i32s[4] = {-1, 0, 1, 2147483647};
    static const float f32s[3] = {1.5f, -2.0f, 0.0f};
    static const uint8_t bools[3] = {1, 0, 1};
    static const uint64_t u64s[2] = {0, UINT64_MAX};
    static const double f64s[2] = {0.5, -1e-300};
    static const uint16_t u16s[2] = {1, 65535};
    struct enc e = {.n = 0};
    int rc = gguf_writer_set_arr(w, "test.arr_i32", GGUF_TYPE_INT32, i32s, 4);
    rc = rc ? rc : gguf_writer_set_arr(w, "test.arr_f32", GGUF_TYPE_FLOAT32, f32s, 3);
    rc = rc ? rc : gguf_writer_set_arr(w, "test.arr_bool", GGUF_TYPE_BOOL, bools, 3);
    rc = rc ? rc : gguf_writer_set_arr(w, "test.arr_u64", GGUF_TYPE_UINT64, u64s, 2);
    rc = rc ? rc : gguf_writer_set_arr(w, "test.arr_f64", GGUF_TYPE_FLOAT64, f64s, 2);
    rc = rc ? rc : gguf_writer_set_arr(w, "test.arr_u16", GGUF_TYPE_UINT16, u16s, 2);
    rc = rc ? rc : gguf_writer_set_arr(w, "test.arr_empty", GGUF_TYPE_UINT8, NULL, 0);
    rc = rc ? rc : gguf_writer_set_arr_strn(w, "test.arr_str", sample_strs, sample_str_lens,
                                            SAMPLE_N_STRS);
    sample_nested(&e);
    rc = rc ? rc : gguf_writer_set_raw(w, "test.nested", GGUF_TYPE_ARRAY, e.b, e.n);
    return rc;
}

int sample_writer_build(struct gguf_writer **out, uint32_t alignment, int with_tensors)
{
    struct gguf_writer *w;
    int rc = gguf_writer_create(&w);
    if (rc != CS_OK)
        return rc;
    rc = sample_scalars(w);
    if (rc == CS_OK && alignment)
        rc = gguf_writer_set_u32(w, "general.alignment", alignment);
    rc = rc ? rc : sample_arrays(w);
    for (int i = 0; with_tensors && rc == CS_OK && i < SAMPLE_N_TENSORS; i++) {
        const struct sample_tensor *t = &sample_tensors[i];
        uint64_t n = 0;
        gguf_tensor_nbytes(t->type, t->ne, t->n_dims, &n);
        if (i % 2) {
            rc = gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, NULL, sample_fill,
                                        (void *)(uintptr_t)i);
            continue;
        }
        /* static storage: data must outlive the writer's write */
        static uint8_t bufs[SAMPLE_N_TENSORS][4096];
        sample_pattern(bufs[i], n, (uint32_t)i);
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, bufs[i], NULL, NULL);
    }
    if (rc != CS_OK) {
        gguf_writer_destroy(w);
        return rc;
    }
    *out = w;
    return CS_OK;
}

int sample_write(const char *path, uint32_t alignment, int with_tensors, struct cs_error *err)
{
    struct gguf_writer *w;
    int rc = sample_writer_build(&w, alignment, with_tensors);
    if (rc != CS_OK)
        return cs_error_set(err, rc, "building the sample: %s", cs_strerror(rc));
    rc = gguf_writer_write(w, path, err);
    gguf_writer_destroy(w);
    return rc;
}

uint8_t *sample_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        *size = (size_t)n;
    return buf;
}
