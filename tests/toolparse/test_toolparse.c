/* test_toolparse.c - proves coordinator/toolparse.c splits generations into
 * reasoning, content and tool calls as api.md says, with schema-driven
 * argument conversion (every parameter type, anyOf, type arrays, fallbacks),
 * parallel calls, code containing </parameter>, calls inside an unclosed
 * think block, literal <tool_call> in prose, cut-off reasoning, UTF-8,
 * thinking off, no tools and malformed calls; and, for EVERY case, that the
 * text cut at every byte into two chunks, fed one byte at a time and one
 * character at a time gives events that reassemble exactly to the
 * non-streamed message (and the same message). Also: when events are sent
 * (nothing stalls on a literal tag; a call starts when <function=NAME>
 * completes), call-id format and uniqueness, and misuse statuses. */
#include "coordinator/jsonschema_convert.h"
#include "coordinator/toolparse.h"
#include "common/buf.h"
#include "common/status.h"
#include "tests/test_util.h"
#include "tests/toolparse/toolparse_check.h"

#include <stdlib.h>
#include <string.h>

static const char *TOOLS_JSON =
    "[{\"type\":\"function\",\"function\":{\"name\":\"all_types\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"
    "\"n\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},\"z\":{\"type\":\"null\"},"
    "\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},"
    "\"u\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]},"
    "\"t\":{\"type\":[\"integer\",\"null\"]},\"e\":{\"enum\":[1,2,\"x\"]},"
    "\"p\":{\"properties\":{\"q\":{\"type\":\"string\"}}}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":"
    "\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"content\":{\"type\":"
    "\"string\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{}}}}]";

static cJSON *tools;

struct expect {
    const char *reasoning, *content;
    size_t n_calls;
    const char *names[4], *args[4];
    bool cut;
};

static int g_case_failures;

static void report(const char *name, const char *how, size_t at, const char *what)
{
    test_failures++;
    g_case_failures++;
    fprintf(stderr, "case %s: %s at %zu: %s\n", name, how, at, what);
}

/* Compare one chunked run with the whole-text run. */
static bool check_run(const char *name, const char *how, size_t at, const struct tpc_run *r,
                      const struct tpc_message *whole)
{
    const char *d = NULL;
    test_checks++;
    if (r->status)
        d = cs_strerror(r->status);
    else if (r->protocol_error[0])
        d = r->protocol_error;
    else if (!(d = tpc_message_diff(&r->streamed, &r->final))) /* same run */
        d = tpc_message_diff(&r->final, whole);                 /* vs one feed */
    for (size_t i = 0; !d && i < r->final.n_calls; i++) {
        if (strcmp(r->final.ids[i], r->streamed.ids[i]) != 0)
            d = "streamed id differs from the final id";
    }
    if (d)
        report(name, how, at, d);
    return d == NULL;
}

static bool check_expected(const char *name, const struct tpc_message *m, const struct expect *e)
{
    struct tpc_message want = {.reasoning = (char *)e->reasoning,
                               .content = (char *)e->content,
                               .n_calls = e->n_calls,
                               .cut_in_reasoning = e->cut,
                               .has_tool_calls = e->n_calls > 0};
    for (size_t i = 0; i < e->n_calls; i++) {
        want.names[i] = (char *)e->names[i];
        want.args[i] = (char *)e->args[i];
    }
    const char *d = tpc_message_diff(m, &want);
    test_checks++;
    if (d) {
        report(name, "whole text", 0, d);
        fprintf(stderr, "  reasoning=[%s]\n  content=[%s]\n", m->reasoning ? m->reasoning : "(null)",
                m->content ? m->content : "(null)");
        for (size_t i = 0; i < m->n_calls; i++)
            fprintf(stderr, "  call %zu %s %s\n", i, m->names[i], m->args[i]);
    }
    return d == NULL;
}

/* Whole text, every two-chunk split, byte by byte, character by character. */
static void check_case(const char *name, bool thinking, bool with_tools, const char *text,
                       const struct expect *e)
{
    struct toolparse_options opt = {.thinking = thinking, .tools = with_tools ? tools : NULL};
    size_t len = strlen(text);
    bool utf8 = tpc_utf8_valid(text, len);
    struct tpc_run whole, r;
    g_case_failures = 0;
    tpc_run_chunks(&whole, &opt, text, len, NULL, 0, utf8);
    if (!check_run(name, "whole", 0, &whole, &whole.final) ||
        !check_expected(name, &whole.final, e)) {
        tpc_run_free(&whole);
        return;
    }
    for (size_t k = 0; k <= len && g_case_failures == 0; k++) {
        tpc_run_chunks(&r, &opt, text, len, &k, 1, utf8);
        check_run(name, "two chunks split", k, &r, &whole.final);
        tpc_run_free(&r);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts), n_bytes = 0, n_chars = 0;
    for (size_t k = 1; k < len; k++)
        cuts[n_bytes++] = k;
    tpc_run_chunks(&r, &opt, text, len, cuts, n_bytes, utf8);
    check_run(name, "byte at a time", 0, &r, &whole.final);
    tpc_run_free(&r);
    for (size_t k = 1; k < len; k++) {
        if (((unsigned char)text[k] & 0xC0) != 0x80)
            cuts[n_chars++] = k;
    }
    tpc_run_chunks(&r, &opt, text, len, cuts, n_chars, utf8);
    check_run(name, "character at a time", 0, &r, &whole.final);
    tpc_run_free(&r);
    free(cuts);
    tpc_run_free(&whole);
}

#define CALL_OPEN(fn) "<tool_call>\n<function=" fn ">\n"
#define PARAM(k, v) "<parameter=" k ">\n" v "\n</parameter>\n"
#define CALL_CLOSE "</function>\n</tool_call>"

static void test_toolparse_every_parameter_type(void)
{
    const char *text =
        "The user wants all types.\n</think>\n\nCalling now.\n\n" CALL_OPEN("all_types")
        PARAM("s", "  hello \"world\"") PARAM("i", "0042") PARAM("n", "-3.5e2")
        PARAM("b", "True") PARAM("z", "null") PARAM("o", "{\"k\":[1,2],\"m\":{\"x\":null}}")
        PARAM("a", "[1,\"two\", false]") PARAM("u", "17") PARAM("u", "seventeen")
        PARAM("t", "null") PARAM("e", "2") PARAM("p", "{\"q\": \"r\"}") PARAM("extra", "5")
        CALL_CLOSE;
    struct expect e = {"The user wants all types.", "Calling now.", 1, {"all_types"},
                       {"{\"s\": \"  hello \\\"world\\\"\", \"i\": 42, \"n\": -3.5e2, \"b\": true, "
                        "\"z\": null, \"o\": {\"k\": [1, 2], \"m\": {\"x\": null}}, "
                        "\"a\": [1, \"two\", false], \"u\": 17, \"u\": \"seventeen\", "
                        "\"t\": null, \"e\": 2, \"p\": {\"q\": \"r\"}, \"extra\": \"5\"}"}, false};
    check_case("every type", true, true, text, &e);
}

static void test_toolparse_conversion_fallbacks(void)
{
    const char *text = CALL_OPEN("all_types") "<parameter=s>\n\nx\n\n</parameter>\n"
        PARAM("i", "three") PARAM("i", "1.5") PARAM("i", "null") PARAM("n", "NaN")
        PARAM("b", "yes") PARAM("z", "nil") PARAM("o", "{bad") PARAM("a", "{}")
        PARAM("t", "7") PARAM("e", "x") PARAM("o", "{\"k\": \"\\ud800\"}") CALL_CLOSE;
    struct expect e = {NULL, NULL, 1, {"all_types"},
                       {"{\"s\": \"\\nx\\n\", \"i\": \"three\", \"i\": \"1.5\", \"i\": null, "
                        "\"n\": \"NaN\", \"b\": \"yes\", \"z\": \"nil\", \"o\": \"{bad\", "
                        "\"a\": \"{}\", \"t\": 7, \"e\": \"x\", "
                        "\"o\": \"{\\\"k\\\": \\\"\\\\ud800\\\"}\"}"}, false};
    check_case("fallbacks", false, true, text, &e);
}

static void test_toolparse_parallel_calls(void)
{
    const char *text = CALL_OPEN("get_weather") PARAM("city", "Paris") PARAM("days", "3")
        CALL_CLOSE "\n" CALL_OPEN("get_weather") PARAM("city", "London") CALL_CLOSE
        "\n" CALL_OPEN("ping") CALL_CLOSE;
    struct expect e = {NULL, NULL, 3, {"get_weather", "get_weather", "ping"},
                       {"{\"city\": \"Paris\", \"days\": 3}", "{\"city\": \"London\"}", "{}"}, false};
    check_case("parallel", false, true, text, &e);
}

static void test_toolparse_code_with_closing_tags(void)
{
    const char *text = CALL_OPEN("write_file") PARAM("path", "x.py")
        "<parameter=content>\ns = \"</parameter>\"\nprint(s)  # </parameter> here\n"
        "</parameter>\nend = 1</function>x</tool_call>y\n</parameter>\n" CALL_CLOSE;
    struct expect e = {NULL, NULL, 1, {"write_file"},
                       {"{\"path\": \"x.py\", \"content\": \"s = \\\"</parameter>\\\"\\nprint(s)"
                        "  # </parameter> here\\n</parameter>\\nend = 1</function>x</tool_call>y\"}"}, false};
    check_case("code with </parameter>", false, true, text, &e);
}

static void test_toolparse_call_inside_unclosed_think(void)
{
    const char *text = "I need the weather.\n\n" CALL_OPEN("get_weather") PARAM("city", "Paris")
        CALL_CLOSE;
    struct expect e = {"I need the weather.", NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}, false};
    check_case("call in think", true, true, text, &e);
}

static void test_toolparse_literal_tool_call_in_prose(void)
{
    const char *text = "Wrap calls in <tool_call> tags, e.g. <tool_call>foo</tool_call>. "
                       "Or <tool_call>\n<function=bad name>. Done <tool_call>";
    struct expect e = {NULL, text, 0, {0}, {0}, false};
    check_case("literal in content", false, true, text, &e);
    struct expect e2 = {"Maybe use <tool_call> here.", "OK", 0, {0}, {0}, false};
    check_case("literal in reasoning", true, true, "Maybe use <tool_call> here.\n</think>\n\nOK", &e2);
}

static void test_toolparse_cut_off_reasoning(void)
{
    struct expect e = {"Let me think about 2+2.\nIt is", NULL, 0, {0}, {0}, true};
    check_case("cut reasoning", true, true, "Let me think about 2+2.\nIt is\n", &e);
    check_case("cut reasoning no tools", true, false, "Let me think about 2+2.\nIt is", &e);
    struct expect empty = {NULL, NULL, 0, {0}, {0}, true};
    check_case("cut before anything", true, true, "\n", &empty);
    check_case("cut in </think>", true, true, "Let me think about 2+2.\nIt is\n</thi", &(struct expect){
        "Let me think about 2+2.\nIt is\n</thi", NULL, 0, {0}, {0}, true});
}

static void test_toolparse_utf8(void)
{
    struct expect e = {"Ünïcödé 思考 🎉", "答案是 42 ✓ — done", 0, {0}, {0}, false};
    check_case("utf8 text", true, true, "Ünïcödé 思考 🎉\n</think>\n\n答案是 42 ✓ — done", &e);
    struct expect c = {"é", "ß", 1, {"get_weather"}, {"{\"city\": \"Zürich 東京 🎉\"}"}, false};
    check_case("utf8 call", true, true,
               "é</think>ß" CALL_OPEN("get_weather") PARAM("city", "Zürich 東京 🎉") CALL_CLOSE, &c);
}

static void test_toolparse_thinking_off(void)
{
    struct expect e = {NULL, "Hello there.\n\nBye.", 0, {0}, {0}, false};
    check_case("thinking off", false, true, "Hello there.\n\nBye.\n", &e);
    struct expect s = {NULL, "A BC", 0, {0}, {0}, false};
    check_case("stray think tags", false, true, "A </think> B<think>C", &s);
    struct expect o = {"r1", "c1", 0, {0}, {0}, false};
    check_case("model opens think", false, true, "\n<think>\nr1\n</think>\n\nc1", &o);
    struct expect l = {"Plan.", "Answer.", 0, {0}, {0}, false};
    check_case("leading think stripped", true, true, "<think>\nPlan.\n</think>\n\nAnswer.", &l);
    struct expect t = {"a <think> b", "c", 0, {0}, {0}, false};
    check_case("inner think kept in reasoning", true, false, "a <think> b</think>c<think>", &t);
}

static void test_toolparse_no_tools(void)
{
    const char *text = "Sure. " CALL_OPEN("get_weather") PARAM("city", "Paris") CALL_CLOSE;
    struct expect e = {NULL, text, 0, {0}, {0}, false};
    check_case("no tools", false, false, text, &e);
    struct expect r = {"think " CALL_OPEN("get_weather") "x", "y", 0, {0}, {0}, false};
    check_case("no tools in think", true, false, "think " CALL_OPEN("get_weather") "x</think>y", &r);
}

static void test_toolparse_malformed_calls(void)
{
    const char *bad = "Try: <tool_call>\n<function=get weather>\n" PARAM("city", "Paris") CALL_CLOSE;
    struct expect e1 = {NULL, "Try: <tool_call>\n<function=get weather>\n<parameter=city>\nParis\n"
                              "</parameter>\n</function>\n</tool_call>", 0, {0}, {0}, false};
    check_case("bad name", false, true, bad, &e1);
    struct expect e2 = {NULL, NULL, 1, {"get_weather"}, {"{\"city\": \"Par\"}"}, false};
    check_case("cut in value", false, true, CALL_OPEN("get_weather") "<parameter=city>\nPar", &e2);
    struct expect e3 = {NULL, NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}, false};
    check_case("no </parameter>", false, true,
               CALL_OPEN("get_weather") "<parameter=city>\nParis\n</function>\n</tool_call>", &e3);
    check_case("cut after </parameter>", false, true,
               CALL_OPEN("get_weather") "<parameter=city>\nParis\n</parameter>\n</func", &e3);
    struct expect e4 = {NULL, NULL, 1, {"get_weather"}, {"{}"}, false};
    check_case("cut after name", false, true, "<tool_call>\n<function=get_weather>", &e4);
    struct expect e5 = {NULL, "<tool_call>\n<function=get_wea", 0, {0}, {0}, false};
    check_case("cut in name", false, true, "<tool_call>\n<function=get_wea", &e5);
    struct expect e6 = {NULL, NULL, 1, {"ping"}, {"{}"}, false};
    check_case("junk and text after call", false, true,
               CALL_OPEN("ping") "junk <x> </parameter>\n" CALL_CLOSE "\nI will wait. <tool_call> x",
               &e6);
    struct expect e7 = {NULL, NULL, 1, {"nope"}, {"{\"x\": \"1\"}"}, false};
    check_case("undeclared function", false, true, CALL_OPEN("nope") PARAM("x", "1") CALL_CLOSE, &e7);
    char wide[200];
    snprintf(wide, sizeof wide, "<tool_call>%70s<function=ping>", "");
    struct expect e8 = {NULL, wide, 0, {0}, {0}, false};
    check_case("too much whitespace before <function=", false, true, wide, &e8);
    struct expect e9 = {"Checking.", "OK.", 1, {"get_weather"}, {"{\"city\": \"Rome\"}"}, false};
    check_case("content then call", true, true,
               "Checking.\n</think>\n\nOK.\n\n" CALL_OPEN("get_weather") PARAM("city", "Rome")
               "</function></tool_call>",
               &e9);
}

/* Feed chunks one after another; the concatenated deltas of one type. */
static void feed_collect(struct toolparse *p, const char *chunk, struct buf *content,
                         struct buf *reasoning, size_t *n_starts, const char **name)
{
    const struct toolparse_event *ev;
    size_t n;
    CHECK_EQ_INT(toolparse_feed(p, chunk, strlen(chunk), &ev, &n), CS_OK);
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type == TOOLPARSE_CONTENT_DELTA)
            buf_append(content, ev[i].text, ev[i].len);
        if (ev[i].type == TOOLPARSE_REASONING_DELTA)
            buf_append(reasoning, ev[i].text, ev[i].len);
        if (ev[i].type == TOOLPARSE_TOOL_CALL_START)
            (*n_starts)++, *name = ev[i].name;
    }
}

static void test_toolparse_streams_without_stalling(void)
{
    struct toolparse *p;
    struct toolparse_options opt = {.thinking = true, .tools = tools};
    struct buf c = {0}, r = {0};
    size_t starts = 0;
    const char *name = NULL;
    CHECK_EQ_INT(toolparse_create(&p, &opt), CS_OK);
    feed_collect(p, "abc</thi", &c, &r, &starts, &name);
    CHECK(strcmp(buf_cstr(&r), "abc") == 0);
    feed_collect(p, "nk>\n\nUse <tool_call> n", &c, &r, &starts, &name);
    CHECK(strcmp(buf_cstr(&c), "Use <tool_call> n") == 0); /* not stalled by the literal tag */
    feed_collect(p, "ow. <tool_c", &c, &r, &starts, &name);
    CHECK(strcmp(buf_cstr(&c), "Use <tool_call> now.") == 0); /* no partial tag leaks */
    feed_collect(p, "all>\n<function=get_weather", &c, &r, &starts, &name);
    CHECK_EQ_INT(starts, 0);
    feed_collect(p, ">", &c, &r, &starts, &name);
    CHECK_EQ_INT(starts, 1); /* the call starts as soon as <function=NAME> completes */
    CHECK(name && strcmp(name, "get_weather") == 0);
    CHECK(strcmp(buf_cstr(&c), "Use <tool_call> now.") == 0);
    toolparse_destroy(p);
    buf_free(&c);
    buf_free(&r);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_toolparse_ids_unique(void)
{
    enum { N = 100000 };
    char **ids = malloc(N * sizeof *ids);
    bool ok = true;
    for (int i = 0; i < N; i++) {
        ids[i] = malloc(TOOLPARSE_ID_SIZE);
        toolparse_id_make(ids[i], NULL);
        ok &= tpc_id_valid(ids[i]);
    }
    CHECK(ok);
    qsort(ids, N, sizeof *ids, cmp_str);
    int dups = 0;
    for (int i = 1; i < N; i++)
        dups += strcmp(ids[i - 1], ids[i]) == 0;
    CHECK_EQ_INT(dups, 0);
    for (int i = 0; i < N; i++)
        free(ids[i]);
    free(ids);
}

static void test_toolparse_misuse(void)
{
    struct toolparse *p;
    const struct toolparse_result *res;
    struct toolparse_options opt = {.thinking = false, .tools = NULL};
    CHECK_EQ_INT(toolparse_create(&p, NULL), CS_EINVAL);
    cJSON *obj = cJSON_CreateObject();
    opt.tools = obj;
    CHECK_EQ_INT(toolparse_create(&p, &opt), CS_EINVAL);
    cJSON_Delete(obj);
    opt.tools = NULL;
    CHECK_EQ_INT(toolparse_create(&p, &opt), CS_OK);
    CHECK_EQ_INT(toolparse_parse_text(p, "hi", 2, &res), CS_OK);
    CHECK(res && res->content_len == 2 && !res->reasoning && !res->cut_in_reasoning);
    CHECK_EQ_INT(toolparse_feed(p, "x", 1, NULL, NULL), CS_EINVAL);
    CHECK_EQ_INT(toolparse_finish(p, NULL, NULL, NULL), CS_EINVAL);
    toolparse_destroy(p);
    toolparse_destroy(NULL);
}

static void convert_is(const char *schema_json, const char *in, const char *want)
{
    cJSON *schema = schema_json ? cJSON_Parse(schema_json) : NULL;
    struct buf out = {0};
    CHECK_EQ_INT(jsonschema_value_convert(&out, schema, in, strlen(in)), CS_OK);
    test_checks++;
    if (strcmp(buf_cstr(&out), want) != 0) {
        test_failures++;
        fprintf(stderr, "convert %s [%s]: got [%s] want [%s]\n", schema_json ? schema_json : "NULL",
                in, buf_cstr(&out), want);
    }
    buf_free(&out);
    cJSON_Delete(schema);
}

static void test_jsonschema_convert_edges(void)
{
    convert_is("{\"type\":\"integer\"}", " 12345678901234567890123 ", "12345678901234567890123");
    convert_is("{\"type\":\"integer\"}", "-000", "0");
    convert_is("{\"type\":\"integer\"}", "+7", "7");
    convert_is("{\"type\":\"number\"}", "1e400", "1e400");
    convert_is("{\"type\":\"number\"}", "01", "\"01\"");
    convert_is("{\"type\":\"boolean\"}", "FALSE", "false");
    convert_is("{\"type\":[\"string\",\"null\"]}", "null", "\"null\"");
    convert_is("{\"type\":[\"null\",\"string\"]}", "null", "null");
    convert_is("{\"oneOf\":[{\"type\":\"array\"},{\"type\":\"object\"}]}", "{ }", "{}");
    convert_is("{\"type\":\"array\"}", " [ [ ] , { \"a\" : \"\\u00e9\\n\" } ] ",
               "[[], {\"a\": \"\\u00e9\\n\"}]");
    convert_is("{\"type\":\"object\"}", "{\"a\":1,}", "\"{\\\"a\\\":1,}\"");
    convert_is("{\"type\":\"object\"}", "{\"a\":\"\\ud83d\\ude00\"}", "{\"a\": \"\\ud83d\\ude00\"}");
    convert_is(NULL, "a\x01\x7f\"\\\t", "\"a\\u0001\x7f\\\"\\\\\\t\"");
    convert_is(NULL, "bad \xff\xc3 utf8 \xe2\x82", "\"bad \xEF\xBF\xBD\xEF\xBF\xBD utf8 \xEF\xBF\xBD\xEF\xBF\xBD\"");
    convert_is("{\"type\":\"string\"}", "  42  ", "\"  42  \"");
    convert_is("{\"type\":\"frob\"}", "42", "\"42\"");
    convert_is("{\"enum\":[\"a\",\"b\"]}", "42", "\"42\"");
    convert_is("{}", "42", "\"42\"");
    /* nesting beyond the limit stays a string instead of recursing forever */
    char deep[600];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    deep[0] = '[';
    char *want = malloc(700);
    snprintf(want, 700, "\"%.*s\"", 600, deep);
    struct buf out = {0};
    cJSON *arr = cJSON_Parse("{\"type\":\"array\"}");
    CHECK_EQ_INT(jsonschema_value_convert(&out, arr, deep, 600), CS_OK);
    CHECK(strcmp(buf_cstr(&out), want) == 0);
    buf_free(&out);
    free(want);
    cJSON_Delete(arr);
}

int main(void)
{
    tools = cJSON_Parse(TOOLS_JSON);
    CHECK(tools != NULL);
    RUN(test_toolparse_every_parameter_type);
    RUN(test_toolparse_conversion_fallbacks);
    RUN(test_toolparse_parallel_calls);
    RUN(test_toolparse_code_with_closing_tags);
    RUN(test_toolparse_call_inside_unclosed_think);
    RUN(test_toolparse_literal_tool_call_in_prose);
    RUN(test_toolparse_cut_off_reasoning);
    RUN(test_toolparse_utf8);
    RUN(test_toolparse_thinking_off);
    RUN(test_toolparse_no_tools);
    RUN(test_toolparse_malformed_calls);
    RUN(test_toolparse_streams_without_stalling);
    RUN(test_toolparse_ids_unique);
    RUN(test_toolparse_misuse);
    RUN(test_jsonschema_convert_edges);
    cJSON_Delete(tools);
    return test_report();
}
