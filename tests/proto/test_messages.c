/* test_messages.c - proves that proto/messages.c encodes and decodes every
 * message type losslessly (random contents, field by field, and canonical
 * bytes on re-encoding), that truncated or corrupted buffers at every byte
 * offset are refused with CS_EPROTO (or decode to a valid message) and never
 * crash, that a version mismatch and an unknown type are named in the error,
 * that oversize arrays, strings and inconsistent counts are refused by both
 * the encoder and the decoder, and that a step converts to struct cs_batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto/messages.h"
#include "tests/proto/msg_testlib.h"
#include "tests/test_util.h"

static int encode(const struct msg *m, void **data, size_t *size)
{
    struct cs_error err = {0};
    int rc = msg_encode(m, data, size, &err);
    if (rc)
        fprintf(stderr, "encode %s: %s\n", msg_type_name(m->h.type), err.msg);
    return rc;
}

/* Decode and expect CS_EPROTO with a message containing want (NULL: any). */
static void expect_refused(const void *data, size_t size, const char *want)
{
    struct msg m;
    struct cs_error err = {0};
    int rc = msg_decode(&m, data, size, &err);
    CHECK_EQ_INT(rc, CS_EPROTO);
    CHECK(err.msg[0] != 0);
    if (want && !strstr(err.msg, want)) {
        fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err.msg, want);
        CHECK(0);
    }
    CHECK(m.mem == NULL);
    msg_free(&m);
}

static void test_messages_roundtrip(void)
{
    struct rnd r;
    rnd_init(&r, 1);
    for (uint32_t type = MSG_TYPE_FIRST; type <= MSG_TYPE_LAST; type++) {
        for (int it = 0; it < 200; it++) {
            struct msg a, b;
            void *buf = NULL, *buf2 = NULL;
            size_t n = 0, n2 = 0;
            struct cs_error err = {0};
            rnd_msg(&r, &a, type, it % 4);
            CHECK_EQ_INT(encode(&a, &buf, &n), CS_OK);
            int rc = msg_decode(&b, buf, n, &err);
            CHECK_EQ_INT(rc, CS_OK);
            if (rc)
                fprintf(stderr, "decode %s: %s\n", msg_type_name(type), err.msg);
            const char *what = NULL;
            bool eq = rc == CS_OK && msg_equal(&a, &b, &what);
            CHECK(eq);
            if (!eq && what)
                fprintf(stderr, "%s: field %s differs\n", msg_type_name(type), what);
            /* canonical: re-encoding the decoded message gives the same bytes */
            if (rc == CS_OK) {
                CHECK_EQ_INT(encode(&b, &buf2, &n2), CS_OK);
                CHECK(n2 == n && memcmp(buf, buf2, n) == 0);
            }
            free(buf);
            free(buf2);
            msg_free(&b);
            rnd_release(&r);
        }
    }
}

static void test_messages_truncated(void)
{
    struct rnd r;
    rnd_init(&r, 2);
    for (uint32_t type = MSG_TYPE_FIRST; type <= MSG_TYPE_LAST; type++) {
        struct msg a;
        void *buf;
        size_t n;
        rnd_msg(&r, &a, type, 0);
        CHECK_EQ_INT(encode(&a, &buf, &n), CS_OK);
        for (size_t cut = 0; cut < n; cut++)
            expect_refused(buf, cut, NULL);
        /* and one byte too many */
        uint8_t *longer = malloc(n + 1);
        memcpy(longer, buf, n);
        longer[n] = 0;
        expect_refused(longer, n + 1, "after the message");
        free(longer);
        free(buf);
        rnd_release(&r);
    }
}

/* A corrupted buffer either is refused with CS_EPROTO or is a valid message
 * that survives its own round trip. */
static int decode_corrupt(const uint8_t *data, size_t n)
{
    struct msg m;
    struct cs_error err = {0};
    int rc = msg_decode(&m, data, n, &err);
    if (rc == CS_OK) {
        void *buf;
        size_t n2;
        struct msg m2;
        CHECK_EQ_INT(msg_encode(&m, &buf, &n2, &err), CS_OK);
        CHECK_EQ_INT(msg_decode(&m2, buf, n2, &err), CS_OK);
        CHECK(msg_equal(&m, &m2, NULL));
        msg_free(&m2);
        free(buf);
    } else {
        CHECK_EQ_INT(rc, CS_EPROTO);
        CHECK(err.msg[0] != 0);
    }
    msg_free(&m);
    return rc;
}

static void test_messages_corrupted(void)
{
    static const uint8_t xors[] = {0x01, 0x02, 0x10, 0x80, 0xff};
    static const uint8_t sets[] = {0x00, 0x7f, 0xc0, 0xc1, 0xc6, 0xca, 0xcb, 0xdb, 0xdd, 0xdf, 0xff};
    struct rnd r;
    rnd_init(&r, 3);
    int refused = 0, total = 0;
    for (uint32_t type = MSG_TYPE_FIRST; type <= MSG_TYPE_LAST; type++) {
        struct msg a;
        void *buf;
        size_t n;
        rnd_msg(&r, &a, type, 0);
        CHECK_EQ_INT(encode(&a, &buf, &n), CS_OK);
        uint8_t *c = malloc(n);
        for (size_t i = 0; i < n; i++) {
            for (size_t k = 0; k < sizeof xors + sizeof sets; k++) {
                memcpy(c, buf, n);
                c[i] = k < sizeof xors ? (uint8_t)(c[i] ^ xors[k]) : sets[k - sizeof xors];
                int rc = decode_corrupt(c, n);
                refused += rc != CS_OK;
                total++;
                if (i < 2) /* the array header and the version byte */
                    CHECK(rc == CS_EPROTO);
            }
        }
        free(c);
        free(buf);
        rnd_release(&r);
    }
    /* random byte soup */
    uint8_t soup[256];
    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)rnd_range(&r, 1, sizeof soup);
        for (size_t i = 0; i < n; i++)
            soup[i] = (uint8_t)rnd_u64(&r);
        if (it & 1)
            soup[0] = 0x95; /* a 5-array, like a real header */
        decode_corrupt(soup, n);
    }
    /* most bytes are free-form (strings, ids, u64), but a good share of the
     * corruptions must be caught */
    CHECK(refused > total / 10);
}

static void test_messages_version(void)
{
    struct rnd r;
    rnd_init(&r, 4);
    struct msg a;
    void *buf;
    size_t n;
    struct cs_error err = {0};
    rnd_msg(&r, &a, MSG_HEARTBEAT, 0);
    CHECK_EQ_INT(encode(&a, &buf, &n), CS_OK);
    uint8_t *b = buf;
    CHECK_EQ_INT(b[0], 0x95); /* [version, type, step_id, sender, body] */
    CHECK_EQ_INT(b[1], CS_PROTO_VERSION);
    b[1] = CS_PROTO_VERSION + 1;
    char want[64];
    snprintf(want, sizeof want, "protocol version %d, expected %d", CS_PROTO_VERSION + 1,
             CS_PROTO_VERSION);
    expect_refused(buf, n, want);
    free(buf);
    /* the encoder refuses a foreign version too */
    a.h.version = 9;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "protocol version 9") != NULL);
    /* a hello whose body version disagrees with its header */
    rnd_msg(&r, &a, MSG_HELLO, 0);
    a.u.hello.proto_version = CS_PROTO_VERSION + 1;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "proto_version") != NULL);
    rnd_release(&r);
}

static void test_messages_unknown_type(void)
{
    struct rnd r;
    rnd_init(&r, 5);
    struct msg a;
    void *buf;
    size_t n;
    rnd_msg(&r, &a, MSG_SHUTDOWN, 0);
    CHECK_EQ_INT(encode(&a, &buf, &n), CS_OK);
    ((uint8_t *)buf)[2] = 99;
    expect_refused(buf, n, "unknown message type 99");
    ((uint8_t *)buf)[2] = 0;
    expect_refused(buf, n, "unknown message type 0");
    free(buf);
    struct cs_error err = {0};
    a.h.type = 42;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "unknown message type 42") != NULL);
    CHECK(strcmp(msg_type_name(42), "unknown") == 0);
    rnd_release(&r);
}

/* ---- hand-packed invalid messages ---- */

static void pack_header(msgpack_packer *pk, uint32_t type)
{
    msgpack_pack_array(pk, 5);
    msgpack_pack_uint32(pk, CS_PROTO_VERSION);
    msgpack_pack_uint32(pk, type);
    msgpack_pack_uint64(pk, 7);
    msgpack_pack_int32(pk, -1);
}

static void pack_i32s(msgpack_packer *pk, const int32_t *a, int n)
{
    msgpack_pack_bin(pk, (size_t)n * 4);
    msgpack_pack_bin_body(pk, a, (size_t)n * 4); /* test host is little-endian */
}

/* A step of n_seqs sequences of 2 tokens; variants break one rule. */
enum step_variant { STEP_OK, STEP_SUM, STEP_DUP_SLOT, STEP_FLAG_NO_SAMPLE, STEP_TOKENS };

static void pack_step(msgpack_sbuffer *sb, int n_seqs, enum step_variant v)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    static const int32_t tokens[3] = {5, 6, 7}, pages[1] = {0};
    pack_header(&pk, MSG_STEP);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_int32(&pk, -1);
    msgpack_pack_int32(&pk, 2 * n_seqs + (v == STEP_SUM));
    msgpack_pack_array(&pk, (size_t)n_seqs);
    for (int s = 0; s < n_seqs; s++) {
        msgpack_pack_array(&pk, 9);
        msgpack_pack_int64(&pk, s);
        msgpack_pack_int32(&pk, v == STEP_DUP_SLOT ? 3 : s);
        msgpack_pack_int32(&pk, 0);
        msgpack_pack_int32(&pk, 2);
        msgpack_pack_uint32(&pk, v == STEP_FLAG_NO_SAMPLE ? MSG_SEQ_SAMPLE : 0);
        msgpack_pack_int32(&pk, -1);
        pack_i32s(&pk, tokens, v == STEP_TOKENS ? 3 : 2);
        pack_i32s(&pk, pages, 1);
        msgpack_pack_nil(&pk);
    }
    msgpack_pack_array(&pk, 0);
}

static void expect_step(int n_seqs, enum step_variant v, int want_rc, const char *want)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    pack_step(&sb, n_seqs, v);
    if (want_rc == CS_OK) {
        struct msg m;
        struct cs_error err = {0};
        CHECK_EQ_INT(msg_decode(&m, sb.data, sb.size, &err), CS_OK);
        CHECK_EQ_INT(m.u.step.n_seqs, n_seqs);
        msg_free(&m);
    } else {
        expect_refused(sb.data, sb.size, want);
    }
    msgpack_sbuffer_destroy(&sb);
}

static void test_messages_oversize(void)
{
    expect_step(MSG_MAX_SEQS, STEP_OK, CS_OK, NULL);
    expect_step(MSG_MAX_SEQS + 1, STEP_OK, CS_EPROTO, "seqs: 1025 entries, limit 1024");
    /* an array header claiming 2^32-1 entries in a 10-byte buffer: refused
     * before msgpack-c would allocate 100 GB */
    static const uint8_t huge[] = {0x95, 0x01, 0x04, 0x00, 0xff, 0xdd, 0xff, 0xff, 0xff, 0xff};
    expect_refused(huge, sizeof huge, "malformed msgpack");
    static const uint8_t huge_map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01};
    expect_refused(huge_map, sizeof huge_map, "malformed msgpack");
    /* nesting deeper than any message */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof deep);
    deep[63] = 0x01;
    expect_refused(deep, sizeof deep, "nested deeper");

    /* encoder side: oversize arrays and strings */
    struct rnd r;
    rnd_init(&r, 6);
    struct msg a;
    void *buf;
    size_t n;
    struct cs_error err = {0};
    rnd_msg(&r, &a, MSG_SEQ_FREE, 0);
    a.u.seq_free.n_pages = MSG_MAX_PAGES + 1;
    a.u.seq_free.pages = calloc(MSG_MAX_PAGES + 1, 4);
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "pages: length 65537") != NULL);
    /* decoder side: the same list packed by hand */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_header(&pk, MSG_SEQ_FREE);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_int64(&pk, 1);
    msgpack_pack_int32(&pk, 0);
    pack_i32s(&pk, a.u.seq_free.pages, MSG_MAX_PAGES + 1);
    expect_refused(sb.data, sb.size, "pages: 65537 entries, limit 65536");
    msgpack_sbuffer_destroy(&sb);
    free(a.u.seq_free.pages);

    char name[MSG_MAX_NAME + 2];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = 0;
    rnd_msg(&r, &a, MSG_HELLO, 0);
    a.u.hello.device_name = name;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "device_name longer than 256") != NULL);
    rnd_release(&r);
}

static void test_messages_consistency(void)
{
    expect_step(3, STEP_OK, CS_OK, NULL);
    expect_step(3, STEP_SUM, CS_EPROTO, "n_tokens 7 but the sequences hold 6");
    expect_step(3, STEP_DUP_SLOT, CS_EPROTO, "slot 3 used twice");
    expect_step(3, STEP_FLAG_NO_SAMPLE, CS_EPROTO, "sample block absent but the sample flag is set");
    expect_step(3, STEP_TOKENS, CS_EPROTO, "n_tokens 2 but 3 token ids");

    struct rnd r;
    rnd_init(&r, 7);
    struct msg a;
    void *buf;
    size_t n;
    struct cs_error err = {0};
    rnd_msg(&r, &a, MSG_STEP, 0);
    a.u.step.seqs[0].flags = MSG_SEQ_SAMPLE;
    a.u.step.seqs[0].snapshot_slot = -1;
    memset(&a.u.step.seqs[0].sample, 0, sizeof a.u.step.seqs[0].sample);
    a.u.step.seqs[0].sample.repetition_penalty = 1.0f;
    a.u.step.seqs[0].sample.temperature = NAN;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "step: seq 0: sample: temperature nan") != NULL);
    a.u.step.seqs[0].sample.temperature = 0.5f;
    a.u.step.seqs[0].sample.n_allowed = 3; /* a length without a mask */
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "allowed: 3 bytes but no array") != NULL);
    a.u.step.seqs[0].sample.n_allowed = MSG_MAX_ALLOWED_BYTES + 1;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "allowed bytes") != NULL);
    uint8_t mask[3] = {0x01, 0x80, 0x5a};
    a.u.step.seqs[0].sample.allowed = mask;
    a.u.step.seqs[0].sample.n_allowed = 3;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_OK);
    struct msg back;
    CHECK_EQ_INT(msg_decode(&back, buf, n, &err), CS_OK);
    CHECK_EQ_INT(back.u.step.seqs[0].sample.n_allowed, 3);
    CHECK(memcmp(back.u.step.seqs[0].sample.allowed, mask, 3) == 0);
    struct msg_batch mb;
    CHECK_EQ_INT(msg_step_to_batch(&mb, &back.u.step, 0, &err), CS_OK);
    CHECK(mb.params[0].allowed == back.u.step.seqs[0].sample.allowed);
    msg_batch_free(&mb);
    msg_free(&back);
    free(buf);
    a.u.step.seqs[0].sample.allowed = NULL;
    a.u.step.seqs[0].sample.n_allowed = 0;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_OK);
    free(buf);
    a.u.step.seqs[0].flags = 0xff;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "unknown flag bits") != NULL);
    rnd_release(&r);

    rnd_msg(&r, &a, MSG_LOAD, 0);
    a.u.load.layer_end = a.u.load.layer_begin;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "load: layer_end") != NULL);
    rnd_release(&r);

    rnd_msg(&r, &a, MSG_SNAPSHOT, 0);
    a.u.slot_copy.dst_slot = a.u.slot_copy.src_slot;
    CHECK_EQ_INT(msg_encode(&a, &buf, &n, &err), CS_EPROTO);
    rnd_release(&r);
}

static void test_messages_batch(void)
{
    int32_t t0[3] = {10, 11, 12}, t1[1] = {20}, p0[1] = {4}, p1[3] = {7, 8, 9};
    int32_t gen[2] = {1, 2};
    struct msg_seq seqs[2] = {
        {.seq_id = 100, .slot = 5, .n_past = 0, .n_tokens = 3, .flags = MSG_SEQ_RESET,
         .snapshot_slot = -1, .tokens = t0, .pages = p0, .n_pages = 1},
        {.seq_id = 101, .slot = 2, .n_past = 40, .n_tokens = 1, .flags = MSG_SEQ_SAMPLE,
         .snapshot_slot = -1, .tokens = t1, .pages = p1, .n_pages = 3,
         .sample = {.temperature = 0.7f, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = 9,
                    .draw = 3, .n_logprobs = 2, .gen_tokens = gen, .n_gen_tokens = 2}},
    };
    struct msg_step step = {.edge_slot = -1, .n_tokens = 4, .n_seqs = 2, .seqs = seqs};
    struct msg_batch mb;
    struct cs_error err = {0};
    CHECK_EQ_INT(msg_step_to_batch(&mb, &step, 16, &err), CS_OK);
    const struct cs_batch *b = &mb.batch;
    CHECK_EQ_INT(b->n_tokens, 4);
    CHECK_EQ_INT(b->n_seqs, 2);
    CHECK_EQ_INT(b->max_pages, 3);
    static const int32_t want_tok[4] = {10, 11, 12, 20}, want_pos[4] = {0, 1, 2, 40},
                         want_seq[4] = {0, 0, 0, 1}, want_pt[6] = {4, -1, -1, 7, 8, 9};
    CHECK(memcmp(b->tokens, want_tok, sizeof want_tok) == 0);
    CHECK(memcmp(b->pos, want_pos, sizeof want_pos) == 0);
    CHECK(memcmp(b->seq_of, want_seq, sizeof want_seq) == 0);
    CHECK(memcmp(b->page_table, want_pt, sizeof want_pt) == 0);
    CHECK_EQ_INT(b->seq_start[0], 0);
    CHECK_EQ_INT(b->seq_start[1], 3);
    CHECK_EQ_INT(b->seq_start[2], 4);
    CHECK_EQ_INT(b->slot[0], 5);
    CHECK_EQ_INT(b->slot[1], 2);
    CHECK(!mb.sample[0] && mb.sample[1]);
    CHECK_NEAR(mb.params[1].temperature, 0.7, 1e-7);
    CHECK_EQ_INT(mb.params[1].draw, 3);
    CHECK(mb.params[1].gen_tokens == gen && mb.params[1].n_gen_tokens == 2);
    CHECK(mb.params[1].allowed == NULL);
    msg_batch_free(&mb);
    /* pages must cover the last position: 40 needs page index 2 with 16 tokens a page */
    seqs[1].n_pages = 2;
    CHECK_EQ_INT(msg_step_to_batch(&mb, &step, 16, &err), CS_EPROTO);
    CHECK(strstr(err.msg, "do not cover position 40") != NULL);
    CHECK(mb.mem == NULL);
    CHECK_EQ_INT(msg_step_to_batch(&mb, &step, 0, &err), CS_OK); /* 0: unchecked */
    msg_batch_free(&mb);
}

int main(void)
{
    RUN(test_messages_roundtrip);
    RUN(test_messages_truncated);
    RUN(test_messages_corrupted);
    RUN(test_messages_version);
    RUN(test_messages_unknown_type);
    RUN(test_messages_oversize);
    RUN(test_messages_consistency);
    RUN(test_messages_batch);
    return test_report();
}
