/* json_constrain.h - constrained decoding: a byte-level pushdown automaton
 * for JSON (optionally restricted by a JSON-schema subset) or for Qwen XML
 * tool calls, and the per-step token mask derived from it.
 *
 * Grammar (what a constraint accepts):
 *   - json_object: any JSON object; json_schema: a value valid under the
 *     schema subset below. Whitespace between tokens is allowed but at most
 *     JC_MAX_WS consecutive bytes (so a model cannot loop on it); numbers are
 *     at most JC_MAX_NUM bytes; nesting at most JC_MAX_DEPTH frames.
 *   - Schema subset: type (one name or an array of names: object, array,
 *     string, number, integer, boolean, null), properties + required (the
 *     properties are produced in schema order; optional ones may be skipped,
 *     required ones may not; no other keys), additionalProperties (false,
 *     true, or a schema for the values of an object without properties),
 *     items, minItems, maxItems, enum, const, anyOf, and the annotations
 *     title, description, default, examples, $schema, $comment. Any other
 *     keyword is refused with CS_EUNSUPPORTED and a message naming it.
 *     integer means no fraction and no exponent.
 *   - Tool calls: `NAME>\n` (the prompt already ends with
 *     "<tool_call>\n<function="), or, for a named function, starting after
 *     "<function=NAME>\n"; then any number of `<parameter=P>\n TEXT
 *     </parameter>\n` with P one of the tool's declared properties and TEXT
 *     free UTF-8 up to the first "</parameter>\n"; then
 *     `</function>\n</tool_call>`; with parallel calls, more calls may follow
 *     after "\n<tool_call>\n<function=".
 *
 * Token mask: allowed[id] = feeding the token's bytes keeps the automaton
 * alive; the end-of-turn id is allowed only when the text is complete;
 * other special tokens never. The vocabulary is kept as a byte trie in
 * preorder (built once per tokenizer, jc_vocab_create) and walked with the
 * state cloned per depth, skipping dead subtrees; inside a plain string the
 * tokens of plain string bytes are taken from a precomputed mask. Masks are
 * cached per automaton state (exact state bytes as the key).
 *
 * Threads: a grammar is immutable after compiling; a vocab is immutable
 * after creation and may be shared by threads; a constraint belongs to one
 * thread at a time. */
#ifndef CS_JSON_CONSTRAIN_H
#define CS_JSON_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JC_MAX_WS 8
#define JC_MAX_NUM 24
#define JC_MAX_DEPTH 32

struct tokenizer;
struct jc_vocab;
struct jc_constraint;

/* Build the byte trie of tok's ordinary tokens for masks over n_vocab ids
 * (n_vocab >= the tokenizer's size; the extra ids are never allowed).
 * CS_OK, CS_EINVAL, CS_ENOMEM. */
int jc_vocab_create(struct jc_vocab **out, const struct tokenizer *tok, int n_vocab);
void jc_vocab_destroy(struct jc_vocab *v);
/* A process-wide vocab for tok, built on the first call (thread-safe) and
 * kept for the life of the process; NULL on failure. */
const struct jc_vocab *jc_vocab_shared(const struct tokenizer *tok, int n_vocab);

/* A constraint to any JSON value valid under schema (NULL: any JSON object).
 * vocab may be NULL (then only the byte-level calls work); end_id is the
 * end-of-turn token. CS_OK; CS_EUNSUPPORTED or CS_EINVAL for a schema it
 * cannot honour (err says which keyword or value, prefixed by nothing);
 * CS_ENOMEM. */
int jc_constraint_json(struct jc_constraint **out, const struct jc_vocab *vocab,
                       const cJSON *schema, int32_t end_id, struct cs_error *err);

/* A constraint to Qwen XML tool calls of the OpenAI tools array tools;
 * named: the function's name (the output starts after its opening tags), or
 * NULL (any declared function; the output starts with its name). parallel:
 * more than one call may follow. CS_OK, CS_EINVAL (no usable tool, or the
 * name is not declared), CS_EUNSUPPORTED (more than 63 tools or
 * parameters), CS_ENOMEM. */
int jc_constraint_tools(struct jc_constraint **out, const struct jc_vocab *vocab,
                        const cJSON *tools, const char *named, bool parallel, int32_t end_id,
                        struct cs_error *err);

void jc_constraint_free(struct jc_constraint *c);

/* Feed bytes: CS_OK when the automaton is still alive after all of them;
 * CS_EINVAL when byte *at (if at is not NULL) killed it (the state is then
 * dead and every later feed fails). */
int jc_constraint_feed(struct jc_constraint *c, const char *bytes, size_t n, size_t *at);
/* True when the text fed so far is a complete value (the end may come). */
bool jc_constraint_complete(const struct jc_constraint *c);

/* Fill mask (n_vocab bits, LSB first) with the tokens allowed next.
 * CS_OK; CS_EINVAL (no vocab, or n_vocab differs from the vocab's);
 * CS_ERANGE when no token is allowed (a dead state). */
int jc_constraint_mask(struct jc_constraint *c, uint8_t *mask, int n_vocab);
/* Advance by the sampled token (its bytes; the end id completes). CS_OK, or
 * CS_EINVAL when the token was not allowed (the constraint is then dead). */
int jc_constraint_advance(struct jc_constraint *c, int32_t token);

/* The engine hook of engine.h over jc_constraint_mask / _advance / _free
 * (the void * is a struct jc_constraint *). */
struct engine_constraint_ops;
extern const struct engine_constraint_ops jc_engine_ops;

/* Cache counters of masks computed and served from the cache (tests). */
void jc_constraint_cache_stats(const struct jc_constraint *c, long *computed, long *hits);

#ifdef __cplusplus
}
#endif
#endif
