/* test_gguf.c - proves the GGUF writer and reader round-trip everything:
 * every metadata type (all scalars, strings with NUL and invalid UTF-8 bytes,
 * arrays of each scalar type, string arrays, nested arrays), key insertion
 * order and in-place replacement, tensors of several ggml types and ranks
 * (data given by pointer and by fill callback) at aligned offsets with
 * alignment 32 and 64, typed getters and their errors, hashed lookups over
 * many names, large string arrays, copy_kv, and writer failure paths. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "gguf_sample.h"
#include "tests/test_util.h"

static char dir[64];

static const char *tmp_path(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static bool str_eq(struct gguf_str s, const char *p, uint64_t len)
{
    return s.len == len && memcmp(s.ptr, p, len) == 0;
}

static void check_scalars(const struct gguf_file *f)
{
    struct cs_error err = {0};
    uint32_t u32 = 0;
    int64_t i64 = 0;
    float f32 = 0;
    bool b = false;
    char *s = NULL;
    CHECK_EQ_INT(gguf_get_u32(f, "test.u32", &u32, &err), CS_OK);
    CHECK_EQ_INT(u32, 4000000000u);
    CHECK_EQ_INT(gguf_get_i64(f, "test.i32", &i64, &err), CS_OK);
    CHECK_EQ_INT(i64, -7);
    CHECK_EQ_INT(gguf_get_i64(f, "test.u64", &i64, &err), CS_OK);
    CHECK_EQ_INT(i64, 1ll << 40);
    CHECK_EQ_INT(gguf_get_f32(f, "test.f32", &f32, &err), CS_OK);
    CHECK(f32 == 0.125f);
    CHECK_EQ_INT(gguf_get_bool(f, "test.bool", &b, &err), CS_OK);
    CHECK(b);
    CHECK_EQ_INT(gguf_get_u32(f, "test.u8", &u32, &err), CS_OK);
    CHECK_EQ_INT(u32, 200);
    CHECK_EQ_INT(gguf_get_i64(f, "test.i8", &i64, &err), CS_OK);
    CHECK_EQ_INT(i64, -100);
    CHECK_EQ_INT(gguf_get_u32(f, "test.u16", &u32, &err), CS_OK);
    CHECK_EQ_INT(u32, 60000);
    CHECK_EQ_INT(gguf_get_i64(f, "test.i16", &i64, &err), CS_OK);
    CHECK_EQ_INT(i64, -30000);
    CHECK_EQ_INT(gguf_get_i64(f, "test.i64", &i64, &err), CS_OK);
    CHECK_EQ_INT(i64, -5000000000LL);
    const struct gguf_kv *kv = gguf_find_kv(f, "test.f64");
    CHECK(kv && kv->type == GGUF_TYPE_FLOAT64 && kv->val.f64 == 3.25e100);
    CHECK_EQ_INT(gguf_get_f32(f, "test.f64", &f32, &err), CS_OK);
    CHECK_EQ_INT(gguf_get_str(f, "general.architecture", &s, &err), CS_OK);
    CHECK(s && strcmp(s, "qwen35") == 0);
    free(s);
}

static void check_getter_errors(const struct gguf_file *f)
{
    struct cs_error err = {0};
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    char *s;
    CHECK_EQ_INT(gguf_get_u32(f, "no.such.key", &u32, &err), CS_ENOTFOUND);
    CHECK_EQ_INT(gguf_get_u32(f, "test.i32", &u32, &err), CS_ERANGE);      /* -7 */
    CHECK(strstr(err.msg, "test.i32") != NULL);
    CHECK_EQ_INT(gguf_get_u32(f, "test.u64", &u32, &err), CS_ERANGE);      /* 2^40 */
    CHECK_EQ_INT(gguf_get_u32(f, "general.architecture", &u32, &err), CS_EFORMAT);
    CHECK(strstr(err.msg, "general.architecture") && strstr(err.msg, "string"));
    CHECK_EQ_INT(gguf_get_f32(f, "test.u32", &f32, &err), CS_EFORMAT);
    CHECK_EQ_INT(gguf_get_bool(f, "test.u8", &b, &err), CS_EFORMAT);
    CHECK_EQ_INT(gguf_get_str(f, "test.arr_str", &s, &err), CS_EFORMAT);
    CHECK(strstr(err.msg, "array") != NULL);
    CHECK_EQ_INT(gguf_get_i64(f, "test.f32", &i64, &err), CS_EFORMAT);
}

static void check_arrays(const struct gguf_file *f)
{
    const struct gguf_kv *kv = gguf_find_kv(f, "test.arr_i32");
    int64_t i64;
    uint32_t u32;
    float f32;
    bool b;
    CHECK(kv && kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_INT32 && kv->arr_len == 4);
    CHECK(gguf_arr_i64(kv, 0, &i64) == CS_OK && i64 == -1);
    CHECK(gguf_arr_i64(kv, 3, &i64) == CS_OK && i64 == 2147483647);
    CHECK_EQ_INT(gguf_arr_i64(kv, 4, &i64), CS_ERANGE);
    CHECK_EQ_INT(gguf_arr_u32(kv, 0, &u32), CS_ERANGE);
    CHECK(gguf_arr_u32(kv, 2, &u32) == CS_OK && u32 == 1);
    CHECK_EQ_INT(gguf_arr_f32(kv, 0, &f32), CS_EFORMAT);
    kv = gguf_find_kv(f, "test.arr_f32");
    CHECK(kv && gguf_arr_f32(kv, 1, &f32) == CS_OK && f32 == -2.0f);
    kv = gguf_find_kv(f, "test.arr_bool");
    CHECK(kv && gguf_arr_bool(kv, 0, &b) == CS_OK && b);
    CHECK(kv && gguf_arr_bool(kv, 1, &b) == CS_OK && !b);
    kv = gguf_find_kv(f, "test.arr_u64");
    CHECK(kv && gguf_arr_i64(kv, 1, &i64) == CS_ERANGE);
    CHECK(kv && gguf_arr_u32(kv, 0, &u32) == CS_OK && u32 == 0);
    kv = gguf_find_kv(f, "test.arr_f64");
    CHECK(kv && gguf_arr_f32(kv, 0, &f32) == CS_OK && f32 == 0.5f);
    kv = gguf_find_kv(f, "test.arr_u16");
    CHECK(kv && gguf_arr_u32(kv, 1, &u32) == CS_OK && u32 == 65535);
    kv = gguf_find_kv(f, "test.arr_empty");
    CHECK(kv && kv->arr_len == 0 && kv->arr_type == GGUF_TYPE_UINT8 && gguf_arr_u32(kv, 0, &u32) == CS_ERANGE);
    kv = gguf_find_kv(f, "test.arr_str");
    CHECK(kv && kv->arr_type == GGUF_TYPE_STRING && kv->arr_len == SAMPLE_N_STRS);
    for (int i = 0; kv && i < SAMPLE_N_STRS; i++) {
        struct gguf_str s;
        CHECK(gguf_arr_str(kv, (uint64_t)i, &s) == CS_OK && str_eq(s, sample_strs[i], sample_str_lens[i]));
        CHECK(str_eq(kv->arr_strs[i], sample_strs[i], sample_str_lens[i]));
    }
    CHECK(kv && gguf_arr_u32(kv, 0, &u32) == CS_EFORMAT);
}

static void check_nested(const struct gguf_file *f)
{
    const struct gguf_kv *kv = gguf_find_kv(f, "test.nested"), *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    uint32_t u32;
    struct gguf_str s;
    CHECK(kv && kv->arr_type == GGUF_TYPE_ARRAY && kv->arr_len == 3);
    if (!kv)
        return;
    CHECK(gguf_arr_nested(kv, 0, &a) == CS_OK && a->arr_type == GGUF_TYPE_UINT32 && a->arr_len == 3);
    CHECK(a && gguf_arr_u32(a, 2, &u32) == CS_OK && u32 == 3);
    CHECK(gguf_arr_nested(kv, 1, &b) == CS_OK && b->arr_type == GGUF_TYPE_STRING && b->arr_len == 2);
    CHECK(b && gguf_arr_str(b, 1, &s) == CS_OK && str_eq(s, "b\0c", 3));
    CHECK(gguf_arr_nested(kv, 2, &c) == CS_OK && c->arr_type == GGUF_TYPE_ARRAY && c->arr_len == 1);
    CHECK(c && gguf_arr_nested(c, 0, &d) == CS_OK && d->arr_type == GGUF_TYPE_INT8 && d->arr_len == 0);
    CHECK_EQ_INT(gguf_arr_nested(kv, 3, &a), CS_ERANGE);
    CHECK_EQ_INT(gguf_arr_nested(gguf_find_kv(f, "test.arr_i32"), 0, &a), CS_EFORMAT);
    CHECK(kv->arr_end > kv->arr_data && c && c->arr_end == kv->arr_end);
}

static void check_tensors(const struct gguf_file *f, uint64_t alignment)
{
    CHECK_EQ_INT(f->n_tensors, SAMPLE_N_TENSORS);
    CHECK_EQ_INT(f->alignment, alignment);
    CHECK_EQ_INT(f->data_offset % alignment, 0);
    for (int i = 0; i < SAMPLE_N_TENSORS && (uint64_t)i < f->n_tensors; i++) {
        const struct sample_tensor *st = &sample_tensors[i];
        const struct gguf_tensor *t = gguf_find_tensor(f, st->name);
        CHECK(t == &f->tensors[i]);
        if (!t)
            continue;
        CHECK(str_eq(t->name, st->name, strlen(st->name)));
        CHECK_EQ_INT(t->type, st->type);
        CHECK_EQ_INT(t->n_dims, st->n_dims);
        for (int d = 0; d < 4; d++)
            CHECK_EQ_INT(t->ne[d], st->ne[d]);
        uint64_t n = 0;
        CHECK_EQ_INT(gguf_tensor_nbytes(st->type, st->ne, st->n_dims, &n), CS_OK);
        CHECK_EQ_INT(t->n_bytes, n);
        CHECK_EQ_INT(t->offset % alignment, 0);
        CHECK((const uint8_t *)t->data == f->map + f->data_offset + t->offset);
        uint8_t want[4096];
        sample_pattern(want, n, (uint32_t)i);
        CHECK(memcmp(t->data, want, n) == 0);
    }
    CHECK(gguf_find_tensor(f, "blk.0.attn_q") == NULL);
    CHECK(gguf_find_tensor(f, "") == NULL);
}

static void check_key_order(const struct gguf_file *f, bool aligned)
{
    static const char *order[] = {"general.architecture", "test.u32", "test.i32", "test.u64"};
    for (int i = 0; i < 4 && (uint64_t)i < f->n_kv; i++)
        CHECK(str_eq(f->kv[i].key, order[i], strlen(order[i])));
    if (aligned)
        CHECK(str_eq(f->kv[12].key, "general.alignment", 17));
}

static void test_gguf_round_trip(void)
{
    static const uint32_t aligns[2] = {0, 64};
    for (int a = 0; a < 2; a++) {
        struct cs_error err = {0};
        struct gguf_file *f = NULL;
        char path[256];
        snprintf(path, sizeof path, "%s", tmp_path(a ? "rt64.gguf" : "rt.gguf"));
        CHECK_EQ_INT(sample_write(path, aligns[a], 1, &err), CS_OK);
        CHECK(access(tmp_path(a ? "rt64.gguf.tmp" : "rt.gguf.tmp"), F_OK) != 0);
        int rc = gguf_open(&f, path, &err);
        CHECK_EQ_INT(rc, CS_OK);
        if (rc != CS_OK) {
            fprintf(stderr, "open: %s\n", err.msg);
            continue;
        }
        CHECK_EQ_INT(f->version, 3);
        CHECK_EQ_INT(f->n_kv, a ? 22 : 21);
        check_key_order(f, a);
        check_scalars(f);
        check_getter_errors(f);
        check_arrays(f);
        check_nested(f);
        check_tensors(f, a ? 64 : 32);
        gguf_close(f);
    }
}

static void test_gguf_replace_keeps_position(void)
{
    struct gguf_writer *w;
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    uint32_t v = 0;
    CHECK_EQ_INT(gguf_writer_create(&w), CS_OK);
    gguf_writer_set_u32(w, "a", 1);
    gguf_writer_set_str(w, "b", "x");
    gguf_writer_set_u32(w, "c", 3);
    gguf_writer_set_u32(w, "a", 11);
    gguf_writer_set_u32(w, "b", 22); /* another type replaces too */
    CHECK_EQ_INT(gguf_writer_write(w, tmp_path("rep.gguf"), &err), CS_OK);
    gguf_writer_destroy(w);
    CHECK_EQ_INT(gguf_open(&f, tmp_path("rep.gguf"), &err), CS_OK);
    if (!f)
        return;
    CHECK_EQ_INT(f->n_kv, 3);
    CHECK(str_eq(f->kv[0].key, "a", 1) && str_eq(f->kv[1].key, "b", 1) && str_eq(f->kv[2].key, "c", 1));
    CHECK(gguf_get_u32(f, "a", &v, &err) == CS_OK && v == 11);
    CHECK(gguf_get_u32(f, "b", &v, &err) == CS_OK && v == 22);
    CHECK_EQ_INT(f->n_tensors, 0);
    gguf_close(f);
}

/* 1000 tensors and a 200k-entry string array: hashed lookups find each one. */
static void test_gguf_many_names(void)
{
    enum { NT = 1000, NS = 200000 };
    struct gguf_writer *w;
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    static char names[NT][32];
    static char strs[NS][16];
    static const char *ptrs[NS];
    static float one[16];
    CHECK_EQ_INT(gguf_writer_create(&w), CS_OK);
    for (int i = 0; i < NS; i++) {
        snprintf(strs[i], sizeof strs[i], "tok%d", i);
        ptrs[i] = strs[i];
    }
    CHECK_EQ_INT(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptrs, NS), CS_OK);
    for (int i = 0; i < NT; i++) {
        int64_t ne[1] = {16};
        snprintf(names[i], sizeof names[i], "blk.%d.w", i);
        CHECK_EQ_INT(gguf_writer_add_tensor(w, names[i], CS_DTYPE_F32, ne, 1, one, NULL, NULL), CS_OK);
    }
    int64_t ne1[1] = {16};
    CHECK_EQ_INT(gguf_writer_add_tensor(w, names[5], CS_DTYPE_F32, ne1, 1, one, NULL, NULL), CS_EINVAL);
    CHECK_EQ_INT(gguf_writer_write(w, tmp_path("many.gguf"), &err), CS_OK);
    gguf_writer_destroy(w);
    CHECK_EQ_INT(gguf_open(&f, tmp_path("many.gguf"), &err), CS_OK);
    if (!f)
        return;
    int found = 0;
    for (int i = 0; i < NT; i++)
        found += gguf_find_tensor(f, names[i]) == &f->tensors[i];
    CHECK_EQ_INT(found, NT);
    const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    CHECK(kv && kv->arr_len == NS);
    int same = 0;
    for (int i = 0; kv && i < NS; i++)
        same += str_eq(kv->arr_strs[i], strs[i], strlen(strs[i]));
    CHECK_EQ_INT(same, NS);
    gguf_close(f);
}

/* Every key copied with copy_kv comes back byte-identical. */
static void test_gguf_copy_kv(void)
{
    struct gguf_file *a = NULL, *b = NULL;
    struct gguf_writer *w;
    struct cs_error err = {0};
    CHECK_EQ_INT(sample_write(tmp_path("src.gguf"), 0, 0, &err), CS_OK);
    CHECK_EQ_INT(gguf_open(&a, tmp_path("src.gguf"), &err), CS_OK);
    CHECK_EQ_INT(gguf_writer_create(&w), CS_OK);
    for (uint64_t i = 0; a && i < a->n_kv; i++)
        CHECK_EQ_INT(gguf_writer_copy_kv(w, &a->kv[i]), CS_OK);
    CHECK_EQ_INT(gguf_writer_write(w, tmp_path("copy.gguf"), &err), CS_OK);
    gguf_writer_destroy(w);
    CHECK_EQ_INT(gguf_open(&b, tmp_path("copy.gguf"), &err), CS_OK);
    if (a && b) {
        CHECK_EQ_INT(a->n_kv, b->n_kv);
        CHECK_EQ_INT(a->size, b->size);
        CHECK(memcmp(a->map, b->map, a->size) == 0);
    }
    gguf_close(a);
    gguf_close(b);
}

static int failing_fill(void *ctx, void *dst, uint64_t n)
{
    return CS_EIO;
}

static void test_gguf_writer_errors(void)
{
    struct gguf_writer *w;
    struct cs_error err = {0};
    int64_t ne[2] = {33, 2}, bad[2] = {32, 0};
    static uint8_t data[256];
    CHECK_EQ_INT(gguf_writer_create(&w), CS_OK);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "q", CS_DTYPE_Q8_0, ne, 2, data, NULL, NULL), CS_ERANGE);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "q", 99, bad, 1, data, NULL, NULL), CS_EUNSUPPORTED);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "q", CS_DTYPE_F32, bad, 2, data, NULL, NULL), CS_EINVAL);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "q", CS_DTYPE_F32, ne, 5, data, NULL, NULL), CS_EINVAL);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "", CS_DTYPE_F32, ne, 1, data, NULL, NULL), CS_EINVAL);
    CHECK_EQ_INT(gguf_writer_set_arr(w, "k", GGUF_TYPE_STRING, data, 1), CS_EINVAL);
    CHECK_EQ_INT(gguf_writer_add_tensor(w, "f", CS_DTYPE_F32, ne, 2, NULL, failing_fill, NULL), CS_OK);
    CHECK_EQ_INT(gguf_writer_write(w, tmp_path("fail.gguf"), &err), CS_EIO);
    CHECK(strstr(err.msg, "filling tensor f") != NULL);
    CHECK(access(tmp_path("fail.gguf"), F_OK) != 0 && access(tmp_path("fail.gguf.tmp"), F_OK) != 0);
    gguf_writer_destroy(w);

    CHECK_EQ_INT(gguf_writer_create(&w), CS_OK);
    gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK_EQ_INT(gguf_writer_write(w, tmp_path("al.gguf"), &err), CS_EINVAL);
    CHECK(strstr(err.msg, "alignment") != NULL);
    gguf_writer_set_u32(w, "general.alignment", 16);
    CHECK_EQ_INT(gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err), CS_EIO);
    CHECK(strstr(err.msg, "/nonexistent-dir/x.gguf.tmp") != NULL);
    gguf_writer_destroy(w);
}

static void test_gguf_open_errors(void)
{
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(gguf_open(&f, tmp_path("absent.gguf"), &err), CS_ENOTFOUND);
    CHECK(strstr(err.msg, "absent.gguf") != NULL);
    CHECK_EQ_INT(gguf_open(&f, dir, &err), CS_EIO);
    FILE *e = fopen(tmp_path("empty.gguf"), "wb");
    fclose(e);
    CHECK_EQ_INT(gguf_open(&f, tmp_path("empty.gguf"), &err), CS_EFORMAT);
    CHECK(strstr(err.msg, "truncated at byte 0") != NULL);
    CHECK(f == NULL);
}

static void test_gguf_nbytes(void)
{
    int64_t ne[4] = {256, 3, 2, 1};
    uint64_t n = 0;
    CHECK(gguf_tensor_nbytes(CS_DTYPE_Q8_0, ne, 2, &n) == CS_OK && n == 8 * 34 * 3);
    CHECK(gguf_tensor_nbytes(CS_DTYPE_BF16, ne, 3, &n) == CS_OK && n == 256 * 6 * 2);
    CHECK(gguf_tensor_nbytes(12, ne, 1, &n) == CS_OK && n == 144);  /* q4_k */
    CHECK(gguf_tensor_nbytes(10, ne, 1, &n) == CS_OK && n == 84);   /* q2_k */
    CHECK(gguf_tensor_nbytes(9, ne, 1, &n) == CS_OK && n == 8 * 36); /* q8_1 */
    CHECK_EQ_INT(gguf_tensor_nbytes(99, ne, 1, &n), CS_EUNSUPPORTED);
    int64_t huge[4] = {1ll << 62, 1ll << 62, 1, 1};
    CHECK_EQ_INT(gguf_tensor_nbytes(CS_DTYPE_F32, huge, 2, &n), CS_ERANGE);
    CHECK(strcmp(gguf_type_name(CS_DTYPE_Q8_0), "q8_0") == 0);
    CHECK(strcmp(gguf_type_name(4), "unknown") == 0);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_gguf_XXXXXX");
    if (!mkdtemp(dir))
        return 2;
    RUN(test_gguf_round_trip);
    RUN(test_gguf_replace_keeps_position);
    RUN(test_gguf_many_names);
    RUN(test_gguf_copy_kv);
    RUN(test_gguf_writer_errors);
    RUN(test_gguf_open_errors);
    RUN(test_gguf_nbytes);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_report();
}
