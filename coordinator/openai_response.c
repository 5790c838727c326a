/* openai_response.c - the JSON the API answers with (openai.h): error
 * bodies, the model list, chat and text completions, their stream chunks and
 * logprobs objects, exactly in the shapes of api.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/tokenizer.h"
#include "openai.h"

static char *print_and_free(cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* A string value, or null for NULL. */
static cJSON *str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

char *oai_error_body(const struct oai_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    cJSON_AddItemToObject(err, "param", str_or_null(e->param[0] ? e->param : NULL));
    cJSON_AddItemToObject(err, "code", str_or_null(e->code[0] ? e->code : NULL));
    return print_and_free(root);
}

char *oai_models_body(const char *model, long created, int max_model_len)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "cmpserve");
    cJSON_AddNumberToObject(m, "max_model_len", max_model_len);
    cJSON_AddItemToArray(data, m);
    return print_and_free(root);
}

/* ---- logprobs ---- */

/* A token as JSON text: its bytes with invalid UTF-8 replaced. */
static cJSON *token_string(const struct oai_token_lp *t)
{
    char *clean = NULL;
    size_t n = 0;
    if (tokenizer_utf8_sanitize(t->bytes ? t->bytes : "", t->len, &clean, &n) != CS_OK)
        return cJSON_CreateString("");
    cJSON *s = cJSON_CreateString(clean);
    free(clean);
    return s;
}

static double lp_value(float v)
{
    return isfinite(v) ? (double)v : -9999.0;
}

static cJSON *token_entry(const struct oai_token_lp *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", token_string(t));
    cJSON_AddNumberToObject(o, "logprob", lp_value(t->logprob));
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < t->len; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)t->bytes[i]));
    return o;
}

cJSON *oai_logprobs_chat(const struct oai_logprob *lp, int n)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(root, "content");
    for (int i = 0; i < n; i++) {
        cJSON *e = token_entry(&lp[i].tok);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < lp[i].n_top; k++)
            cJSON_AddItemToArray(top, token_entry(&lp[i].top[k]));
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(root, "refusal");
    return root;
}

cJSON *oai_logprobs_text(const struct oai_logprob *lp, int n)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(root, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(root, "top_logprobs");
    cJSON *off = cJSON_AddArrayToObject(root, "text_offset");
    for (int i = 0; i < n; i++) {
        cJSON_AddItemToArray(tokens, token_string(&lp[i].tok));
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(lp_value(lp[i].tok.logprob)));
        cJSON *d = cJSON_CreateObject();
        for (int k = 0; k < lp[i].n_top; k++) {
            cJSON *key = token_string(&lp[i].top[k]);
            if (key && !cJSON_GetObjectItemCaseSensitive(d, key->valuestring))
                cJSON_AddNumberToObject(d, key->valuestring, lp_value(lp[i].top[k].logprob));
            cJSON_Delete(key);
        }
        cJSON_AddItemToArray(top, d);
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)lp[i].text_offset));
    }
    return root;
}

/* ---- whole responses ---- */

static cJSON *meta_object(const struct oai_meta *m, const char *object)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", m->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)m->created);
    cJSON_AddStringToObject(root, "model", m->model);
    return root;
}

static cJSON *usage_object(const struct oai_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *pd = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(pd, "cached_tokens", u->cached_tokens);
    cJSON *cd = cJSON_AddObjectToObject(o, "completion_tokens_details");
    cJSON_AddNumberToObject(cd, "reasoning_tokens", u->reasoning_tokens);
    return o;
}

static void add_finish(cJSON *choice, const char *finish_reason)
{
    cJSON_AddItemToObject(choice, "finish_reason", str_or_null(finish_reason));
}

char *oai_chat_response(const struct oai_meta *m, const struct oai_choice *ch, int n,
                        const struct oai_usage *u)
{
    cJSON *root = meta_object(m, "chat.completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddItemToObject(msg, "content", str_or_null(ch[i].content));
        cJSON_AddItemToObject(msg, "reasoning_content", str_or_null(ch[i].reasoning));
        cJSON_AddItemToObject(msg, "reasoning", str_or_null(ch[i].reasoning));
        if (ch[i].tool_calls && cJSON_GetArraySize(ch[i].tool_calls) > 0)
            cJSON_AddItemReferenceToObject(msg, "tool_calls", ch[i].tool_calls);
        if (ch[i].lp)
            cJSON_AddItemToObject(c, "logprobs", oai_logprobs_chat(ch[i].lp, ch[i].n_lp));
        else
            cJSON_AddNullToObject(c, "logprobs");
        add_finish(c, ch[i].finish_reason);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(root, "usage", usage_object(u));
    return print_and_free(root);
}

char *oai_text_response(const struct oai_meta *m, const struct oai_choice *ch, int n,
                        const struct oai_usage *u)
{
    cJSON *root = meta_object(m, "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "text", ch[i].content ? ch[i].content : "");
        cJSON_AddNumberToObject(c, "index", i);
        if (ch[i].lp)
            cJSON_AddItemToObject(c, "logprobs", oai_logprobs_text(ch[i].lp, ch[i].n_lp));
        else
            cJSON_AddNullToObject(c, "logprobs");
        add_finish(c, ch[i].finish_reason);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(root, "usage", usage_object(u));
    return print_and_free(root);
}

/* ---- stream chunks ---- */

char *oai_chat_chunk(const struct oai_meta *m, int index, const struct oai_delta *d,
                     const char *finish_reason, const struct oai_logprob *lp, int n_lp,
                     bool with_logprobs)
{
    cJSON *root = meta_object(m, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON *delta = cJSON_AddObjectToObject(c, "delta");
    if (d->role)
        cJSON_AddStringToObject(delta, "role", "assistant");
    if (d->content)
        cJSON_AddStringToObject(delta, "content", d->content);
    if (d->reasoning) {
        cJSON_AddStringToObject(delta, "reasoning_content", d->reasoning);
        cJSON_AddStringToObject(delta, "reasoning", d->reasoning);
    }
    if (d->tool_calls)
        cJSON_AddItemReferenceToObject(delta, "tool_calls", d->tool_calls);
    if (with_logprobs)
        cJSON_AddItemToObject(c, "logprobs", oai_logprobs_chat(lp, n_lp));
    else
        cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, finish_reason);
    cJSON_AddItemToArray(choices, c);
    return print_and_free(root);
}

char *oai_text_chunk(const struct oai_meta *m, int index, const char *text,
                     const char *finish_reason, const struct oai_logprob *lp, int n_lp,
                     bool with_logprobs)
{
    cJSON *root = meta_object(m, "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "text", text ? text : "");
    cJSON_AddNumberToObject(c, "index", index);
    if (with_logprobs)
        cJSON_AddItemToObject(c, "logprobs", oai_logprobs_text(lp, n_lp));
    else
        cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, finish_reason);
    cJSON_AddItemToArray(choices, c);
    return print_and_free(root);
}

char *oai_usage_chunk(const struct oai_meta *m, bool chat, const struct oai_usage *u)
{
    cJSON *root = meta_object(m, chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToObject(root, "usage", usage_object(u));
    return print_and_free(root);
}
