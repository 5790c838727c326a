/* tokenizer_bpe.h - internal to the tokenizer: the byte-level BPE tables and
 * the merge loop (tokenizer_bpe.c). Not for other modules: use tokenizer.h. */
#ifndef CS_TOKENIZER_BPE_H
#define CS_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* A growable id vector. */
struct bpe_ids {
    int32_t *v;
    size_t n, cap;
};

struct bpe_merge {
    uint64_t key;      /* (left id << 32) | right id; UINT64_MAX = empty slot */
    uint32_t rank;
    int32_t result;
};

struct bpe_tables {
    int32_t byte_id[256];          /* single-byte token of each byte, -1 if none */
    int32_t *tok_slots;            /* open addressing: raw bytes -> NORMAL/BYTE id; -1 empty */
    uint64_t tok_mask;
    struct bpe_merge *merge_slots; /* open addressing: pair -> rank, result */
    uint64_t merge_mask;
    const char *arena;             /* borrowed from the tokenizer */
    const uint64_t *off;
    const uint32_t *len;
};

/* Scratch reused across the pieces of one encode call. */
struct bpe_work {
    struct bpe_sym *sym;
    size_t sym_cap;
    struct bpe_cand *heap;
    size_t heap_n, heap_cap;
};

/* Build the tables over tokens whose raw bytes are arena[off[i]..+len[i]).
 * Merges are "A B" byte-level strings, rank = index. CS_EFORMAT (err names
 * the merge) for a malformed merge, an unknown part or a missing result. */
int bpe_tables_build(struct bpe_tables *b, const char *arena, const uint64_t *off,
                     const uint32_t *len, const uint8_t *types, uint32_t n_tokens,
                     const char *const *merges, const uint64_t *merge_lens, uint32_t n_merges,
                     struct cs_error *err);
void bpe_tables_free(struct bpe_tables *b);
/* NORMAL/BYTE token with raw bytes s[0..n), or -1. */
int32_t bpe_tables_find(const struct bpe_tables *b, const char *s, size_t n);

/* BPE-encode one pre-token of n raw bytes, appending ids. CS_ENOMEM. */
int bpe_encode_piece(const struct bpe_tables *b, struct bpe_work *w, const uint8_t *s, size_t n,
                     struct bpe_ids *ids);
int bpe_ids_push(struct bpe_ids *ids, int32_t id);
void bpe_work_free(struct bpe_work *w);

#endif
