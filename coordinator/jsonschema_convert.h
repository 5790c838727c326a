/* jsonschema_convert.h - schema-driven conversion of tool-call parameter
 * values (api.md "Tool calls") and the JSON text writers the tool-call parser
 * shares with it.
 *
 * The model writes every parameter value as raw text; the request's tool
 * schema says what JSON it should become. jsonschema_value_convert appends
 * the JSON text of the converted value to a buffer:
 *   - no schema, or a parameter the tool does not declare: a JSON string;
 *   - "string": the raw text as a JSON string (never trimmed);
 *   - "integer": [+-]?digits (surrounding whitespace ignored), written without
 *     '+' and leading zeros, digits kept verbatim (no precision loss);
 *   - "number": a strict JSON number (surrounding whitespace and a leading '+'
 *     ignored), written verbatim;
 *   - "boolean": true/false, any case; "null": null, any case;
 *   - "object"/"array": a JSON text of that kind, re-written in the one
 *     formatting of this module: `{"k": v, "k2": v2}`, `[1, 2]` (separators
 *     ", " and ": ", as Python's json.dumps), strings and numbers verbatim;
 *   - a "type" array, or "anyOf"/"oneOf": each alternative tried in order,
 *     the first that accepts the text wins;
 *   - no "type": "properties" means object, "items" array, an "enum" of
 *     only strings string, an "enum" with other values any JSON value,
 *     otherwise string; unknown type names accept nothing.
 * When nothing accepts the text it stays a JSON string, except the text
 * "null" (any case, trimmed), which becomes null (as vLLM does).
 *
 * All JSON written here is valid UTF-8: invalid bytes in raw text become
 * U+FFFD; JSON strings copied from parsed values must be valid UTF-8 with
 * paired surrogate escapes, else that parse fails. Non-ASCII is kept as is
 * (ensure_ascii=False). Nesting deeper than 128 fails a parse. */
#ifndef CS_JSONSCHEMA_CONVERT_H
#define CS_JSONSCHEMA_CONVERT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/buf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Append to out the JSON text of the parameter value text[0, len) converted
 * by schema (the parameter's JSON schema object; NULL when unknown), per the
 * rules above. CS_OK or CS_ENOMEM (out then holds a partial append). */
int jsonschema_value_convert(struct buf *out, const cJSON *schema, const char *text, size_t len);

/* Append s[0, len) as a JSON string literal: `"`, `\`, and bytes below 0x20
 * escaped (\n \r \t \b \f, else \u00XX), invalid UTF-8 replaced by U+FFFD,
 * everything else verbatim. CS_OK or CS_ENOMEM. */
int jsonschema_string_write(struct buf *out, const char *s, size_t len);

/* The "properties" object of the function named name[0, name_len) in an
 * OpenAI tools array ([{type:"function", function:{name, parameters}}], or
 * entries {name, parameters}); NULL when tools is NULL, the function is not
 * declared, or it declares no properties. The result points into tools. */
const cJSON *jsonschema_tool_properties(const cJSON *tools, const char *name, size_t name_len);

/* The schema of property name[0, name_len) in a properties object (may be
 * NULL); NULL when absent. The result points into properties. */
const cJSON *jsonschema_property_find(const cJSON *properties, const char *name, size_t name_len);

#ifdef __cplusplus
}
#endif
#endif
