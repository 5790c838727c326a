/* tokenizer.h - the Qwen3.5 byte-level BPE tokenizer (model.md section 7).
 *
 * Encoding: text -> (optional split on special-token strings) -> invalid UTF-8
 * replaced by U+FFFD (maximal subparts, as Python's bytes.decode(errors=
 * "replace") does; the references operate on Python str, so invalid bytes can
 * never reach them) -> NFC (utf8proc) -> the qwen35 pre-tokenizer regex
 * (PCRE2, UTF + UCP, JIT) -> byte-level BPE with the GGUF merges, leftmost
 * lowest-rank pair first (Hugging Face tokenizers semantics). No BOS.
 *
 * Special tokens (types CONTROL and USER_DEFINED: <|im_start|>, <think>, ...)
 * are matched only when the caller says the text is its own (allow_special);
 * user content is encoded with allow_special=false, so "<|im_start|>" typed by
 * a user becomes ordinary tokens.
 *
 * Decoding: tokenizer_token_bytes gives a token's raw bytes; the incremental
 * decoder (tokenizer_decoder_*) turns a stream of ids into text that only
 * ever contains complete UTF-8 characters.
 *
 * A struct tokenizer is immutable after creation and may be shared by threads;
 * a struct tokenizer_decoder belongs to one stream. */
#ifndef CS_TOKENIZER_H
#define CS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gguf_file;
struct tokenizer;

/* Token types as llama.cpp writes tokenizer.ggml.token_type. */
enum tokenizer_token_type {
    TOKEN_TYPE_UNDEFINED = 0,
    TOKEN_TYPE_NORMAL = 1,
    TOKEN_TYPE_UNKNOWN = 2,
    TOKEN_TYPE_CONTROL = 3,
    TOKEN_TYPE_USER_DEFINED = 4,
    TOKEN_TYPE_UNUSED = 5,
    TOKEN_TYPE_BYTE = 6,
};

/* The vocabulary as GGUF stores it: tokens[i] is the byte-level string of
 * token i (lens[i] bytes; lens may be NULL for NUL-terminated strings),
 * types[i] its enum tokenizer_token_type (NULL: all NORMAL), merges[j] the
 * j-th merge "A B" (rank j; merge_lens may be NULL). eos_id / pad_id are -1
 * when unknown. Nothing is retained: the tokenizer copies what it needs. */
struct tokenizer_vocab_view {
    uint32_t n_tokens;
    const char *const *tokens;
    const uint64_t *lens;
    const int32_t *types;
    uint32_t n_merges;
    const char *const *merges;
    const uint64_t *merge_lens;
    int32_t eos_id;
    int32_t pad_id;
};

/* Build a tokenizer from arrays. CS_EFORMAT (err says which token or merge)
 * when a merge names an unknown token, a byte has no single-byte token, or a
 * string is not valid UTF-8; CS_ENOMEM; CS_EINTERNAL if the regex fails. */
int tokenizer_create(struct tokenizer **out, const struct tokenizer_vocab_view *v,
                     struct cs_error *err);
/* Build from an open GGUF (tokenizer.ggml.model must be "gpt2"; tokens,
 * token_type, merges, eos_token_id, padding_token_id). Errors as above plus
 * CS_ENOTFOUND / CS_EUNSUPPORTED naming the key. (tokenizer_gguf.c) */
int tokenizer_create_from_gguf(struct tokenizer **out, const struct gguf_file *f,
                               struct cs_error *err);
void tokenizer_destroy(struct tokenizer *tok);

/* Encode len bytes of text (any bytes: invalid UTF-8 becomes U+FFFD). On
 * CS_OK *ids is a malloc'd array of *n ids (the caller frees it; NULL when
 * *n == 0). allow_special: recognise special-token strings in the text (only
 * for text the server rendered itself). CS_ENOMEM, CS_EINTERNAL (regex). */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                     bool allow_special, int32_t **ids, size_t *n);

uint32_t tokenizer_vocab_size(const struct tokenizer *tok);
/* enum tokenizer_token_type of id; TOKEN_TYPE_UNDEFINED when out of range. */
int tokenizer_token_type(const struct tokenizer *tok, int32_t id);
/* True for CONTROL and USER_DEFINED tokens (the ones allow_special matches). */
bool tokenizer_is_special(const struct tokenizer *tok, int32_t id);
/* The raw bytes a token stands for (byte-level mapping undone; a special
 * token's literal text; empty for UNUSED tokens). NULL for an id out of range.
 * The pointer lives as long as the tokenizer. */
const char *tokenizer_token_bytes(const struct tokenizer *tok, int32_t id, size_t *len);
/* Id of the token whose raw bytes are exactly s[0..len) (special tokens by
 * their text, e.g. "<|im_end|>"); -1 when there is none. */
int32_t tokenizer_token_find(const struct tokenizer *tok, const char *s, size_t len);
/* End-of-generation ids: eos (<|im_end|>) and, when present and different,
 * <|endoftext|>. Writes up to cap ids, returns how many exist. */
size_t tokenizer_eos_ids(const struct tokenizer *tok, int32_t *ids, size_t cap);
int32_t tokenizer_pad_id(const struct tokenizer *tok);

/* ---- incremental decoder (tokenizer_decode.c) ---- */

/* Caller-owned; fields are private. */
struct tokenizer_decoder {
    const struct tokenizer *tok;
    bool emit_control;      /* output the text of CONTROL tokens too */
    uint8_t pending[4];     /* an incomplete UTF-8 sequence held back */
    size_t n_pending;
    char *out;              /* output buffer, reused between calls */
    size_t out_cap;
};

/* Start a stream. emit_control: whether CONTROL tokens (<|im_end|>...) appear
 * in the text; USER_DEFINED ones (<think>, <tool_call>) always do. */
void tokenizer_decoder_init(struct tokenizer_decoder *d, const struct tokenizer *tok,
                            bool emit_control);
/* Feed one id. *text and *len receive the newly complete text (valid UTF-8, maybe
 * empty), valid until the next call on d. Bytes that cannot yet form a
 * character are held back; a sequence that is definitely invalid becomes one
 * U+FFFD per maximal subpart. CS_EINVAL for an id out of range (nothing
 * changes), CS_ENOMEM. */
int tokenizer_decoder_feed(struct tokenizer_decoder *d, int32_t id, const char **text,
                           size_t *len);
/* End of stream: held-back bytes become U+FFFD. Same output contract. */
int tokenizer_decoder_flush(struct tokenizer_decoder *d, const char **text, size_t *len);
void tokenizer_decoder_free(struct tokenizer_decoder *d);

/* ---- byte-level mapping and UTF-8 helpers (tokenizer_bytes.c) ---- */

/* GPT-2 bytes_to_unicode: the code point byte b is written as in GGUF token strings. */
uint32_t tokenizer_byte_to_cp(uint8_t b);
/* Inverse: the byte for code point cp, or -1 if cp is not in the mapping. */
int tokenizer_cp_to_byte(uint32_t cp);
/* Write the byte-level string of n raw bytes into out (room for 2*n bytes;
 * every mapped code point is < U+0800). Returns the bytes written. */
size_t tokenizer_bytes_to_bytelevel(const uint8_t *in, size_t n, char *out);
/* Inverse: decode a byte-level string into raw bytes (out has room for n).
 * CS_EFORMAT if s is not valid UTF-8 or holds a code point outside the map. */
int tokenizer_bytelevel_to_bytes(const char *s, size_t n, uint8_t *out, size_t *out_n);

/* Classify the start of s[0..n) as UTF-8 (Unicode table 3-7). Returns k > 0
 * when a complete valid character of k bytes starts there; 0 when the bytes
 * so far are a valid but incomplete prefix (needs more input, n < 4);
 * -k when the first k bytes are a maximal invalid subpart (one U+FFFD). */
int tokenizer_utf8_classify(const uint8_t *s, size_t n);
/* Copy s with every maximal invalid subpart replaced by U+FFFD into a malloc'd
 * buffer (*out, *out_n); an incomplete tail counts as invalid. CS_ENOMEM. */
int tokenizer_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_n);

#ifdef __cplusplus
}
#endif
#endif
