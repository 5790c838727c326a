/* vocab_tiktoken.c - import a .tiktoken vocabulary (or build the fallback)
 * into struct vocab: GGUF token strings, types, derived merges, specials,
 * PAD fillers. See vocab_tiktoken.h for the conventions followed.
 *
 * Parsing is strict (outside input): every line is "base64 rank" with a
 * rank below the line count, no rank twice, so ids 0..n_base-1 are exactly
 * filled. The derivation is O(sum of L^2) over token lengths L with a
 * byte-string hash (~0.2 s for the 248,044 Qwen3.5 tokens). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "vocab_tiktoken.h"

const char *const vocab_qwen35_specials[VOCAB_QWEN35_N_SPECIAL] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
    "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
};

/* Added tokens the model's tokenizer_config marks "special": false; llama.cpp
 * writes them USER_DEFINED, every other added token CONTROL. */
static int special_type(const char *s)
{
    static const char *const user[] = {"<tool_call>", "</tool_call>", "<tool_response>",
                                       "</tool_response>", "<think>", "</think>"};
    for (size_t i = 0; i < sizeof user / sizeof user[0]; i++)
        if (strcmp(s, user[i]) == 0)
            return TOKEN_TYPE_USER_DEFINED;
    return TOKEN_TYPE_CONTROL;
}

/* Raw token bytes of the base vocabulary while importing. */
struct raw_vocab {
    uint32_t n;
    uint8_t *arena;
    uint64_t *off;      /* token r: arena[off[r] .. off[r+1]) */
    int32_t *slots;     /* hash: bytes -> rank, -1 empty */
    uint64_t mask;
};

static uint64_t hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static int32_t raw_find(const struct raw_vocab *r, const uint8_t *s, size_t n)
{
    for (uint64_t h = hash_bytes(s, n) & r->mask;; h = (h + 1) & r->mask) {
        int32_t id = r->slots[h];
        if (id < 0)
            return -1;
        if (r->off[id + 1] - r->off[id] == n && memcmp(r->arena + r->off[id], s, n) == 0)
            return id;
    }
}

static void raw_free(struct raw_vocab *r)
{
    free(r->arena);
    free(r->off);
    free(r->slots);
}

/* ---- parsing ---- */

static int b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Standard base64 with '=' padding; returns decoded length or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4 != 0)
        return -1;
    size_t pad = 0;
    while (pad < 2 && s[n - 1 - pad] == '=')
        pad++;
    long o = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n - pad; i++) {
        int v = b64_value((uint8_t)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        if (i % 4 == 3) {
            out[o++] = (uint8_t)(acc >> 16);
            out[o++] = (uint8_t)(acc >> 8);
            out[o++] = (uint8_t)acc;
            acc = 0;
        }
    }
    if (pad == 1) {
        out[o++] = (uint8_t)(acc >> 10);
        out[o++] = (uint8_t)(acc >> 2);
    } else if (pad == 2) {
        out[o++] = (uint8_t)(acc >> 4);
    }
    return o;
}

static uint32_t lines_count(const char *d, size_t n)
{
    uint32_t c = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || d[i] == '\n') {
            if (i > start && !(i - start == 1 && d[start] == '\r'))
                c++;
            start = i + 1;
        }
    }
    return c;
}

/* Parse one "b64 rank" line into tokens[rank] (bytes in tmp). */
static int line_parse(const char *l, size_t n, uint32_t n_lines, uint8_t *tmp, long *tok_n,
                      uint32_t *rank)
{
    const char *sp = memchr(l, ' ', n);
    if (!sp)
        return -1;
    *tok_n = b64_decode(l, (size_t)(sp - l), tmp);
    if (*tok_n <= 0)
        return -1;
    const char *p = sp + 1, *end = l + n;
    if (end > p && end[-1] == '\r')
        end--;
    if (p == end)
        return -2;
    uint64_t v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > UINT32_MAX)
            return -2;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v >= n_lines)
        return -2;
    *rank = (uint32_t)v;
    return 0;
}

/* Fill r from the file: bytes per rank, then the hash. */
static int raw_parse(struct raw_vocab *r, const char *d, size_t n, const char *name,
                     struct cs_error *err)
{
    uint32_t n_lines = lines_count(d, n);
    if (n_lines == 0)
        return cs_error_set(err, CS_EFORMAT, "%s: no tokens", name);
    r->n = n_lines;
    /* each token decodes to at most 3/4 of its line */
    uint8_t *bytes = malloc(n + 1);
    uint64_t *start = malloc(sizeof *start * n_lines);
    uint32_t *len = calloc(n_lines, sizeof *len);
    r->off = malloc(sizeof *r->off * (n_lines + 1u));
    r->arena = malloc(n + 1);
    int rc = (!bytes || !start || !len || !r->off || !r->arena) ? CS_ENOMEM : CS_OK;
    size_t pos = 0, lno = 0, ls = 0;
    for (size_t i = 0; i <= n && rc == CS_OK; i++) {
        if (i < n && d[i] != '\n')
            continue;
        size_t ll = i - ls;
        const char *l = d + ls;
        ls = i + 1;
        lno++;
        if (ll == 0 || (ll == 1 && l[0] == '\r'))
            continue;
        long tn;
        uint32_t rank;
        int e = line_parse(l, ll, n_lines, bytes + pos, &tn, &rank);
        if (e == -1)
            rc = cs_error_set(err, CS_EFORMAT, "%s:%zu: bad base64 token", name, lno);
        else if (e == -2)
            rc = cs_error_set(err, CS_EFORMAT, "%s:%zu: rank missing or not below %u", name,
                              lno, n_lines);
        else if (len[rank] != 0)
            rc = cs_error_set(err, CS_EFORMAT, "%s:%zu: rank %u given twice", name, lno, rank);
        else {
            start[rank] = pos;
            len[rank] = (uint32_t)tn;
            pos += (size_t)tn;
        }
    }
    uint64_t o = 0;
    for (uint32_t k = 0; k < n_lines && rc == CS_OK; k++) {
        r->off[k] = o;
        memcpy(r->arena + o, bytes + start[k], len[k]);
        o += len[k];
    }
    if (rc == CS_OK)
        r->off[n_lines] = o;
    free(bytes);
    free(start);
    free(len);
    return rc;
}

static int raw_index(struct raw_vocab *r)
{
    uint64_t cap = 16;
    while (cap < 2ull * r->n)
        cap <<= 1;
    r->mask = cap - 1;
    r->slots = malloc(sizeof *r->slots * cap);
    if (!r->slots)
        return CS_ENOMEM;
    memset(r->slots, 0xff, sizeof *r->slots * cap);
    for (uint32_t k = 0; k < r->n; k++) {
        const uint8_t *s = r->arena + r->off[k];
        size_t n = r->off[k + 1] - r->off[k];
        if (raw_find(r, s, n) >= 0)
            continue;
        uint64_t h = hash_bytes(s, n) & r->mask;
        while (r->slots[h] >= 0)
            h = (h + 1) & r->mask;
        r->slots[h] = (int32_t)k;
    }
    return CS_OK;
}

/* ---- merge derivation ---- */

/* BPE on token t restricted to ranks below t: on success (exactly two parts)
 * *split is the length of the left part. bnd/rk: scratch of len+1 entries. */
static bool merge_derive(const struct raw_vocab *r, uint32_t t, uint32_t *bnd, int64_t *rk,
                         uint32_t *split)
{
    const uint8_t *s = r->arena + r->off[t];
    uint32_t n = (uint32_t)(r->off[t + 1] - r->off[t]);
    uint32_t parts = n;   /* part i = s[bnd[i] .. bnd[i+1]) */
    for (uint32_t i = 0; i <= n; i++)
        bnd[i] = i;
    for (uint32_t i = 0; i + 1 < parts; i++)
        rk[i] = raw_find(r, s + bnd[i], bnd[i + 2] - bnd[i]);
    while (parts > 2) {
        int64_t best = -1;
        uint32_t bi = 0;
        for (uint32_t i = 0; i + 1 < parts; i++) {
            if (rk[i] >= 0 && rk[i] < (int64_t)t && (best < 0 || rk[i] < best)) {
                best = rk[i];
                bi = i;
            }
        }
        if (best < 0)
            return false;
        /* merge parts bi and bi+1: drop boundary bi+1 */
        memmove(bnd + bi + 1, bnd + bi + 2, sizeof *bnd * (parts - bi - 1));
        memmove(rk + bi, rk + bi + 1, sizeof *rk * (parts - bi - 2));
        parts--;
        if (bi > 0)
            rk[bi - 1] = raw_find(r, s + bnd[bi - 1], bnd[bi + 1] - bnd[bi - 1]);
        if (bi + 1 < parts)
            rk[bi] = raw_find(r, s + bnd[bi], bnd[bi + 2] - bnd[bi]);
    }
    if (parts != 2 || rk[0] != (int64_t)t)
        return false;
    *split = bnd[1];
    return true;
}

static int merges_build(struct vocab *v, const struct raw_vocab *r)
{
    uint64_t max_len = 0;
    for (uint32_t k = 0; k < r->n; k++)
        if (r->off[k + 1] - r->off[k] > max_len)
            max_len = r->off[k + 1] - r->off[k];
    uint32_t *bnd = malloc(sizeof *bnd * (max_len + 2));
    int64_t *rk = malloc(sizeof *rk * (max_len + 2));
    v->merges = malloc(sizeof *v->merges * r->n);
    v->merge_lens = malloc(sizeof *v->merge_lens * r->n);
    /* each merge: 2 bytes per raw byte + space + NUL */
    v->merge_arena = malloc(2 * r->off[r->n] + 2ull * r->n);
    if (!bnd || !rk || !v->merges || !v->merge_lens || !v->merge_arena) {
        free(bnd);
        free(rk);
        return CS_ENOMEM;
    }
    char *p = v->merge_arena;
    for (uint32_t t = 0; t < r->n; t++) {
        uint32_t n = (uint32_t)(r->off[t + 1] - r->off[t]), split;
        if (n < 2)
            continue;
        if (!merge_derive(r, t, bnd, rk, &split)) {
            v->n_merges_skipped++;
            continue;
        }
        const uint8_t *s = r->arena + r->off[t];
        char *m = p;
        p += tokenizer_bytes_to_bytelevel(s, split, p);
        *p++ = ' ';
        p += tokenizer_bytes_to_bytelevel(s + split, n - split, p);
        *p++ = 0;
        v->merges[v->n_merges] = m;
        v->merge_lens[v->n_merges++] = (uint64_t)(p - m - 1);
    }
    free(bnd);
    free(rk);
    return CS_OK;
}

/* ---- assembling the vocabulary ---- */

/* Tokens: base (byte-level of raw), specials, PAD fillers. */
static int tokens_build(struct vocab *v, const struct raw_vocab *r, uint32_t vocab_size,
                        struct cs_error *err)
{
    uint32_t need = r->n + VOCAB_QWEN35_N_SPECIAL;
    if (vocab_size == 0)
        vocab_size = need;
    if (vocab_size < need)
        return cs_error_set(err, CS_EINVAL, "vocab size %u is below %u tokens + %d specials",
                            vocab_size, r->n, VOCAB_QWEN35_N_SPECIAL);
    v->n_tokens = vocab_size;
    v->n_base = r->n;
    v->tokens = malloc(sizeof *v->tokens * vocab_size);
    v->token_lens = malloc(sizeof *v->token_lens * vocab_size);
    v->token_types = malloc(sizeof *v->token_types * vocab_size);
    v->tok_arena = malloc(2 * r->off[r->n] + 32ull * vocab_size);
    if (!v->tokens || !v->token_lens || !v->token_types || !v->tok_arena)
        return CS_ENOMEM;
    char *p = v->tok_arena;
    for (uint32_t i = 0; i < vocab_size; i++) {
        char *s = p;
        if (i < r->n) {
            p += tokenizer_bytes_to_bytelevel(r->arena + r->off[i],
                                              (size_t)(r->off[i + 1] - r->off[i]), p);
            v->token_types[i] = TOKEN_TYPE_NORMAL;
        } else if (i < need) {
            const char *sp = vocab_qwen35_specials[i - r->n];
            p += sprintf(p, "%s", sp);
            v->token_types[i] = special_type(sp);
        } else {
            p += sprintf(p, "[PAD%u]", i);
            v->token_types[i] = TOKEN_TYPE_UNUSED;
        }
        *p++ = 0;
        v->tokens[i] = s;
        v->token_lens[i] = (uint64_t)(p - s - 1);
    }
    v->pad_id = (int32_t)r->n;       /* <|endoftext|> */
    v->eos_id = (int32_t)r->n + 2;   /* <|im_end|> */
    return CS_OK;
}

static int vocab_from_raw(struct vocab **out, struct raw_vocab *r, uint32_t vocab_size,
                          bool with_merges, struct cs_error *err)
{
    struct vocab *v = calloc(1, sizeof *v);
    if (!v)
        return CS_ENOMEM;
    v->model = "gpt2";
    v->pre = "qwen35";
    int rc = tokens_build(v, r, vocab_size, err);
    if (rc == CS_OK && with_merges)
        rc = raw_index(r);
    if (rc == CS_OK && with_merges)
        rc = merges_build(v, r);
    if (rc != CS_OK) {
        if (rc == CS_ENOMEM)
            cs_error_set(err, rc, "vocabulary: out of memory");
        vocab_destroy(v);
        return rc;
    }
    *out = v;
    return CS_OK;
}

int vocab_tiktoken_parse(struct vocab **out, const char *data, size_t n, uint32_t vocab_size,
                         const char *name, struct cs_error *err)
{
    struct raw_vocab r = {0};
    int rc = raw_parse(&r, data, n, name, err);
    if (rc == CS_ENOMEM)
        cs_error_set(err, rc, "%s: out of memory", name);
    if (rc == CS_OK)
        rc = vocab_from_raw(out, &r, vocab_size, true, err);
    raw_free(&r);
    return rc;
}

int vocab_tiktoken_load(struct vocab **out, const char *path, uint32_t vocab_size,
                        struct cs_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cs_error_set(err, CS_EIO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = CS_OK;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = cs_error_set(err, CS_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = cs_error_set(err, CS_EIO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (rc == CS_OK)
        rc = vocab_tiktoken_parse(out, buf, n, vocab_size, path, err);
    free(buf);
    return rc;
}

int vocab_fallback_create(struct vocab **out, uint32_t vocab_size, struct cs_error *err)
{
    struct raw_vocab r = {0};
    r.n = 256;
    r.arena = malloc(256);
    r.off = malloc(sizeof *r.off * 257);
    if (!r.arena || !r.off) {
        raw_free(&r);
        return cs_error_set(err, CS_ENOMEM, "vocabulary: out of memory");
    }
    for (uint32_t b = 0; b <= 256; b++) {
        r.off[b] = b;
        if (b < 256)
            r.arena[b] = (uint8_t)b;
    }
    int rc = vocab_from_raw(out, &r, vocab_size, false, err);
    raw_free(&r);
    return rc;
}

void vocab_destroy(struct vocab *v)
{
    if (!v)
        return;
    free(v->tokens);
    free(v->token_lens);
    free(v->token_types);
    free(v->merges);
    free(v->merge_lens);
    free(v->tok_arena);
    free(v->merge_arena);
    free(v);
}

void vocab_view_fill(const struct vocab *v, struct tokenizer_vocab_view *view)
{
    view->n_tokens = v->n_tokens;
    view->tokens = (const char *const *)v->tokens;
    view->lens = v->token_lens;
    view->types = v->token_types;
    view->n_merges = v->n_merges;
    view->merges = (const char *const *)v->merges;
    view->merge_lens = v->merge_lens;
    view->eos_id = v->eos_id;
    view->pad_id = v->pad_id;
}
