/* test_template.c - proves coordinator/template.c reports exactly the
 * client-supplied bytes as user spans (contents after trimming, text parts
 * but not vision placeholders, reasoning split out of content, tool names,
 * argument names and values, tool JSON, tool results), returns the
 * template's own messages for its error cases, detects the variants from
 * template text, follows the tri-state enable_thinking per variant, renders
 * numbers as Python does, and survives random and malformed input. These
 * checks run without ../shared; the Jinja2 comparison is test_template_jinja.py. */
#include "coordinator/template.h"
#include "tests/test_util.h"

#include <stdlib.h>
#include <string.h>

/* Render a JSON messages array (and optional tools) with default options
 * plus a generation prompt; returns the status. */
static int render(const char *messages_json, const char *tools_json,
                  const struct template_options *opt, struct template_output *out,
                  struct cs_error *err)
{
    struct template_options def = {.add_generation_prompt = 1};
    cJSON *m = cJSON_Parse(messages_json);
    cJSON *t = tools_json ? cJSON_Parse(tools_json) : NULL;
    int rc = template_render(m, t, opt ? opt : &def, out, err);
    cJSON_Delete(m);
    cJSON_Delete(t);
    return rc;
}

/* The spans as "span|span|..." for compact comparisons. */
static char *spans_joined(const struct template_output *out)
{
    struct buf b = {0};
    for (size_t i = 0; i < out->n_user_spans; i++) {
        if (i)
            buf_append_str(&b, "|");
        buf_append(&b, out->text.data + out->user_spans[i].offset, out->user_spans[i].len);
    }
    return buf_detach(&b, NULL);
}

static int spans_equal(const struct template_output *out, const char *expect)
{
    char *s = spans_joined(out);
    int eq = strcmp(s, expect) == 0;
    if (!eq)
        fprintf(stderr, "  spans: \"%s\"\n  want:  \"%s\"\n", s, expect);
    free(s);
    return eq;
}

static void test_template_user_text_is_one_trimmed_span(void)
{
    struct template_output out;
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"  Hi <|im_end|> there \\n\"}]", NULL,
                        NULL, &out, NULL),
                 CS_OK);
    CHECK(strcmp(buf_cstr(&out.text), "<|im_start|>user\nHi <|im_end|> there<|im_end|>\n"
                                      "<|im_start|>assistant\n<think>\n") == 0);
    CHECK(spans_equal(&out, "Hi <|im_end|> there"));
    template_output_free(&out);
}

static void test_template_vision_placeholders_are_not_user(void)
{
    struct template_options opt = {.add_generation_prompt = 0, .add_vision_id = 1};
    struct template_output out;
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                        "{\"type\":\"text\",\"text\":\"b\"},{\"type\":\"image_url\",\"image_url\":"
                        "{\"url\":\"x\"}},{\"type\":\"text\",\"text\":\"c\"}]}]",
                        NULL, &opt, &out, NULL),
                 CS_OK);
    CHECK(strcmp(buf_cstr(&out.text), "<|im_start|>user\nabPicture 1: "
                                      "<|vision_start|><|image_pad|><|vision_end|>c<|im_end|>\n") ==
          0);
    CHECK(spans_equal(&out, "ab|c")); /* adjacent user parts merge */
    template_output_free(&out);
}

static void test_template_reasoning_split_from_content(void)
{
    struct template_output out;
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                        "\"content\":\"<think>\\nR <|im_end|>\\n</think>\\n\\nC\"}]",
                        NULL, NULL, &out, NULL),
                 CS_OK);
    CHECK(strstr(buf_cstr(&out.text), "<|im_start|>assistant\n<think>\nR <|im_end|>\n</think>\n\nC"
                                      "<|im_end|>\n") != NULL);
    /* the server's own <think> tags are outside; the client's special token inside */
    CHECK(spans_equal(&out, "q|R <|im_end|>|C"));
    template_output_free(&out);
}

static void test_template_history_reasoning_dropped_unless_preserved(void)
{
    const char *msgs = "[{\"role\":\"user\",\"content\":\"q1\"},{\"role\":\"assistant\","
                       "\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
                       "{\"role\":\"user\",\"content\":\"q2\"}]";
    struct template_options opt = {.preserve_thinking = 1};
    struct template_output out;
    CHECK_EQ_INT(render(msgs, NULL, &opt, &out, NULL), CS_OK); /* Qwen3.5: ignored */
    CHECK(strstr(buf_cstr(&out.text), "r1") == NULL);
    template_output_free(&out);
    opt.variant.preserve_thinking = 1; /* Qwen3.6 */
    CHECK_EQ_INT(render(msgs, NULL, &opt, &out, NULL), CS_OK);
    CHECK(strstr(buf_cstr(&out.text), "<|im_start|>assistant\n<think>\nr1\n</think>\n\na1") !=
          NULL);
    CHECK(spans_equal(&out, "q1|r1|a1|q2"));
    template_output_free(&out);
}

static void test_template_tool_calls_and_results_spans(void)
{
    struct template_output out;
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"w\"},{\"role\":\"assistant\","
                        "\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":"
                        "{\"name\":\"get\",\"arguments\":\"{\\\"city\\\": \\\"Oslo\\\", "
                        "\\\"n\\\": 2, \\\"ok\\\": true, \\\"v\\\": [1.5, null]}\"}}]},"
                        "{\"role\":\"tool\",\"content\":\"cold\"},"
                        "{\"role\":\"tool\",\"content\":\"wet\"}]",
                        "[{\"name\":\"get\"}]", NULL, &out, NULL),
                 CS_OK);
    const char *t = buf_cstr(&out.text);
    CHECK(strstr(t, "<tools>\n{\"name\": \"get\"}\n</tools>") != NULL);
    CHECK(strstr(t, "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get>\n"
                    "<parameter=city>\nOslo\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
                    "<parameter=ok>\ntrue\n</parameter>\n<parameter=v>\n[1.5, null]\n"
                    "</parameter>\n</function>\n</tool_call><|im_end|>\n") != NULL);
    CHECK(strstr(t, "<|im_start|>user\n<tool_response>\ncold\n</tool_response>\n"
                    "<tool_response>\nwet\n</tool_response><|im_end|>\n") != NULL);
    CHECK(spans_equal(&out, "{\"name\": \"get\"}|w|get|city|Oslo|n|2|ok|true|v|[1.5, null]|cold|"
                            "wet"));
    template_output_free(&out);
}

static void expect_error(const char *msgs, const char *want)
{
    struct template_output out;
    struct cs_error err = {0};
    CHECK_EQ_INT(render(msgs, NULL, NULL, &out, &err), CS_EINVAL);
    CHECK_EQ_INT(err.code, CS_EINVAL);
    if (strcmp(err.msg, want) != 0) {
        fprintf(stderr, "  error \"%s\", want \"%s\"\n", err.msg, want);
        CHECK(0);
    }
    CHECK(out.text.len == 0 && out.n_user_spans == 0);
    template_output_free(&out);
}

static void test_template_errors_carry_template_messages(void)
{
    expect_error("[]", "No messages provided.");
    expect_error("[{\"role\":\"system\",\"content\":\"s\"}]", "No user query found in messages.");
    expect_error("[{\"role\":\"user\",\"content\":\"<tool_response>x</tool_response>\"}]",
                 "No user query found in messages.");
    expect_error("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"system\",\"content\":\"s\"}]",
                 "System message must be at the beginning.");
    expect_error("[{\"role\":\"system\",\"content\":[{\"type\":\"image\"}]},{\"role\":\"user\"}]",
                 "System message cannot contain images.");
    expect_error("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"robot\",\"content\":\"x\"}]",
                 "Unexpected message role.");
    expect_error("[{\"role\":\"user\",\"content\":3}]", "Unexpected content type.");
    expect_error("[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]",
                 "Unexpected item type in content.");
    expect_error("{\"role\":\"user\"}", "messages must be an array");
    expect_error("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"tool_calls\":"
                 "[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]",
                 "tool_calls[0].function.arguments must be a JSON object or a string holding one");
}

static void test_template_variant_detection(void)
{
    struct template_variant v;
    const char *base = "{%- macro render_content(x) %}<|vision_start|> ns.last_query_index "
                       "<tool_call> enable_thinking is defined and enable_thinking is false";
    CHECK_EQ_INT(template_variant_detect(base, &v), CS_OK);
    CHECK(!v.thinking_opt_in && !v.preserve_thinking);
    CHECK(strcmp(template_variant_name(&v), "qwen3.5") == 0);
    char small[512];
    snprintf(small, sizeof small, "%s enable_thinking is defined and enable_thinking is true",
             base);
    CHECK_EQ_INT(template_variant_detect(small, &v), CS_OK);
    CHECK(v.thinking_opt_in && !v.preserve_thinking);
    char q36[512];
    snprintf(q36, sizeof q36, "%s (preserve_thinking is defined and preserve_thinking is true)",
             base);
    CHECK_EQ_INT(template_variant_detect(q36, &v), CS_OK);
    CHECK(!v.thinking_opt_in && v.preserve_thinking);
    CHECK(strcmp(template_variant_name(&v), "qwen3.6") == 0);
    CHECK_EQ_INT(template_variant_detect("{{ messages }}", &v), CS_ENOTFOUND);
    CHECK(!v.thinking_opt_in && !v.preserve_thinking);
    CHECK_EQ_INT(template_variant_detect(NULL, &v), CS_ENOTFOUND);
}

/* The generation prompt's think block for one variant and setting. */
static int opens_thinking(int opt_in, enum template_thinking t)
{
    struct template_options opt = {.add_generation_prompt = 1, .enable_thinking = t};
    opt.variant.thinking_opt_in = opt_in;
    struct template_output out;
    if (render("[{\"role\":\"user\",\"content\":\"q\"}]", NULL, &opt, &out, NULL))
        return -1;
    const char *t_end = buf_cstr(&out.text) + out.text.len;
    int on = out.text.len > 8 && strcmp(t_end - 8, "<think>\n") == 0;
    int off = out.text.len > 19 && strcmp(t_end - 19, "<think>\n\n</think>\n\n") == 0;
    template_output_free(&out);
    return on ? 1 : off ? 0 : -1;
}

static void test_template_thinking_tristate_per_variant(void)
{
    CHECK_EQ_INT(opens_thinking(0, TEMPLATE_THINKING_DEFAULT), 1);
    CHECK_EQ_INT(opens_thinking(0, TEMPLATE_THINKING_ON), 1);
    CHECK_EQ_INT(opens_thinking(0, TEMPLATE_THINKING_OFF), 0);
    CHECK_EQ_INT(opens_thinking(1, TEMPLATE_THINKING_DEFAULT), 0);
    CHECK_EQ_INT(opens_thinking(1, TEMPLATE_THINKING_ON), 1);
    CHECK_EQ_INT(opens_thinking(1, TEMPLATE_THINKING_OFF), 0);
}

static void test_template_numbers_render_like_python(void)
{
    struct template_output out;
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"q\"}]",
                        "[[1, 1.0, 1.5, 1e20, 1e-5, 0.0001, -0.25, 1e16, 123456.789, 0.1]]", NULL,
                        &out, NULL),
                 CS_OK);
    CHECK(strstr(buf_cstr(&out.text),
                 "[1, 1, 1.5, 1e+20, 1e-05, 0.0001, -0.25, 1e+16, 123456.789, 0.1]") != NULL);
    template_output_free(&out);
}

static void test_template_unicode_whitespace_and_bad_utf8(void)
{
    struct template_output out;
    /* U+3000 and U+00A0 are whitespace to str.strip(); U+200B is not */
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"\\u3000\\u00a0x\\u200b\"}]", NULL,
                        NULL, &out, NULL),
                 CS_OK);
    CHECK(spans_equal(&out, "x\xe2\x80\x8b"));
    template_output_free(&out);
    /* malformed UTF-8 (a lone continuation byte, a truncated sequence) is kept */
    cJSON *m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"\"}]");
    cJSON *content = cJSON_GetObjectItem(cJSON_GetArrayItem(m, 0), "content");
    cJSON_SetValuestring(content, "\x80 a \xe3\x80");
    CHECK_EQ_INT(template_render(m, NULL, NULL, &out, NULL), CS_OK);
    CHECK(spans_equal(&out, "\x80 a \xe3\x80"));
    template_output_free(&out);
    cJSON_Delete(m);
}

/* Random conversations from a small vocabulary of pieces, good and bad:
 * every result is CS_OK with well-formed spans or CS_EINVAL, never a crash. */
static void test_template_random_conversations_never_crash(void)
{
    static const char *pieces[] = {
        "{\"role\":\"user\",\"content\":\"u <think>\"}",
        "{\"role\":\"user\",\"content\":\"<tool_response>x</tool_response>\"}",
        "{\"role\":\"system\",\"content\":\" s \"}",
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"d\"}]}",
        "{\"role\":\"assistant\",\"content\":\"a</think>b</think>\"}",
        "{\"role\":\"assistant\",\"reasoning\":\"r\",\"tool_calls\":[{\"name\":\"f\","
        "\"arguments\":{\"x\":[true]}},{\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]}",
        "{\"role\":\"assistant\",\"tool_calls\":[{\"function\":null}]}",
        "{\"role\":\"tool\",\"content\":\"t\"}",
        "{\"role\":\"tool\",\"content\":[{\"type\":\"video\"},\"text\"]}",
        "{\"role\":\"user\",\"content\":[{\"image_url\":{}},{\"type\":\"text\",\"text\":\"\"}]}",
        "{\"role\":7}",
        "{\"role\":\"user\",\"content\":{}}",
    };
    const int n_pieces = (int)(sizeof pieces / sizeof pieces[0]);
    unsigned seed = 12345;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        struct buf json = {0};
        buf_append_str(&json, "[");
        seed = seed * 1103515245u + 12345u;
        int len = (int)((seed >> 16) % 7);
        for (int k = 0; k < len; k++) {
            seed = seed * 1103515245u + 12345u;
            buf_printf(&json, "%s%s", k ? "," : "", pieces[(seed >> 16) % (unsigned)n_pieces]);
        }
        buf_append_str(&json, "]");
        struct template_options opt = {.add_generation_prompt = (int)(seed & 1),
                                       .preserve_thinking = 1, .add_vision_id = 1};
        opt.variant.preserve_thinking = (int)((seed >> 1) & 1);
        struct template_output out;
        int rc = render(buf_cstr(&json), (seed & 4) ? "[{\"a\":1}]" : NULL, &opt, &out, NULL);
        CHECK(rc == CS_OK || rc == CS_EINVAL);
        if (rc == CS_OK) {
            ok++;
            size_t end = 0;
            for (size_t i = 0; i < out.n_user_spans; i++) {
                CHECK(out.user_spans[i].len > 0);
                CHECK(i == 0 || out.user_spans[i].offset > end);
                end = out.user_spans[i].offset + out.user_spans[i].len;
                CHECK(end <= out.text.len);
            }
        } else {
            bad++;
        }
        template_output_free(&out);
        buf_free(&json);
    }
    CHECK(ok > 100 && bad > 100); /* both paths exercised */
}

int main(void)
{
    RUN(test_template_user_text_is_one_trimmed_span);
    RUN(test_template_vision_placeholders_are_not_user);
    RUN(test_template_reasoning_split_from_content);
    RUN(test_template_history_reasoning_dropped_unless_preserved);
    RUN(test_template_tool_calls_and_results_spans);
    RUN(test_template_errors_carry_template_messages);
    RUN(test_template_variant_detection);
    RUN(test_template_thinking_tristate_per_variant);
    RUN(test_template_numbers_render_like_python);
    RUN(test_template_unicode_whitespace_and_bad_utf8);
    RUN(test_template_random_conversations_never_crash);
    return test_report();
}
