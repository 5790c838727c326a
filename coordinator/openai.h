/* openai.h - the OpenAI wire format (api.md): request bodies of
 * /v1/chat/completions and /v1/completions parsed and type-checked into
 * struct oai_request, and the JSON of responses, stream chunks, error bodies
 * and the model list.
 *
 * Parsing never trusts the body: every field has its type and range checked
 * and a failure fills struct oai_error with HTTP status 400, the OpenAI error
 * type, the offending field as `param` and a message naming it. Unknown
 * fields are ignored. Builders return malloc'd NUL-terminated JSON text (the
 * caller frees it) or NULL on allocation failure. */
#ifndef CS_OPENAI_H
#define CS_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "coordinator/template.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OAI_MAX_STOP 16
#define OAI_MAX_N 16

enum oai_kind { OAI_CHAT = 0, OAI_COMPLETION = 1 };
enum oai_tool_choice { OAI_TOOL_AUTO = 0, OAI_TOOL_NONE, OAI_TOOL_REQUIRED, OAI_TOOL_NAMED };
enum oai_format { OAI_FORMAT_TEXT = 0, OAI_FORMAT_JSON_OBJECT, OAI_FORMAT_JSON_SCHEMA };

/* An error answer: HTTP status plus the body fields. */
struct oai_error {
    int status;             /* 400, 401, 404, ... */
    const char *type;       /* "invalid_request_error", ... */
    char param[64];         /* "" means null */
    char code[48];          /* "" means null */
    char message[512];
};

struct oai_request {
    enum oai_kind kind;
    cJSON *root;                    /* the parsed body (owned) */
    char model[256];                /* "" when absent */
    /* chat */
    const cJSON *messages, *tools;  /* point into root; tools NULL when absent */
    enum oai_tool_choice tool_choice;
    char tool_name[128];            /* OAI_TOOL_NAMED */
    bool parallel_tool_calls;
    enum template_thinking enable_thinking; /* chat_template_kwargs / reasoning_effort */
    bool preserve_thinking;
    /* completions */
    const char *prompt;             /* points into root; NULL when given as ids */
    int32_t *prompt_ids;            /* prompt given as token ids (owned) */
    int n_prompt_ids;
    /* common */
    bool stream, include_usage;
    int max_tokens;                 /* -1: absent */
    float temperature, top_p, min_p;
    int top_k;
    float presence_penalty, frequency_penalty, repetition_penalty;
    bool has_seed;
    uint64_t seed;
    const char *stop[OAI_MAX_STOP]; /* point into root */
    int n_stop;
    int n;
    bool logprobs;
    int top_logprobs;               /* 0..20 */
    int32_t *bias_ids;              /* owned */
    float *bias_vals;
    int n_bias;
    enum oai_format format;
    const cJSON *json_schema;       /* response_format.json_schema.schema */
};

/* Fill e with status, type, param (may be NULL) and a formatted message. */
void oai_error_set(struct oai_error *e, int status, const char *type, const char *param,
                   const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Parse body[0, len) as a request of kind. CS_OK, or CS_EINVAL with e set
 * (400) and r empty, or CS_ENOMEM. r must be released with oai_request_free
 * in every case. */
int oai_request_parse(struct oai_request *r, enum oai_kind kind, const char *body, size_t len,
                      struct oai_error *e);
void oai_request_free(struct oai_request *r);

/* ---- responses ---- */

/* What every response and chunk repeats. */
struct oai_meta {
    const char *id;         /* "chatcmpl-..." / "cmpl-..." */
    long created;           /* unix seconds */
    const char *model;
};

struct oai_usage {
    int prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens;
};

/* One token for logprobs: raw bytes (any bytes) and its log-probability. */
struct oai_token_lp {
    const char *bytes;
    size_t len;
    float logprob;
};

struct oai_logprob {
    struct oai_token_lp tok;
    int n_top;
    struct oai_token_lp top[CS_MAX_TOP_LOGPROBS];
    size_t text_offset;     /* completions: byte offset of the token in the text */
};

/* One finished choice. content/reasoning NULL render as null. */
struct oai_choice {
    const char *content;
    const char *reasoning;
    cJSON *tool_calls;              /* borrowed array of OpenAI tool calls, or NULL */
    const char *finish_reason;
    const struct oai_logprob *lp;   /* NULL: "logprobs": null */
    int n_lp;
};

/* {"error":{"message","type","param","code"}} */
char *oai_error_body(const struct oai_error *e);
/* {"object":"list","data":[{id, object:"model", created, owned_by, max_model_len}]} */
char *oai_models_body(const char *model, long created, int max_model_len);

char *oai_chat_response(const struct oai_meta *m, const struct oai_choice *ch, int n,
                        const struct oai_usage *u);
char *oai_text_response(const struct oai_meta *m, const struct oai_choice *ch, int n,
                        const struct oai_usage *u);

/* A chat stream delta. Fields left NULL are omitted; role adds
 * "role":"assistant". tool_calls is a borrowed array of delta tool calls. */
struct oai_delta {
    bool role;
    const char *content;
    const char *reasoning;
    cJSON *tool_calls;
};

/* One chat.completion.chunk with one choice (finish_reason NULL: null). */
char *oai_chat_chunk(const struct oai_meta *m, int index, const struct oai_delta *d,
                     const char *finish_reason, const struct oai_logprob *lp, int n_lp,
                     bool with_logprobs);
/* One text_completion chunk with one choice. */
char *oai_text_chunk(const struct oai_meta *m, int index, const char *text,
                     const char *finish_reason, const struct oai_logprob *lp, int n_lp,
                     bool with_logprobs);
/* The include_usage chunk: choices [] and usage. */
char *oai_usage_chunk(const struct oai_meta *m, bool chat, const struct oai_usage *u);

/* Logprobs objects: chat {"content":[...],"refusal":null}; completions
 * {"tokens","token_logprobs","top_logprobs","text_offset"}. */
cJSON *oai_logprobs_chat(const struct oai_logprob *lp, int n);
cJSON *oai_logprobs_text(const struct oai_logprob *lp, int n);

#ifdef __cplusplus
}
#endif
#endif
