/* cli_common.c - argument iteration, strict number parsing and one-line error
 * reporting for the tools/ subcommands (see cli_common.h). */
#include "cli_common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/status.h"
#include "../worker/load_progress.h"

void cli_args_init(struct cli_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->argc = argc;
    a->argv = argv;
    a->i = 1;
    a->cmd = argc > 0 ? argv[0] : "?";
}

const char *cli_args_peek(const struct cli_args *a)
{
    return a->i < a->argc ? a->argv[a->i] : NULL;
}

/* Does arg match "--name" exactly (eq == NULL) or "--name=..." (eq set)? */
static bool flag_match(const char *arg, const char *name, const char **eq)
{
    *eq = NULL;
    if (strncmp(arg, "--", 2) != 0)
        return false;
    size_t n = strlen(name);
    if (strncmp(arg + 2, name, n) != 0)
        return false;
    if (arg[2 + n] == '\0')
        return true;
    if (arg[2 + n] == '=') {
        *eq = arg + 3 + n;
        return true;
    }
    return false;
}

bool cli_args_opt(struct cli_args *a, const char *name)
{
    const char *arg = cli_args_peek(a), *eq;
    if (!arg || !flag_match(arg, name, &eq))
        return false;
    a->i++;
    if (eq) {
        a->value = eq;
        return true;
    }
    if (a->i >= a->argc) {
        fprintf(stderr, "cmpserve %s: option --%s needs a value\n", a->cmd, name);
        a->error = true;
        return false;
    }
    a->value = a->argv[a->i++];
    return true;
}

bool cli_args_flag(struct cli_args *a, const char *name)
{
    const char *arg = cli_args_peek(a), *eq;
    if (!arg || !flag_match(arg, name, &eq) || eq)
        return false;
    a->i++;
    return true;
}

void cli_args_unknown(struct cli_args *a)
{
    const char *arg = cli_args_peek(a);
    fprintf(stderr, "cmpserve %s: unknown argument '%s'\n", a->cmd, arg ? arg : "");
    a->error = true;
    a->i++;
}

static void bad_value(struct cli_args *a, const char *name, const char *want)
{
    fprintf(stderr, "cmpserve %s: --%s expects %s, got '%s'\n", a->cmd, name, want, a->value);
    a->error = true;
}

void cli_parse_int(struct cli_args *a, const char *name, long min, long max, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(a->value, &end, 10);
    if (errno || end == a->value || *end != '\0' || v < min || v > max) {
        char want[96];
        snprintf(want, sizeof want, "an integer in [%ld, %ld]", min, max);
        bad_value(a, name, want);
        return;
    }
    *out = (int)v;
}

void cli_parse_u64(struct cli_args *a, const char *name, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    if (a->value[0] == '-') {
        bad_value(a, name, "a non-negative integer");
        return;
    }
    unsigned long long v = strtoull(a->value, &end, 10);
    if (errno || end == a->value || *end != '\0') {
        bad_value(a, name, "a non-negative integer");
        return;
    }
    *out = (uint64_t)v;
}

void cli_parse_float(struct cli_args *a, const char *name, double min, double max, float *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(a->value, &end);
    if (errno || end == a->value || *end != '\0' || !isfinite(v) || v < min || v > max) {
        char want[96];
        snprintf(want, sizeof want, "a number in [%g, %g]", min, max);
        bad_value(a, name, want);
        return;
    }
    *out = (float)v;
}

void cli_fail(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    fprintf(stderr, "cmpserve %s: %s\n", cmd, msg);
}

int cli_parse_id_list(const char *s, int32_t **out, int *n_out)
{
    int cap = 16, n = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids)
        return CS_ENOMEM;
    const char *p = s;
    for (;;) {
        char *end = NULL;
        errno = 0;
        if (*p < '0' || *p > '9')
            goto bad;
        long v = strtol(p, &end, 10);
        if (errno || v > INT32_MAX)
            goto bad;
        if (n == cap) {
            int32_t *grown = realloc(ids, sizeof *ids * (size_t)cap * 2);
            if (!grown) {
                free(ids);
                return CS_ENOMEM;
            }
            ids = grown;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            goto bad;
        p = end + 1;
    }
    *out = ids;
    *n_out = n;
    return CS_OK;
bad:
    free(ids);
    return CS_EINVAL;
}

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- a loaded model for the in-process subcommands ---- */

#define CLI_PAGE_SIZE 256

static int session_backend(struct cli_session *s, const struct cli_session_options *o,
                           struct cs_error *err)
{
    const char *dev = o->device ? o->device : "cpu";
    int rc;
    if (strcmp(dev, "cpu") == 0) {
        struct cs_backend_cpu_options opt = {.n_threads = o->n_threads,
                                             .int8_matmul = o->int8_matmul};
        rc = cs_backend_cpu_create(&s->be, &opt);
    } else {
        rc = cs_backend_create(&s->be, dev, o->n_threads);
    }
    if (rc)
        return cs_error_set(err, rc, "cannot create backend '%s': %s", dev, cs_strerror(rc));
    return CS_OK;
}

int cli_session_open(struct cli_session *s, const struct cli_session_options *o,
                     struct cs_error *err)
{
    memset(s, 0, sizeof *s);
    int rc = gguf_open(&s->f, o->model_path, err);
    if (rc)
        goto fail;
    if (o->need_tokenizer && (rc = tokenizer_create_from_gguf(&s->tok, s->f, err))) {
        cs_error_prefix(err, "%s: tokenizer", o->model_path);
        goto fail;
    }
    if ((rc = session_backend(s, o, err)))
        goto fail;
    bool on_cpu = strcmp(s->be->name, "cpu") == 0;
    if (!o->kv_type || strcmp(o->kv_type, "auto") == 0)
        s->kv_type = on_cpu ? CS_DTYPE_F32 : CS_DTYPE_F16;
    else if (strcmp(o->kv_type, "f32") == 0 || strcmp(o->kv_type, "f16") == 0)
        s->kv_type = o->kv_type[1] == '3' ? CS_DTYPE_F32 : CS_DTYPE_F16;
    else {
        rc = cs_error_set(err, CS_EINVAL, "kv type '%s' is not f32, f16 or auto", o->kv_type);
        goto fail;
    }
    if (o->no_cuda_graphs && s->be->graph_enable)
        s->be->graph_enable(s->be, false);
    if (o->no_cuda_pdl && s->be->pdl_enable)
        s->be->pdl_enable(s->be, false);
    s->m = calloc(1, sizeof *s->m);
    if (!s->m) {
        rc = cs_error_set(err, CS_ENOMEM, "out of memory");
        goto fail;
    }
    struct cs_hparams hp;
    if ((rc = model_hparams_read(&hp, s->f, err))) {
        cs_error_prefix(err, "%s", o->model_path);
        goto fail;
    }
    struct load_progress lp;
    rc = model_load(s->m, s->f, s->be, 0, hp.n_layer, load_progress_cb, load_progress_begin(&lp),
                    err);
    if (rc) {
        cs_error_prefix(err, "%s", o->model_path);
        free(s->m);
        s->m = NULL;
        goto fail;
    }
    s->n_seqs = o->n_seqs > 0 ? o->n_seqs : 1;
    s->n_spare_slots = o->n_spare_slots > 0 ? o->n_spare_slots : 0;
    if (o->max_ctx > 0 && (rc = cli_session_state(s, o->max_tokens, o->max_ctx, err)))
        goto fail;
    return CS_OK;
fail:
    if (!err->msg[0])
        cs_error_set(err, rc, "%s: %s", o->model_path, cs_strerror(rc));
    cli_session_close(s);
    return rc;
}

int cli_session_state(struct cli_session *s, int max_tokens, int max_ctx, struct cs_error *err)
{
    if (s->st) {
        state_destroy(s->st);
        s->st = NULL;
    }
    int n_seqs = s->n_seqs > 0 ? s->n_seqs : 1;
    int per_seq = (max_ctx + CLI_PAGE_SIZE - 1) / CLI_PAGE_SIZE;
    if (per_seq < 1)
        per_seq = 1;
    if ((size_t)per_seq * n_seqs > INT32_MAX)
        return cs_error_set(err, CS_EINVAL, "%d sequences of %d positions: too many KV pages",
                            n_seqs, max_ctx);
    struct cs_state_config cfg = {
        .max_tokens = max_tokens < 1 ? 1 : max_tokens,
        .n_slots = n_seqs + s->n_spare_slots,
        .kv_pages = per_seq * n_seqs,
        .page_size = CLI_PAGE_SIZE,
        .kv_type = s->kv_type ? s->kv_type : CS_DTYPE_F32,
    };
    s->max_pages = per_seq;
    s->page_size = CLI_PAGE_SIZE;
    int rc = state_create(&s->st, s->m, &cfg, err);
    if (rc) {
        if (!err->msg[0])
            cs_error_set(err, rc, "cannot create the model state: %s", cs_strerror(rc));
        return rc;
    }
    if ((rc = state_slot_reset(s->st, 0)))
        return cs_error_set(err, rc, "cannot reset the state slot: %s", cs_strerror(rc));
    return CS_OK;
}

void cli_session_close(struct cli_session *s)
{
    if (s->st)
        state_destroy(s->st);
    if (s->m) {
        model_free(s->m);
        free(s->m);
    }
    if (s->be)
        s->be->destroy(s->be);
    if (s->tok)
        tokenizer_destroy(s->tok);
    if (s->f)
        gguf_close(s->f);
    memset(s, 0, sizeof *s);
}

int cli_batch_init(struct cli_batch *cb, const int32_t *tokens, int n, int pos0, int max_pages)
{
    memset(cb, 0, sizeof *cb);
    cb->pos = malloc(sizeof(int32_t) * (size_t)n);
    cb->seq_of = calloc((size_t)n, sizeof(int32_t));
    cb->page_table = malloc(sizeof(int32_t) * (size_t)(max_pages > 0 ? max_pages : 1));
    if (!cb->pos || !cb->seq_of || !cb->page_table) {
        cli_batch_free(cb);
        return CS_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        cb->pos[i] = pos0 + i;
    for (int p = 0; p < max_pages; p++)
        cb->page_table[p] = p;
    cb->seq_start[0] = 0;
    cb->seq_start[1] = n;
    cb->slot[0] = 0;
    cb->b = (struct cs_batch){
        .n_tokens = n,
        .n_seqs = 1,
        .tokens = tokens,
        .pos = cb->pos,
        .seq_of = cb->seq_of,
        .seq_start = cb->seq_start,
        .slot = cb->slot,
        .page_table = cb->page_table,
        .max_pages = max_pages,
    };
    return CS_OK;
}

void cli_batch_free(struct cli_batch *cb)
{
    free(cb->pos);
    free(cb->seq_of);
    free(cb->page_table);
    memset(cb, 0, sizeof *cb);
}
