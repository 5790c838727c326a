/* tokenizer_decode.c - the incremental decoder: ids in, text out, only ever
 * whole UTF-8 characters.
 *
 * A token may end in the middle of a character (byte-level BPE splits emoji
 * and CJK freely); those bytes wait in d->pending (at most 3) until the
 * character completes. Bytes that can no longer become a valid character turn
 * into U+FFFD, one per maximal invalid subpart (the same rule as the encoder's
 * sanitiser and Python's errors="replace"), as soon as that is certain. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

void tokenizer_decoder_init(struct tokenizer_decoder *d, const struct tokenizer *tok,
                            bool emit_control)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->emit_control = emit_control;
}

void tokenizer_decoder_free(struct tokenizer_decoder *d)
{
    free(d->out);
    d->out = NULL;
    d->out_cap = 0;
}

static int out_reserve(struct tokenizer_decoder *d, size_t n)
{
    if (n <= d->out_cap)
        return CS_OK;
    size_t cap = d->out_cap ? d->out_cap : 64;
    while (cap < n)
        cap *= 2;
    char *p = realloc(d->out, cap);
    if (!p)
        return CS_ENOMEM;
    d->out = p;
    d->out_cap = cap;
    return CS_OK;
}

/* Finish the pending prefix with bytes of s; returns how many were used.
 * Appends to d->out at *o. */
static size_t pending_complete(struct tokenizer_decoder *d, const uint8_t *s, size_t n, size_t *o)
{
    size_t i = 0;
    while (d->n_pending > 0 && i < n) {
        d->pending[d->n_pending++] = s[i++];
        int k = tokenizer_utf8_classify(d->pending, d->n_pending);
        if (k == 0)
            continue;
        if (k > 0) {
            memcpy(d->out + *o, d->pending, (size_t)k);
            *o += (size_t)k;
        } else {
            /* the prefix was valid until the byte just added: that byte
             * starts afresh */
            memcpy(d->out + *o, REPLACEMENT, 3);
            *o += 3;
            i--;
        }
        d->n_pending = 0;
    }
    return i;
}

static void bytes_process(struct tokenizer_decoder *d, const uint8_t *s, size_t n, size_t *o)
{
    size_t i = pending_complete(d, s, n, o);
    while (i < n) {
        int k = tokenizer_utf8_classify(s + i, n - i);
        if (k > 0) {
            memcpy(d->out + *o, s + i, (size_t)k);
            *o += (size_t)k;
            i += (size_t)k;
        } else if (k < 0) {
            memcpy(d->out + *o, REPLACEMENT, 3);
            *o += 3;
            i += (size_t)-k;
        } else {
            memcpy(d->pending, s + i, n - i);   /* n - i < 4 */
            d->n_pending = n - i;
            i = n;
        }
    }
}

int tokenizer_decoder_feed(struct tokenizer_decoder *d, int32_t id, const char **text,
                           size_t *len)
{
    size_t n = 0;
    const char *bytes = tokenizer_token_bytes(d->tok, id, &n);
    if (!bytes)
        return CS_EINVAL;
    if (tokenizer_token_type(d->tok, id) == TOKEN_TYPE_CONTROL && !d->emit_control)
        n = 0;
    /* worst case: every byte (pending included) becomes U+FFFD */
    if (out_reserve(d, 3 * (n + sizeof d->pending) + 1) != CS_OK)
        return CS_ENOMEM;
    size_t o = 0;
    bytes_process(d, (const uint8_t *)bytes, n, &o);
    d->out[o] = 0;
    *text = d->out;
    *len = o;
    return CS_OK;
}

int tokenizer_decoder_flush(struct tokenizer_decoder *d, const char **text, size_t *len)
{
    if (out_reserve(d, 4) != CS_OK)
        return CS_ENOMEM;
    size_t o = 0;
    if (d->n_pending > 0) {
        memcpy(d->out, REPLACEMENT, 3);
        o = 3;
        d->n_pending = 0;
    }
    d->out[o] = 0;
    *text = d->out;
    *len = o;
    return CS_OK;
}
