/* completion_prompt.c - the start of a completion request (completion_int.h):
 * the checks that need the server's knowledge (model name, vocabulary, the
 * named tool), the chat prompt (template, thinking directives, the forced
 * tool-call opening, tokens), the completions prompt (text or token ids) and
 * the context-length check. Each fills the OpenAI error on failure; the
 * request's life goes on in completion.c. */
#include "completion_int.h"

#include <stdio.h>
#include <string.h>

static bool valid_tool_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '.' || *s == ':' || *s == '-'))
            return false;
    return true;
}

static bool tools_declare(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn ? fn : t, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return true;
    }
    return false;
}

int completion_check_request(struct completion *c, struct oai_error *e)
{
    const struct oai_request *r = &c->req;
    const struct completion_ctx *cx = c->cx;
    if (r->model[0] && strcmp(r->model, cx->model->name) != 0) {
        oai_error_set(e, 404, "invalid_request_error", "model",
                      "The model '%s' does not exist (this server serves '%s')", r->model,
                      cx->model->name);
        snprintf(e->code, sizeof e->code, "model_not_found");
        return CS_ENOTFOUND;
    }
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= cx->engine->n_vocab) {
            oai_error_set(e, 400, "invalid_request_error", "logit_bias",
                          "'logit_bias' token id %d is out of the vocabulary (size %d)",
                          r->bias_ids[i], cx->engine->n_vocab);
            return CS_EINVAL;
        }
    if (r->tool_choice == OAI_TOOL_NAMED &&
        (!valid_tool_name(r->tool_name) || !tools_declare(r->tools, r->tool_name))) {
        oai_error_set(e, 400, "invalid_request_error", "tool_choice",
                      "'tool_choice' names '%s', which is not one of the tools", r->tool_name);
        return CS_EINVAL;
    }
    return CS_OK;
}

int completion_build_chat_prompt(struct completion *c, struct oai_error *e)
{
    struct oai_request *r = &c->req;
    enum template_thinking thinking = r->enable_thinking;
    prompt_thinking_directives((cJSON *)r->messages, &thinking);
    bool has_tools = cJSON_IsArray(r->tools) && cJSON_GetArraySize(r->tools) > 0;
    bool forced = has_tools && (r->tool_choice == OAI_TOOL_REQUIRED || r->tool_choice == OAI_TOOL_NAMED);
    if (forced || r->format != OAI_FORMAT_TEXT)
        thinking = TEMPLATE_THINKING_OFF; /* the whole output is the call or the JSON */
    struct template_options opt = {
        .add_generation_prompt = 1,
        .enable_thinking = thinking,
        .preserve_thinking = r->preserve_thinking,
        .variant = c->cx->model->variant,
    };
    struct template_output out;
    struct cs_error err = {0};
    int rc = template_render(r->messages, r->tool_choice == OAI_TOOL_NONE ? NULL : r->tools, &opt,
                             &out, &err);
    if (rc == CS_OK) {
        const char *t = buf_cstr(&out.text);
        c->thinking = out.text.len >= 8 && memcmp(t + out.text.len - 8, "<think>\n", 8) == 0;
        if (forced) {
            if (r->tool_choice == OAI_TOOL_NAMED)
                snprintf(c->forced, sizeof c->forced, "<tool_call>\n<function=%s>\n", r->tool_name);
            else
                snprintf(c->forced, sizeof c->forced, "<tool_call>\n<function=");
            rc = buf_append_str(&out.text, c->forced);
        }
    }
    size_t n = 0;
    if (rc == CS_OK)
        rc = prompt_tokenize(c->cx->model->tok, &c->cx->specials, &out, &c->prompt, &n);
    template_output_free(&out);
    c->n_prompt = (int)n;
    if (rc == CS_EINVAL)
        oai_error_set(e, 400, "invalid_request_error", "messages", "%s", err.msg);
    else if (rc != CS_OK)
        oai_error_set(e, 500, "server_error", NULL, "cannot build the prompt: %s", cs_strerror(rc));
    return rc;
}

int completion_build_text_prompt(struct completion *c, struct oai_error *e)
{
    struct oai_request *r = &c->req;
    int n_vocab = c->cx->engine->n_vocab;
    if (r->prompt) {
        size_t n = 0;
        int rc = tokenizer_encode(c->cx->model->tok, r->prompt, strlen(r->prompt), true,
                                  &c->prompt, &n);
        c->n_prompt = (int)n;
        if (rc != CS_OK) {
            oai_error_set(e, 500, "server_error", NULL, "cannot tokenize: %s", cs_strerror(rc));
            return rc;
        }
    } else {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= n_vocab) {
                oai_error_set(e, 400, "invalid_request_error", "prompt",
                              "'prompt' token id %d is out of the vocabulary (size %d)",
                              r->prompt_ids[i], n_vocab);
                return CS_EINVAL;
            }
        c->prompt = r->prompt_ids;
        c->n_prompt = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
    }
    if (c->n_prompt == 0) {
        oai_error_set(e, 400, "invalid_request_error", "prompt", "'prompt' is empty");
        return CS_EINVAL;
    }
    return CS_OK;
}

int completion_check_context(struct completion *c, int *max_tokens, struct oai_error *e)
{
    int ctx = c->cx->engine->ctx_size;
    int want = c->req.max_tokens > 0 ? c->req.max_tokens : ctx - c->n_prompt;
    if (want < 1 || (long)c->n_prompt + want > ctx) {
        oai_error_set(e, 400, "invalid_request_error",
                      c->req.kind == OAI_CHAT ? "messages" : "prompt",
                      "This model's maximum context length is %d tokens. However, you requested "
                      "%ld tokens (%d in the %s, %d in the completion). Please reduce the length "
                      "of the %s or completion.",
                      ctx, (long)c->n_prompt + (want < 1 ? 1 : want), c->n_prompt,
                      c->req.kind == OAI_CHAT ? "messages" : "prompt", want < 1 ? 1 : want,
                      c->req.kind == OAI_CHAT ? "messages" : "prompt");
        snprintf(e->code, sizeof e->code, "context_length_exceeded");
        return CS_ERANGE;
    }
    *max_tokens = want;
    return CS_OK;
}
