/* template_cli.c - a test driver for coordinator/template.c: reads one JSON
 * request object, or an array of them, on stdin and prints the result(s) as
 * JSON on stdout, for the Jinja2 comparison test (test_template_jinja.py).
 *
 * Request: {"messages": [...], "tools": [...], "add_generation_prompt": bool,
 *           "enable_thinking": bool (absent: default), "preserve_thinking": bool,
 *           "add_vision_id": bool, "chat_template": "template text used only to
 *           detect the variant (absent: plain Qwen3.5)"}
 * Result:  {"text": "...", "spans": [[offset, len], ...], "variant": "qwen3.5",
 *           "recognised": bool}  or  {"error": "message", "code": "CS_EINVAL"}
 * Exit status 0 unless stdin is not JSON (1). */
#include "coordinator/template.h"

#include <stdio.h>
#include <stdlib.h>

static int flag(const cJSON *req, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, key));
}

static cJSON *render_one(const cJSON *req)
{
    struct template_options opt = {0};
    struct template_output out;
    struct cs_error err = {0};
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(req, "enable_thinking");
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(req, "chat_template");
    int recognised = template_variant_detect(cJSON_IsString(tmpl) ? tmpl->valuestring : NULL,
                                             &opt.variant) == CS_OK;
    opt.add_generation_prompt = flag(req, "add_generation_prompt");
    opt.preserve_thinking = flag(req, "preserve_thinking");
    opt.add_vision_id = flag(req, "add_vision_id");
    if (cJSON_IsBool(think))
        opt.enable_thinking = cJSON_IsTrue(think) ? TEMPLATE_THINKING_ON : TEMPLATE_THINKING_OFF;
    int rc = template_render(cJSON_GetObjectItemCaseSensitive(req, "messages"),
                             cJSON_GetObjectItemCaseSensitive(req, "tools"), &opt, &out, &err);
    cJSON *res = cJSON_CreateObject();
    if (rc != CS_OK) {
        cJSON_AddStringToObject(res, "error", err.msg);
        cJSON_AddStringToObject(res, "code", cs_status_name(rc));
    } else {
        cJSON_AddStringToObject(res, "text", buf_cstr(&out.text));
        cJSON *spans = cJSON_AddArrayToObject(res, "spans");
        for (size_t i = 0; i < out.n_user_spans; i++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)out.user_spans[i].offset));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)out.user_spans[i].len));
            cJSON_AddItemToArray(spans, pair);
        }
    }
    cJSON_AddStringToObject(res, "variant", template_variant_name(&opt.variant));
    cJSON_AddBoolToObject(res, "recognised", recognised);
    template_output_free(&out);
    return res;
}

int main(void)
{
    struct buf in = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (buf_append(&in, chunk, n))
            return 1;
    cJSON *req = cJSON_ParseWithLength(buf_cstr(&in), in.len);
    buf_free(&in);
    if (!req) {
        fprintf(stderr, "template_cli: stdin is not JSON\n");
        return 1;
    }
    cJSON *res;
    if (cJSON_IsArray(req)) {
        res = cJSON_CreateArray();
        for (const cJSON *r = req->child; r; r = r->next)
            cJSON_AddItemToArray(res, render_one(r));
    } else {
        res = render_one(req);
    }
    char *s = cJSON_PrintUnformatted(res);
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
    cJSON_Delete(res);
    cJSON_Delete(req);
    return 0;
}
