/* logits.c - `cmpserve logits`: the logits of every position of a given token
 * sequence, for the reference check against transformers and the GPU tests.
 *
 * Runs one prefill batch of the --tokens ids (model_forward_logits), then N
 * greedy decode steps of one token each, feeding back the argmax (lowest id on
 * ties). Output file, little-endian:
 *   char     magic[4]   "CSLG"
 *   uint32   version    1
 *   uint32   n_positions = n_prompt + n_decode
 *   uint32   n_vocab
 *   uint32   n_prompt
 *   uint32   n_decode
 *   int32    tokens[n_positions]      the id fed at each position
 *   int32    argmax[n_positions]      the greedy id after each position
 *   float32  logits[n_positions][n_vocab]
 * Errors: one line on stderr, exit 1; usage errors exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/status.h"
#include "cli_common.h"
#include "commands.h"

#define LOGITS_MAX_POSITIONS (1 << 16)

struct lg_opts {
    const char *model, *tokens, *out, *device;
    int n_decode, n_threads, log_level;
    bool int8;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cmpserve logits --model FILE --tokens ID,ID,... [--decode N] --out FILE.bin\n"
            "         [--device cpu|0] [--int8] [--threads N] [--log-level LEVEL]\n"
            "Writes the fp32 logits of every position (prefill, then N greedy decode steps).\n");
}

static int opts_parse(struct lg_opts *o, int argc, char **argv)
{
    struct cli_args a;
    cli_args_init(&a, argc, argv);
    o->device = "cpu";
    o->log_level = -1;
    while (cli_args_peek(&a) && !a.error) {
        if (cli_args_flag(&a, "help") || cli_args_flag(&a, "h")) {
            usage(stdout);
            return 1;
        } else if (cli_args_opt(&a, "model")) {
            o->model = a.value;
        } else if (cli_args_opt(&a, "tokens")) {
            o->tokens = a.value;
        } else if (cli_args_opt(&a, "out")) {
            o->out = a.value;
        } else if (cli_args_opt(&a, "device")) {
            o->device = a.value;
        } else if (cli_args_opt(&a, "decode")) {
            cli_parse_int(&a, "decode", 0, LOGITS_MAX_POSITIONS / 2, &o->n_decode);
        } else if (cli_args_opt(&a, "threads")) {
            cli_parse_int(&a, "threads", 0, 1024, &o->n_threads);
        } else if (cli_args_flag(&a, "int8")) {
            o->int8 = true;
        } else if (cli_args_opt(&a, "log-level")) {
            o->log_level = cs_log_level_parse(a.value);
            if (o->log_level < 0) {
                fprintf(stderr, "cmpserve logits: unknown log level '%s'\n", a.value);
                a.error = true;
            }
        } else if (!a.error) {
            cli_args_unknown(&a);
        }
    }
    if (!a.error && (!o->model || !o->tokens || !o->out)) {
        fprintf(stderr, "cmpserve logits: --model, --tokens and --out are required\n");
        a.error = true;
    }
    if (a.error) {
        usage(stderr);
        return -1;
    }
    return 0;
}

struct lg_run {
    struct cli_session s;
    int32_t *ids;          /* [n_pos] fed ids */
    int32_t *argmax;       /* [n_pos] */
    float *logits;         /* [n_pos][n_vocab] */
    int n_prompt, n_pos, n_vocab;
};

static int32_t row_argmax(const float *row, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

/* Run ids [first, first + n) and store their logits rows and argmaxes. */
static int lg_forward(struct lg_run *r, int first, int n, struct cs_error *err)
{
    struct cli_batch cb;
    int rc = cli_batch_init(&cb, r->ids + first, n, first, r->s.max_pages);
    if (rc)
        return cs_error_set(err, rc, "out of memory");
    float *rows = r->logits + (size_t)first * (size_t)r->n_vocab;
    rc = model_forward_logits(r->s.m, r->s.st, &cb.b, NULL, rows);
    if (!rc)
        rc = r->s.be->sync(r->s.be);
    cli_batch_free(&cb);
    if (rc)
        return cs_error_set(err, rc, "forward pass at position %d failed: %s", first,
                            cs_strerror(rc));
    for (int i = 0; i < n; i++)
        r->argmax[first + i] = row_argmax(rows + (size_t)i * (size_t)r->n_vocab, r->n_vocab);
    return CS_OK;
}

static int lg_write(const struct lg_run *r, const struct lg_opts *o, struct cs_error *err)
{
    FILE *f = fopen(o->out, "wb");
    if (!f)
        return cs_error_set(err, CS_EIO, "cannot create %s", o->out);
    uint32_t hdr[5] = {1, (uint32_t)r->n_pos, (uint32_t)r->n_vocab, (uint32_t)r->n_prompt,
                       (uint32_t)o->n_decode};
    size_t np = (size_t)r->n_pos, nl = np * (size_t)r->n_vocab;
    bool ok = fwrite("CSLG", 1, 4, f) == 4 && fwrite(hdr, 4, 5, f) == 5 &&
              fwrite(r->ids, 4, np, f) == np && fwrite(r->argmax, 4, np, f) == np &&
              fwrite(r->logits, 4, nl, f) == nl;
    if (fclose(f) != 0)
        ok = false;
    if (!ok)
        return cs_error_set(err, CS_EIO, "cannot write %s", o->out);
    return CS_OK;
}

static int lg_run_all(struct lg_run *r, const struct lg_opts *o, struct cs_error *err)
{
    int32_t *prompt = NULL;
    int rc = cli_parse_id_list(o->tokens, &prompt, &r->n_prompt);
    if (rc)
        return cs_error_set(err, rc, "--tokens must be a comma-separated list of token ids");
    r->n_pos = r->n_prompt + o->n_decode;
    r->ids = calloc((size_t)r->n_pos, sizeof(int32_t));
    r->argmax = calloc((size_t)r->n_pos, sizeof(int32_t));
    if (!r->ids || !r->argmax || r->n_pos > LOGITS_MAX_POSITIONS) {
        free(prompt);
        return cs_error_set(err, CS_ENOMEM, "too many positions (%d)", r->n_pos);
    }
    memcpy(r->ids, prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    free(prompt);
    struct cli_session_options so = {.model_path = o->model, .device = o->device,
                                     .n_threads = o->n_threads, .int8_matmul = o->int8,
                                     .max_tokens = r->n_prompt, .max_ctx = r->n_pos,
                                     .kv_type = "f32"};   /* reference checks: full precision */
    if ((rc = cli_session_open(&r->s, &so, err)))
        return rc;
    r->n_vocab = r->s.m->hp.n_vocab;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->ids[i] < 0 || r->ids[i] >= r->n_vocab)
            return cs_error_set(err, CS_ERANGE, "token id %d outside the vocabulary (%d)",
                                (int)r->ids[i], r->n_vocab);
    r->logits = malloc(sizeof(float) * (size_t)r->n_pos * (size_t)r->n_vocab);
    if (!r->logits)
        return cs_error_set(err, CS_ENOMEM, "out of memory for %d x %d logits", r->n_pos,
                            r->n_vocab);
    if ((rc = lg_forward(r, 0, r->n_prompt, err)))
        return rc;
    for (int p = r->n_prompt; p < r->n_pos; p++) {
        r->ids[p] = r->argmax[p - 1];
        if ((rc = lg_forward(r, p, 1, err)))
            return rc;
    }
    return lg_write(r, o, err);
}

int logits_main(int argc, char **argv)
{
    struct lg_opts o;
    memset(&o, 0, sizeof o);
    int prc = opts_parse(&o, argc, argv);
    if (prc)
        return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    cs_log_set_process("cli");
    cs_log_set_level(o.log_level);
    struct lg_run r;
    memset(&r, 0, sizeof r);
    struct cs_error err = {0};
    int rc = lg_run_all(&r, &o, &err);
    cli_session_close(&r.s);
    free(r.ids);
    free(r.argmax);
    free(r.logits);
    if (rc) {
        cli_fail("logits", "%s", err.msg[0] ? err.msg : cs_strerror(rc));
        return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}
