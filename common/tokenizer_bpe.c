/* tokenizer_bpe.c - byte-level BPE over merge ranks (Hugging Face tokenizers
 * semantics: repeatedly merge the adjacent pair with the lowest merge rank,
 * the leftmost one among equals).
 *
 * Per pre-token the symbols form a doubly linked list over an array and the
 * candidate pairs sit in a binary min-heap keyed by (rank, left position);
 * stale candidates (a side already merged away) are skipped when popped, so a
 * piece of n bytes costs O(n log n) however long it is (a 100k-space run
 * included). Tables are open-addressing hashes built once per tokenizer. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "tokenizer_bpe.h"

struct bpe_sym {
    int32_t id;      /* -1 once merged into its left neighbour */
    int32_t prev, next;
};

struct bpe_cand {
    uint32_t rank;
    int32_t left, right;  /* symbol positions */
    int32_t lid, rid;     /* their ids when the candidate was made */
    int32_t result;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

int32_t bpe_tables_find(const struct bpe_tables *b, const char *s, size_t n)
{
    for (uint64_t h = hash_bytes(s, n) & b->tok_mask;; h = (h + 1) & b->tok_mask) {
        int32_t id = b->tok_slots[h];
        if (id < 0)
            return -1;
        if (b->len[id] == n && memcmp(b->arena + b->off[id], s, n) == 0)
            return id;
    }
}

static const struct bpe_merge *merge_find(const struct bpe_tables *b, int32_t l, int32_t r)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (uint64_t h = hash_pair(key) & b->merge_mask;; h = (h + 1) & b->merge_mask) {
        const struct bpe_merge *m = &b->merge_slots[h];
        if (m->key == key)
            return m;
        if (m->key == UINT64_MAX)
            return NULL;
    }
}

static void tokens_index(struct bpe_tables *b, const uint8_t *types, uint32_t n_tokens)
{
    for (uint32_t i = 0; i < n_tokens; i++) {
        if (types[i] != TOKEN_TYPE_NORMAL && types[i] != TOKEN_TYPE_BYTE)
            continue;
        const char *s = b->arena + b->off[i];
        if (bpe_tables_find(b, s, b->len[i]) >= 0)
            continue;   /* first of duplicate strings wins */
        uint64_t h = hash_bytes(s, b->len[i]) & b->tok_mask;
        while (b->tok_slots[h] >= 0)
            h = (h + 1) & b->tok_mask;
        b->tok_slots[h] = (int32_t)i;
    }
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        b->byte_id[c] = bpe_tables_find(b, &ch, 1);
    }
}

/* One half of a merge: byte-level string -> id (via raw bytes). */
static int32_t merge_part_id(const struct bpe_tables *b, const char *s, size_t n, uint8_t *scratch)
{
    size_t raw_n = 0;
    if (tokenizer_bytelevel_to_bytes(s, n, scratch, &raw_n) != CS_OK)
        return -1;
    return bpe_tables_find(b, (const char *)scratch, raw_n);
}

static int merge_add(struct bpe_tables *b, uint32_t rank, const char *s, size_t n,
                     uint8_t *scratch, struct cs_error *err)
{
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp == s + n - 1)
        return cs_error_set(err, CS_EFORMAT, "merge %u: expected \"A B\", got \"%.*s\"", rank,
                            (int)(n > 64 ? 64 : n), s);
    int32_t l = merge_part_id(b, s, (size_t)(sp - s), scratch);
    int32_t r = merge_part_id(b, sp + 1, n - (size_t)(sp - s) - 1, scratch);
    if (l < 0 || r < 0)
        return cs_error_set(err, CS_EFORMAT, "merge %u \"%.*s\": unknown %s token", rank,
                            (int)(n > 64 ? 64 : n), s, l < 0 ? "left" : "right");
    size_t ln = b->len[l], rn = b->len[r];
    memcpy(scratch, b->arena + b->off[l], ln);
    memcpy(scratch + ln, b->arena + b->off[r], rn);
    int32_t res = bpe_tables_find(b, (const char *)scratch, ln + rn);
    if (res < 0)
        return cs_error_set(err, CS_EFORMAT, "merge %u \"%.*s\": result not in the vocabulary",
                            rank, (int)(n > 64 ? 64 : n), s);
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint64_t h = hash_pair(key) & b->merge_mask;
    while (b->merge_slots[h].key != UINT64_MAX) {
        if (b->merge_slots[h].key == key)
            return CS_OK;   /* duplicate merge: the lower rank stays */
        h = (h + 1) & b->merge_mask;
    }
    b->merge_slots[h] = (struct bpe_merge){key, rank, res};
    return CS_OK;
}

int bpe_tables_build(struct bpe_tables *b, const char *arena, const uint64_t *off,
                     const uint32_t *len, const uint8_t *types, uint32_t n_tokens,
                     const char *const *merges, const uint64_t *merge_lens, uint32_t n_merges,
                     struct cs_error *err)
{
    memset(b, 0, sizeof *b);
    b->arena = arena;
    b->off = off;
    b->len = len;
    uint64_t tok_cap = pow2_at_least(2ull * n_tokens);
    uint64_t merge_cap = pow2_at_least(2ull * n_merges);
    b->tok_mask = tok_cap - 1;
    b->merge_mask = merge_cap - 1;
    b->tok_slots = malloc(sizeof *b->tok_slots * tok_cap);
    b->merge_slots = malloc(sizeof *b->merge_slots * merge_cap);
    size_t max_len = 0;
    for (uint32_t i = 0; i < n_tokens; i++)
        if (len[i] > max_len)
            max_len = len[i];
    uint8_t *scratch = malloc(4 * max_len + 2);   /* one merge half, raw */
    if (!b->tok_slots || !b->merge_slots || !scratch) {
        free(scratch);
        return CS_ENOMEM;
    }
    memset(b->tok_slots, 0xff, sizeof *b->tok_slots * tok_cap);
    for (uint64_t i = 0; i < merge_cap; i++)
        b->merge_slots[i].key = UINT64_MAX;
    tokens_index(b, types, n_tokens);
    int rc = CS_OK;
    for (uint32_t j = 0; j < n_merges && rc == CS_OK; j++) {
        size_t n = merge_lens ? merge_lens[j] : strlen(merges[j]);
        /* a merge longer than two longest tokens plus the space is malformed */
        if (n > 4 * max_len + 1)
            rc = cs_error_set(err, CS_EFORMAT, "merge %u: %zu bytes is too long", j, n);
        else
            rc = merge_add(b, j, merges[j], n, scratch, err);
    }
    free(scratch);
    return rc;
}

void bpe_tables_free(struct bpe_tables *b)
{
    free(b->tok_slots);
    free(b->merge_slots);
    b->tok_slots = NULL;
    b->merge_slots = NULL;
}

/* ---- the merge loop ---- */

int bpe_ids_push(struct bpe_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, sizeof *v * cap);
        if (!v)
            return CS_ENOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return CS_OK;
}

void bpe_work_free(struct bpe_work *w)
{
    free(w->sym);
    free(w->heap);
    memset(w, 0, sizeof *w);
}

static bool cand_less(const struct bpe_cand *a, const struct bpe_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(struct bpe_work *w, struct bpe_cand c)
{
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static struct bpe_cand heap_pop(struct bpe_work *w)
{
    struct bpe_cand top = w->heap[0];
    struct bpe_cand last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && cand_less(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!cand_less(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* Queue the pair (l, its next) when a merge exists for it. */
static void cand_try(const struct bpe_tables *b, struct bpe_work *w, int32_t l)
{
    if (l < 0)
        return;
    int32_t r = w->sym[l].next;
    if (r < 0)
        return;
    const struct bpe_merge *m = merge_find(b, w->sym[l].id, w->sym[r].id);
    if (m)
        heap_push(w, (struct bpe_cand){m->rank, l, r, w->sym[l].id, w->sym[r].id, m->result});
}

static int work_reserve(struct bpe_work *w, size_t n)
{
    if (n <= w->sym_cap)
        return CS_OK;
    free(w->sym);
    free(w->heap);
    w->sym = malloc(sizeof *w->sym * n);
    /* each merge adds at most two candidates: n initial + 2n */
    w->heap = malloc(sizeof *w->heap * 3 * n);
    if (!w->sym || !w->heap) {
        bpe_work_free(w);
        return CS_ENOMEM;
    }
    w->sym_cap = n;
    w->heap_cap = 3 * n;
    return CS_OK;
}

int bpe_encode_piece(const struct bpe_tables *b, struct bpe_work *w, const uint8_t *s, size_t n,
                     struct bpe_ids *ids)
{
    if (n == 1)
        return b->byte_id[s[0]] >= 0 ? bpe_ids_push(ids, b->byte_id[s[0]]) : CS_OK;
    if (n > INT32_MAX || work_reserve(w, n) != CS_OK)
        return CS_ENOMEM;
    int32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = b->byte_id[s[i]];
        if (id < 0)
            continue;   /* no token for this byte: dropped */
        w->sym[k] = (struct bpe_sym){id, k - 1, -1};
        if (k > 0)
            w->sym[k - 1].next = k;
        k++;
    }
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < k; i++)
        cand_try(b, w, i);
    while (w->heap_n > 0) {
        struct bpe_cand c = heap_pop(w);
        struct bpe_sym *l = &w->sym[c.left], *r = &w->sym[c.right];
        if (l->id != c.lid || r->id != c.rid || l->next != c.right)
            continue;   /* stale */
        l->id = c.result;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = c.left;
        r->id = -1;
        cand_try(b, w, l->prev);
        cand_try(b, w, c.left);
    }
    for (int32_t i = k > 0 ? 0 : -1; i >= 0; i = w->sym[i].next) {
        int rc = bpe_ids_push(ids, w->sym[i].id);
        if (rc != CS_OK)
            return rc;
    }
    return CS_OK;
}
