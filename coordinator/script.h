/* script.h - scripted output for tests (config test_script, refused unless
 * allow_test_options): the model still runs, but each generated token of a
 * request is replaced by the next token of its script.
 *
 * File format (JSON): {"scripts": [S0, S1, ...]} where each S is either a
 * string, tokenized with special tokens recognised ("Hi<|im_end|>" ends in
 * the <|im_end|> id), or an array of token ids. The k-th request accepted by
 * the engine (0-based, in submit order) gets script k mod N. When a script is
 * exhausted the request finishes as if an end-of-generation token had been
 * sampled (ENGINE_FINISH_STOP); a scripted stop id stops it too. */
#ifndef CS_SCRIPT_H
#define CS_SCRIPT_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tokenizer;

struct engine_script {
    int n;              /* scripts (>= 1) */
    int32_t **ids;      /* ids[i][0..len[i]) */
    int *len;
};

/* Read the script file at path. Strings are tokenized with tok (may be NULL
 * when every script is an id array); ids must be in [0, n_vocab). CS_EIO
 * (unreadable), CS_EFORMAT (err names the script and the problem),
 * CS_ENOMEM. */
int script_load(struct engine_script **out, const char *path, const struct tokenizer *tok,
                int n_vocab, struct cs_error *err);
void script_free(struct engine_script *s);
/* The script of the k-th request; *n receives its length. */
const int32_t *script_for(const struct engine_script *s, uint64_t k, int *n);

#ifdef __cplusplus
}
#endif
#endif
