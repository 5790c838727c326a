/* toolparse.h - the streaming parser that splits a Qwen3.5/3.6 generation
 * into reasoning, content and tool calls (api.md "Thinking", "Tool calls").
 *
 * Input: the generated text as it comes, in chunks of any size (the literal
 * text of special tokens such as <think>, </think>, <tool_call> included).
 * Output: events per feed (reasoning, content and argument deltas, tool call
 * starts) and, at the end, the assembled message. Whatever the chunking, the
 * events concatenate to exactly the message that one feed of the whole text
 * gives: every decision waits until the bytes seen settle it, holding back
 * only what could still become a tag (bounded: a few hundred bytes) plus the
 * whitespace at the end of a section. The non-streaming path is the same
 * code (toolparse_parse_text).
 *
 * Rules (sections and tags):
 *   - thinking on (the prompt ended with "<think>\n"): the text starts in
 *     reasoning; a leading "<think>" written by the model is dropped; the
 *     first "</think>" ends the reasoning. Thinking off: the text starts in
 *     content; a "<think>" before any content opens a reasoning section.
 *   - "<think>"/"</think>" never reach content: stray ones are dropped.
 *   - each section (reasoning, content) is trimmed of leading and trailing
 *     whitespace (space, \t, \r, \n): whitespace is held back and sent only
 *     when more text of the same section follows; the model's "</think>\n\n"
 *     or "text\n\n<tool_call>" leave no stray newlines.
 *   - with tools: "<tool_call>", at most 64 whitespace bytes,
 *     "<function=NAME>" (NAME 1-256 bytes of [A-Za-z0-9_.:-]) opens call i
 *     (from content or from an unclosed think block, which it ends); a
 *     "<tool_call>" not so followed is ordinary text, sent once that is
 *     clear. Without tools (NULL or empty) tool-call markup is ordinary text.
 *   - in a call: "<parameter=P>" (P 1-256 bytes without '<', '>', '\n')
 *     opens a value, which ends at the first STRUCTURAL closing tag:
 *     "</parameter>" followed (after at most 256 whitespace bytes) by
 *     "<parameter=", "</function>", "</tool_call>" or the end of the text;
 *     "</function>" followed by "</tool_call>", "<tool_call>" or the end;
 *     "</tool_call>" followed by "<tool_call>" or the end. Other closing tags
 *     are value text (code containing "</parameter>" survives). One leading
 *     and one trailing "\n" of each value are stripped; the value is
 *     converted by the tool's schema (jsonschema_convert.h). "</function>"
 *     or "</tool_call>" between parameters ends the call; other text there
 *     is ignored. A text that ends inside a call ends the open value and the
 *     call there (arguments still closed with "}").
 *   - content is the text before the first call: text after a call is
 *     dropped, except a further call, which gets the next index.
 *
 * Arguments format (the same in the deltas and the final string): "{" sent
 * with the call start, each completed parameter as `"key": value` (", "
 * before all but the first), "}" when the call ends:
 * `{"city": "Paris", "days": 3}`; no parameters: `{}`. Keys in emitted order.
 *
 * Text deltas end at UTF-8 character boundaries even when a chunk splits a
 * character (a trailing incomplete sequence waits for the next feed).
 *
 * Ownership: the parser copies the tools; event and result memory belongs
 * to the parser: events until the next feed/finish/destroy, the result until
 * destroy. One parser per generation; not thread-safe. */
#ifndef CS_TOOLPARSE_H
#define CS_TOOLPARSE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "call_" + 24 lowercase hex digits + NUL. */
#define TOOLPARSE_ID_SIZE 30

/* Writes a NUL-terminated call id of at most TOOLPARSE_ID_SIZE bytes. */
typedef void (*toolparse_id_fn)(char *out, void *ctx);

/* The default id maker: "call_<24 hex>", unique within the process (a
 * counter through a bijective mix, keyed by a getrandom() seed drawn once)
 * and random across processes. Thread-safe. out has TOOLPARSE_ID_SIZE bytes. */
void toolparse_id_make(char *out, void *ctx);

struct toolparse_options {
    bool thinking;          /* the generation starts inside a think block */
    const cJSON *tools;     /* the request's tools array, or NULL (copied) */
    toolparse_id_fn make_id; /* NULL: toolparse_id_make */
    void *id_ctx;           /* passed to make_id */
};

enum toolparse_event_type {
    TOOLPARSE_REASONING_DELTA,
    TOOLPARSE_CONTENT_DELTA,
    TOOLPARSE_TOOL_CALL_START,      /* index, id, name */
    TOOLPARSE_TOOL_CALL_ARGS_DELTA, /* index, text */
};

struct toolparse_event {
    enum toolparse_event_type type;
    size_t index;     /* TOOL_CALL_*: the call's index, from 0 */
    const char *id;   /* TOOL_CALL_START: the call id; else NULL */
    const char *name; /* TOOL_CALL_START: the function name; else NULL */
    const char *text; /* *_DELTA: len bytes, NUL-terminated; else NULL */
    size_t len;
};

struct toolparse_call {
    const char *id;
    const char *name;
    const char *arguments; /* the JSON object text, NUL-terminated */
    size_t arguments_len;
};

struct toolparse_result {
    const char *reasoning; /* NULL when there is none */
    size_t reasoning_len;
    const char *content;   /* NULL when empty */
    size_t content_len;
    const struct toolparse_call *calls;
    size_t n_calls;
    bool has_tool_calls;   /* n_calls > 0: finish_reason "tool_calls" */
    bool cut_in_reasoning; /* the text ended inside the think block */
};

struct toolparse;

/* Create a parser for one generation. opt may not be NULL. CS_OK,
 * CS_EINVAL (opt NULL, tools not an array) or CS_ENOMEM. */
int toolparse_create(struct toolparse **out, const struct toolparse_options *opt);

/* Free the parser and everything it handed out. Safe on NULL. */
void toolparse_destroy(struct toolparse *p);

/* Feed text[0, len) (any bytes; text may be NULL when len is 0). *events and
 * *n_events receive the events this feed settled, in order, consecutive
 * deltas of one kind merged. CS_OK; CS_EINVAL after finish; CS_ENOMEM (the
 * parser is then failed: every later call returns it). */
int toolparse_feed(struct toolparse *p, const char *text, size_t len,
                   const struct toolparse_event **events, size_t *n_events);

/* End of the text: settle everything held back, close an open call, and
 * return the last events and the assembled message (result may be NULL
 * when not wanted; events/n_events may be NULL too). CS_OK, CS_EINVAL when
 * called twice, or the parser's failure status. */
int toolparse_finish(struct toolparse *p, const struct toolparse_event **events,
                     size_t *n_events, const struct toolparse_result **result);

/* Non-streaming: feed the whole text and finish (same code path). */
int toolparse_parse_text(struct toolparse *p, const char *text, size_t len,
                         const struct toolparse_result **result);

#ifdef __cplusplus
}
#endif
#endif
