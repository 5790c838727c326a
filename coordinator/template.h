/* template.h - the Qwen3.5/3.6 chat template, rendered natively in C.
 *
 * template_render turns an OpenAI request's `messages` and `tools` (cJSON)
 * into the prompt text, byte-identical to Jinja2 rendering of the official
 * Qwen3.5 chat_template (transformers settings: trim_blocks, lstrip_blocks,
 * tojson = json.dumps(ensure_ascii=False)), and reports which byte spans came
 * from the client (message contents, reasoning, tool names, argument names and
 * values, tool results, tool JSON), so the tokenizer recognises special tokens
 * only in text the server produced (api.md).
 *
 * Supported template variants (detected from the GGUF's
 * tokenizer.chat_template by distinctive substrings, template_variant_detect):
 *   - Qwen3.5 (27B and larger): thinking on unless enable_thinking is false;
 *     reasoning is kept only for assistant turns after the last user query.
 *   - Qwen3.5 small (0.8B, 2B, 4B, 9B): thinking is opt-in: the generation
 *     prompt opens a think block only when enable_thinking is true
 *     ("enable_thinking is defined and enable_thinking is true").
 *   - Qwen3.6: preserve_thinking=true keeps the reasoning of every assistant
 *     turn in history ("preserve_thinking is defined and preserve_thinking is
 *     true"); otherwise as Qwen3.5.
 * The two flags combine. Any other template renders with Qwen3.5 semantics
 * (template_variant_detect says it was not recognised).
 *
 * Deliberate, documented differences from the Jinja rendering (each is an
 * input normalisation the comparison test applies on the Python side too):
 *   1. tool-call argument values true/false/null render as JSON literals
 *      (api.md), not Python's True/False/None.
 *   2. tool-call `arguments` given as a JSON string (what OpenAI clients send)
 *      is parsed first (as vLLM and llama-server do); an empty or all-blank
 *      string means {}; a string that is not a JSON object is CS_EINVAL;
 *      `arguments: null` means no arguments.
 *   3. role "developer" is treated as "system" (api.md).
 *   4. an assistant message without a string `reasoning_content` but with a
 *      string `reasoning` uses that (api.md: both are passed back).
 *   5. numbers: cJSON keeps doubles only, so an integral value below 1e16
 *      renders as an integer ("1.0" in the request renders "1") and others in
 *      Python's float repr (shortest round trip: 1.5, 1e+20, 1e-05).
 *   6. shapes Jinja would render in surprising ways are rejected with
 *      CS_EINVAL instead: `messages` or `tools` not an array (tools: a string),
 *      a message that is not an object, a content part that is not an object
 *      or string, a text part whose `text` is not a string.
 * Duplicate keys in one JSON object are all rendered (Python keeps the last).
 *
 * Errors: CS_EINVAL with err->msg set to the template's own message for its
 * raise_exception cases ("No messages provided.", "No user query found in
 * messages.", "System message must be at the beginning.", "System message
 * cannot contain images." (or videos), "Unexpected message role.",
 * "Unexpected content type.", "Unexpected item type in content.") and a
 * precise message naming the field for the others (bad tool calls, the
 * shapes of difference 6); CS_ENOMEM on allocation failure.
 *
 * Proof: tests/template (test_template_jinja.py compares with Jinja2 over
 * corpus.json x variants x thinking options; test_template.c checks spans). */
#ifndef CS_TEMPLATE_H
#define CS_TEMPLATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the template's variables were set: enable_thinking is tri-state because
 * the variants differ exactly in what "not given" means. */
enum template_thinking {
    TEMPLATE_THINKING_DEFAULT = 0, /* not given: the variant decides */
    TEMPLATE_THINKING_ON = 1,      /* enable_thinking=true */
    TEMPLATE_THINKING_OFF = 2,     /* enable_thinking=false */
};

/* Behaviour differences between the official templates (see top comment). */
struct template_variant {
    int thinking_opt_in;   /* 1: think only when enable_thinking is true */
    int preserve_thinking; /* 1: the preserve_thinking variable is honoured */
};

struct template_options {
    int add_generation_prompt;           /* end with the assistant turn opener */
    enum template_thinking enable_thinking;
    int preserve_thinking;               /* only with variant.preserve_thinking */
    int add_vision_id;                   /* "Picture N: " / "Video N: " labels */
    struct template_variant variant;
};

/* A byte range [offset, offset + len) of the rendered text. */
struct template_span {
    size_t offset;
    size_t len;
};

struct template_output {
    struct buf text;                   /* the prompt, NUL-terminated */
    struct template_span *user_spans;  /* client-supplied bytes: sorted, */
    size_t n_user_spans;               /* disjoint, never adjacent, len > 0 */
};

/* Fill v from a chat template text (the GGUF's tokenizer.chat_template).
 * Returns CS_OK when the text is recognised as a Qwen3.5/3.6 template and
 * CS_ENOTFOUND otherwise (text NULL or unknown); v is filled in both cases
 * (unknown: the plain Qwen3.5 behaviour, all flags 0). */
int template_variant_detect(const char *chat_template, struct template_variant *v);

/* A short name for logs: "qwen3.5", "qwen3.5-small", "qwen3.6",
 * "qwen3.6-small". */
const char *template_variant_name(const struct template_variant *v);

/* Render messages (a cJSON array) and tools (NULL, or any cJSON value: only a
 * non-empty array renders a tools block) with opt (NULL: all zero) into out,
 * which the caller provides uninitialised and must release with
 * template_output_free whatever the result. Returns CS_OK, CS_EINVAL (err set,
 * out empty) or CS_ENOMEM. Never keeps pointers into messages or tools. */
int template_render(const cJSON *messages, const cJSON *tools,
                    const struct template_options *opt,
                    struct template_output *out, struct cs_error *err);

/* Release out's memory; safe on a zeroed or already freed output. */
void template_output_free(struct template_output *out);

#ifdef __cplusplus
}
#endif
#endif
