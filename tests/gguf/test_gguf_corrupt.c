/* test_gguf_corrupt.c - proves the GGUF reader refuses corrupted files with
 * CS_EFORMAT / CS_EUNSUPPORTED and a message naming the file and the exact
 * problem, and never reads out of bounds: a table of targeted corruptions of a
 * valid file (magic, versions 1/2/4, absurd counts, key and string lengths
 * near 2^63, unknown value and tensor types, n_dims 5, zero and negative dims,
 * shape overflow, misaligned and out-of-file tensor offsets, duplicate names
 * and keys, bad alignment, arrays nested too deep); truncation at every byte
 * offset; and single-byte overwrites of the whole metadata region (each input
 * in an exact-size heap copy, so the sanitized build catches overreads). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "gguf_sample.h"
#include "gguf_walk.h"
#include "tests/test_util.h"

#define NAME "sample.gguf"

static uint8_t *good, *good64;
static const struct gguf_file *sample; /* good, opened */
static size_t good_size, good64_size;

/* Open an exact-size heap copy of buf[0..n); returns the status, err filled. */
static int open_copy(const uint8_t *buf, size_t n, struct cs_error *err)
{
    uint8_t *copy = malloc(n ? n : 1);
    struct gguf_file *f = NULL;
    memcpy(copy, buf, n);
    err->msg[0] = 0;
    int rc = gguf_open_buffer(&f, copy, n, NAME, err);
    if (rc == CS_OK) {
        volatile uint64_t h = gguf_walk(f);
        (void)h;
        gguf_close(f);
    } else {
        CHECK(f == NULL);
    }
    free(copy);
    return rc;
}

/* buf must fail with code and a message containing NAME and each of w1, w2. */
static void expect_fail_at(int line, const uint8_t *buf, size_t n, int code, const char *w1,
                           const char *w2)
{
    struct cs_error err;
    int rc = open_copy(buf, n, &err);
    bool ok = rc == code && strncmp(err.msg, NAME ": ", strlen(NAME) + 2) == 0 &&
              (!w1 || strstr(err.msg, w1)) && (!w2 || strstr(err.msg, w2));
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  line %d: got %s \"%s\", wanted %s with \"%s\" \"%s\"\n", line,
                cs_status_name(rc), err.msg, cs_status_name(code), w1 ? w1 : "", w2 ? w2 : "");
}
#define EXPECT_FAIL(buf, n, code, w1, w2) expect_fail_at(__LINE__, buf, n, code, w1, w2)

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Offsets of fields in the good file, found by reading it. */
struct layout {
    struct gguf_file *f;
    size_t tensor_info[SAMPLE_N_TENSORS]; /* offset of each tensor's name length */
};

static size_t off(const struct gguf_file *f, const void *p)
{
    return (size_t)((const uint8_t *)p - f->map);
}

static size_t key_off(const struct gguf_file *f, const char *key)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    return kv ? off(f, kv->key.ptr) - 8 : 0; /* the key's length field */
}

static size_t value_type_off(const struct gguf_file *f, const char *key)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    return off(f, kv->key.ptr) + kv->key.len;
}

/* Offsets inside tensor info i: name length, n_dims, ne[0], type, offset. */
static size_t tinfo(const struct gguf_file *f, int i, int field)
{
    const struct gguf_tensor *t = &f->tensors[i];
    size_t nd = off(f, t->name.ptr) + t->name.len;
    switch (field) {
    case 0: return off(f, t->name.ptr) - 8;
    case 1: return nd;
    case 2: return nd + 4;
    case 3: return nd + 4 + 8 * t->n_dims;
    default: return nd + 8 + 8 * t->n_dims;
    }
}

static uint8_t *mut(void)
{
    uint8_t *m = malloc(good_size);
    memcpy(m, good, good_size);
    return m;
}

static void test_gguf_corrupt_header(void)
{
    uint8_t *m = mut();
    memcpy(m, "GGUX", 4);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "bad magic 0x47475558", NULL);
    memcpy(m, "GGUF", 4);
    for (uint32_t v = 1; v <= 4; v += (v == 2 ? 2 : 1)) {
        char want[64];
        snprintf(want, sizeof want, "unsupported GGUF version %u", v);
        put_u32(m + 4, v);
        EXPECT_FAIL(m, good_size, CS_EUNSUPPORTED, want, NULL);
    }
    put_u32(m + 4, 3);
    put_u64(m + 8, 1ull << 60);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "1152921504606846976 tensors", "cannot fit");
    put_u64(m + 8, SAMPLE_N_TENSORS);
    put_u64(m + 16, 1ull << 60);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "key/value pairs", "cannot fit");
    put_u64(m + 16, UINT64_MAX);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "cannot fit", NULL);
    EXPECT_FAIL(good, 3, CS_EFORMAT, "truncated at byte 0", "header");
    EXPECT_FAIL(good, 0, CS_EFORMAT, "truncated at byte 0", NULL);
    EXPECT_FAIL(good, 20, CS_EFORMAT, "truncated at byte 16", "header");
    free(m);
}

static void test_gguf_corrupt_metadata(void)
{
    const struct gguf_file *f = sample;
    uint8_t *m = mut();
    size_t k = key_off(f, "test.i32");
    put_u64(m + k, 1ull << 63);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "truncated at byte", "reading key/value 2");
    put_u64(m + k, 8);
    memcpy(m + k + 8, "test.u32", 8);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "duplicate key 'test.u32'", NULL);
    memcpy(m + k + 8, "test.i32", 8);
    put_u32(m + value_type_off(f, "test.i32"), 13);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "unknown value type 13", "test.i32");
    put_u32(m + value_type_off(f, "test.i32"), GGUF_TYPE_INT32);

    const struct gguf_kv *kv = gguf_find_kv(f, "test.arr_str");
    size_t arr = off(f, kv->arr_data);
    put_u64(m + arr - 8, 1ull << 60);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "truncated at byte", "test.arr_str");
    put_u64(m + arr - 8, SAMPLE_N_STRS);
    put_u64(m + arr, UINT64_MAX - 3); /* first string's length */
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "truncated at byte", "test.arr_str");
    put_u64(m + arr, sample_str_lens[0]);
    put_u32(m + arr - 12, 77);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "unknown value type 77", "test.arr_str");
    put_u32(m + arr - 12, GGUF_TYPE_STRING);

    kv = gguf_find_kv(f, "test.arr_i32");
    put_u64(m + off(f, kv->arr_data) - 8, (1ull << 62) + 1); /* 4-byte elements: overflows 2^64 */
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "truncated at byte", "test.arr_i32");
    put_u64(m + off(f, kv->arr_data) - 8, 4);
    CHECK(memcmp(m, good, good_size) == 0);
    free(m);
}

static void test_gguf_corrupt_alignment(void)
{
    struct gguf_file *f = NULL;
    struct cs_error err;
    CHECK_EQ_INT(gguf_open_buffer(&f, good64, good64_size, NAME, &err), CS_OK);
    if (!f)
        return;
    uint8_t *m = malloc(good64_size);
    size_t v = value_type_off(f, "general.alignment") + 4;
    static const uint32_t bad[3] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        memcpy(m, good64, good64_size);
        put_u32(m + v, bad[i]);
        EXPECT_FAIL(m, good64_size, CS_EFORMAT, "general.alignment", "power of two");
    }
    memcpy(m, good64, good64_size);
    put_u32(m + v - 4, GGUF_TYPE_FLOAT32);
    EXPECT_FAIL(m, good64_size, CS_EFORMAT, "general.alignment has type float32", NULL);
    /* alignment 32 instead of 64: offsets still multiples, data section moves */
    memcpy(m, good64, good64_size);
    put_u32(m + v, 32);
    struct cs_error e2;
    int rc = open_copy(m, good64_size, &e2);
    CHECK(rc == CS_OK || rc == CS_EFORMAT);
    free(m);
    gguf_close(f);
}

static void test_gguf_corrupt_tensors(void)
{
    const struct gguf_file *f = sample;
    uint8_t *m = mut();
    put_u64(m + tinfo(f, 5, 4), f->tensors[5].offset + 1);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "output.weight offset", "not a multiple of the alignment 32");
    put_u64(m + tinfo(f, 5, 4), 1ull << 40);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "tensor output.weight (offset 1099511627776, 210 bytes) extends past end of file", NULL);
    put_u64(m + tinfo(f, 5, 4), UINT64_MAX - 31);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "extends past end of file", NULL);
    put_u64(m + tinfo(f, 5, 4), f->tensors[5].offset);

    put_u32(m + tinfo(f, 2, 1), 5);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "blk.0.attn_norm.weight has n_dims 5", NULL);
    put_u32(m + tinfo(f, 2, 1), 1);
    put_u32(m + tinfo(f, 1, 3), 99);
    EXPECT_FAIL(m, good_size, CS_EUNSUPPORTED, "tensor blk.0.attn_q.weight has unsupported type 99", NULL);
    put_u32(m + tinfo(f, 1, 3), 4);
    EXPECT_FAIL(m, good_size, CS_EUNSUPPORTED, "unsupported type 4", NULL);
    put_u32(m + tinfo(f, 1, 3), CS_DTYPE_F16);

    size_t ne = tinfo(f, 0, 2);
    put_u64(m + ne, 0);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "token_embd.weight dimension 0 is 0", NULL);
    put_u64(m + ne, 64);
    put_u64(m + ne + 8, UINT64_MAX);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "dimension 1 is -1", NULL);
    put_u64(m + ne + 8, 1ull << 62);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "overflows", NULL);
    put_u64(m + ne + 8, 3);
    put_u64(m + ne, 65);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "row length 65 is not a multiple of the block size 32", NULL);
    put_u64(m + ne, 64);

    memcpy(m + tinfo(f, 7, 0) + 8, "ids", 3); /* "big" -> "ids" */
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "duplicate tensor name ids", NULL);
    memcpy(m + tinfo(f, 7, 0) + 8, "big", 3);
    put_u64(m + tinfo(f, 3, 0), 1ull << 63);
    EXPECT_FAIL(m, good_size, CS_EFORMAT, "truncated at byte", "reading tensor info 3");
    put_u64(m + tinfo(f, 3, 0), 11);
    CHECK(memcmp(m, good, good_size) == 0);
    free(m);
    /* cut inside tensor info 5 */
    EXPECT_FAIL(good, tinfo(f, 5, 2) + 3, CS_EFORMAT, "reading tensor info 5 'output.weight'", NULL);
}

/* An array nested 9 deep is refused; 7 deep is read. */
static void test_gguf_corrupt_nesting(void)
{
    for (int depth = 7; depth <= 9; depth += 2) {
        struct gguf_writer *w;
        struct cs_error err;
        uint8_t raw[256];
        size_t n = 0;
        uint64_t one = 1, zero = 0;
        uint32_t at = GGUF_TYPE_ARRAY, u8 = GGUF_TYPE_UINT8;
        for (int d = 0; d < depth - 1; d++) {
            memcpy(raw + n, &at, 4);
            memcpy(raw + n + 4, &one, 8);
            n += 12;
        }
        memcpy(raw + n, &u8, 4);
        memcpy(raw + n + 4, &zero, 8);
        n += 12;
        gguf_writer_create(&w);
        gguf_writer_set_raw(w, "deep", GGUF_TYPE_ARRAY, raw, n);
        char path[64];
        snprintf(path, sizeof path, "/tmp/test_gguf_deep_%d.gguf", (int)getpid());
        CHECK_EQ_INT(gguf_writer_write(w, path, &err), CS_OK);
        gguf_writer_destroy(w);
        size_t size = 0;
        uint8_t *buf = sample_read_file(path, &size);
        unlink(path);
        if (!buf)
            continue;
        if (depth == 7)
            CHECK_EQ_INT(open_copy(buf, size, &err), CS_OK);
        else
            EXPECT_FAIL(buf, size, CS_EFORMAT, "nested deeper than 8", "'deep'");
        free(buf);
    }
}

/* Every prefix shorter than the end of the last tensor's data fails. */
static void test_gguf_truncate_every_byte(void)
{
    const struct gguf_file *f = sample;
    const struct gguf_tensor *last = &f->tensors[f->n_tensors - 1];
    size_t end = f->data_offset + last->offset + last->n_bytes;
    int bad = 0;
    for (size_t n = 0; n < good_size; n++) {
        struct cs_error err;
        int rc = open_copy(good, n, &err);
        if (n < end)
            bad += rc != CS_EFORMAT || strncmp(err.msg, NAME ": ", strlen(NAME) + 2) != 0 ||
                   !(strstr(err.msg, "truncated at byte") || strstr(err.msg, "past end of file") ||
                     strstr(err.msg, "cannot fit"));
        else
            bad += rc != CS_OK;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(end <= good_size);
}

/* Overwrite each byte of the metadata region with a few values: any result
 * is allowed but a crash, a hang or an error without a message. */
static void test_gguf_overwrite_every_byte(void)
{
    const struct gguf_file *f = sample;
    static const int vals[] = {0x00, 0xff, 0x80, 0x01, -1};
    uint8_t *m = mut();
    int bad = 0;
    for (size_t i = 0; i < f->data_offset && i < good_size; i++) {
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            struct cs_error err;
            m[i] = (uint8_t)(vals[v] < 0 ? good[i] ^ 0x20 : vals[v]);
            int rc = open_copy(m, good_size, &err);
            if (rc != CS_OK)
                bad += (rc != CS_EFORMAT && rc != CS_EUNSUPPORTED) || strlen(err.msg) < 16;
        }
        m[i] = good[i];
    }
    CHECK_EQ_INT(bad, 0);
    free(m);
}

int main(void)
{
    char path[64];
    struct cs_error err;
    struct gguf_file *f = NULL;
    snprintf(path, sizeof path, "/tmp/test_gguf_corrupt_%d.gguf", (int)getpid());
    if (sample_write(path, 0, 1, &err) != CS_OK || !(good = sample_read_file(path, &good_size)) ||
        sample_write(path, 64, 1, &err) != CS_OK || !(good64 = sample_read_file(path, &good64_size))) {
        fprintf(stderr, "cannot write the sample: %s\n", err.msg);
        return 1;
    }
    unlink(path);
    if (gguf_open_buffer(&f, good, good_size, NAME, &err) != CS_OK) {
        fprintf(stderr, "the sample does not open: %s\n", err.msg);
        return 1;
    }
    sample = f;
    RUN(test_gguf_corrupt_header);
    RUN(test_gguf_corrupt_metadata);
    RUN(test_gguf_corrupt_alignment);
    RUN(test_gguf_corrupt_tensors);
    RUN(test_gguf_corrupt_nesting);
    RUN(test_gguf_truncate_every_byte);
    RUN(test_gguf_overwrite_every_byte);
    gguf_close(f);
    free(good);
    free(good64);
    return test_report();
}
