/* fake_serve.c - `cs_fake_serve`: the real API server (server_run) over the
 * fake engine, for the API tests. Takes every `cmpserve serve` flag plus
 *   --vocab FILE.tiktoken  the tokenizer (instead of a GGUF's)
 *   --fake-tick-ms N       milliseconds per generated token (default 1)
 * With --model FILE the tokenizer comes from that GGUF instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/log.h"
#include "common/tokenizer.h"
#include "common/vocab_tiktoken.h"
#include "coordinator/server.h"
#include "fake_engine.h"

static const struct tokenizer *g_tok; /* test program: handed to the engine factory */
static int g_tick_ms = 1;

static int create_fake(struct engine **out, uv_loop_t *loop, const struct cs_config *cfg,
                       struct cs_error *err)
{
    return fake_engine_create(out, loop, cfg, g_tok, g_tick_ms, err);
}

static int tokenizer_load(const char *model, const char *vocab, struct tokenizer **tok,
                          struct cs_error *err)
{
    if (model[0]) {
        struct gguf_file *f = NULL;
        int rc = gguf_open(&f, model, err);
        if (rc == CS_OK)
            rc = tokenizer_create_from_gguf(tok, f, err);
        gguf_close(f);
        return rc;
    }
    struct vocab *v = NULL;
    int rc = vocab ? vocab_tiktoken_load(&v, vocab, 0, err) : vocab_fallback_create(&v, 0, err);
    if (rc != CS_OK)
        return rc;
    struct tokenizer_vocab_view view;
    vocab_view_fill(v, &view);
    rc = tokenizer_create(tok, &view, err);
    vocab_destroy(v);
    return rc;
}

int main(int argc, char **argv)
{
    struct cs_config cfg;
    struct cs_error err = {0};
    config_defaults(&cfg);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    if (!rest || config_parse_args(&cfg, argc, argv, &n_rest, rest, &err) != CS_OK) {
        fprintf(stderr, "cs_fake_serve: %s\n", err.msg);
        return 2;
    }
    const char *vocab = NULL;
    for (int i = 1; i < n_rest; i++) {
        if (strcmp(rest[i], "--vocab") == 0 && i + 1 < n_rest) {
            vocab = rest[++i];
        } else if (strcmp(rest[i], "--fake-tick-ms") == 0 && i + 1 < n_rest) {
            g_tick_ms = atoi(rest[++i]);
        } else {
            fprintf(stderr, "cs_fake_serve: unknown argument %s\n", rest[i]);
            return 2;
        }
    }
    free(rest);
    int level = cs_log_level_parse(cfg.log_level);
    cs_log_set_level(level < 0 ? CS_LOG_INFO : level);
    cs_log_set_process("coord");
    struct tokenizer *tok = NULL;
    if (tokenizer_load(cfg.model, vocab, &tok, &err) != CS_OK) {
        fprintf(stderr, "cs_fake_serve: %s\n", err.msg);
        return 1;
    }
    g_tok = tok;
    struct server_model model;
    memset(&model, 0, sizeof model);
    model.tok = tok;
    snprintf(model.name, sizeof model.name, "%s", cfg.model_name[0] ? cfg.model_name : "fake-model");
    int status = server_run(&cfg, &model, create_fake);
    tokenizer_destroy(tok);
    return status;
}
