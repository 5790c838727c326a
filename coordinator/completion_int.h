/* completion_int.h - what the files of one completion request share
 * (completion.c: the life of the request, the token path, the answer;
 * completion_prompt.c: the request checks and the prompt). Internal to
 * coordinator/completion*.c. */
#ifndef CS_COMPLETION_INT_H
#define CS_COMPLETION_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "coordinator/completion.h"
#include "coordinator/toolparse.h"

struct choice {
    struct completion *c;
    int index;
    uint64_t engine_id;
    bool running;
    struct tokenizer_decoder dec;
    struct toolparse *tp;               /* chat only */
    struct buf hold;                    /* text that may start a stop string */
    struct buf text;                    /* completions: the text so far */
    bool stop_hit, in_reasoning;
    int n_tokens, n_reasoning;
    struct oai_logprob *lp;
    int n_lp, cap_lp, lp_sent;
    size_t text_offset;
    uint64_t t_last_ns;
    enum engine_finish finish;
    int status;
    char errmsg[256];
    const struct toolparse_result *result;
};

struct completion {
    struct completion_ctx *cx;
    struct http_request *http;          /* NULL once answered or gone */
    struct oai_request req;
    char id[64];
    long created;
    int32_t *prompt;
    int n_prompt;
    bool thinking;                      /* the generation starts in a think block */
    char forced[300];                   /* forced tool-call opening, fed to the parser first */
    struct choice *ch;
    int n_ch, n_running, refs;
    bool streaming, failed;
    uint64_t t_submit_ns;
};

/* ---- completion_prompt.c: checks and the prompt (each fills e on failure) ---- */

/* Checks that need the server's knowledge (model, vocabulary, features). */
int completion_check_request(struct completion *c, struct oai_error *e);
/* The chat prompt: template, thinking, forced tool-call opening, tokens. */
int completion_build_chat_prompt(struct completion *c, struct oai_error *e);
/* The completions prompt: text tokenized, or token ids checked and taken. */
int completion_build_text_prompt(struct completion *c, struct oai_error *e);
/* prompt + max_tokens must fit the context; fills *max_tokens. */
int completion_check_context(struct completion *c, int *max_tokens, struct oai_error *e);

#endif
