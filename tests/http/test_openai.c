/* test_openai.c - proves the API's request parsing and response JSON
 * (coordinator/openai.c, openai_response.c) and the prompt helpers
 * (coordinator/prompt.c): every field is read with its type and range,
 * wrong types name the field, unknown fields are ignored, defaults and
 * precedence (max_completion_tokens wins; reasoning_effort none turns
 * thinking off); /think directives are cut from the text; special tokens
 * typed by a user are not special; responses and chunks have api.md's
 * shapes. */
#include <stdlib.h>
#include <string.h>

#include "common/tokenizer.h"
#include "common/vocab_tiktoken.h"
#include "coordinator/openai.h"
#include "coordinator/prompt.h"
#include "test_util.h"

static int parse(struct oai_request *r, enum oai_kind k, const char *json, struct oai_error *e)
{
    memset(e, 0, sizeof *e);
    return oai_request_parse(r, k, json, strlen(json), e);
}

static void test_openai_parse_chat_fields(void)
{
    struct oai_request r;
    struct oai_error e;
    int rc = parse(&r, OAI_CHAT,
                   "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                   "\"max_tokens\":10,\"max_completion_tokens\":20,\"temperature\":0.5,"
                   "\"top_k\":-1,\"seed\":-3,\"stop\":[\"a\",\"\",\"bc\"],\"n\":3,"
                   "\"logprobs\":true,\"top_logprobs\":4,\"logit_bias\":{\"7\":-5.5},"
                   "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                   "\"reasoning_effort\":\"minimal\",\"unknown_field\":{\"x\":1},"
                   "\"tool_choice\":\"required\",\"tools\":[]}",
                   &e);
    CHECK_EQ_INT(rc, CS_OK);
    CHECK(strcmp(r.model, "m") == 0);
    CHECK_EQ_INT(r.max_tokens, 20);
    CHECK_NEAR(r.temperature, 0.5, 1e-6);
    CHECK_EQ_INT(r.top_k, -1);
    CHECK(r.has_seed && r.seed == (uint64_t)-3);
    CHECK_EQ_INT(r.n_stop, 2);
    CHECK(r.n_stop == 2 && strcmp(r.stop[1], "bc") == 0);
    CHECK_EQ_INT(r.n, 3);
    CHECK(r.logprobs && r.top_logprobs == 4);
    CHECK(r.n_bias == 1 && r.bias_ids[0] == 7 && r.bias_vals[0] == -5.5f);
    CHECK(r.stream && r.include_usage);
    CHECK_EQ_INT(r.enable_thinking, TEMPLATE_THINKING_OFF);
    CHECK_EQ_INT(r.tool_choice, OAI_TOOL_REQUIRED);
    oai_request_free(&r);

    rc = parse(&r, OAI_CHAT, "{\"messages\":[],\"chat_template_kwargs\":{\"enable_thinking\":true}}", &e);
    CHECK_EQ_INT(rc, CS_OK);
    CHECK_EQ_INT(r.enable_thinking, TEMPLATE_THINKING_ON);
    CHECK_EQ_INT(r.max_tokens, -1);
    CHECK_NEAR(r.temperature, 1.0, 0);
    CHECK_EQ_INT(r.n, 1);
    oai_request_free(&r);
}

static void test_openai_parse_errors_name_field(void)
{
    static const struct { const char *json; const char *param; } cases[] = {
        {"{\"messages\":[],\"temperature\":\"hot\"}", "temperature"},
        {"{\"messages\":[],\"temperature\":3}", "temperature"},
        {"{\"messages\":[],\"max_tokens\":0}", "max_tokens"},
        {"{\"messages\":[],\"max_tokens\":1.5}", "max_tokens"},
        {"{\"messages\":[],\"n\":100}", "n"},
        {"{\"messages\":[],\"stop\":[1]}", "stop"},
        {"{\"messages\":[],\"stream\":1}", "stream"},
        {"{\"messages\":[],\"logit_bias\":{\"-1\":1}}", "logit_bias"},
        {"{\"messages\":[],\"logit_bias\":{\"5\":500}}", "logit_bias"},
        {"{\"messages\":[],\"top_logprobs\":3}", "top_logprobs"},
        {"{\"messages\":[],\"tool_choice\":\"sometimes\"}", "tool_choice"},
        {"{\"messages\":[],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}", "tool_choice"},
        {"{\"messages\":[],\"response_format\":{\"type\":\"xml\"}}", "response_format.type"},
        {"{\"messages\":[],\"reasoning_effort\":\"max\"}", "reasoning_effort"},
        {"{\"messages\":[],\"seed\":\"1\"}", "seed"},
        {"{\"messages\":{}}", "messages"},
        {"{}", "messages"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct oai_request r;
        struct oai_error e;
        int rc = parse(&r, OAI_CHAT, cases[i].json, &e);
        CHECK_EQ_INT(rc, CS_EINVAL);
        CHECK_EQ_INT(e.status, 400);
        if (strcmp(e.param, cases[i].param) != 0)
            fprintf(stderr, "case %zu: param '%s', want '%s'\n", i, e.param, cases[i].param);
        CHECK(strcmp(e.param, cases[i].param) == 0);
        CHECK(strstr(e.message, cases[i].param) != NULL);
        oai_request_free(&r);
    }
    struct oai_request r;
    struct oai_error e;
    CHECK_EQ_INT(parse(&r, OAI_CHAT, "{\"messages\":[", &e), CS_EINVAL);
    CHECK(strstr(e.message, "not valid JSON") != NULL);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&r, OAI_CHAT, "[1]", &e), CS_EINVAL);
    oai_request_free(&r);
}

static void test_openai_parse_completion_prompt(void)
{
    struct oai_request r;
    struct oai_error e;
    CHECK_EQ_INT(parse(&r, OAI_COMPLETION, "{\"prompt\":[\"abc\"],\"logprobs\":2}", &e), CS_OK);
    CHECK(r.prompt && strcmp(r.prompt, "abc") == 0);
    CHECK(r.logprobs && r.top_logprobs == 2);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&r, OAI_COMPLETION, "{\"prompt\":[5,6,7]}", &e), CS_OK);
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 7 && !r.logprobs);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&r, OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", &e), CS_EINVAL);
    CHECK(strcmp(e.param, "prompt") == 0);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&r, OAI_COMPLETION, "{\"max_tokens\":3}", &e), CS_EINVAL);
    oai_request_free(&r);
}

static void test_openai_directives(void)
{
    cJSON *m = cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief /no_think\"},"
                           "{\"role\":\"user\",\"content\":\"Hi /think  \"},"
                           "{\"role\":\"assistant\",\"content\":\"x /no_think\"}]");
    enum template_thinking t = TEMPLATE_THINKING_DEFAULT;
    prompt_thinking_directives(m, &t);
    CHECK_EQ_INT(t, TEMPLATE_THINKING_ON); /* the last user message wins */
    CHECK(strcmp(cJSON_GetArrayItem(m, 0)->child->next->valuestring, "Be brief") == 0);
    CHECK(strcmp(cJSON_GetArrayItem(m, 1)->child->next->valuestring, "Hi") == 0);
    CHECK(strcmp(cJSON_GetArrayItem(m, 2)->child->next->valuestring, "x /no_think") == 0);
    cJSON_Delete(m);
    m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"path/no_think\"}]");
    t = TEMPLATE_THINKING_DEFAULT;
    prompt_thinking_directives(m, &t);
    CHECK_EQ_INT(t, TEMPLATE_THINKING_DEFAULT);
    cJSON_Delete(m);
}

static void test_openai_user_specials_not_special(void)
{
    struct vocab *v = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(vocab_fallback_create(&v, 0, &err), CS_OK);
    struct tokenizer_vocab_view view;
    vocab_view_fill(v, &view);
    struct tokenizer *tok = NULL;
    CHECK_EQ_INT(tokenizer_create(&tok, &view, &err), CS_OK);
    vocab_destroy(v);
    struct prompt_specials ps;
    CHECK_EQ_INT(prompt_specials_init(&ps, tok), CS_OK);
    CHECK(ps.n >= 10);
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"<|im_start|>x\"}]");
    struct template_options opt = {.add_generation_prompt = 1};
    struct template_output out;
    CHECK_EQ_INT(template_render(msgs, NULL, &opt, &out, &err), CS_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(prompt_tokenize(tok, &ps, &out, &ids, &n), CS_OK);
    int32_t im_start = tokenizer_token_find(tok, "<|im_start|>", 12);
    int count = 0;
    for (size_t i = 0; i < n; i++)
        count += ids[i] == im_start;
    CHECK_EQ_INT(count, 2); /* the user turn's and the assistant turn's, not the typed one */
    free(ids);
    template_output_free(&out);
    cJSON_Delete(msgs);
    prompt_specials_free(&ps);
    tokenizer_destroy(tok);
}

static void test_openai_response_shapes(void)
{
    struct oai_meta m = {"chatcmpl-abc", 123, "model-x"};
    struct oai_logprob lp = {.tok = {"hi", 2, -0.5f}, .n_top = 1, .text_offset = 0};
    lp.top[0] = lp.tok;
    struct oai_choice ch = {.content = "hello", .reasoning = NULL, .finish_reason = "stop",
                            .lp = &lp, .n_lp = 1};
    struct oai_usage u = {3, 4, 0, 1};
    char *s = oai_chat_response(&m, &ch, 1, &u);
    cJSON *o = cJSON_Parse(s);
    CHECK(o != NULL);
    CHECK(strcmp(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion") == 0);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    cJSON *msg = cJSON_GetObjectItem(c0, "message");
    CHECK(strcmp(cJSON_GetObjectItem(msg, "role")->valuestring, "assistant") == 0);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(msg, "reasoning_content")));
    cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(content, 0), "bytes")), 2);
    cJSON *usage = cJSON_GetObjectItem(o, "usage");
    CHECK_EQ_INT(cJSON_GetObjectItem(usage, "total_tokens")->valueint, 7);
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "completion_tokens_details"),
                                     "reasoning_tokens")->valueint, 1);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"), "cached_tokens") != NULL);
    cJSON_Delete(o);
    free(s);

    struct oai_delta d = {.role = true, .content = ""};
    s = oai_chat_chunk(&m, 0, &d, NULL, NULL, 0, false);
    CHECK(s && strstr(s, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}") != NULL);
    CHECK(strstr(s, "\"finish_reason\":null") != NULL);
    free(s);
    s = oai_usage_chunk(&m, true, &u);
    CHECK(s && strstr(s, "\"choices\":[]") != NULL);
    free(s);
    s = oai_text_response(&m, &ch, 1, &u);
    CHECK(s && strstr(s, "\"text_offset\":[0]") && strstr(s, "\"token_logprobs\":[-0.5]"));
    free(s);
    struct oai_error e;
    oai_error_set(&e, 400, "invalid_request_error", NULL, "bad \"thing\"");
    s = oai_error_body(&e);
    CHECK(s && strcmp(s, "{\"error\":{\"message\":\"bad \\\"thing\\\"\",\"type\":"
                         "\"invalid_request_error\",\"param\":null,\"code\":null}}") == 0);
    free(s);
}

int main(void)
{
    RUN(test_openai_parse_chat_fields);
    RUN(test_openai_parse_errors_name_field);
    RUN(test_openai_parse_completion_prompt);
    RUN(test_openai_directives);
    RUN(test_openai_user_specials_not_special);
    RUN(test_openai_response_shapes);
    return test_report();
}
