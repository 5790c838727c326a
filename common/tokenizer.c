/* tokenizer.c - vocabulary tables and the encoder of the Qwen3.5 tokenizer.
 *
 * Owns: struct tokenizer (raw bytes of every token, types, a hash from raw
 * bytes to NORMAL/BYTE token ids, a hash from id pairs to merge rank and
 * result, the list of special tokens, the compiled pre-tokenizer regex) and
 * tokenizer_encode. The BPE itself lives in tokenizer_bpe.c, the incremental
 * decoder in tokenizer_decode.c, byte-level and UTF-8 helpers in
 * tokenizer_bytes.c, loading from a GGUF in tokenizer_gguf.c.
 *
 * Invariants after tokenizer_create: every merge names two tokens and its
 * result exists; byte_id[b] is the single-byte token of b (or -1 when the
 * vocabulary has none, in which case such bytes are dropped, as HF does
 * without byte fallback). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "log.h"
#include "tokenizer.h"
#include "tokenizer_bpe.h"

/* The qwen35 pre-tokenizer (model.md 7). The contractions are written with
 * (?i:...) as in the reference tiktoken/HF patterns: with UCP, caseless
 * matching follows Unicode case folding ('ſ' matches 's'), which the
 * explicit [sS] classes would not. */
static const char QWEN35_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct tokenizer {
    uint32_t n_vocab;
    uint8_t *types;
    char *arena;            /* raw bytes of all tokens, back to back */
    uint64_t *off;          /* token i: arena[off[i] .. off[i] + len[i]) */
    uint32_t *len;
    struct bpe_tables bpe;  /* byte ids, raw-bytes hash, merge hash */
    int32_t *special_ids;   /* CONTROL and USER_DEFINED, longest text first */
    uint32_t n_special;
    bool special_first[256];
    pcre2_code *re;
    int32_t eos_id, eot_id, pad_id;
};

/* ---- construction ---- */

static uint64_t view_len(const uint64_t *lens, const char *const *strs, uint32_t i)
{
    return lens ? lens[i] : strlen(strs[i]);
}

/* Raw bytes of token i into the arena: byte-level decoded for NORMAL/BYTE
 * tokens (falling back to the string itself when it is not a byte-level
 * string), the literal text for the others. */
static int tokens_copy(struct tokenizer *t, const struct tokenizer_vocab_view *v,
                       struct cs_error *err)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        total += view_len(v->lens, v->tokens, i);
    t->arena = malloc(total + 1);
    t->off = malloc(sizeof *t->off * (v->n_tokens + 1u));
    t->len = malloc(sizeof *t->len * (v->n_tokens + 1u));
    t->types = malloc(v->n_tokens + 1u);
    if (!t->arena || !t->off || !t->len || !t->types)
        return CS_ENOMEM;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        uint64_t n = view_len(v->lens, v->tokens, i);
        if (n > UINT32_MAX)
            return cs_error_set(err, CS_EFORMAT, "token %u: %llu bytes is too long", i,
                                (unsigned long long)n);
        int type = v->types ? v->types[i] : TOKEN_TYPE_NORMAL;
        t->types[i] = (uint8_t)(type >= 0 && type <= TOKEN_TYPE_BYTE ? type : TOKEN_TYPE_NORMAL);
        size_t out_n = 0;
        bool bytelevel = type == TOKEN_TYPE_NORMAL || type == TOKEN_TYPE_BYTE;
        if (!bytelevel || tokenizer_bytelevel_to_bytes(v->tokens[i], n,
                                                       (uint8_t *)t->arena + pos, &out_n) != CS_OK) {
            memcpy(t->arena + pos, v->tokens[i], n);
            out_n = n;
        }
        t->off[i] = pos;
        t->len[i] = (uint32_t)out_n;
        pos += out_n;
    }
    return CS_OK;
}

struct special_key {
    uint32_t len;
    int32_t id;
};

/* Longest text first, then lowest id: the longest special wins a match. */
static int special_key_cmp(const void *a, const void *b)
{
    const struct special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int specials_collect(struct tokenizer *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (tokenizer_is_special(t, (int32_t)i) && t->len[i] > 0)
            n++;
    struct special_key *keys = malloc(sizeof *keys * (n + 1u));
    t->special_ids = malloc(sizeof *t->special_ids * (n + 1u));
    if (!keys || !t->special_ids) {
        free(keys);
        return CS_ENOMEM;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (tokenizer_is_special(t, (int32_t)i) && t->len[i] > 0) {
            keys[t->n_special++] = (struct special_key){t->len[i], (int32_t)i};
            t->special_first[(uint8_t)t->arena[t->off[i]]] = true;
        }
    }
    qsort(keys, t->n_special, sizeof *keys, special_key_cmp);
    for (uint32_t i = 0; i < t->n_special; i++)
        t->special_ids[i] = keys[i].id;
    free(keys);
    return CS_OK;
}

static int regex_compile(struct tokenizer *t, struct cs_error *err)
{
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)QWEN35_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!t->re)
        return cs_error_set(err, CS_EINTERNAL, "pre-tokenizer regex: error %d at %zu", code,
                            (size_t)at);
    if (pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) != 0)
        LOG_WARN("tokenizer", "PCRE2 JIT unavailable, using the interpreter");
    return CS_OK;
}

int tokenizer_create(struct tokenizer **out, const struct tokenizer_vocab_view *v,
                     struct cs_error *err)
{
    if (!out || !v || !v->tokens || v->n_tokens == 0 || v->n_tokens > INT32_MAX)
        return cs_error_set(err, CS_EINVAL, "tokenizer: empty or missing vocabulary");
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return CS_ENOMEM;
    t->n_vocab = v->n_tokens;
    t->eos_id = v->eos_id >= 0 && (uint32_t)v->eos_id < v->n_tokens ? v->eos_id : -1;
    t->pad_id = v->pad_id >= 0 && (uint32_t)v->pad_id < v->n_tokens ? v->pad_id : -1;
    int rc = tokens_copy(t, v, err);
    if (rc == CS_OK)
        rc = bpe_tables_build(&t->bpe, t->arena, t->off, t->len, t->types, t->n_vocab, v->merges,
                              v->merge_lens, v->n_merges, err);
    if (rc == CS_OK)
        rc = specials_collect(t);
    if (rc == CS_OK)
        rc = regex_compile(t, err);
    if (rc != CS_OK) {
        if (rc == CS_ENOMEM)
            cs_error_set(err, rc, "tokenizer: out of memory");
        tokenizer_destroy(t);
        return rc;
    }
    t->eot_id = tokenizer_token_find(t, "<|endoftext|>", 13);
    if (t->eos_id < 0)
        t->eos_id = tokenizer_token_find(t, "<|im_end|>", 10);
    *out = t;
    return CS_OK;
}

void tokenizer_destroy(struct tokenizer *t)
{
    if (!t)
        return;
    pcre2_code_free(t->re);
    bpe_tables_free(&t->bpe);
    free(t->special_ids);
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->types);
    free(t);
}

/* ---- lookups ---- */

uint32_t tokenizer_vocab_size(const struct tokenizer *t)
{
    return t->n_vocab;
}

int tokenizer_token_type(const struct tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return TOKEN_TYPE_UNDEFINED;
    return t->types[id];
}

bool tokenizer_is_special(const struct tokenizer *t, int32_t id)
{
    int type = tokenizer_token_type(t, id);
    return type == TOKEN_TYPE_CONTROL || type == TOKEN_TYPE_USER_DEFINED;
}

const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return NULL;
    *len = t->types[id] == TOKEN_TYPE_UNUSED ? 0 : t->len[id];
    return t->arena + t->off[id];
}

int32_t tokenizer_token_find(const struct tokenizer *t, const char *s, size_t len)
{
    for (uint32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special_ids[i];
        if (t->len[id] == len && memcmp(t->arena + t->off[id], s, len) == 0)
            return id;
    }
    return bpe_tables_find(&t->bpe, s, len);
}

size_t tokenizer_eos_ids(const struct tokenizer *t, int32_t *ids, size_t cap)
{
    size_t n = 0;
    int32_t cand[2] = {t->eos_id, t->eot_id};
    for (int i = 0; i < 2; i++) {
        if (cand[i] < 0 || (i == 1 && cand[1] == cand[0]))
            continue;
        if (n < cap)
            ids[n] = cand[i];
        n++;
    }
    return n;
}

int32_t tokenizer_pad_id(const struct tokenizer *t)
{
    return t->pad_id;
}

/* ---- encoding ---- */

/* NFC of valid UTF-8 s[0..n): *out is malloc'd (or s itself when it is
 * ASCII, which NFC leaves unchanged; *owned says which). */
static int text_nfc(const char *s, size_t n, const char **out, size_t *out_n, bool *owned)
{
    size_t i = 0;
    while (i < n && (uint8_t)s[i] < 0x80)
        i++;
    if (i == n) {
        *out = s;
        *out_n = n;
        *owned = false;
        return CS_OK;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0)
        return r == UTF8PROC_ERROR_NOMEM ? CS_ENOMEM : CS_EINTERNAL;
    *out = (const char *)dst;
    *out_n = (size_t)r;
    *owned = true;
    return CS_OK;
}

/* Split valid UTF-8 s[0..n) with the pre-tokenizer and BPE every piece.
 * Text between matches (none with this pattern) would form pieces too. */
static int text_split_encode(const struct tokenizer *t, struct bpe_work *w, const char *s,
                             size_t n, struct bpe_ids *ids)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!md)
        return CS_ENOMEM;
    int rc = CS_OK;
    size_t pos = 0;
    while (pos < n && rc == CS_OK) {
        int m = pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) {
            rc = bpe_encode_piece(&t->bpe, w, (const uint8_t *)s + pos, n - pos, ids);
            break;
        }
        if (m < 0) {
            LOG_ERROR("tokenizer", "pre-tokenizer match failed: error %d at byte %zu", m, pos);
            rc = CS_EINTERNAL;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (start > pos)
            rc = bpe_encode_piece(&t->bpe, w, (const uint8_t *)s + pos, start - pos, ids);
        if (rc == CS_OK && end > start)
            rc = bpe_encode_piece(&t->bpe, w, (const uint8_t *)s + start, end - start, ids);
        if (end <= pos) {
            /* cannot happen (no alternative matches empty); never loop */
            rc = CS_EINTERNAL;
            break;
        }
        pos = end;
    }
    pcre2_match_data_free(md);
    return rc;
}

/* Ordinary text: sanitise, NFC, split, BPE. */
static int text_encode(const struct tokenizer *t, struct bpe_work *w, const char *s, size_t n,
                       struct bpe_ids *ids)
{
    if (n == 0)
        return CS_OK;
    char *clean = NULL;
    size_t clean_n = 0;
    int rc = tokenizer_utf8_sanitize(s, n, &clean, &clean_n);
    if (rc != CS_OK)
        return rc;
    const char *norm = NULL;
    size_t norm_n = 0;
    bool owned = false;
    rc = text_nfc(clean, clean_n, &norm, &norm_n, &owned);
    if (rc == CS_OK)
        rc = text_split_encode(t, w, norm, norm_n, ids);
    if (owned)
        free((void *)norm);
    free(clean);
    return rc;
}

/* The longest special token starting at s[0..n), or -1. */
static int32_t special_match(const struct tokenizer *t, const char *s, size_t n)
{
    if (!t->special_first[(uint8_t)s[0]])
        return -1;
    for (uint32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special_ids[i];
        if (t->len[id] <= n && memcmp(t->arena + t->off[id], s, t->len[id]) == 0)
            return id;
    }
    return -1;
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool allow_special,
                     int32_t **ids_out, size_t *n_out)
{
    *ids_out = NULL;
    *n_out = 0;
    struct bpe_ids ids = {0};
    struct bpe_work w = {0};
    int rc = CS_OK;
    size_t seg = 0;
    if (allow_special && t->n_special > 0) {
        for (size_t i = 0; i < len && rc == CS_OK;) {
            int32_t id = special_match(t, text + i, len - i);
            if (id < 0) {
                i++;
                continue;
            }
            rc = text_encode(t, &w, text + seg, i - seg, &ids);
            if (rc == CS_OK)
                rc = bpe_ids_push(&ids, id);
            i += t->len[id];
            seg = i;
        }
    }
    if (rc == CS_OK)
        rc = text_encode(t, &w, text + seg, len - seg, &ids);
    bpe_work_free(&w);
    if (rc != CS_OK) {
        free(ids.v);
        return rc;
    }
    *ids_out = ids.v;
    *n_out = ids.n;
    return CS_OK;
}
