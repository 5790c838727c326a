/* engine_request.c - checks and copies of struct engine_request shared by every
 * engine (engine_local.c, engine_pipeline.c), so both refuse the same requests
 * with the same messages. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static bool mask_any(const uint8_t *mask, int n_vocab)
{
    for (int i = 0; i < n_vocab; i++)
        if ((mask[i >> 3] >> (i & 7)) & 1)
            return true;
    return false;
}

int engine_request_check(const struct engine_request *r, int n_vocab, int ctx_size,
                         int max_stop_ids, int max_bias, struct cs_error *err)
{
    if (!r || !r->on_done || !r->prompt)
        return cs_error_set(err, CS_EINVAL, "a request needs a prompt and a done callback");
    if (r->n_prompt < 1)
        return cs_error_set(err, CS_EINVAL, "the prompt is empty");
    if (r->max_tokens < 1)
        return cs_error_set(err, CS_EINVAL, "max_tokens must be at least 1 (got %d)",
                            r->max_tokens);
    if ((long)r->n_prompt + r->max_tokens > ctx_size)
        return cs_error_set(err, CS_ERANGE,
                            "the prompt (%d tokens) plus max_tokens (%d) is %ld tokens, more than "
                            "the context size of %d tokens",
                            r->n_prompt, r->max_tokens, (long)r->n_prompt + r->max_tokens,
                            ctx_size);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab)
            return cs_error_set(err, CS_EINVAL, "prompt token %d is %d, outside [0, %d)", i,
                                (int)r->prompt[i], n_vocab);
    if (r->n_stop_ids < 0 || r->n_stop_ids > max_stop_ids || (r->n_stop_ids && !r->stop_ids))
        return cs_error_set(err, CS_EINVAL, "%d stop ids (at most %d)", r->n_stop_ids,
                            max_stop_ids);
    const struct cs_sample_params *sp = &r->sample;
    if (sp->n_bias < 0 || sp->n_bias > max_bias ||
        (sp->n_bias && (!sp->bias_ids || !sp->bias_vals)))
        return cs_error_set(err, CS_EINVAL, "%d logit bias entries (at most %d)", sp->n_bias,
                            max_bias);
    if (sp->allowed && !mask_any(sp->allowed, n_vocab))
        return cs_error_set(err, CS_EINVAL, "the allowed-token mask allows no token");
    if (r->constraint && r->constraint_ops &&
        (!r->constraint_ops->mask || !r->constraint_ops->advance))
        return cs_error_set(err, CS_EINVAL, "a constraint needs mask and advance functions");
    if (sp->n_logprobs > CS_MAX_TOP_LOGPROBS)
        return cs_error_set(err, CS_EINVAL, "%d top logprobs requested (at most %d)",
                            sp->n_logprobs, CS_MAX_TOP_LOGPROBS);
    return CS_OK;
}

void *engine_dup_bytes(const void *src, size_t bytes, bool *fail)
{
    if (!bytes)
        return NULL;
    void *p = malloc(bytes);
    if (!p)
        *fail = true;
    else
        memcpy(p, src, bytes);
    return p;
}
