/* vocab_gguf.c - write a struct vocab as the tokenizer.* keys of a GGUF
 * (model.md section 2). Kept apart from vocab_tiktoken.c so that importing a
 * vocabulary does not pull in the GGUF writer. */
#include "gguf.h"
#include "vocab_tiktoken.h"

int vocab_gguf_write(const struct vocab *v, struct gguf_writer *w)
{
    int rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v->model);
    if (rc == CS_OK)
        rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    if (rc == CS_OK)
        rc = gguf_writer_set_arr_strn(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                      v->token_lens, v->n_tokens);
    if (rc == CS_OK)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->token_types,
                                 v->n_tokens);
    if (rc == CS_OK)
        rc = gguf_writer_set_arr_strn(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                      v->merge_lens, v->n_merges);
    if (rc == CS_OK)
        rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    if (rc == CS_OK)
        rc = gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad_id);
    if (rc == CS_OK)
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    return rc;
}
