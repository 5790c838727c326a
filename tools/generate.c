/* generate.c - `cmpserve generate`: in-process text generation for one raw
 * prompt (no chat template) on one backend, streaming the text to stdout.
 *
 * Flow: load the whole model (tools/cli_common.c), tokenize the prompt,
 * prefill it in chunks of up to GEN_CHUNK tokens (the last chunk samples the
 * first token), then decode one token per step with the sampler until -n
 * tokens or an end-of-generation token. Text goes through the tokenizer's
 * incremental decoder, so stdout only ever receives complete UTF-8. At the end
 * a summary (prompt and generated tokens, prefill and decode tok/s) goes to
 * stderr.
 *
 * Errors: one line on stderr and exit status 1 (a bad model file, a failed
 * step); usage errors exit 2. Library logging is off unless --log-level. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/config.h"
#include "../common/log.h"
#include "../common/status.h"
#include "../coordinator/engine_pipeline.h"
#include "cli_common.h"
#include "commands.h"

#define GEN_CHUNK 512
#define GEN_MAX_STOP 8

struct gen_opts {
    const char *model, *prompt, *device;
    int n_predict;
    int n_threads;
    int log_level;
    struct cs_sample_params sp;
    /* pipeline (--workers N): worker processes instead of the in-process model */
    int workers;
    int spin_ms;         /* pipeline_spin_ms */
    const char *kv_type; /* auto (serve's rule: f16 on a GPU), f16 or f32 */
    const char *gpus, *layer_split, *run_dir;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cmpserve generate --model FILE --prompt TEXT -n N\n"
            "         [--temperature T] [--top-k K] [--top-p P] [--min-p M]\n"
            "         [--presence-penalty X] [--frequency-penalty X] [--repetition-penalty X]\n"
            "         [--seed S] [--threads N] [--device cpu|0] [--kv-type auto|f16|f32]\n"
            "         [--log-level error|warn|info|debug]\n"
            "         [--workers N [--gpus cpu|0,1,2] [--layer-split 10,12] [--run-dir DIR]\n"
            "          [--pipeline-spin-ms MS]]\n"
            "Generates up to N tokens after the raw prompt (no chat template), streaming to stdout.\n"
            "Defaults: temperature 1 (0: greedy), top-k/top-p/min-p and penalties off, seed 0,\n"
            "all cores, device cpu. Stops early at an end-of-generation token.\n");
}

static bool parse_sampling(struct cli_args *a, struct cs_sample_params *sp)
{
    if (cli_args_opt(a, "temperature"))
        cli_parse_float(a, "temperature", 0.0, 100.0, &sp->temperature);
    else if (cli_args_opt(a, "top-k"))
        cli_parse_int(a, "top-k", 0, 1 << 30, &sp->top_k);
    else if (cli_args_opt(a, "top-p"))
        cli_parse_float(a, "top-p", 0.0, 1.0, &sp->top_p);
    else if (cli_args_opt(a, "min-p"))
        cli_parse_float(a, "min-p", 0.0, 1.0, &sp->min_p);
    else if (cli_args_opt(a, "presence-penalty"))
        cli_parse_float(a, "presence-penalty", -2.0, 2.0, &sp->presence_penalty);
    else if (cli_args_opt(a, "frequency-penalty"))
        cli_parse_float(a, "frequency-penalty", -2.0, 2.0, &sp->frequency_penalty);
    else if (cli_args_opt(a, "repetition-penalty"))
        cli_parse_float(a, "repetition-penalty", 0.01, 100.0, &sp->repetition_penalty);
    else if (cli_args_opt(a, "seed"))
        cli_parse_u64(a, "seed", &sp->seed);
    else
        return false;
    return true;
}

/* 0: ok; 1: --help printed; -1: usage error (printed). */
static int opts_parse(struct gen_opts *o, int argc, char **argv)
{
    struct cli_args a;
    cli_args_init(&a, argc, argv);
    o->device = "cpu";
    o->n_predict = -1;
    o->log_level = -1;
    o->spin_ms = -1;
    o->sp = (struct cs_sample_params){.temperature = 1.0f, .top_p = 1.0f,
                                      .repetition_penalty = 1.0f, .n_logprobs = -1};
    while (cli_args_peek(&a) && !a.error) {
        if (cli_args_flag(&a, "help") || cli_args_flag(&a, "h")) {
            usage(stdout);
            return 1;
        } else if (cli_args_opt(&a, "model")) {
            o->model = a.value;
        } else if (cli_args_opt(&a, "prompt")) {
            o->prompt = a.value;
        } else if (cli_args_opt(&a, "device")) {
            o->device = a.value;
        } else if (cli_args_opt(&a, "kv-type")) {
            o->kv_type = a.value;
        } else if (cli_args_opt(&a, "n") || cli_args_opt(&a, "n-predict")) {
            cli_parse_int(&a, "n", 0, 1 << 20, &o->n_predict);
        } else if (strcmp(cli_args_peek(&a), "-n") == 0 && a.i + 1 < a.argc) {
            a.i++;
            a.value = a.argv[a.i++];
            cli_parse_int(&a, "n", 0, 1 << 20, &o->n_predict);
        } else if (cli_args_opt(&a, "workers")) {
            cli_parse_int(&a, "workers", 1, 64, &o->workers);
        } else if (cli_args_opt(&a, "gpus")) {
            o->gpus = a.value;
        } else if (cli_args_opt(&a, "layer-split")) {
            o->layer_split = a.value;
        } else if (cli_args_opt(&a, "run-dir")) {
            o->run_dir = a.value;
        } else if (cli_args_opt(&a, "pipeline-spin-ms")) {
            cli_parse_int(&a, "pipeline-spin-ms", -1, 60000, &o->spin_ms);
        } else if (cli_args_opt(&a, "threads")) {
            cli_parse_int(&a, "threads", 0, 1024, &o->n_threads);
        } else if (cli_args_opt(&a, "log-level")) {
            o->log_level = cs_log_level_parse(a.value);
            if (o->log_level < 0) {
                fprintf(stderr, "cmpserve generate: unknown log level '%s'\n", a.value);
                a.error = true;
            }
        } else if (!parse_sampling(&a, &o->sp) && !a.error) {
            cli_args_unknown(&a);
        }
    }
    if (!a.error && (!o->model || !o->prompt || o->n_predict < 0)) {
        fprintf(stderr, "cmpserve generate: --model, --prompt and -n are required\n");
        a.error = true;
    }
    if (a.error) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* The state of one generation. */
struct gen_run {
    struct cli_session s;
    struct gen_opts *o;
    int32_t *ctx;          /* prompt + generated */
    int n_prompt, n_ctx, n_gen;
    int32_t stop[GEN_MAX_STOP];
    size_t n_stop;
    struct tokenizer_decoder dec;
    double t_prefill, t_decode;
    double t_last;         /* --workers: when the last token arrived */
};

static bool is_stop(const struct gen_run *g, int32_t id)
{
    for (size_t i = 0; i < g->n_stop; i++)
        if (g->stop[i] == id)
            return true;
    return false;
}

/* Run tokens [first, first + n) of ctx through the model; when sample is set,
 * sample the next token into *next. */
static int gen_forward(struct gen_run *g, int first, int n, bool sample, int32_t *next,
                       struct cs_error *err)
{
    struct cli_batch cb;
    int rc = cli_batch_init(&cb, g->ctx + first, n, first, g->s.max_pages);
    if (rc)
        return cs_error_set(err, rc, "out of memory");
    struct cs_sample_params sp = g->o->sp;
    sp.draw = (uint64_t)g->n_gen;
    sp.gen_tokens = g->ctx + g->n_prompt;
    sp.n_gen_tokens = g->n_gen;
    sp.ctx_tokens = g->ctx;
    sp.n_ctx_tokens = g->n_ctx;
    struct cs_sample_result res;
    memset(&res, 0, sizeof res);
    bool want = sample;
    rc = model_forward(g->s.m, g->s.st, &cb.b, NULL, NULL, &want, &sp, &res);
    if (!rc)
        rc = g->s.be->sync(g->s.be);
    cli_batch_free(&cb);
    if (rc)
        return cs_error_set(err, rc, "forward pass at position %d failed: %s", first,
                            cs_strerror(rc));
    if (sample)
        *next = res.token;
    return CS_OK;
}

static int gen_emit(struct gen_run *g, int32_t id, struct cs_error *err)
{
    const char *text;
    size_t len;
    int rc = tokenizer_decoder_feed(&g->dec, id, &text, &len);
    if (rc)
        return cs_error_set(err, rc, "cannot decode token %d", (int)id);
    if (len && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0))
        return cs_error_set(err, CS_EIO, "cannot write to stdout");
    return CS_OK;
}

static int gen_prefill(struct gen_run *g, int32_t *next, struct cs_error *err)
{
    double t0 = cli_now_s();
    for (int first = 0; first < g->n_prompt; first += GEN_CHUNK) {
        int n = g->n_prompt - first < GEN_CHUNK ? g->n_prompt - first : GEN_CHUNK;
        int rc = gen_forward(g, first, n, first + n == g->n_prompt, next, err);
        if (rc)
            return rc;
    }
    g->t_prefill = cli_now_s() - t0;
    return CS_OK;
}

static int gen_decode(struct gen_run *g, int32_t next, struct cs_error *err)
{
    double t0 = cli_now_s();
    int rc = CS_OK;
    while (g->n_gen < g->o->n_predict && !is_stop(g, next)) {
        g->ctx[g->n_ctx++] = next;
        g->n_gen++;
        if ((rc = gen_emit(g, next, err)))
            break;
        if (g->n_gen == g->o->n_predict)
            break;
        if ((rc = gen_forward(g, g->n_ctx - 1, 1, true, &next, err)))
            break;
    }
    g->t_decode = cli_now_s() - t0;
    const char *text;
    size_t len;
    if (!rc && tokenizer_decoder_flush(&g->dec, &text, &len) == CS_OK && len)
        fwrite(text, 1, len, stdout);
    fflush(stdout);
    return rc;
}

static int gen_tokenize(struct gen_run *g, struct cs_error *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tokenizer_encode(g->s.tok, g->o->prompt, strlen(g->o->prompt), false, &ids, &n);
    if (rc)
        return cs_error_set(err, rc, "cannot tokenize the prompt: %s", cs_strerror(rc));
    if (n == 0)
        return cs_error_set(err, CS_EINVAL, "the prompt is empty");
    if (n > (size_t)(1 << 24)) {
        free(ids);
        return cs_error_set(err, CS_ERANGE, "the prompt is too long (%zu tokens)", n);
    }
    g->n_prompt = (int)n;
    g->ctx = malloc(sizeof(int32_t) * (n + (size_t)g->o->n_predict + 1));
    if (!g->ctx) {
        free(ids);
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    }
    memcpy(g->ctx, ids, sizeof(int32_t) * n);
    g->n_ctx = (int)n;
    free(ids);
    return CS_OK;
}

/* ---- --workers N: the same generation through the pipeline engine ---- */

static bool gen_pipe_token(void *user, const struct cs_sample_result *tok)
{
    struct gen_run *g = user;
    g->t_last = cli_now_s();
    if (g->n_gen == 0)
        g->t_prefill = g->t_last - g->t_decode;
    g->ctx[g->n_ctx++] = tok->token;
    g->n_gen++;
    struct cs_error err = {0};
    return gen_emit(g, tok->token, &err) == CS_OK;
}

static void gen_pipe_submitted(void *user)
{
    struct gen_run *g = user;
    g->t_decode = cli_now_s();   /* start time until the first token: the load is not prefill */
}

static void gen_pipe_config(const struct gen_run *g, struct cs_config *cfg)
{
    const struct gen_opts *o = g->o;
    config_defaults(cfg);
    snprintf(cfg->model, sizeof cfg->model, "%s", o->model);
    snprintf(cfg->gpus, sizeof cfg->gpus, "%s", o->gpus ? o->gpus : "cpu");
    snprintf(cfg->layer_split, sizeof cfg->layer_split, "%s", o->layer_split ? o->layer_split : "");
    if (o->run_dir)
        snprintf(cfg->run_dir, sizeof cfg->run_dir, "%s", o->run_dir);
    snprintf(cfg->log_level, sizeof cfg->log_level, "%s",
             o->log_level == CS_LOG_DEBUG ? "debug" : o->log_level == CS_LOG_INFO ? "info"
             : o->log_level == CS_LOG_WARN ? "warn" : "error");
    cfg->workers = o->workers;
    cfg->pipeline_spin_ms = o->spin_ms;
    if (o->kv_type)
        snprintf(cfg->kv_type, sizeof cfg->kv_type, "%s", o->kv_type);
    cfg->threads = o->n_threads;
    cfg->ctx_size = g->n_prompt + o->n_predict + 1;
    cfg->max_seqs = 1;
    cfg->prefill_chunk = GEN_CHUNK;
    cfg->step_tokens = GEN_CHUNK;
}

static int gen_run_pipeline(struct gen_run *g, struct cs_error *err)
{
    int rc = gguf_open(&g->s.f, g->o->model, err);
    if (rc)
        return rc;
    if ((rc = tokenizer_create_from_gguf(&g->s.tok, g->s.f, err)) || (rc = gen_tokenize(g, err)))
        return rc;
    g->n_stop = tokenizer_eos_ids(g->s.tok, g->stop, GEN_MAX_STOP);
    if (g->n_stop > GEN_MAX_STOP)
        g->n_stop = GEN_MAX_STOP;
    tokenizer_decoder_init(&g->dec, g->s.tok, false);
    if (g->o->n_predict == 0)
        return CS_OK;
    struct cs_config cfg;
    gen_pipe_config(g, &cfg);
    g->t_decode = cli_now_s();   /* reset by gen_pipe_submitted once the stages have loaded */
    rc = engine_pipeline_generate(&cfg, g->ctx, g->n_prompt, g->o->n_predict, &g->o->sp, g->stop,
                                  (int)g->n_stop, gen_pipe_submitted, gen_pipe_token, g, err);
    /* decode: first to last token, like the in-process loop (the workers'
     * shutdown after the last token is not decode time) */
    g->t_decode = g->n_gen > 0 ? g->t_last - g->t_decode - g->t_prefill : 0;
    const char *text;
    size_t len;
    if (!rc && tokenizer_decoder_flush(&g->dec, &text, &len) == CS_OK && len)
        fwrite(text, 1, len, stdout);
    fflush(stdout);
    return rc;
}

static int gen_run_all(struct gen_run *g, struct cs_error *err)
{
    if (g->o->workers > 0)
        return gen_run_pipeline(g, err);
    struct cli_session_options so = {.model_path = g->o->model, .device = g->o->device,
                                     .n_threads = g->o->n_threads, .need_tokenizer = true,
                                     .kv_type = g->o->kv_type};
    int rc = cli_session_open(&g->s, &so, err);
    if (rc)
        return rc;
    if ((rc = gen_tokenize(g, err)))
        return rc;
    int chunk = g->n_prompt < GEN_CHUNK ? g->n_prompt : GEN_CHUNK;
    if ((rc = cli_session_state(&g->s, chunk, g->n_ctx + g->o->n_predict + 1, err)))
        return rc;
    g->n_stop = tokenizer_eos_ids(g->s.tok, g->stop, GEN_MAX_STOP);
    if (g->n_stop > GEN_MAX_STOP)
        g->n_stop = GEN_MAX_STOP;
    tokenizer_decoder_init(&g->dec, g->s.tok, false);
    int32_t next = -1;
    if (g->o->n_predict == 0)
        return CS_OK;
    if ((rc = gen_prefill(g, &next, err)))
        return rc;
    return gen_decode(g, next, err);
}

int generate_main(int argc, char **argv)
{
    struct gen_opts o;
    memset(&o, 0, sizeof o);
    int prc = opts_parse(&o, argc, argv);
    if (prc)
        return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    cs_log_set_process("cli");
    cs_log_set_level(o.log_level);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error, not a signal */
    struct gen_run g;
    memset(&g, 0, sizeof g);
    g.o = &o;
    struct cs_error err = {0};
    int rc = gen_run_all(&g, &err);
    if (g.dec.tok)
        tokenizer_decoder_free(&g.dec);
    cli_session_close(&g.s);
    free(g.ctx);
    if (rc) {
        fflush(stdout);
        cli_fail("generate", "%s", err.msg[0] ? err.msg : cs_strerror(rc));
        return CLI_EXIT_ERROR;
    }
    fprintf(stdout, "\n");
    fprintf(stderr,
            "prompt tokens: %d, generated tokens: %d, prefill: %.1f tok/s, decode: %.1f tok/s\n",
            g.n_prompt, g.n_gen, g.t_prefill > 0 ? g.n_prompt / g.t_prefill : 0.0,
            g.t_decode > 0 && g.n_gen > 1 ? (g.n_gen - 1) / g.t_decode : 0.0);
    return CLI_EXIT_OK;
}
