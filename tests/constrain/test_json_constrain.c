/* test_json_constrain.c - proves the constrained-decoding automaton of
 * coordinator/json_constrain.h: a table of JSON texts is accepted (every
 * prefix alive, complete at the end) or rejected at exactly the expected
 * byte; schemas restrict values (required keys, enums, integer, anyOf,
 * minItems/maxItems) and unsupported keywords are refused by name; the Qwen
 * tool-call grammar accepts a call and rejects unknown names and
 * parameters. With a vocabulary (argv[1], a .tiktoken file): a random-token
 * driver that picks only allowed tokens from the real mask always produces
 * text that parses and validates against the schema (10 schemas x 20
 * seeds), the end token is allowed exactly when the text is complete, and
 * mask times are printed (and bounded).
 *
 * usage: test_json_constrain [VOCAB.tiktoken] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/tokenizer.h"
#include "common/vocab_tiktoken.h"
#include "coordinator/json_constrain.h"
#include "test_util.h"

static struct jc_constraint *mk(const char *schema_json)
{
    cJSON *s = schema_json ? cJSON_Parse(schema_json) : NULL;
    struct jc_constraint *c = NULL;
    struct cs_error err = {0};
    int rc = jc_constraint_json(&c, NULL, s, -1, &err);
    if (rc)
        fprintf(stderr, "schema %s: %s\n", schema_json, err.msg);
    cJSON_Delete(s);
    return c;
}

/* Every prefix of text alive and the whole complete. */
static int accepts(const char *schema, const char *text)
{
    struct jc_constraint *c = mk(schema);
    if (!c)
        return 0;
    int ok = 1;
    for (size_t i = 0; text[i] && ok; i++)
        ok = jc_constraint_feed(c, text + i, 1, NULL) == CS_OK;
    ok = ok && jc_constraint_complete(c);
    jc_constraint_free(c);
    return ok;
}

/* The byte index where text dies, -1 when it survives. */
static long dies_at(const char *schema, const char *text)
{
    struct jc_constraint *c = mk(schema);
    size_t at = 0;
    int rc = jc_constraint_feed(c, text, strlen(text), &at);
    jc_constraint_free(c);
    return rc == CS_OK ? -1 : (long)at;
}

static void test_constrain_json_valid(void)
{
    static const char *const ok_any[] = {
        "{}", "[]", "0", "-0", "-12.5E+7", "1e3", "true", "false", "null", "\"\"",
        "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\"", "\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9d\x84\x9e\"",
        "[1, 2.5e-3, -0, true, false, null, \"x\", {}, []]", "{\"a\":{\"b\":[{}, {\"c\":null}]}}",
        " \n\t{ \"k\" : [ 1 , 2 ] } \n", "[[[[[[[[[[1]]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof ok_any / sizeof ok_any[0]; i++) {
        int r = accepts("{}", ok_any[i]);
        if (!r)
            fprintf(stderr, "rejected: %s\n", ok_any[i]);
        CHECK(r);
    }
    CHECK(accepts(NULL, "{\"a\": [1, {\"b\": \"c\"}]}"));
    CHECK(!accepts(NULL, "[1]"));
    CHECK(!accepts(NULL, "\"s\""));
    CHECK(!accepts("{}", "nul"));    /* alive but incomplete */
    CHECK(!accepts("{}", "[1, 2"));
    CHECK(!accepts("{}", "-"));
    CHECK(!accepts("{}", "1."));
}

static void test_constrain_json_invalid(void)
{
    static const struct { const char *text; long at; } bad[] = {
        {"{\"a\" 1}", 5}, {"[01]", 2}, {"{\"a\":tru}", 8}, {"\"\\x\"", 2}, {"[1,]", 3},
        {"{,}", 1}, {"\"\xc0\x80\"", 1}, {"\"\xed\xa0\x80\"", 2}, {"[1 2]", 3}, {"\"a\nb\"", 2},
        {"1 2", 2}, {"{\"a\":1}}", 7}, {"[         1]", 9}, {"\"\\u12g4\"", 5}, {"01", 1},
        {"{\"a\":1,}", 7}, {"[1.e5]", 3}, {"\"\xf5\x80\"", 1}, {"}", 0}, {"truex", 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long at = dies_at("{}", bad[i].text);
        if (at != bad[i].at)
            fprintf(stderr, "text %zu: died at %ld, expected %ld\n", i, at, bad[i].at);
        CHECK_EQ_INT(at, bad[i].at);
    }
    CHECK_EQ_INT(dies_at(NULL, "[1]"), 0);
}

#define OBJ_SCHEMA                                                                               \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"         \
    "\"string\"},\"c\":{\"enum\":[\"x\",\"y\",10,1]}},\"required\":[\"a\",\"c\"]}"

static void test_constrain_json_schema(void)
{
    CHECK(accepts(OBJ_SCHEMA, "{\"a\":1,\"b\":\"q\",\"c\":\"x\"}"));
    CHECK(accepts(OBJ_SCHEMA, "{ \"a\": -7, \"c\": 10 }"));
    CHECK(accepts(OBJ_SCHEMA, "{\"a\":1,\"c\":1}"));
    CHECK_EQ_INT(dies_at(OBJ_SCHEMA, "{\"b\":\"q\"}"), 2);
    CHECK_EQ_INT(dies_at(OBJ_SCHEMA, "{\"a\":1.5}"), 6);
    CHECK_EQ_INT(dies_at(OBJ_SCHEMA, "{\"a\":1}"), 6);
    CHECK_EQ_INT(dies_at(OBJ_SCHEMA, "{\"a\":1,\"c\":\"z\"}"), 12);
    CHECK_EQ_INT(dies_at(OBJ_SCHEMA, "{\"a\":1,\"c\":100}"), 13);
    CHECK_EQ_INT(dies_at(OBJ_SCHEMA, "{\"a\":1,\"c\":1,\"b\":\"q\"}"), 12) /* no key after c */;
    const char *any = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":"
                      "{\"type\":\"string\"}}]}";
    CHECK(accepts(any, "5"));
    CHECK(accepts(any, "[\"x\", \"y\"]"));
    CHECK_EQ_INT(dies_at(any, "true"), 0);
    CHECK_EQ_INT(dies_at(any, "[1]"), 1);
    const char *arr = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,"
                      "\"maxItems\":3}";
    CHECK(accepts(arr, "[1,2]"));
    CHECK(accepts(arr, "[1, 2, 3]"));
    CHECK_EQ_INT(dies_at(arr, "[1]"), 2);
    CHECK_EQ_INT(dies_at(arr, "[1,2,3,4]"), 6);
    CHECK(accepts("{\"type\":[\"string\",\"null\"]}", "null"));
    CHECK_EQ_INT(dies_at("{\"type\":[\"string\",\"null\"]}", "true"), 0);
    CHECK(accepts("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
                  "{\"x\":true,\"y\":false}"));
    CHECK_EQ_INT(dies_at("{\"type\":\"object\",\"additionalProperties\":false}", "{\"x\""), 1);
    CHECK(accepts("{\"const\":\"fixed\"}", "\"fixed\""));
}

static void test_constrain_json_refuses(void)
{
    static const char *const bad[] = {
        "{\"type\":\"string\",\"pattern\":\"x\"}", "{\"$ref\":\"#/$defs/a\"}",
        "{\"oneOf\":[{\"type\":\"string\"}]}", "{\"type\":\"string\",\"format\":\"date\"}",
    };
    static const char *const kw[] = {"pattern", "$ref", "oneOf", "format"};
    for (int i = 0; i < 4; i++) {
        cJSON *s = cJSON_Parse(bad[i]);
        struct jc_constraint *c = NULL;
        struct cs_error err = {0};
        CHECK_EQ_INT(jc_constraint_json(&c, NULL, s, -1, &err), CS_EUNSUPPORTED);
        CHECK(strstr(err.msg, kw[i]) != NULL);
        cJSON_Delete(s);
    }
    cJSON *s = cJSON_Parse("{\"type\":\"strin\"}");
    struct jc_constraint *c = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(jc_constraint_json(&c, NULL, s, -1, &err), CS_EINVAL);
    cJSON_Delete(s);
    s = cJSON_Parse("{\"enum\":[]}");
    CHECK_EQ_INT(jc_constraint_json(&c, NULL, s, -1, &err), CS_EINVAL);
    cJSON_Delete(s);
}

#define TOOLS_JSON                                                                             \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":" \
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{}}}}},"               \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]"

static struct jc_constraint *mk_tools(const char *named, bool parallel)
{
    cJSON *t = cJSON_Parse(TOOLS_JSON);
    struct jc_constraint *c = NULL;
    struct cs_error err = {0};
    int rc = jc_constraint_tools(&c, NULL, t, named, parallel, -1, &err);
    cJSON_Delete(t);
    CHECK_EQ_INT(rc, CS_OK);
    return c;
}

static void test_constrain_tools(void)
{
    const char *call = "get_weather>\n<parameter=city>\nParis </x> <\n</parameter>\n"
                       "<parameter=unit>\nC\n</parameter>\n</function>\n</tool_call>";
    struct jc_constraint *c = mk_tools(NULL, false);
    CHECK_EQ_INT(jc_constraint_feed(c, call, strlen(call), NULL), CS_OK);
    CHECK(jc_constraint_complete(c));
    size_t at = 0;
    CHECK_EQ_INT(jc_constraint_feed(c, "\n", 1, &at), CS_EINVAL); /* not parallel */
    jc_constraint_free(c);
    c = mk_tools(NULL, true);
    const char *two = "get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
                      "</function>\n</tool_call>";
    CHECK_EQ_INT(jc_constraint_feed(c, two, strlen(two), NULL), CS_OK);
    CHECK(jc_constraint_complete(c));
    jc_constraint_free(c);
    c = mk_tools(NULL, false);
    CHECK_EQ_INT(jc_constraint_feed(c, "bad>", 4, &at), CS_EINVAL);
    CHECK_EQ_INT(at, 0);
    jc_constraint_free(c);
    c = mk_tools("get_weather", false);
    const char *p = "<parameter=zip>\n";
    CHECK_EQ_INT(jc_constraint_feed(c, p, strlen(p), &at), CS_EINVAL);
    CHECK_EQ_INT(at, 11);
    jc_constraint_free(c);
    c = mk_tools("get_weather", false);
    CHECK(!jc_constraint_complete(c));
    p = "</function>\n</tool_call>";
    CHECK_EQ_INT(jc_constraint_feed(c, p, strlen(p), NULL), CS_OK);
    CHECK(jc_constraint_complete(c));
    jc_constraint_free(c);
    cJSON *t = cJSON_Parse(TOOLS_JSON);
    struct cs_error err = {0};
    CHECK_EQ_INT(jc_constraint_tools(&c, NULL, t, "nope", false, -1, &err), CS_EINVAL);
    cJSON_Delete(t);
}

/* ---- the random-token driver over the real vocabulary ---- */

static bool validate(const cJSON *v, const cJSON *s);

static bool validate_type(const cJSON *v, const char *t)
{
    if (strcmp(t, "null") == 0) return cJSON_IsNull(v);
    if (strcmp(t, "boolean") == 0) return cJSON_IsBool(v);
    if (strcmp(t, "string") == 0) return cJSON_IsString(v);
    if (strcmp(t, "number") == 0) return cJSON_IsNumber(v);
    if (strcmp(t, "integer") == 0)
        return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (strcmp(t, "array") == 0) return cJSON_IsArray(v);
    if (strcmp(t, "object") == 0) return cJSON_IsObject(v);
    return false;
}

static bool validate_object(const cJSON *v, const cJSON *s)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required"), *r, *kv;
    cJSON_ArrayForEach(r, req)
        if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
            return false;
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    cJSON_ArrayForEach(kv, v) {
        const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, kv->string) : NULL;
        if (props && !ps)
            return false;
        if (!props && cJSON_IsFalse(ap))
            return false;
        if (!validate(kv, ps ? ps : (cJSON_IsObject(ap) ? ap : NULL)))
            return false;
    }
    return true;
}

static bool validate(const cJSON *v, const cJSON *s)
{
    if (!s)
        return true;
    const cJSON *x, *e;
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        cJSON_ArrayForEach(e, x)
            if (validate(v, e))
                return true;
        return false;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "const")))
        return cJSON_Compare(v, x, true);
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        cJSON_ArrayForEach(e, x)
            if (cJSON_Compare(v, e, true))
                return true;
        return false;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        bool any = false;
        if (cJSON_IsString(x))
            any = validate_type(v, x->valuestring);
        cJSON_ArrayForEach(e, x)
            any = any || validate_type(v, e->valuestring);
        if (!any)
            return false;
    }
    if (cJSON_IsObject(v) && !validate_object(v, s))
        return false;
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minItems");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
        if ((mn && n < mn->valueint) || (mx && n > mx->valueint))
            return false;
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        cJSON_ArrayForEach(e, v)
            if (!validate(e, items))
                return false;
    }
    return true;
}

static const char *const driver_schemas[] = {
    NULL, /* json_object */
    OBJ_SCHEMA,
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":4}",
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false}",
    "{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"boolean\"},{\"type\":\"null\"}]}",
    "{\"enum\":[\"red\",\"green\",\"blue\",42,null]}",
    "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\",\"properties\":{\"x\":"
    "{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"]}},"
    "\"required\":[\"p\"]}",
    "{\"type\":[\"string\",\"integer\"]}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
    "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"v\":{\"anyOf\":"
    "[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"const\":1},\"maxItems\":2}]}},"
    "\"required\":[\"ok\",\"v\"]}",
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

struct drive_stats {
    double mask_ms_max, mask_ms_sum;
    long masks, finished, valid, end_wrong;
};

/* Prefer closing: with p_close pick among allowed tokens holding a closing
 * byte, and end as soon as allowed half of the time. */
static int32_t driver_pick(const struct tokenizer *tok, const uint8_t *mask, int n_vocab,
                           int32_t end_id, uint64_t *rng, int step, int32_t *buf)
{
    int n = 0, n_close = 0;
    if ((mask[end_id >> 3] >> (end_id & 7)) & 1 && rng_next(rng) % 2 == 0)
        return end_id;
    for (int32_t id = 0; id < n_vocab; id++)
        if ((mask[id >> 3] >> (id & 7)) & 1 && id != end_id)
            buf[n++] = id;
    if (n == 0)
        return end_id;
    int p_close = step > 40 ? 90 : 30;
    if ((int)(rng_next(rng) % 100) < p_close) {
        for (int i = 0; i < n; i++) {
            size_t len = 0;
            const char *b = tokenizer_token_bytes(tok, buf[i], &len);
            if (memchr(b, '"', len) || memchr(b, '}', len) || memchr(b, ']', len) ||
                (len == 1 && (b[0] == ',' || (b[0] >= '0' && b[0] <= '9'))))
                buf[n_close++] = buf[i];
        }
        if (n_close)
            n = n_close;
    }
    return buf[rng_next(rng) % (uint64_t)n];
}

static void drive_one(const struct jc_vocab *v, const struct tokenizer *tok, int n_vocab,
                      int32_t end_id, const char *schema_json, uint64_t seed,
                      struct drive_stats *st)
{
    cJSON *schema = schema_json ? cJSON_Parse(schema_json) : NULL;
    struct jc_constraint *c = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(jc_constraint_json(&c, v, schema, end_id, &err), CS_OK);
    uint8_t *mask = malloc(((size_t)n_vocab + 7) / 8);
    int32_t *buf = malloc(sizeof *buf * (size_t)n_vocab);
    char text[8192];
    size_t len = 0;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    bool done = false;
    for (int step = 0; step < 200 && !done; step++) {
        double t0 = now_ms();
        int rc = jc_constraint_mask(c, mask, n_vocab);
        double dt = now_ms() - t0;
        CHECK_EQ_INT(rc, CS_OK);
        st->masks++;
        st->mask_ms_sum += dt;
        if (dt > st->mask_ms_max)
            st->mask_ms_max = dt;
        bool end_ok = (mask[end_id >> 3] >> (end_id & 7)) & 1;
        if (end_ok != jc_constraint_complete(c))
            st->end_wrong++;
        int32_t id = driver_pick(tok, mask, n_vocab, end_id, &rng, step, buf);
        CHECK_EQ_INT(jc_constraint_advance(c, id), CS_OK);
        if (id == end_id) {
            done = true;
            break;
        }
        size_t tl = 0;
        const char *b = tokenizer_token_bytes(tok, id, &tl);
        if (len + tl < sizeof text) {
            memcpy(text + len, b, tl);
            len += tl;
        }
    }
    text[len] = 0;
    if (done) {
        st->finished++;
        cJSON *val = cJSON_ParseWithLength(text, len);
        bool ok = val && validate(val, schema) && (schema || cJSON_IsObject(val));
        if (!ok)
            fprintf(stderr, "INVALID under %s: %s\n", schema_json ? schema_json : "object", text);
        st->valid += ok;
        cJSON_Delete(val);
    }
    free(mask);
    free(buf);
    jc_constraint_free(c);
    cJSON_Delete(schema);
}

static void test_constrain_driver(const char *vocab_path)
{
    struct vocab *voc = NULL;
    struct cs_error err = {0};
    if (vocab_tiktoken_load(&voc, vocab_path, 248320, &err) != CS_OK) {
        fprintf(stderr, "cannot load %s: %s\n", vocab_path, err.msg);
        CHECK(0);
        return;
    }
    struct tokenizer_vocab_view view;
    vocab_view_fill(voc, &view);
    struct tokenizer *tok = NULL;
    CHECK_EQ_INT(tokenizer_create(&tok, &view, &err), CS_OK);
    int n_vocab = (int)tokenizer_vocab_size(tok);
    int32_t end_id = tokenizer_token_find(tok, "<|im_end|>", 10);
    CHECK(end_id >= 0);
    double t0 = now_ms();
    struct jc_vocab *v = NULL;
    CHECK_EQ_INT(jc_vocab_create(&v, tok, n_vocab), CS_OK);
    fprintf(stderr, "vocab trie of %d tokens built in %.1f ms\n", n_vocab, now_ms() - t0);
    long total_runs = 0, total_fin = 0, total_valid = 0;
    for (size_t k = 0; k < sizeof driver_schemas / sizeof driver_schemas[0]; k++) {
        struct drive_stats st = {0};
        for (uint64_t seed = 1; seed <= 20; seed++)
            drive_one(v, tok, n_vocab, end_id, driver_schemas[k], seed, &st);
        fprintf(stderr, "schema %zu: %ld/20 finished, %ld valid, masks %ld, mean %.3f ms, "
                "max %.3f ms\n", k, st.finished, st.valid, st.masks,
                st.mask_ms_sum / (double)st.masks, st.mask_ms_max);
        CHECK_EQ_INT(st.valid, st.finished);
        CHECK_EQ_INT(st.end_wrong, 0);
        CHECK(st.finished >= 15);
        total_runs += 20;
        total_fin += st.finished;
        total_valid += st.valid;
    }
    fprintf(stderr, "driver: %ld runs, %ld finished, %ld valid\n", total_runs, total_fin,
            total_valid);
    jc_vocab_destroy(v);
    tokenizer_destroy(tok);
    vocab_destroy(voc);
}

int main(int argc, char **argv)
{
    RUN(test_constrain_json_valid);
    RUN(test_constrain_json_invalid);
    RUN(test_constrain_json_schema);
    RUN(test_constrain_json_refuses);
    RUN(test_constrain_tools);
    if (argc > 1)
        test_constrain_driver(argv[1]);
    return test_report();
}
