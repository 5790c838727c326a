/* fuzz_toolparse.c - libFuzzer entry for the streaming tool-call parser:
 * for any text, thinking on/off, with or without tools, the text fed in
 * random chunks (and byte by byte when short) must give events that follow
 * the event rules and reassemble exactly to the message of one whole feed;
 * every arguments string must be a valid UTF-8 JSON object. Input layout:
 * byte 0 = flags (bit 0 thinking, bit 1 tools), bytes 1-4 = the seed of the
 * split points, the rest = the text. Any broken invariant traps. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "coordinator/toolparse.h"
#include "tests/toolparse/toolparse_check.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"
    "\"n\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},"
    "\"a\":{\"type\":\"array\"},\"u\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\"}]},"
    "\"t\":{\"type\":[\"boolean\",\"integer\"]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

static cJSON *tools;

static void check_same(const struct tpc_run *r, const struct tpc_message *whole)
{
    if (r->status || r->protocol_error[0] || tpc_message_diff(&r->streamed, &r->final) ||
        tpc_message_diff(&r->final, whole))
        __builtin_trap();
}

static void check_arguments(const struct tpc_message *m)
{
    for (size_t i = 0; i < m->n_calls; i++) {
        if (!tpc_utf8_valid(m->args[i], strlen(m->args[i])))
            __builtin_trap();
        cJSON *v = cJSON_Parse(m->args[i]);
        if (!cJSON_IsObject(v))
            __builtin_trap();
        cJSON_Delete(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    if (!tools)
        tools = cJSON_Parse(TOOLS);
    struct toolparse_options opt = {.thinking = data[0] & 1, .tools = (data[0] & 2) ? tools : NULL};
    uint32_t seed;
    memcpy(&seed, data + 1, 4);
    const char *text = (const char *)data + 5;
    size_t len = size - 5;
    bool utf8 = tpc_utf8_valid(text, len);

    struct tpc_run whole, r;
    tpc_run_chunks(&whole, &opt, text, len, NULL, 0, utf8);
    check_same(&whole, &whole.final);
    check_arguments(&whole.final);

    size_t cuts[8], n_cuts = 0, at = 0;
    for (int i = 0; i < 8 && len > 0; i++) {
        seed = seed * 1103515245u + 12345u;
        at += (seed >> 8) % (len / 4 + 2);
        if (at > len)
            break;
        cuts[n_cuts++] = at;
    }
    tpc_run_chunks(&r, &opt, text, len, cuts, n_cuts, utf8);
    check_same(&r, &whole.final);
    tpc_run_free(&r);

    if (len > 1 && len <= 512) {
        size_t bytes[512];
        for (size_t k = 1; k < len; k++)
            bytes[k - 1] = k;
        tpc_run_chunks(&r, &opt, text, len, bytes, len - 1, utf8);
        check_same(&r, &whole.final);
        tpc_run_free(&r);
    }
    tpc_run_free(&whole);
    return 0;
}
