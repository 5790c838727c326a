/* prompt.h - from a chat request to prompt token ids: the /think and
 * /no_think directives (api.md "Thinking") and the tokenization of the
 * rendered template that recognises special tokens only in the text the
 * template produced, never in the client's spans.
 *
 * Tokenization rule: special-token strings are located only outside the user
 * spans; the text between two such tokens (template text and user text
 * together) is encoded as one piece with allow_special=false. So the BPE
 * pre-tokenization is exactly the reference's (which splits on special
 * tokens first), and "<|im_start|>" typed by a user stays ordinary text. */
#ifndef CS_PROMPT_H
#define CS_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/tokenizer.h"
#include "coordinator/template.h"

#ifdef __cplusplus
extern "C" {
#endif

struct prompt_special {
    const char *text;   /* points into the tokenizer */
    size_t len;
    int32_t id;
};

/* The special tokens of a vocabulary, longest first. */
struct prompt_specials {
    struct prompt_special *items;
    int n;
};

/* Collect the CONTROL and USER_DEFINED tokens of tok. CS_OK or CS_ENOMEM. */
int prompt_specials_init(struct prompt_specials *ps, const struct tokenizer *tok);
void prompt_specials_free(struct prompt_specials *ps);

/* Look for "/think" or "/no_think" at the end of the system message (the
 * first message, role system or developer) and then of the last user
 * message; each one found is removed from the text (with the whitespace
 * around it) and sets *thinking (the later one wins). Messages whose shape
 * is unexpected are left alone (the template reports them). */
void prompt_thinking_directives(cJSON *messages, enum template_thinking *thinking);

/* Encode a rendered template per the rule above. *ids is malloc'd (caller
 * frees). CS_OK, CS_ENOMEM, CS_EINTERNAL. */
int prompt_tokenize(const struct tokenizer *tok, const struct prompt_specials *ps,
                    const struct template_output *out, int32_t **ids, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
