/* main.c - `cmpserve serve`: configuration (flags and --config FILE, one
 * struct), the model's tokenizer and chat template read from the GGUF, then
 * the API server over the in-process engine (server_run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/gguf.h"
#include "common/log.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"
#include "coordinator/engine_pipeline.h"
#include "coordinator/server.h"
#include "tools/commands.h"

/* Tokenizer, template variant and model id from the GGUF at cfg->model. */
static int model_load(const struct cs_config *cfg, struct server_model *m, struct tokenizer **tok,
                      struct cs_error *err)
{
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, cfg->model, err);
    if (rc != CS_OK)
        return rc;
    rc = tokenizer_create_from_gguf(tok, f, err);
    char *tmpl = NULL;
    if (rc == CS_OK && gguf_get_str(f, "tokenizer.chat_template", &tmpl, NULL) != CS_OK)
        tmpl = NULL;
    if (rc == CS_OK && template_variant_detect(tmpl, &m->variant) != CS_OK)
        LOG_WARN("serve", "chat template not recognised: rendering with Qwen3.5 semantics");
    free(tmpl);
    gguf_close(f);
    if (rc != CS_OK)
        return rc;
    m->tok = *tok;
    if (cfg->model_name[0]) {
        snprintf(m->name, sizeof m->name, "%s", cfg->model_name);
    } else {
        const char *base = strrchr(cfg->model, '/');
        snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : cfg->model);
    }
    return CS_OK;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: cmpserve serve --model FILE [--gpus cpu|auto|0,1,2] [--port N] "
                 "[--config FILE] [options]\n\noptions:\n");
    config_usage(out);
}

int serve_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    struct cs_config cfg;
    struct cs_error err = {0};
    config_defaults(&cfg);
    if (config_parse_args(&cfg, argc, argv, NULL, NULL, &err) != CS_OK) {
        fprintf(stderr, "cmpserve serve: %s\n", err.msg);
        usage(stderr);
        return 2;
    }
    if (cfg.test_script[0] && !cfg.allow_test_options) {
        fprintf(stderr, "cmpserve serve: --test-script is a test-only option; it needs "
                        "--allow-test-options\n");
        return 2;
    }
    if (!cfg.model[0]) {
        fprintf(stderr, "cmpserve serve: --model FILE is required\n");
        usage(stderr);
        return 2;
    }
    int level = cs_log_level_parse(cfg.log_level);
    cs_log_set_level(level < 0 ? CS_LOG_INFO : level);
    cs_log_set_process("coord");
    config_print(&cfg, stderr);
    struct server_model model;
    memset(&model, 0, sizeof model);
    struct tokenizer *tok = NULL;
    if (model_load(&cfg, &model, &tok, &err) != CS_OK) {
        fprintf(stderr, "cmpserve serve: %s\n", err.msg);
        return 1;
    }
    /* worker processes when asked for (--workers, --attach, a device list) */
    int status = server_run(&cfg, &model, engine_pipeline_wanted(&cfg) ? engine_pipeline_create
                                                                         : engine_local_create);
    tokenizer_destroy(tok);
    return status;
}
