/* tokenizer_gguf.c - build a tokenizer from the tokenizer.ggml.* keys of an
 * open GGUF file (model.md section 2). Kept apart from tokenizer.c so that
 * code building tokenizers from arrays does not pull in the GGUF reader. */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

/* Gather a string array: ptr/len pairs pointing into the mapping. */
static int strs_get(const struct gguf_file *f, const char *key, bool required, const char ***strs,
                    uint64_t **lens, uint64_t *n, struct cs_error *err)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    *strs = NULL;
    *lens = NULL;
    *n = 0;
    if (!kv)
        return required ? cs_error_set(err, CS_ENOTFOUND, "%s: missing", key) : CS_OK;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return cs_error_set(err, CS_EFORMAT, "%s: expected an array of strings", key);
    if (kv->arr_len > INT32_MAX)
        return cs_error_set(err, CS_EFORMAT, "%s: %llu entries is too many", key,
                            (unsigned long long)kv->arr_len);
    *strs = malloc(sizeof **strs * (kv->arr_len + 1));
    *lens = malloc(sizeof **lens * (kv->arr_len + 1));
    if (!*strs || !*lens)
        return cs_error_set(err, CS_ENOMEM, "%s: out of memory", key);
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        struct gguf_str s;
        if (gguf_arr_str(kv, i, &s) != CS_OK)
            return cs_error_set(err, CS_EFORMAT, "%s[%llu]: unreadable", key,
                                (unsigned long long)i);
        (*strs)[i] = s.ptr;
        (*lens)[i] = s.len;
    }
    *n = kv->arr_len;
    return CS_OK;
}

static int types_get(const struct gguf_file *f, uint64_t n, int32_t **types, struct cs_error *err)
{
    const char *key = "tokenizer.ggml.token_type";
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    *types = NULL;
    if (!kv)
        return CS_OK;   /* all NORMAL */
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_len != n)
        return cs_error_set(err, CS_EFORMAT, "%s: expected %llu integers", key,
                            (unsigned long long)n);
    *types = malloc(sizeof **types * (n + 1));
    if (!*types)
        return cs_error_set(err, CS_ENOMEM, "%s: out of memory", key);
    for (uint64_t i = 0; i < n; i++) {
        int64_t t;
        if (gguf_arr_i64(kv, i, &t) != CS_OK)
            return cs_error_set(err, CS_EFORMAT, "%s[%llu]: not an integer", key,
                                (unsigned long long)i);
        (*types)[i] = (int32_t)t;
    }
    return CS_OK;
}

static int32_t id_get(const struct gguf_file *f, const char *key)
{
    uint32_t v;
    return gguf_get_u32(f, key, &v, NULL) == CS_OK && v <= INT32_MAX ? (int32_t)v : -1;
}

int tokenizer_create_from_gguf(struct tokenizer **out, const struct gguf_file *f,
                               struct cs_error *err)
{
    char *model = NULL;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc == CS_OK && strcmp(model, "gpt2") != 0)
        rc = cs_error_set(err, CS_EUNSUPPORTED,
                          "tokenizer.ggml.model: \"%s\" is not supported (expected \"gpt2\")",
                          model);
    free(model);
    if (rc != CS_OK)
        return rc;
    const char **toks = NULL, **merges = NULL;
    uint64_t *tlens = NULL, *mlens = NULL, nt = 0, nm = 0;
    int32_t *types = NULL;
    rc = strs_get(f, "tokenizer.ggml.tokens", true, &toks, &tlens, &nt, err);
    if (rc == CS_OK)
        rc = strs_get(f, "tokenizer.ggml.merges", false, &merges, &mlens, &nm, err);
    if (rc == CS_OK)
        rc = types_get(f, nt, &types, err);
    if (rc == CS_OK) {
        struct tokenizer_vocab_view v = {
            .n_tokens = (uint32_t)nt, .tokens = toks, .lens = tlens, .types = types,
            .n_merges = (uint32_t)nm, .merges = merges, .merge_lens = mlens,
            .eos_id = id_get(f, "tokenizer.ggml.eos_token_id"),
            .pad_id = id_get(f, "tokenizer.ggml.padding_token_id"),
        };
        rc = tokenizer_create(out, &v, err);
    }
    free(toks);
    free(tlens);
    free(merges);
    free(mlens);
    free(types);
    return rc;
}
