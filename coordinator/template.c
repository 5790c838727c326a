/* template.c - the Qwen3.5/3.6 chat template as C code (see template.h).
 *
 * The code follows the official Jinja template top to bottom: render_content,
 * the system/tools header, the reverse scan for the last user query, the
 * message loop (user, assistant with reasoning and tool calls, tool results
 * grouped into one user turn), the generation prompt. Every string is built
 * as a struct mstr: the bytes plus a parallel mask (1 = the byte came from the
 * client), so trimming and splitting keep track of provenance and the final
 * mask becomes the user spans. Allocation failure is sticky in struct render
 * and reported once at the end. Python semantics reproduced on purpose:
 * str.strip() (Unicode whitespace), `in` on strings, float repr (those three
 * in template_pystr.c), json.dumps with ensure_ascii=False and ", "/": "
 * separators (here). */
#include "template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template_pystr.h"

/* ---- strings with provenance ---- */

struct mstr {
    struct buf text;
    struct buf mask; /* one byte per text byte: 1 = client-supplied */
};

struct render {
    const struct template_options *opt;
    struct cs_error *err;
    int oom;         /* sticky allocation failure */
    int image_count; /* the template's image_count/video_count namespaces */
    int video_count;
};

static void mstr_free(struct mstr *m)
{
    buf_free(&m->text);
    buf_free(&m->mask);
}

static void put(struct render *r, struct mstr *m, const char *s, size_t n, int user)
{
    if (r->oom || n == 0)
        return;
    if (buf_reserve(&m->mask, n) || buf_append(&m->text, s, n)) {
        r->oom = 1;
        return;
    }
    memset(m->mask.data + m->mask.len, user ? 1 : 0, n);
    m->mask.len += n;
    m->mask.data[m->mask.len] = '\0';
}

/* A literal the server writes. */
static void lit(struct render *r, struct mstr *m, const char *s)
{
    put(r, m, s, strlen(s), 0);
}

/* Client text. */
static void usr(struct render *r, struct mstr *m, const char *s)
{
    put(r, m, s, strlen(s), 1);
}

/* Append src[a, b) with its provenance. */
static void put_slice(struct render *r, struct mstr *dst, const struct mstr *src, size_t a,
                      size_t b)
{
    if (r->oom || b <= a)
        return;
    if (buf_reserve(&dst->mask, b - a) || buf_append(&dst->text, src->text.data + a, b - a)) {
        r->oom = 1;
        return;
    }
    memcpy(dst->mask.data + dst->mask.len, src->mask.data + a, b - a);
    dst->mask.len += b - a;
    dst->mask.data[dst->mask.len] = '\0';
}

static int fail(struct render *r, const char *msg)
{
    return cs_error_set(r->err, CS_EINVAL, "%s", msg);
}

/* ---- JSON, as Python's json.dumps(ensure_ascii=False) writes it ---- */

static void json_string(struct render *r, struct mstr *m, const char *s, int user)
{
    char esc[8];
    put(r, m, "\"", 1, user);
    for (const char *p = s; *p; p++) {
        const char *run = p;
        while (*p && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
            p++;
        put(r, m, run, (size_t)(p - run), user);
        if (!*p)
            break;
        switch (*p) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        case '\b': strcpy(esc, "\\b"); break;
        case '\f': strcpy(esc, "\\f"); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", (unsigned char)*p); break;
        }
        put(r, m, esc, strlen(esc), user);
    }
    put(r, m, "\"", 1, user);
}

/* tojson of any value; all of it is client data (cJSON bounds the depth). */
static void json_value(struct render *r, struct mstr *m, const cJSON *v)
{
    char num[40];
    if (cJSON_IsNull(v)) {
        usr(r, m, "null");
    } else if (cJSON_IsTrue(v)) {
        usr(r, m, "true");
    } else if (cJSON_IsFalse(v)) {
        usr(r, m, "false");
    } else if (cJSON_IsNumber(v)) {
        pystr_number(v->valuedouble, 1, num);
        usr(r, m, num);
    } else if (cJSON_IsString(v)) {
        json_string(r, m, v->valuestring, 1);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v);
        usr(r, m, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (obj) {
                json_string(r, m, c->string ? c->string : "", 1);
                usr(r, m, ": ");
            }
            json_value(r, m, c);
            if (c->next)
                usr(r, m, ", ");
        }
        usr(r, m, obj ? "}" : "]");
    } else if (cJSON_IsRaw(v) && v->valuestring) {
        usr(r, m, v->valuestring);
    }
}

/* Python's dict lookup: the last member named key (cJSON keeps duplicates). */
static const cJSON *obj_get(const cJSON *o, const char *key)
{
    const cJSON *found = NULL;
    if (!cJSON_IsObject(o))
        return NULL;
    for (const cJSON *c = o->child; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0)
            found = c;
    return found;
}

static int str_is(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

/* ---- render_content ---- */

enum part_kind { PART_IMAGE, PART_VIDEO, PART_TEXT, PART_NONE, PART_BAD };

/* Classify a content part as the template's if/elif chain does. */
static enum part_kind part_classify(const cJSON *item)
{
    if (cJSON_IsObject(item)) {
        const cJSON *type = obj_get(item, "type");
        if (obj_get(item, "image") || obj_get(item, "image_url") || str_is(type, "image"))
            return PART_IMAGE;
        if (obj_get(item, "video") || str_is(type, "video"))
            return PART_VIDEO;
        return obj_get(item, "text") ? PART_TEXT : PART_BAD;
    }
    if (cJSON_IsString(item)) { /* `'image' in item` is a substring test */
        const char *s = item->valuestring;
        if (strstr(s, "image"))
            return PART_IMAGE;
        if (strstr(s, "video"))
            return PART_VIDEO;
        return strstr(s, "text") ? PART_NONE : PART_BAD; /* item.text: undefined */
    }
    return PART_BAD;
}

static int render_vision(struct render *r, struct mstr *dst, int image, int do_count,
                         int is_system)
{
    char label[48];
    if (is_system)
        return fail(r, image ? "System message cannot contain images."
                              : "System message cannot contain videos.");
    int *count = image ? &r->image_count : &r->video_count;
    if (do_count)
        (*count)++;
    if (r->opt->add_vision_id) {
        snprintf(label, sizeof label, "%s %d: ", image ? "Picture" : "Video", *count);
        lit(r, dst, label);
    }
    lit(r, dst, image ? "<|vision_start|><|image_pad|><|vision_end|>"
                      : "<|vision_start|><|video_pad|><|vision_end|>");
    return CS_OK;
}

static int render_content(struct render *r, const cJSON *content, int do_count, int is_system,
                          struct mstr *dst)
{
    if (!content || cJSON_IsNull(content))
        return CS_OK;
    if (cJSON_IsString(content)) {
        usr(r, dst, content->valuestring);
        return CS_OK;
    }
    if (!cJSON_IsArray(content))
        return fail(r, "Unexpected content type.");
    for (const cJSON *item = content->child; item; item = item->next) {
        int rc = CS_OK;
        switch (part_classify(item)) {
        case PART_IMAGE: rc = render_vision(r, dst, 1, do_count, is_system); break;
        case PART_VIDEO: rc = render_vision(r, dst, 0, do_count, is_system); break;
        case PART_NONE: break;
        case PART_TEXT: {
            const cJSON *text = obj_get(item, "text");
            if (!cJSON_IsString(text))
                return cs_error_set(r->err, CS_EINVAL, "content part text must be a string");
            usr(r, dst, text->valuestring);
            break;
        }
        case PART_BAD: return fail(r, "Unexpected item type in content.");
        }
        if (rc)
            return rc;
    }
    return CS_OK;
}

/* render_content(...)|trim into dst (emptied first). */
static int render_trimmed(struct render *r, const cJSON *content, int do_count, int is_system,
                          struct mstr *dst)
{
    struct mstr tmp = {0};
    buf_clear(&dst->text);
    buf_clear(&dst->mask);
    int rc = render_content(r, content, do_count, is_system, &tmp);
    if (rc == CS_OK) {
        size_t a = 0, b = tmp.text.len;
        pystr_strip(buf_cstr(&tmp.text), &a, &b);
        put_slice(r, dst, &tmp, a, b);
    }
    mstr_free(&tmp);
    return rc;
}

/* ---- messages ---- */

enum role { ROLE_OTHER, ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

static enum role message_role(const cJSON *msg)
{
    const cJSON *role = obj_get(msg, "role");
    if (str_is(role, "system") || str_is(role, "developer")) /* api.md: developer = system */
        return ROLE_SYSTEM;
    if (str_is(role, "user"))
        return ROLE_USER;
    if (str_is(role, "assistant"))
        return ROLE_ASSISTANT;
    if (str_is(role, "tool"))
        return ROLE_TOOL;
    return ROLE_OTHER;
}

struct conv {
    const cJSON **msg; /* the messages, indexable */
    enum role *role;
    size_t n;
    size_t last_query; /* ns.last_query_index */
};

static const char TOOLS_INTRO[] =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";

static const char TOOLS_RULES[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
    "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>";

/* The system turn: tools (when a non-empty array) and messages[0] if system. */
static int render_header(struct render *r, const struct conv *c, const cJSON *tools,
                         struct mstr *out)
{
    struct mstr sys = {0};
    int has_system = c->role[0] == ROLE_SYSTEM, rc = CS_OK;
    if (has_system)
        rc = render_trimmed(r, obj_get(c->msg[0], "content"), 0, 1, &sys);
    if (rc == CS_OK && cJSON_IsArray(tools) && tools->child) {
        lit(r, out, TOOLS_INTRO);
        for (const cJSON *t = tools->child; t; t = t->next) {
            lit(r, out, "\n");
            json_value(r, out, t);
        }
        lit(r, out, TOOLS_RULES);
        if (sys.text.len) {
            lit(r, out, "\n\n");
            put_slice(r, out, &sys, 0, sys.text.len);
        }
        lit(r, out, "<|im_end|>\n");
    } else if (rc == CS_OK && has_system) {
        lit(r, out, "<|im_start|>system\n");
        put_slice(r, out, &sys, 0, sys.text.len);
        lit(r, out, "<|im_end|>\n");
    }
    mstr_free(&sys);
    return rc;
}

/* The last user message that is not only tool responses, scanning back. */
static int find_last_query(struct render *r, struct conv *c)
{
    struct mstr content = {0};
    int rc = CS_OK, found = 0;
    for (size_t k = c->n; k-- > 0 && !found;) {
        if (c->role[k] != ROLE_USER)
            continue;
        rc = render_trimmed(r, obj_get(c->msg[k], "content"), 0, 0, &content);
        if (rc)
            break;
        const char *s = buf_cstr(&content.text);
        size_t len = content.text.len;
        int wrapped = len >= 15 && strncmp(s, "<tool_response>", 15) == 0 && len >= 16 &&
                      memcmp(s + len - 16, "</tool_response>", 16) == 0;
        if (!wrapped) {
            c->last_query = k;
            found = 1;
        }
    }
    mstr_free(&content);
    if (rc == CS_OK && !found)
        rc = fail(r, "No user query found in messages.");
    return rc;
}

/* One argument value: tojson for mappings and sequences, `| string` else
 * (true/false/null as JSON literals: template.h, difference 1). */
static void render_arg_value(struct render *r, struct mstr *out, const cJSON *v)
{
    char num[40];
    if (cJSON_IsString(v)) {
        usr(r, out, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        pystr_number(v->valuedouble, 0, num);
        usr(r, out, num);
    } else {
        json_value(r, out, v);
    }
}

/* The arguments as an object: parsed from a JSON string when needed (*owned
 * then holds the tree to free); NULL result with CS_OK means none. */
static int tool_args(struct render *r, const cJSON *args, size_t k, const cJSON **obj,
                     cJSON **owned)
{
    *obj = NULL;
    *owned = NULL;
    if (!args || cJSON_IsNull(args))
        return CS_OK;
    if (cJSON_IsObject(args)) {
        *obj = args;
        return CS_OK;
    }
    if (cJSON_IsString(args)) {
        size_t a = 0, b = strlen(args->valuestring);
        pystr_strip(args->valuestring, &a, &b);
        if (a == b)
            return CS_OK;
        *owned = cJSON_ParseWithLength(args->valuestring, strlen(args->valuestring));
        if (cJSON_IsObject(*owned)) {
            *obj = *owned;
            return CS_OK;
        }
        cJSON_Delete(*owned);
        *owned = NULL;
    }
    return cs_error_set(r->err, CS_EINVAL,
                        "tool_calls[%zu].function.arguments must be a JSON object or a string "
                        "holding one",
                        k);
}

static int render_tool_call(struct render *r, struct mstr *out, const cJSON *tc, size_t k,
                            int content_nonblank)
{
    const cJSON *fn = obj_get(tc, "function");
    if (fn)
        tc = fn;
    const cJSON *name = cJSON_IsObject(tc) ? obj_get(tc, "name") : NULL;
    if (!cJSON_IsString(name))
        return cs_error_set(r->err, CS_EINVAL, "tool_calls[%zu].function.name must be a string",
                            k);
    if (k > 0)
        lit(r, out, "\n<tool_call>\n<function=");
    else
        lit(r, out, content_nonblank ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
    usr(r, out, name->valuestring);
    lit(r, out, ">\n");
    const cJSON *args;
    cJSON *owned;
    int rc = tool_args(r, obj_get(tc, "arguments"), k, &args, &owned);
    if (rc)
        return rc;
    for (const cJSON *a = args ? args->child : NULL; a; a = a->next) {
        lit(r, out, "<parameter=");
        usr(r, out, a->string ? a->string : "");
        lit(r, out, ">\n");
        render_arg_value(r, out, a);
        lit(r, out, "\n</parameter>\n");
    }
    cJSON_Delete(owned);
    lit(r, out, "</function>\n</tool_call>");
    return CS_OK;
}

/* Reasoning and answer of an assistant turn: an explicit reasoning field, or
 * the text before </think> in the content (the template's split logic). */
static void split_reasoning(struct render *r, const cJSON *msg, const struct mstr *content,
                            struct mstr *reasoning, size_t *ca, size_t *cb)
{
    struct mstr raw = {0};
    const cJSON *rc = obj_get(msg, "reasoning_content");
    if (!cJSON_IsString(rc))
        rc = obj_get(msg, "reasoning"); /* template.h, difference 4 */
    const char *s = buf_cstr(&content->text);
    size_t a = 0, b = 0;
    *ca = 0;
    *cb = content->text.len;
    if (cJSON_IsString(rc)) {
        usr(r, &raw, rc->valuestring);
        b = raw.text.len;
    } else if (pystr_find_first(s, 0, *cb, "</think>") != SIZE_MAX) {
        b = pystr_find_first(s, 0, *cb, "</think>");
        while (b > 0 && s[b - 1] == '\n') /* .rstrip('\n') */
            b--;
        size_t open = pystr_find_last(s, 0, b, "<think>"); /* .split('<think>')[-1] */
        a = open == SIZE_MAX ? 0 : open + 7;
        while (a < b && s[a] == '\n') /* .lstrip('\n') */
            a++;
        *ca = pystr_find_last(s, 0, *cb, "</think>") + 8;
        while (*ca < *cb && s[*ca] == '\n')
            (*ca)++;
    }
    const struct mstr *src = cJSON_IsString(rc) ? &raw : content;
    pystr_strip(buf_cstr(&src->text), &a, &b); /* reasoning_content|trim */
    put_slice(r, reasoning, src, a, b);
    mstr_free(&raw);
}

static int render_assistant(struct render *r, const cJSON *msg, const struct mstr *content,
                            int keep_reasoning, struct mstr *out)
{
    struct mstr reasoning = {0};
    size_t ca, cb;
    int rc = CS_OK;
    split_reasoning(r, msg, content, &reasoning, &ca, &cb);
    if (keep_reasoning) {
        lit(r, out, "<|im_start|>assistant\n<think>\n");
        put_slice(r, out, &reasoning, 0, reasoning.text.len);
        lit(r, out, "\n</think>\n\n");
    } else {
        lit(r, out, "<|im_start|>assistant\n");
    }
    put_slice(r, out, content, ca, cb);
    const cJSON *calls = obj_get(msg, "tool_calls");
    if (cJSON_IsString(calls) && calls->valuestring[0])
        rc = cs_error_set(r->err, CS_EINVAL, "tool_calls must be an array");
    if (cJSON_IsArray(calls) && calls->child) {
        size_t a = ca, b = cb, k = 0;
        pystr_strip(buf_cstr(&content->text), &a, &b);
        for (const cJSON *tc = calls->child; tc && rc == CS_OK; tc = tc->next, k++)
            rc = render_tool_call(r, out, tc, k, a < b);
    }
    lit(r, out, "<|im_end|>\n");
    mstr_free(&reasoning);
    return rc;
}

static void render_tool_result(struct render *r, const struct conv *c, size_t i,
                               const struct mstr *content, struct mstr *out)
{
    if (i > 0 && c->role[i - 1] != ROLE_TOOL)
        lit(r, out, "<|im_start|>user");
    lit(r, out, "\n<tool_response>\n");
    put_slice(r, out, content, 0, content->text.len);
    lit(r, out, "\n</tool_response>");
    if (i + 1 == c->n || c->role[i + 1] != ROLE_TOOL)
        lit(r, out, "<|im_end|>\n");
}

/* The template's main loop over all messages. */
static int render_messages(struct render *r, const struct conv *c, struct mstr *out)
{
    struct mstr content = {0};
    int rc = CS_OK;
    int preserve = r->opt->variant.preserve_thinking && r->opt->preserve_thinking;
    for (size_t i = 0; i < c->n && rc == CS_OK; i++) {
        rc = render_trimmed(r, obj_get(c->msg[i], "content"), 1, 0, &content);
        if (rc)
            break;
        switch (c->role[i]) {
        case ROLE_SYSTEM:
            if (i != 0)
                rc = fail(r, "System message must be at the beginning.");
            break;
        case ROLE_USER:
            lit(r, out, "<|im_start|>user\n");
            put_slice(r, out, &content, 0, content.text.len);
            lit(r, out, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT:
            rc = render_assistant(r, c->msg[i], &content, preserve || i > c->last_query, out);
            break;
        case ROLE_TOOL: render_tool_result(r, c, i, &content, out); break;
        case ROLE_OTHER: rc = fail(r, "Unexpected message role."); break;
        }
    }
    mstr_free(&content);
    return rc;
}

/* ---- public ---- */

/* The mask as sorted, disjoint, non-adjacent spans. */
static int mask_to_spans(const struct mstr *m, struct template_output *out)
{
    size_t n = 0, cap = 0;
    struct template_span *spans = NULL;
    const char *mask = m->mask.data;
    for (size_t i = 0; i < m->mask.len;) {
        if (!mask[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < m->mask.len && mask[j])
            j++;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct template_span *p = realloc(spans, cap * sizeof *spans);
            if (!p) {
                free(spans);
                return CS_ENOMEM;
            }
            spans = p;
        }
        spans[n].offset = i;
        spans[n].len = j - i;
        n++;
        i = j;
    }
    out->user_spans = spans;
    out->n_user_spans = n;
    return CS_OK;
}

static int conv_init(struct render *r, const cJSON *messages, struct conv *c)
{
    memset(c, 0, sizeof *c);
    if (messages && !cJSON_IsArray(messages) && !cJSON_IsNull(messages))
        return cs_error_set(r->err, CS_EINVAL, "messages must be an array");
    c->n = messages ? (size_t)cJSON_GetArraySize(messages) : 0;
    if (c->n == 0)
        return fail(r, "No messages provided.");
    c->msg = calloc(c->n, sizeof *c->msg);
    c->role = calloc(c->n, sizeof *c->role);
    if (!c->msg || !c->role)
        return CS_ENOMEM;
    size_t i = 0;
    for (const cJSON *m = messages->child; m && i < c->n; m = m->next, i++) {
        if (!cJSON_IsObject(m))
            return cs_error_set(r->err, CS_EINVAL, "messages[%zu] must be an object", i);
        c->msg[i] = m;
        c->role[i] = message_role(m);
    }
    c->last_query = c->n - 1;
    return CS_OK;
}

static void render_generation_prompt(struct render *r, struct mstr *out)
{
    const struct template_options *o = r->opt;
    int think = o->variant.thinking_opt_in ? o->enable_thinking == TEMPLATE_THINKING_ON
                                           : o->enable_thinking != TEMPLATE_THINKING_OFF;
    lit(r, out, "<|im_start|>assistant\n");
    lit(r, out, think ? "<think>\n" : "<think>\n\n</think>\n\n");
}

int template_render(const cJSON *messages, const cJSON *tools,
                    const struct template_options *opt, struct template_output *out,
                    struct cs_error *err)
{
    static const struct template_options defaults;
    struct render r = {.opt = opt ? opt : &defaults, .err = err};
    struct mstr text = {0};
    struct conv c;
    memset(out, 0, sizeof *out);
    int rc = conv_init(&r, messages, &c);
    if (rc == CS_OK && cJSON_IsString(tools) && tools->valuestring[0])
        rc = cs_error_set(err, CS_EINVAL, "tools must be an array");
    if (rc == CS_OK)
        rc = render_header(&r, &c, tools, &text);
    if (rc == CS_OK)
        rc = find_last_query(&r, &c);
    if (rc == CS_OK)
        rc = render_messages(&r, &c, &text);
    if (rc == CS_OK && r.opt->add_generation_prompt)
        render_generation_prompt(&r, &text);
    if (rc == CS_OK && r.oom)
        rc = cs_error_set(err, CS_ENOMEM, "out of memory rendering the chat template");
    if (rc == CS_OK)
        rc = mask_to_spans(&text, out);
    if (rc == CS_OK) {
        out->text = text.text;
        buf_init(&text.text);
        if (!out->text.data && buf_reserve(&out->text, 0))
            rc = CS_ENOMEM;
    }
    if (rc != CS_OK)
        template_output_free(out);
    mstr_free(&text);
    free(c.msg);
    free(c.role);
    return rc;
}

void template_output_free(struct template_output *out)
{
    buf_free(&out->text);
    free(out->user_spans);
    out->user_spans = NULL;
    out->n_user_spans = 0;
}

int template_variant_detect(const char *t, struct template_variant *v)
{
    memset(v, 0, sizeof *v);
    if (!t)
        return CS_ENOTFOUND;
    v->thinking_opt_in = strstr(t, "enable_thinking is defined and enable_thinking is true") != NULL;
    v->preserve_thinking =
        strstr(t, "preserve_thinking is defined and preserve_thinking is true") != NULL;
    int qwen35 = strstr(t, "render_content") && strstr(t, "last_query_index") &&
                 strstr(t, "<tool_call>") && strstr(t, "<|vision_start|>");
    return qwen35 ? CS_OK : CS_ENOTFOUND;
}

const char *template_variant_name(const struct template_variant *v)
{
    if (v->preserve_thinking)
        return v->thinking_opt_in ? "qwen3.6-small" : "qwen3.6";
    return v->thinking_opt_in ? "qwen3.5-small" : "qwen3.5";
}
