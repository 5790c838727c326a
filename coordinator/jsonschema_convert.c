/* jsonschema_convert.c - parameter value conversion by JSON schema, a strict
 * re-writing JSON parser (numbers and strings kept verbatim, one formatting),
 * and the JSON string writer. Rules and formatting: jsonschema_convert.h.
 *
 * Internal convention: helpers return 0 when they accepted the text (and
 * appended its JSON), 1 when they did not (the caller truncates out back),
 * or a negative status (CS_ENOMEM). */
#include "coordinator/jsonschema_convert.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "common/status.h"

#define JSON_DEPTH_MAX 128
#define SCHEMA_DEPTH_MAX 16
#define NO_MATCH 1

/* ---- UTF-8 ---- */

/* Length (1-4) of the valid UTF-8 sequence at s[0, n), or 0 when invalid
 * (overlong forms, surrogates, above U+10FFFF, truncated). */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min, cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, min = 0x80, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, min = 0x800, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* ---- JSON string writer ---- */

int jsonschema_string_write(struct buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    int rc = buf_append_byte(out, '"');
    size_t i = 0;
    while (rc == CS_OK && i < len) {
        unsigned c = u[i];
        size_t k;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            rc = buf_append(out, e, 2), k = 1;
        } else if (c < 0x20) {
            const char *e = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                          : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (e) {
                rc = buf_append(out, e, 2);
            } else {
                char x[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                rc = buf_append(out, x, 6);
            }
            k = 1;
        } else if ((k = utf8_seq_len(u + i, len - i)) > 0) {
            rc = buf_append(out, u + i, k);
        } else {
            rc = buf_append(out, "\xEF\xBF\xBD", 3), k = 1;
        }
        i += k;
    }
    return rc == CS_OK ? buf_append_byte(out, '"') : rc;
}

/* ---- strict JSON re-writer ---- */

struct jparse {
    const char *s;
    size_t n, i;
    struct buf *out;
};

static bool is_json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void jp_ws(struct jparse *p)
{
    while (p->i < p->n && is_json_ws(p->s[p->i]))
        p->i++;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16)
            return NO_MATCH;
        *v = *v * 16 + d;
    }
    return 0;
}

/* Validate the \uXXXX escape at s[i] (after the backslash and 'u'), with its
 * low surrogate when it is a high one; *used gets the bytes consumed. */
static int jp_unicode_escape(struct jparse *p, size_t *used)
{
    unsigned v, w;
    if (p->n - p->i < 4 || hex4(p->s + p->i, &v))
        return NO_MATCH;
    *used = 4;
    if (v >= 0xDC00 && v <= 0xDFFF)
        return NO_MATCH;
    if (v >= 0xD800 && v <= 0xDBFF) {
        if (p->n - p->i < 10 || p->s[p->i + 4] != '\\' || p->s[p->i + 5] != 'u' ||
            hex4(p->s + p->i + 6, &w) || w < 0xDC00 || w > 0xDFFF)
            return NO_MATCH;
        *used = 10;
    }
    return 0;
}

/* A string literal at p->i, validated and copied verbatim. */
static int jp_string(struct jparse *p)
{
    size_t start = p->i++;
    const unsigned char *u = (const unsigned char *)p->s;
    while (p->i < p->n) {
        unsigned c = u[p->i];
        if (c == '"') {
            p->i++;
            return buf_append(p->out, p->s + start, p->i - start);
        }
        if (c < 0x20)
            return NO_MATCH;
        if (c == '\\') {
            if (++p->i >= p->n)
                return NO_MATCH;
            char e = p->s[p->i++];
            size_t used = 0;
            if (e == 'u') {
                if (jp_unicode_escape(p, &used))
                    return NO_MATCH;
            } else if (!strchr("\"\\/bfnrt", e) || e == 0) {
                return NO_MATCH;
            }
            p->i += used;
            continue;
        }
        size_t k = utf8_seq_len(u + p->i, p->n - p->i);
        if (k == 0)
            return NO_MATCH;
        p->i += k;
    }
    return NO_MATCH;
}

static size_t digits(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    return j - i;
}

/* Length of the strict JSON number at s[i, n), 0 when there is none. */
static size_t json_number_len(const char *s, size_t n, size_t i)
{
    size_t j = i;
    if (j < n && s[j] == '-')
        j++;
    size_t d = digits(s, n, j);
    if (d == 0 || (d > 1 && s[j] == '0'))
        return 0;
    j += d;
    if (j < n && s[j] == '.') {
        if ((d = digits(s, n, j + 1)) == 0)
            return 0;
        j += 1 + d;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < n && (s[j] == '+' || s[j] == '-'))
            j++;
        if ((d = digits(s, n, j)) == 0)
            return 0;
        j += d;
    }
    return j - i;
}

static int jp_value(struct jparse *p, int depth);

static int jp_literal(struct jparse *p, const char *lit)
{
    size_t k = strlen(lit);
    if (p->n - p->i < k || memcmp(p->s + p->i, lit, k) != 0)
        return NO_MATCH;
    p->i += k;
    return buf_append(p->out, lit, k);
}

/* An object or array (open is '{' or '['), members separated by ", ". */
static int jp_container(struct jparse *p, int depth, char open)
{
    char close = open == '{' ? '}' : ']';
    int rc = buf_append_byte(p->out, (unsigned char)open);
    p->i++;
    jp_ws(p);
    if (rc == CS_OK && p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return buf_append_byte(p->out, (unsigned char)close);
    }
    for (bool first = true; rc == CS_OK; first = false) {
        if (!first && (rc = buf_append(p->out, ", ", 2)) != CS_OK)
            break;
        jp_ws(p);
        if (open == '{') {
            if (p->i >= p->n || p->s[p->i] != '"' || (rc = jp_string(p)) != 0)
                return rc ? rc : NO_MATCH;
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i++] != ':')
                return NO_MATCH;
            if ((rc = buf_append(p->out, ": ", 2)) != CS_OK)
                break;
        }
        if ((rc = jp_value(p, depth + 1)) != 0)
            return rc;
        jp_ws(p);
        if (p->i >= p->n)
            return NO_MATCH;
        char c = p->s[p->i++];
        if (c == close)
            return buf_append_byte(p->out, (unsigned char)close);
        if (c != ',')
            return NO_MATCH;
    }
    return rc;
}

static int jp_value(struct jparse *p, int depth)
{
    if (depth > JSON_DEPTH_MAX)
        return NO_MATCH;
    jp_ws(p);
    if (p->i >= p->n)
        return NO_MATCH;
    char c = p->s[p->i];
    if (c == '{' || c == '[')
        return jp_container(p, depth, c);
    if (c == '"')
        return jp_string(p);
    if (c == 't')
        return jp_literal(p, "true");
    if (c == 'f')
        return jp_literal(p, "false");
    if (c == 'n')
        return jp_literal(p, "null");
    size_t k = json_number_len(p->s, p->n, p->i);
    if (k == 0)
        return NO_MATCH;
    p->i += k;
    return buf_append(p->out, p->s + p->i - k, k);
}

/* The whole of s[0, n) as one JSON value whose first byte (after whitespace)
 * is `want` ('{', '[', or 0 for any value). */
static int json_rewrite(struct buf *out, const char *s, size_t n, char want)
{
    struct jparse p = {s, n, 0, out};
    jp_ws(&p);
    if (want && (p.i >= n || s[p.i] != want))
        return NO_MATCH;
    int rc = jp_value(&p, 0);
    if (rc != 0)
        return rc;
    jp_ws(&p);
    return p.i == n ? 0 : NO_MATCH;
}

/* ---- scalar conversions ---- */

static void trim(const char **s, size_t *n)
{
    while (*n && is_json_ws(**s))
        (*s)++, (*n)--;
    while (*n && is_json_ws((*s)[*n - 1]))
        (*n)--;
}

static bool word_is(const char *s, size_t n, const char *w)
{
    return n == strlen(w) && strncasecmp(s, w, n) == 0;
}

static int convert_integer(struct buf *out, const char *s, size_t n)
{
    bool neg = false;
    if (n && (s[0] == '+' || s[0] == '-'))
        neg = s[0] == '-', s++, n--;
    if (n == 0 || digits(s, n, 0) != n)
        return NO_MATCH;
    while (n > 1 && s[0] == '0')
        s++, n--;
    if (neg && !(n == 1 && s[0] == '0')) {
        int rc = buf_append_byte(out, '-');
        if (rc)
            return rc;
    }
    return buf_append(out, s, n);
}

static int convert_number(struct buf *out, const char *s, size_t n)
{
    if (n && s[0] == '+')
        s++, n--;
    if (n == 0 || json_number_len(s, n, 0) != n)
        return NO_MATCH;
    return buf_append(out, s, n);
}

/* Try one JSON-schema type name on the text. */
static int convert_type(struct buf *out, const char *type, const char *s, size_t n)
{
    if (strcmp(type, "string") == 0)
        return jsonschema_string_write(out, s, n);
    trim(&s, &n);
    if (strcmp(type, "integer") == 0)
        return convert_integer(out, s, n);
    if (strcmp(type, "number") == 0)
        return convert_number(out, s, n);
    if (strcmp(type, "boolean") == 0) {
        if (word_is(s, n, "true") || word_is(s, n, "false"))
            return buf_append_str(out, word_is(s, n, "true") ? "true" : "false");
        return NO_MATCH;
    }
    if (strcmp(type, "null") == 0)
        return word_is(s, n, "null") ? buf_append_str(out, "null") : NO_MATCH;
    if (strcmp(type, "object") == 0)
        return json_rewrite(out, s, n, '{');
    if (strcmp(type, "array") == 0)
        return json_rewrite(out, s, n, '[');
    if (strcmp(type, "any") == 0)
        return json_rewrite(out, s, n, 0);
    return NO_MATCH;
}

/* ---- schemas ---- */

static bool enum_all_strings(const cJSON *e)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, e) {
        if (!cJSON_IsString(v))
            return false;
    }
    return true;
}

/* The type a schema without "type" implies (see the header). */
static const char *implied_type(const cJSON *schema)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (cJSON_GetObjectItemCaseSensitive(schema, "properties"))
        return "object";
    if (cJSON_GetObjectItemCaseSensitive(schema, "items"))
        return "array";
    if (cJSON_IsArray(e) && !enum_all_strings(e))
        return "any";
    return "string";
}

static int convert_schema(struct buf *out, const cJSON *schema, const char *s, size_t n, int depth);

/* Alternatives in order, out truncated back after each that fails. */
static int convert_alternatives(struct buf *out, const cJSON *alts, const char *s, size_t n,
                                int depth)
{
    size_t mark = out->len;
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        int rc = cJSON_IsString(a)   ? convert_type(out, a->valuestring, s, n)
                 : cJSON_IsObject(a) ? convert_schema(out, a, s, n, depth + 1)
                                     : NO_MATCH;
        if (rc != NO_MATCH)
            return rc;
        buf_truncate(out, mark);
    }
    return NO_MATCH;
}

static int convert_schema(struct buf *out, const cJSON *schema, const char *s, size_t n, int depth)
{
    if (!cJSON_IsObject(schema) || depth > SCHEMA_DEPTH_MAX)
        return jsonschema_string_write(out, s, n);
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(schema, "anyOf");
    if (!cJSON_IsArray(alts))
        alts = cJSON_GetObjectItemCaseSensitive(schema, "oneOf");
    if (cJSON_IsArray(alts))
        return convert_alternatives(out, alts, s, n, depth);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsArray(type))
        return convert_alternatives(out, type, s, n, depth);
    if (cJSON_IsString(type))
        return convert_type(out, type->valuestring, s, n);
    return convert_type(out, implied_type(schema), s, n);
}

int jsonschema_value_convert(struct buf *out, const cJSON *schema, const char *text, size_t len)
{
    size_t mark = out->len;
    int rc = convert_schema(out, schema, text, len, 0);
    if (rc != NO_MATCH)
        return rc;
    buf_truncate(out, mark);
    const char *s = text;
    size_t n = len;
    trim(&s, &n);
    if (word_is(s, n, "null"))
        return buf_append_str(out, "null");
    return jsonschema_string_write(out, text, len);
}

/* ---- tool lookup ---- */

static bool name_eq(const cJSON *item, const char *name, size_t len)
{
    return cJSON_IsString(item) && strlen(item->valuestring) == len &&
           memcmp(item->valuestring, name, len) == 0;
}

const cJSON *jsonschema_tool_properties(const cJSON *tools, const char *name, size_t name_len)
{
    const cJSON *t;
    if (!cJSON_IsArray(tools))
        return NULL;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn))
            fn = t;
        if (!name_eq(cJSON_GetObjectItemCaseSensitive(fn, "name"), name, name_len))
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        return cJSON_IsObject(props) ? props : NULL;
    }
    return NULL;
}

const cJSON *jsonschema_property_find(const cJSON *properties, const char *name, size_t name_len)
{
    const cJSON *p;
    if (!cJSON_IsObject(properties))
        return NULL;
    cJSON_ArrayForEach(p, properties) {
        if (p->string && strlen(p->string) == name_len && memcmp(p->string, name, name_len) == 0)
            return p;
    }
    return NULL;
}
