/* bench_decode.c - `cmpserve bench --model`'s decode rows: tok/s per context
 * depth and batch size, each beside its ratio to the read bandwidth the
 * probes measured in the same run (tools/bench.c), and a check that batching
 * does not change a single token.
 *
 * A row (depth d, batch B): B sequences at position d, one token each per
 * step, all in one forward call (what serve's scheduler runs when B requests
 * decode at once). Every sequence starts from a copy of one prefilled state,
 * so at greedy sampling they must all emit the token stream that the first
 * row at that depth emitted: the numerics contract makes a token's bits
 * independent of the batch (kernels/numerics.h), and this runs it through
 * every batched kernel path of the whole model at real shapes.
 *
 * What a step reads: the weights once, plus per sequence its KV (at the
 * mean depth of the timed steps) and its GDN state read and written. The
 * ratio is that over the measured read bandwidth; tok/s counts every
 * sequence's tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/status.h"
#include "../worker/model.h"
#include "bench_model.h"

/* One step of n_seqs sequences, token in[i] at position pos each; out[i]
 * the greedy choice. Sequence i: GDN slot i, KV pages [i max_pages, ..). */
struct dstep {
    int n;
    int32_t *pos, *seq_of, *seq_start, *slot, *page_table;
    bool *sample;
    struct cs_sample_params *params;
    struct cs_sample_result *res;
};

static void dstep_free(struct dstep *d)
{
    free(d->pos);
    free(d->seq_of);
    free(d->seq_start);
    free(d->slot);
    free(d->page_table);
    free(d->sample);
    free(d->params);
    free(d->res);
    memset(d, 0, sizeof *d);
}

static int dstep_init(struct dstep *d, int n, int max_pages)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    d->pos = calloc((size_t)n, sizeof *d->pos);
    d->seq_of = calloc((size_t)n, sizeof *d->seq_of);
    d->seq_start = calloc((size_t)n + 1, sizeof *d->seq_start);
    d->slot = calloc((size_t)n, sizeof *d->slot);
    d->page_table = calloc((size_t)n * max_pages, sizeof *d->page_table);
    d->sample = calloc((size_t)n, sizeof *d->sample);
    d->params = calloc((size_t)n, sizeof *d->params);
    d->res = calloc((size_t)n, sizeof *d->res);
    if (!d->pos || !d->seq_of || !d->seq_start || !d->slot || !d->page_table || !d->sample ||
        !d->params || !d->res) {
        dstep_free(d);
        return CS_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        d->seq_of[i] = d->seq_start[i] = d->slot[i] = i;
        for (int p = 0; p < max_pages; p++)
            d->page_table[(size_t)i * max_pages + p] = i * max_pages + p;
        d->sample[i] = true;
        d->params[i].temperature = 0.0f;
        d->params[i].top_p = 1.0f;
        d->params[i].repetition_penalty = 1.0f;
        d->params[i].n_logprobs = -1;
    }
    d->seq_start[n] = n;
    return CS_OK;
}

static int dstep_run(struct cli_session *s, struct dstep *d, const int32_t *in, int pos,
                     int32_t *out)
{
    for (int i = 0; i < d->n; i++)
        d->pos[i] = pos;
    struct cs_batch b = {
        .n_tokens = d->n,
        .n_seqs = d->n,
        .tokens = in,
        .pos = d->pos,
        .seq_of = d->seq_of,
        .seq_start = d->seq_start,
        .slot = d->slot,
        .page_table = d->page_table,
        .max_pages = s->max_pages,
    };
    int rc = model_forward(s->m, s->st, &b, NULL, NULL, d->sample, d->params, d->res);
    for (int i = 0; rc == CS_OK && i < d->n; i++)
        out[i] = d->res[i].token;
    return rc;
}

/* Sequences 0..n-1 from the snapshot: GDN slot `snap` and sequence 0's KV
 * pages holding positions [0, depth) (sequence 0's later pages were written
 * by an earlier row only at positions >= depth, which a step writes before
 * it reads them). */
static int seqs_restore(struct cli_session *s, int n, int snap, int depth)
{
    int used = (depth + s->page_size - 1) / s->page_size, rc = CS_OK;
    for (int i = 0; i < n && rc == CS_OK; i++) {
        rc = state_slot_copy(s->st, i, snap);
        if (rc == CS_OK && i > 0)
            rc = state_kv_pages_copy(s->st, i * s->max_pages, 0, used);
    }
    return rc == CS_OK ? s->be->sync(s->be) : rc;
}

/* One row: B sequences from token `first` at position depth, one untimed
 * step (it records this batch shape's graph) and gen timed ones. stream:
 * [B][gen + 1] tokens out. Returns a status; *sec the timed steps' time. */
static int decode_row(struct cli_session *s, int B, int depth, int gen, int32_t first,
                      int32_t *stream, double *sec)
{
    struct dstep d;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * 2);
    int rc = tok ? dstep_init(&d, B, s->max_pages) : CS_ENOMEM;
    if (rc != CS_OK) {
        free(tok);
        return rc;
    }
    int32_t *in = tok, *out = tok + B;
    for (int i = 0; i < B; i++)
        in[i] = first;
    double t0 = 0;
    for (int g = 0; g <= gen && rc == CS_OK; g++) {
        if (g == 1)
            t0 = cli_now_s();
        rc = dstep_run(s, &d, in, depth + g, out);
        for (int i = 0; rc == CS_OK && i < B; i++)
            stream[(size_t)i * (gen + 1) + g] = in[i] = out[i];
    }
    if (rc == CS_OK)
        rc = s->be->sync(s->be);
    *sec = cli_now_s() - t0;
    dstep_free(&d);
    free(tok);
    return rc;
}

int bench_decode(struct cli_session *s, const struct bench_decode_opts *o, const struct mcount *mc,
                 double read_gbps, int32_t *tokens, bool *same)
{
    int max_b = 1;
    for (int j = 0; j < o->n_batches; j++)
        max_b = o->batches[j] > max_b ? o->batches[j] : max_b;
    if (max_b > s->n_seqs || s->n_spare_slots < 1)
        return CS_EINVAL;
    int snap = s->n_seqs;   /* the spare slot */
    size_t len = (size_t)o->gen + 1;
    int32_t *stream = malloc(sizeof(int32_t) * len * max_b), *ref = malloc(sizeof(int32_t) * len);
    if (!stream || !ref) {
        free(stream);
        free(ref);
        return CS_ENOMEM;
    }
    int rc = CS_OK, first_row = 1;
    int32_t next = tokens[0];
    for (int i = 0; i < o->n_depths && rc == CS_OK; i++) {
        int d = o->depths[i];
        if ((rc = state_slot_reset(s->st, 0)) != CS_OK)
            break;
        if (d > 0 && (rc = bench_model_run(s, tokens, d, 0, o->chunk, &next)) != CS_OK)
            break;
        if ((rc = state_slot_copy(s->st, snap, 0)) != CS_OK)
            break;
        for (int j = 0; j < o->n_batches && rc == CS_OK; j++) {
            int B = o->batches[j];
            double sec = 0;
            if ((rc = seqs_restore(s, B, snap, d)) != CS_OK ||
                (rc = decode_row(s, B, d, o->gen, next, stream, &sec)) != CS_OK)
                break;
            if (j == 0)
                memcpy(ref, stream, sizeof(int32_t) * len);
            bool row_same = true;
            for (int q = 0; q < B; q++)
                row_same &= memcmp(stream + (size_t)q * len, ref, sizeof(int32_t) * len) == 0;
            *same &= row_same;
            double steps = o->gen / sec, tps = B * steps;
            double kv = mc->kv_bytes_per_pos * (d + 1 + o->gen / 2.0);
            double bytes = mc->read_bytes + B * (mc->gdn_state_bytes + kv);
            double ratio = steps * bytes / (read_gbps * 1e9);
            if (o->json)
                printf("%s{\"depth\":%d,\"batch\":%d,\"tok_s\":%.2f,\"bytes_per_step\":%.0f,"
                       "\"ratio\":%.4f,\"same_tokens\":%s}",
                       first_row ? "" : ",", d, B, tps, bytes, ratio, row_same ? "true" : "false");
            else if (o->n_batches == 1 && B == 1)   /* the line docs/PERF.md has always quoted */
                printf("decode at depth %6d: %8.2f tok/s  %.2f GB/token  %5.1f%% of read bandwidth\n",
                       d, tps, bytes / 1e9, 100 * ratio);
            else
                printf("decode at depth %6d, batch %2d: %8.2f tok/s (%7.2f a sequence)  %.2f GB/step  "
                       "%5.1f%% of read bandwidth  tokens %s\n",
                       d, B, tps, steps, bytes / 1e9, 100 * ratio,
                       !row_same ? "DIFFER" : j == 0 ? "the reference" : "same as the first row");
            first_row = 0;
        }
    }
    free(stream);
    free(ref);
    return rc;
}
