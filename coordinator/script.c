/* script.c - load the test-only scripted output file (see script.h): a JSON
 * list of texts or id arrays, turned into token id arrays. */
#include "script.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tokenizer.h"

#define SCRIPT_MAX_BYTES (16u << 20)
#define SCRIPT_MAX_COUNT 65536

/* Read a whole file into a NUL-terminated malloc'd buffer. */
static int script_read_file(const char *path, char **out, size_t *n, struct cs_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cs_error_set(err, CS_EIO, "test script %s: cannot open", path);
    char *buf = malloc(SCRIPT_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return cs_error_set(err, CS_ENOMEM, "test script %s: out of memory", path);
    }
    size_t got = fread(buf, 1, SCRIPT_MAX_BYTES + 1, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad || got > SCRIPT_MAX_BYTES) {
        free(buf);
        return cs_error_set(err, bad ? CS_EIO : CS_EFORMAT, "test script %s: %s", path,
                            bad ? "read error" : "larger than 16 MiB");
    }
    buf[got] = '\0';
    *out = buf;
    *n = got;
    return CS_OK;
}

static int script_from_ids(const cJSON *arr, int n_vocab, int32_t **ids, int *len, int idx,
                           struct cs_error *err)
{
    int n = cJSON_GetArraySize(arr);
    *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!*ids)
        return cs_error_set(err, CS_ENOMEM, "test script: out of memory");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (v < 0 || v >= n_vocab || v != (double)(int32_t)v)
            return cs_error_set(err, CS_EFORMAT,
                                "test script %d: element %d is not a token id in [0, %d)", idx, i,
                                n_vocab);
        (*ids)[i++] = (int32_t)v;
    }
    *len = n;
    return CS_OK;
}

static int script_from_text(const char *text, const struct tokenizer *tok, int32_t **ids, int *len,
                            int idx, struct cs_error *err)
{
    if (!tok)
        return cs_error_set(err, CS_EFORMAT, "test script %d: text needs the model's tokenizer",
                            idx);
    size_t n = 0;
    int rc = tokenizer_encode(tok, text, strlen(text), true, ids, &n);
    if (rc)
        return cs_error_set(err, rc, "test script %d: cannot tokenize: %s", idx, cs_strerror(rc));
    *len = (int)n;
    return CS_OK;
}

static int script_parse(struct engine_script *s, const cJSON *list, const struct tokenizer *tok,
                        int n_vocab, struct cs_error *err)
{
    int n = cJSON_GetArraySize(list);
    if (n < 1 || n > SCRIPT_MAX_COUNT)
        return cs_error_set(err, CS_EFORMAT, "test script: \"scripts\" needs 1..%d entries, has %d",
                            SCRIPT_MAX_COUNT, n);
    s->ids = calloc((size_t)n, sizeof *s->ids);
    s->len = calloc((size_t)n, sizeof *s->len);
    if (!s->ids || !s->len)
        return cs_error_set(err, CS_ENOMEM, "test script: out of memory");
    s->n = n;
    int i = 0, rc = CS_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (cJSON_IsString(it))
            rc = script_from_text(it->valuestring, tok, &s->ids[i], &s->len[i], i, err);
        else if (cJSON_IsArray(it))
            rc = script_from_ids(it, n_vocab, &s->ids[i], &s->len[i], i, err);
        else
            rc = cs_error_set(err, CS_EFORMAT,
                              "test script %d: expected a string or an array of token ids", i);
        if (rc)
            return rc;
        i++;
    }
    return CS_OK;
}

int script_load(struct engine_script **out, const char *path, const struct tokenizer *tok,
                int n_vocab, struct cs_error *err)
{
    *out = NULL;
    char *text = NULL;
    size_t n = 0;
    int rc = script_read_file(path, &text, &n, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    if (!root)
        return cs_error_set(err, CS_EFORMAT, "test script %s: not valid JSON", path);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "scripts");
    struct engine_script *s = calloc(1, sizeof *s);
    if (!s)
        rc = cs_error_set(err, CS_ENOMEM, "test script: out of memory");
    else if (!cJSON_IsObject(root) || !cJSON_IsArray(list))
        rc = cs_error_set(err, CS_EFORMAT, "test script %s: expected {\"scripts\": [...]}", path);
    else
        rc = script_parse(s, list, tok, n_vocab, err);
    cJSON_Delete(root);
    if (rc) {
        if (err && !strstr(err->msg, path))
            cs_error_prefix(err, "%s", path);
        script_free(s);
        return rc;
    }
    *out = s;
    return CS_OK;
}

void script_free(struct engine_script *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->ids ? s->ids[i] : NULL);
    free(s->ids);
    free(s->len);
    free(s);
}

const int32_t *script_for(const struct engine_script *s, uint64_t k, int *n)
{
    int i = (int)(k % (uint64_t)s->n);
    *n = s->len[i];
    return s->ids[i];
}
