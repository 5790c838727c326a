/* openai.c - OpenAI request bodies into struct oai_request, with the type and
 * range checks of api.md (openai.h). The response builders live in
 * openai_response.c. */
#include "openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

void oai_error_set(struct oai_error *e, int status, const char *type, const char *param,
                   const char *fmt, ...)
{
    if (!e)
        return;
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* ---- typed field readers: absent or null leaves *out unchanged ---- */

static int bad_type(struct oai_error *e, const char *name, const char *what)
{
    oai_error_set(e, 400, INVALID, name, "'%s' must be %s", name, what);
    return CS_EINVAL;
}

static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNull(v) ? NULL : v;
}

static int get_bool(const cJSON *obj, const char *name, bool *out, struct oai_error *e)
{
    const cJSON *v = field(obj, name);
    if (!v)
        return CS_OK;
    if (!cJSON_IsBool(v))
        return bad_type(e, name, "a boolean");
    *out = cJSON_IsTrue(v);
    return CS_OK;
}

static int get_number(const cJSON *obj, const char *name, double lo, double hi, float *out,
                      struct oai_error *e)
{
    const cJSON *v = field(obj, name);
    if (!v)
        return CS_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return bad_type(e, name, "a number");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        oai_error_set(e, 400, INVALID, name, "'%s' must be between %g and %g, got %g", name, lo,
                      hi, v->valuedouble);
        return CS_EINVAL;
    }
    *out = (float)v->valuedouble;
    return CS_OK;
}

static bool is_integer(const cJSON *v)
{
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

static int get_int(const cJSON *obj, const char *name, long lo, long hi, int *out,
                   struct oai_error *e)
{
    const cJSON *v = field(obj, name);
    if (!v)
        return CS_OK;
    if (!is_integer(v))
        return bad_type(e, name, "an integer");
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
        oai_error_set(e, 400, INVALID, name, "'%s' must be between %ld and %ld, got %.17g", name,
                      lo, hi, v->valuedouble);
        return CS_EINVAL;
    }
    *out = (int)v->valuedouble;
    return CS_OK;
}

static int get_string(const cJSON *obj, const char *name, const char **out, struct oai_error *e)
{
    const cJSON *v = field(obj, name);
    if (!v)
        return CS_OK;
    if (!cJSON_IsString(v))
        return bad_type(e, name, "a string");
    *out = v->valuestring;
    return CS_OK;
}

/* ---- composite fields ---- */

static int parse_stop(struct oai_request *r, struct oai_error *e)
{
    const cJSON *v = field(r->root, "stop");
    if (!v)
        return CS_OK;
    if (cJSON_IsString(v)) {
        if (v->valuestring[0])
            r->stop[r->n_stop++] = v->valuestring;
        return CS_OK;
    }
    if (!cJSON_IsArray(v))
        return bad_type(e, "stop", "a string or an array of strings");
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it))
            return bad_type(e, "stop", "a string or an array of strings");
        if (r->n_stop >= OAI_MAX_STOP) {
            oai_error_set(e, 400, INVALID, "stop", "'stop' has more than %d entries", OAI_MAX_STOP);
            return CS_EINVAL;
        }
        if (it->valuestring[0])
            r->stop[r->n_stop++] = it->valuestring;
    }
    return CS_OK;
}

static int parse_logit_bias(struct oai_request *r, struct oai_error *e)
{
    const cJSON *v = field(r->root, "logit_bias");
    if (!v)
        return CS_OK;
    if (!cJSON_IsObject(v))
        return bad_type(e, "logit_bias", "an object mapping token ids to numbers");
    int n = cJSON_GetArraySize(v);
    if (n > 1024) {
        oai_error_set(e, 400, INVALID, "logit_bias", "'logit_bias' has more than 1024 entries");
        return CS_EINVAL;
    }
    r->bias_ids = calloc((size_t)n + 1, sizeof *r->bias_ids);
    r->bias_vals = calloc((size_t)n + 1, sizeof *r->bias_vals);
    if (!r->bias_ids || !r->bias_vals)
        return CS_ENOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        char *end = NULL;
        long id = strtol(it->string, &end, 10);
        if (!it->string[0] || *end || id < 0 || id > INT32_MAX) {
            oai_error_set(e, 400, INVALID, "logit_bias",
                          "'logit_bias' keys must be token ids, got '%.64s'", it->string);
            return CS_EINVAL;
        }
        if (!cJSON_IsNumber(it) || it->valuedouble < -100 || it->valuedouble > 100) {
            oai_error_set(e, 400, INVALID, "logit_bias",
                          "'logit_bias' values must be numbers between -100 and 100");
            return CS_EINVAL;
        }
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_vals[r->n_bias++] = (float)it->valuedouble;
    }
    return CS_OK;
}

static int parse_response_format(struct oai_request *r, struct oai_error *e)
{
    const cJSON *v = field(r->root, "response_format");
    if (!v)
        return CS_OK;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!cJSON_IsObject(v) || !cJSON_IsString(t))
        return bad_type(e, "response_format", "an object with a string 'type'");
    if (strcmp(t->valuestring, "text") == 0) {
        r->format = OAI_FORMAT_TEXT;
    } else if (strcmp(t->valuestring, "json_object") == 0) {
        r->format = OAI_FORMAT_JSON_OBJECT;
    } else if (strcmp(t->valuestring, "json_schema") == 0) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!cJSON_IsObject(js) || (schema && !cJSON_IsObject(schema)))
            return bad_type(e, "response_format.json_schema", "an object with an object 'schema'");
        r->format = OAI_FORMAT_JSON_SCHEMA;
        r->json_schema = schema;
    } else {
        oai_error_set(e, 400, INVALID, "response_format.type",
                      "'response_format.type' must be text, json_object or json_schema");
        return CS_EINVAL;
    }
    return CS_OK;
}

static int parse_tool_choice(struct oai_request *r, struct oai_error *e)
{
    const cJSON *v = field(r->root, "tool_choice");
    if (!v)
        return CS_OK;
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (strcmp(s, "none") == 0)
            r->tool_choice = OAI_TOOL_NONE;
        else if (strcmp(s, "auto") == 0)
            r->tool_choice = OAI_TOOL_AUTO;
        else if (strcmp(s, "required") == 0)
            r->tool_choice = OAI_TOOL_REQUIRED;
        else
            return bad_type(e, "tool_choice", "none, auto, required or a named function");
        return CS_OK;
    }
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(v, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(v) || !cJSON_IsString(name) || strlen(name->valuestring) >= sizeof r->tool_name)
        return bad_type(e, "tool_choice", "none, auto, required or a named function");
    r->tool_choice = OAI_TOOL_NAMED;
    snprintf(r->tool_name, sizeof r->tool_name, "%s", name->valuestring);
    return CS_OK;
}

/* chat_template_kwargs and reasoning_effort (api.md "Thinking"). */
static int parse_thinking(struct oai_request *r, struct oai_error *e)
{
    const cJSON *kw = field(r->root, "chat_template_kwargs");
    if (kw) {
        if (!cJSON_IsObject(kw))
            return bad_type(e, "chat_template_kwargs", "an object");
        bool on = false, given = cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking") != NULL;
        if (get_bool(kw, "enable_thinking", &on, e))
            return CS_EINVAL;
        if (given && !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking")))
            r->enable_thinking = on ? TEMPLATE_THINKING_ON : TEMPLATE_THINKING_OFF;
        if (get_bool(kw, "preserve_thinking", &r->preserve_thinking, e))
            return CS_EINVAL;
    }
    const char *effort = NULL;
    if (get_string(r->root, "reasoning_effort", &effort, e))
        return CS_EINVAL;
    if (effort) {
        if (strcmp(effort, "none") == 0 || strcmp(effort, "minimal") == 0)
            r->enable_thinking = TEMPLATE_THINKING_OFF;
        else if (strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high"))
            return bad_type(e, "reasoning_effort", "none, minimal, low, medium or high");
    }
    return CS_OK;
}

static int parse_prompt(struct oai_request *r, struct oai_error *e)
{
    const cJSON *v = field(r->root, "prompt");
    if (!v) {
        oai_error_set(e, 400, INVALID, "prompt", "'prompt' is required");
        return CS_EINVAL;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child))
        v = v->child;
    if (cJSON_IsString(v)) {
        r->prompt = v->valuestring;
        return CS_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return bad_type(e, "prompt", "a string, or an array of token ids");
    int n = cJSON_GetArraySize(v);
    r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids);
    if (!r->prompt_ids)
        return CS_ENOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!is_integer(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX) {
            oai_error_set(e, 400, INVALID, "prompt",
                          "'prompt' must be a string or one list of token ids (several prompts "
                          "are not supported)");
            return CS_EINVAL;
        }
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)it->valuedouble;
    }
    return CS_OK;
}

static int parse_chat_fields(struct oai_request *r, struct oai_error *e)
{
    const cJSON *msgs = field(r->root, "messages");
    if (!msgs) {
        oai_error_set(e, 400, INVALID, "messages", "'messages' is required");
        return CS_EINVAL;
    }
    if (!cJSON_IsArray(msgs))
        return bad_type(e, "messages", "an array");
    r->messages = msgs;
    const cJSON *tools = field(r->root, "tools");
    if (tools && !cJSON_IsArray(tools))
        return bad_type(e, "tools", "an array");
    r->tools = tools;
    int rc = parse_tool_choice(r, e);
    if (rc == CS_OK)
        rc = get_bool(r->root, "parallel_tool_calls", &r->parallel_tool_calls, e);
    if (rc == CS_OK)
        rc = parse_thinking(r, e);
    if (rc == CS_OK)
        rc = get_bool(r->root, "logprobs", &r->logprobs, e);
    if (rc == CS_OK)
        rc = get_int(r->root, "top_logprobs", 0, 20, &r->top_logprobs, e);
    if (rc == CS_OK && r->top_logprobs > 0 && !r->logprobs) {
        oai_error_set(e, 400, INVALID, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
        return CS_EINVAL;
    }
    if (rc == CS_OK && r->tool_choice == OAI_TOOL_NAMED && !cJSON_IsArray(r->tools)) {
        oai_error_set(e, 400, INVALID, "tool_choice", "'tool_choice' names a function but no "
                      "'tools' are given");
        return CS_EINVAL;
    }
    return rc;
}

static int parse_completion_fields(struct oai_request *r, struct oai_error *e)
{
    int rc = parse_prompt(r, e);
    int lp = -1;
    if (rc == CS_OK)
        rc = get_int(r->root, "logprobs", 0, 20, &lp, e);
    if (rc == CS_OK && lp >= 0) {
        r->logprobs = true;
        r->top_logprobs = lp;
    }
    bool echo = false;
    if (rc == CS_OK)
        rc = get_bool(r->root, "echo", &echo, e);
    if (rc == CS_OK && echo) {
        oai_error_set(e, 400, INVALID, "echo", "'echo' is not supported");
        return CS_EINVAL;
    }
    return rc;
}

static int parse_sampling(struct oai_request *r, struct oai_error *e)
{
    int rc = get_number(r->root, "temperature", 0, 2, &r->temperature, e);
    if (rc == CS_OK)
        rc = get_number(r->root, "top_p", 0, 1, &r->top_p, e);
    if (rc == CS_OK)
        rc = get_int(r->root, "top_k", -1, 1 << 30, &r->top_k, e);
    if (rc == CS_OK)
        rc = get_number(r->root, "min_p", 0, 1, &r->min_p, e);
    if (rc == CS_OK)
        rc = get_number(r->root, "presence_penalty", -2, 2, &r->presence_penalty, e);
    if (rc == CS_OK)
        rc = get_number(r->root, "frequency_penalty", -2, 2, &r->frequency_penalty, e);
    if (rc == CS_OK)
        rc = get_number(r->root, "repetition_penalty", 0.01, 10, &r->repetition_penalty, e);
    const cJSON *seed = field(r->root, "seed");
    if (rc == CS_OK && seed) {
        if (!is_integer(seed) || fabs(seed->valuedouble) > 9.2e18)
            return bad_type(e, "seed", "an integer");
        r->has_seed = true;
        r->seed = (uint64_t)(int64_t)seed->valuedouble;
    }
    return rc;
}

static int parse_common(struct oai_request *r, struct oai_error *e)
{
    const char *model = NULL;
    int rc = get_string(r->root, "model", &model, e);
    if (rc)
        return rc;
    if (model)
        snprintf(r->model, sizeof r->model, "%s", model);
    rc = get_bool(r->root, "stream", &r->stream, e);
    const cJSON *so = field(r->root, "stream_options");
    if (rc == CS_OK && so) {
        if (!cJSON_IsObject(so))
            return bad_type(e, "stream_options", "an object");
        rc = get_bool(so, "include_usage", &r->include_usage, e);
    }
    if (rc == CS_OK)
        rc = get_int(r->root, "max_tokens", 1, INT32_MAX, &r->max_tokens, e);
    if (rc == CS_OK)
        rc = get_int(r->root, "max_completion_tokens", 1, INT32_MAX, &r->max_tokens, e);
    if (rc == CS_OK)
        rc = get_int(r->root, "n", 1, OAI_MAX_N, &r->n, e);
    if (rc == CS_OK)
        rc = parse_sampling(r, e);
    if (rc == CS_OK)
        rc = parse_stop(r, e);
    if (rc == CS_OK)
        rc = parse_logit_bias(r, e);
    if (rc == CS_OK)
        rc = parse_response_format(r, e);
    return rc;
}

static void request_defaults(struct oai_request *r, enum oai_kind kind)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
    r->n = 1;
    r->parallel_tool_calls = true;
}

int oai_request_parse(struct oai_request *r, enum oai_kind kind, const char *body, size_t len,
                      struct oai_error *e)
{
    request_defaults(r, kind);
    const char *end = NULL;
    r->root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!r->root) {
        size_t off = end && end >= body ? (size_t)(end - body) : 0;
        oai_error_set(e, 400, INVALID, NULL,
                      "the request body is not valid JSON (error near byte %zu)", off);
        return CS_EINVAL;
    }
    if (!cJSON_IsObject(r->root)) {
        oai_error_set(e, 400, INVALID, NULL, "the request body must be a JSON object");
        return CS_EINVAL;
    }
    int rc = parse_common(r, e);
    if (rc == CS_OK)
        rc = kind == OAI_CHAT ? parse_chat_fields(r, e) : parse_completion_fields(r, e);
    if (rc == CS_ENOMEM)
        oai_error_set(e, 500, "server_error", NULL, "out of memory");
    return rc;
}

void oai_request_free(struct oai_request *r)
{
    cJSON_Delete(r->root);
    free(r->prompt_ids);
    free(r->bias_ids);
    free(r->bias_vals);
    memset(r, 0, sizeof *r);
}
