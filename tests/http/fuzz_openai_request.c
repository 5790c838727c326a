/* fuzz_openai_request.c - libFuzzer target: arbitrary bytes as a chat or
 * completions request body (the first byte picks which). Proves that
 * parsing, the /think directives, template rendering of what parsed, and the
 * error/response builders never crash, leak or hang on any input, and that
 * a rejected body always yields a 4xx/5xx error with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/openai.h"
#include "coordinator/prompt.h"
#include "coordinator/template.h"

static void exercise_chat(struct oai_request *r)
{
    enum template_thinking t = r->enable_thinking;
    prompt_thinking_directives((cJSON *)r->messages, &t);
    struct template_options opt = {.add_generation_prompt = 1, .enable_thinking = t};
    struct template_output out;
    struct cs_error err = {0};
    if (template_render(r->messages, r->tools, &opt, &out, &err) == CS_OK) {
        for (size_t i = 0; i < out.n_user_spans; i++)
            if (out.user_spans[i].offset + out.user_spans[i].len > out.text.len)
                abort();
    }
    template_output_free(&out);
}

static void exercise_builders(const struct oai_request *r)
{
    struct oai_meta m = {"chatcmpl-x", 1, r->model};
    struct oai_logprob lp = {.tok = {"\xff\xfe", 2, -1.0f}, .n_top = 1};
    lp.top[0] = lp.tok;
    struct oai_choice ch = {.content = r->stop[0], .reasoning = r->model, .finish_reason = "stop",
                            .lp = &lp, .n_lp = 1};
    struct oai_usage u = {1, 2, 0, 1};
    free(oai_chat_response(&m, &ch, 1, &u));
    free(oai_text_response(&m, &ch, 1, &u));
    struct oai_delta d = {.role = true, .content = r->stop[0]};
    free(oai_chat_chunk(&m, 0, &d, NULL, &lp, 1, r->logprobs));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum oai_kind kind = data[0] & 1 ? OAI_COMPLETION : OAI_CHAT;
    struct oai_request r;
    struct oai_error e;
    memset(&e, 0, sizeof e);
    int rc = oai_request_parse(&r, kind, (const char *)data + 1, size - 1, &e);
    if (rc == CS_OK) {
        if (kind == OAI_CHAT)
            exercise_chat(&r);
        exercise_builders(&r);
    } else {
        if (e.status < 400 || !e.message[0])
            abort();
        free(oai_error_body(&e));
    }
    oai_request_free(&r);
    return 0;
}
