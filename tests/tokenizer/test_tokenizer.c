/* test_tokenizer.c - unit tests of the tokenizer pieces: the GPT-2 byte-level
 * mapping, UTF-8 classification and sanitising, merge derivation from a
 * handmade .tiktoken vocabulary (incl. an underivable token), BPE order
 * (lowest rank, leftmost first), special tokens recognised only with
 * allow_special, the incremental decoder over characters split at every byte
 * (4-byte emoji across tokens, invalid sequences, flush), the GGUF round
 * trip, strict rejection of malformed .tiktoken input, and random bytes never
 * crashing the encoder. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/tokenizer.h"
#include "common/vocab_tiktoken.h"
#include "tests/test_util.h"

/* ---- helpers ---- */

static void b64_encode(const uint8_t *s, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

/* The handmade vocabulary: 256 bytes, then ab bc abc aa aaaa xyz " a". */
static const char *const EXTRA[] = {"ab", "bc", "abc", "aa", "aaaa", "xyz", " a"};
enum { N_EXTRA = 7, ID_AB = 256, ID_BC, ID_ABC, ID_AA, ID_AAAA, ID_XYZ, ID_SPACE_A };

static char *handmade_tiktoken(size_t *n)
{
    char *buf = malloc(65536), line[64];
    size_t o = 0;
    for (int b = 0; b < 256 + N_EXTRA; b++) {
        uint8_t one = (uint8_t)b;
        const uint8_t *s = b < 256 ? &one : (const uint8_t *)EXTRA[b - 256];
        b64_encode(s, b < 256 ? 1 : strlen(EXTRA[b - 256]), line);
        o += (size_t)sprintf(buf + o, "%s %d\n", line, b);
    }
    *n = o;
    return buf;
}

static struct vocab *handmade_vocab(uint32_t vocab_size)
{
    size_t n;
    char *d = handmade_tiktoken(&n);
    struct vocab *v = NULL;
    struct cs_error err = {0};
    int rc = vocab_tiktoken_parse(&v, d, n, vocab_size, "handmade", &err);
    CHECK_EQ_INT(rc, CS_OK);
    free(d);
    return v;
}

static struct tokenizer *tok_from_vocab(const struct vocab *v)
{
    struct tokenizer_vocab_view view;
    vocab_view_fill(v, &view);
    struct tokenizer *t = NULL;
    struct cs_error err = {0};
    int rc = tokenizer_create(&t, &view, &err);
    CHECK_EQ_INT(rc, CS_OK);
    return t;
}

static struct tokenizer *fallback_tok(struct vocab **vout)
{
    struct vocab *v = NULL;
    CHECK_EQ_INT(vocab_fallback_create(&v, 0, NULL), CS_OK);
    struct tokenizer *t = tok_from_vocab(v);
    *vout = v;
    return t;
}

static size_t encode(const struct tokenizer *t, const char *s, bool special, int32_t *out,
                     size_t cap)
{
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(tokenizer_encode(t, s, strlen(s), special, &ids, &n), CS_OK);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = ids[i];
    free(ids);
    return n;
}

/* Decode ids through the incremental decoder, checking every chunk is whole UTF-8. */
static size_t decode_all(const struct tokenizer *t, const int32_t *ids, size_t n, bool control,
                         char *out)
{
    struct tokenizer_decoder d;
    tokenizer_decoder_init(&d, t, control);
    size_t o = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *s;
        size_t len;
        int rc = i < n ? tokenizer_decoder_feed(&d, ids[i], &s, &len)
                       : tokenizer_decoder_flush(&d, &s, &len);
        CHECK_EQ_INT(rc, CS_OK);
        for (size_t j = 0; j < len;) {
            int k = tokenizer_utf8_classify((const uint8_t *)s + j, len - j);
            CHECK(k > 0);
            j += k > 0 ? (size_t)k : len;
        }
        memcpy(out + o, s, len);
        o += len;
    }
    out[o] = 0;
    tokenizer_decoder_free(&d);
    return o;
}

/* ---- tests ---- */

static void test_tokenizer_bytelevel_mapping(void)
{
    CHECK_EQ_INT(tokenizer_byte_to_cp('A'), 'A');
    CHECK_EQ_INT(tokenizer_byte_to_cp(' '), 0x120);    /* 'Ġ' */
    CHECK_EQ_INT(tokenizer_byte_to_cp('\n'), 0x10A);   /* 'Ċ' */
    CHECK_EQ_INT(tokenizer_byte_to_cp(0x00), 0x100);
    CHECK_EQ_INT(tokenizer_byte_to_cp(0xAD), 0x143);   /* the last unprintable byte */
    CHECK_EQ_INT(tokenizer_cp_to_byte(' '), -1);
    CHECK_EQ_INT(tokenizer_cp_to_byte(0x144), -1);
    for (int b = 0; b < 256; b++)
        CHECK_EQ_INT(tokenizer_cp_to_byte(tokenizer_byte_to_cp((uint8_t)b)), b);
    uint8_t raw[256], back[256];
    char bl[512];
    for (int b = 0; b < 256; b++)
        raw[b] = (uint8_t)b;
    size_t n = tokenizer_bytes_to_bytelevel(raw, 256, bl), m = 0;
    CHECK_EQ_INT(tokenizer_bytelevel_to_bytes(bl, n, back, &m), CS_OK);
    CHECK_EQ_INT(m, 256);
    CHECK(memcmp(raw, back, 256) == 0);
    n = tokenizer_bytes_to_bytelevel((const uint8_t *)" a\n", 3, bl);
    CHECK(n == 5 && memcmp(bl, "\xC4\xA0" "a" "\xC4\x8A", 5) == 0);
    CHECK_EQ_INT(tokenizer_bytelevel_to_bytes(" ", 1, back, &m), CS_EFORMAT);
}

static void test_tokenizer_utf8_classify(void)
{
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"a", 1), 1);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xE2\x82\xAC", 3), 3);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xF0\x9F\x98\x80", 4), 4);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xF0\x9F\x98", 3), 0);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xF0\x9F\x98x", 4), -3);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xED\xA0\x80", 3), -1);  /* surrogate */
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xE0\x80\x80", 3), -1);  /* overlong */
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xC0\xAF", 2), -1);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xF4\x90\x80\x80", 4), -1);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\x80", 1), -1);
    CHECK_EQ_INT(tokenizer_utf8_classify((const uint8_t *)"\xFF", 1), -1);
}

static void test_tokenizer_utf8_sanitize(void)
{
    static const struct { const char *in, *out; } cases[] = {
        {"abc", "abc"},
        {"a\xF0\x9F\x98", "a\xEF\xBF\xBD"},                       /* incomplete tail: one */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate: three */
        {"\xE2\x28\xA1", "\xEF\xBF\xBD(\xEF\xBF\xBD"},
        {"\xF0\x9F\x98x\xC3\xA9", "\xEF\xBF\xBDx\xC3\xA9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o;
        size_t n;
        CHECK_EQ_INT(tokenizer_utf8_sanitize(cases[i].in, strlen(cases[i].in), &o, &n), CS_OK);
        CHECK(n == strlen(cases[i].out) && memcmp(o, cases[i].out, n) == 0);
        free(o);
    }
}

static void test_vocab_tiktoken_merges(void)
{
    struct vocab *v = handmade_vocab(300);
    if (!v)
        return;
    CHECK_EQ_INT(v->n_base, 256 + N_EXTRA);
    CHECK_EQ_INT(v->n_tokens, 300);
    CHECK_EQ_INT(v->n_merges, 6);
    CHECK_EQ_INT(v->n_merges_skipped, 1);                 /* "xyz": no "xy" nor "yz" */
    const char *want[] = {"a b", "b c", "ab c", "a a", "aa aa", "\xC4\xA0 a"};
    for (int i = 0; i < 6 && i < (int)v->n_merges; i++)
        CHECK(strcmp(v->merges[i], want[i]) == 0);
    CHECK(strcmp(v->tokens[' '], "\xC4\xA0") == 0);
    CHECK(strcmp(v->tokens[ID_SPACE_A], "\xC4\xA0" "a") == 0);
    uint32_t sp = v->n_base;
    CHECK(strcmp(v->tokens[sp], "<|endoftext|>") == 0);
    CHECK(strcmp(v->tokens[sp + 2], "<|im_end|>") == 0);
    CHECK_EQ_INT(v->token_types['a'], TOKEN_TYPE_NORMAL);
    CHECK_EQ_INT(v->token_types[sp], TOKEN_TYPE_CONTROL);
    CHECK_EQ_INT(v->token_types[sp + 14], TOKEN_TYPE_USER_DEFINED);   /* <tool_call> */
    CHECK_EQ_INT(v->token_types[sp + 24], TOKEN_TYPE_USER_DEFINED);   /* <think> */
    CHECK_EQ_INT(v->token_types[sp + 28], TOKEN_TYPE_CONTROL);        /* <tts_pad> */
    CHECK_EQ_INT(v->token_types[299], TOKEN_TYPE_UNUSED);
    CHECK(strcmp(v->tokens[299], "[PAD299]") == 0);
    CHECK_EQ_INT(v->eos_id, (int32_t)sp + 2);
    CHECK_EQ_INT(v->pad_id, (int32_t)sp);
    vocab_destroy(v);
}

static void test_tokenizer_bpe_order(void)
{
    struct vocab *v = handmade_vocab(0);
    if (!v)
        return;
    struct tokenizer *t = tok_from_vocab(v);
    int32_t ids[32];
    size_t n = encode(t, "aaaa abc", false, ids, 32);
    CHECK(n == 3 && ids[0] == ID_AAAA && ids[1] == ' ' && ids[2] == ID_ABC);
    n = encode(t, "aaa", false, ids, 32);   /* equal ranks: leftmost first */
    CHECK(n == 2 && ids[0] == ID_AA && ids[1] == 'a');
    n = encode(t, "xyz", false, ids, 32);   /* no merge path: bytes */
    CHECK(n == 3 && ids[0] == 'x' && ids[2] == 'z');
    n = encode(t, " a", false, ids, 32);
    CHECK(n == 1 && ids[0] == ID_SPACE_A);
    n = encode(t, "", false, ids, 32);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(tokenizer_token_find(t, "abc", 3), ID_ABC);
    CHECK_EQ_INT(tokenizer_token_find(t, "<think>", 7), (int32_t)v->n_base + 24);
    CHECK_EQ_INT(tokenizer_token_find(t, "nope!", 5), -1);
    tokenizer_destroy(t);
    vocab_destroy(v);
}

static void test_tokenizer_special_on_off(void)
{
    struct vocab *v;
    struct tokenizer *t = fallback_tok(&v);
    int32_t im_start = tokenizer_token_find(t, "<|im_start|>", 12);
    int32_t think = tokenizer_token_find(t, "<think>", 7);
    CHECK_EQ_INT(im_start, 257);
    CHECK(tokenizer_is_special(t, im_start) && tokenizer_is_special(t, think));
    CHECK(!tokenizer_is_special(t, 'a'));
    int32_t ids[64];
    size_t n = encode(t, "<|im_start|>user<think>", true, ids, 64);
    CHECK(n == 6 && ids[0] == im_start && ids[1] == 'u' && ids[5] == think);
    n = encode(t, "<|im_start|>user<think>", false, ids, 64);
    CHECK_EQ_INT(n, 23);
    bool any = false;
    for (size_t i = 0; i < n && i < 64; i++)
        any |= tokenizer_is_special(t, ids[i]);
    CHECK(!any);
    n = encode(t, "<|im_start", true, ids, 64);   /* incomplete: ordinary text */
    CHECK(n == 10 && ids[0] == '<');
    int32_t eos[4];
    CHECK_EQ_INT(tokenizer_eos_ids(t, eos, 4), 2);
    CHECK(eos[0] == 258 && eos[1] == 256);
    CHECK_EQ_INT(tokenizer_pad_id(t), 256);
    tokenizer_destroy(t);
    vocab_destroy(v);
}

static void test_tokenizer_decoder_bytewise(void)
{
    struct vocab *v;
    struct tokenizer *t = fallback_tok(&v);
    /* byte tokens: every character arrives split at every byte */
    const char *text = "h\xC3\xA9llo \xF0\x9F\x98\x80 \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x92\xBB";
    int32_t ids[128];
    size_t n = encode(t, text, false, ids, 128);
    CHECK_EQ_INT(n, strlen(text));
    char out[512];
    decode_all(t, ids, n, false, out);
    CHECK(strcmp(out, text) == 0);
    /* emoji bytes held back until complete */
    struct tokenizer_decoder d;
    tokenizer_decoder_init(&d, t, false);
    const char *s;
    size_t len;
    const uint8_t emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(tokenizer_decoder_feed(&d, emoji[i], &s, &len), CS_OK);
        CHECK_EQ_INT(len, i < 3 ? 0 : 4);
    }
    /* a lead byte then ASCII: U+FFFD then the letter */
    tokenizer_decoder_feed(&d, 0xE2, &s, &len);
    CHECK_EQ_INT(len, 0);
    tokenizer_decoder_feed(&d, 'a', &s, &len);
    CHECK(len == 4 && memcmp(s, "\xEF\xBF\xBD" "a", 4) == 0);
    /* incomplete at the end: flushed as one U+FFFD */
    tokenizer_decoder_feed(&d, 0xE2, &s, &len);
    tokenizer_decoder_feed(&d, 0x82, &s, &len);
    CHECK_EQ_INT(len, 0);
    CHECK_EQ_INT(tokenizer_decoder_flush(&d, &s, &len), CS_OK);
    CHECK(len == 3 && memcmp(s, "\xEF\xBF\xBD", 3) == 0);
    CHECK_EQ_INT(tokenizer_decoder_feed(&d, -1, &s, &len), CS_EINVAL);
    CHECK_EQ_INT(tokenizer_decoder_feed(&d, 1 << 30, &s, &len), CS_EINVAL);
    tokenizer_decoder_free(&d);
    tokenizer_destroy(t);
    vocab_destroy(v);
}

/* Tokens that cut a 4-byte emoji in the middle: "x\xF0\x9F" and "\x98\x80y". */
static void test_tokenizer_decoder_split_tokens(void)
{
    static const uint8_t t1[] = {'x', 0xF0, 0x9F}, t2[] = {0x98, 0x80, 'y'};
    char strs[258][8];
    const char *ptrs[258];
    uint64_t lens[258];
    for (int i = 0; i < 258; i++) {
        uint8_t b = (uint8_t)i;
        const uint8_t *raw = i < 256 ? &b : i == 256 ? t1 : t2;
        lens[i] = tokenizer_bytes_to_bytelevel(raw, i < 256 ? 1 : 3, strs[i]);
        ptrs[i] = strs[i];
    }
    struct tokenizer_vocab_view view = {.n_tokens = 258, .tokens = ptrs, .lens = lens,
                                        .eos_id = -1, .pad_id = -1};
    struct tokenizer *t = NULL;
    CHECK_EQ_INT(tokenizer_create(&t, &view, NULL), CS_OK);
    if (!t)
        return;
    struct tokenizer_decoder d;
    tokenizer_decoder_init(&d, t, false);
    const char *s;
    size_t len;
    tokenizer_decoder_feed(&d, 256, &s, &len);
    CHECK(len == 1 && s[0] == 'x');
    tokenizer_decoder_feed(&d, 257, &s, &len);
    CHECK(len == 5 && memcmp(s, "\xF0\x9F\x98\x80y", 5) == 0);
    tokenizer_decoder_feed(&d, 256, &s, &len);
    tokenizer_decoder_feed(&d, 256, &s, &len);   /* F0 9F then 'x': invalid */
    CHECK(len == 4 && memcmp(s, "\xEF\xBF\xBDx", 4) == 0);
    tokenizer_decoder_free(&d);
    tokenizer_destroy(t);
}

static void test_tokenizer_decoder_control(void)
{
    struct vocab *v;
    struct tokenizer *t = fallback_tok(&v);
    int32_t ids[3] = {'a', 258 /* <|im_end|> */, 256 + 24 /* <think> */};
    char out[128];
    decode_all(t, ids, 3, false, out);
    CHECK(strcmp(out, "a<think>") == 0);
    decode_all(t, ids, 3, true, out);
    CHECK(strcmp(out, "a<|im_end|><think>") == 0);
    tokenizer_destroy(t);
    vocab_destroy(v);
}

static void test_tokenizer_gguf_roundtrip(void)
{
    struct vocab *v = handmade_vocab(320);
    if (!v)
        return;
    char path[] = "/tmp/cs_tok_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct gguf_writer *w = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(gguf_writer_create(&w), CS_OK);
    CHECK_EQ_INT(vocab_gguf_write(v, w), CS_OK);
    CHECK_EQ_INT(gguf_writer_write(w, path, &err), CS_OK);
    gguf_writer_destroy(w);
    struct gguf_file *f = NULL;
    struct tokenizer *t = NULL;
    CHECK_EQ_INT(gguf_open(&f, path, &err), CS_OK);
    if (f)
        CHECK_EQ_INT(tokenizer_create_from_gguf(&t, f, &err), CS_OK);
    if (t) {
        int32_t ids[8];
        size_t n = encode(t, "aaaa abc", false, ids, 8);
        CHECK(n == 3 && ids[0] == ID_AAAA && ids[2] == ID_ABC);
        CHECK_EQ_INT(tokenizer_vocab_size(t), 320);
        CHECK_EQ_INT(tokenizer_token_type(t, 319), TOKEN_TYPE_UNUSED);
        CHECK_EQ_INT(tokenizer_token_type(t, (int32_t)v->n_base + 24), TOKEN_TYPE_USER_DEFINED);
        int32_t eos[2];
        CHECK_EQ_INT(tokenizer_eos_ids(t, eos, 2), 2);
        CHECK_EQ_INT(eos[0], v->eos_id);
        size_t len = 99;
        tokenizer_token_bytes(t, 319, &len);
        CHECK_EQ_INT(len, 0);
    }
    tokenizer_destroy(t);
    gguf_close(f);
    unlink(path);
    vocab_destroy(v);
}

static void test_vocab_tiktoken_bad_input(void)
{
    static const char *bad[] = {"YQ== 0\nYg== 0\n", "YQ== 0\nYg== 5\n", "Y!== 0\n", "YQ==\n",
                                "YQ== 1x\n", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct vocab *v = NULL;
        struct cs_error err = {0};
        int rc = vocab_tiktoken_parse(&v, bad[i], strlen(bad[i]), 0, "bad", &err);
        CHECK_EQ_INT(rc, CS_EFORMAT);
        CHECK(v == NULL && strncmp(err.msg, "bad", 3) == 0);
    }
    struct cs_error err = {0};
    struct vocab *v = NULL;
    CHECK_EQ_INT(vocab_tiktoken_parse(&v, "YQ== 0\n", 7, 10, "small", &err), CS_EINVAL);
    CHECK_EQ_INT(vocab_fallback_create(&v, 100, &err), CS_EINVAL);
    CHECK_EQ_INT(vocab_tiktoken_load(&v, "/nonexistent/x.tiktoken", 0, &err), CS_EIO);
    CHECK_EQ_INT(vocab_fallback_create(&v, 300, &err), CS_OK);
    if (v) {
        CHECK_EQ_INT(v->n_tokens, 300);
        CHECK_EQ_INT(v->n_merges, 0);
        CHECK(strcmp(v->tokens[257], "<|im_start|>") == 0);
    }
    vocab_destroy(v);
}

static void test_tokenizer_random_bytes(void)
{
    struct vocab *v;
    struct tokenizer *t = fallback_tok(&v);
    srand(1234);
    char buf[96], out[8192];
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = (size_t)(rand() % 96);
        for (size_t i = 0; i < n; i++)
            buf[i] = (char)(rand() % 4 == 0 ? "<|>\n \xCC\x81"[rand() % 7] : rand());
        int32_t *ids = NULL;
        size_t k = 0;
        CHECK_EQ_INT(tokenizer_encode(t, buf, n, iter & 1, &ids, &k), CS_OK);
        if (k < 300)
            decode_all(t, ids, k, true, out);
        free(ids);
    }
    tokenizer_destroy(t);
    vocab_destroy(v);
}

int main(void)
{
    RUN(test_tokenizer_bytelevel_mapping);
    RUN(test_tokenizer_utf8_classify);
    RUN(test_tokenizer_utf8_sanitize);
    RUN(test_vocab_tiktoken_merges);
    RUN(test_tokenizer_bpe_order);
    RUN(test_tokenizer_special_on_off);
    RUN(test_tokenizer_decoder_bytewise);
    RUN(test_tokenizer_decoder_split_tokens);
    RUN(test_tokenizer_decoder_control);
    RUN(test_tokenizer_gguf_roundtrip);
    RUN(test_vocab_tiktoken_bad_input);
    RUN(test_tokenizer_random_bytes);
    return test_report();
}
