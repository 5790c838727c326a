/* test_graph.c - proves that decode steps recorded and replayed as CUDA
 * graphs (kernels/cuda/ops_cuda.cu, worker/model.c step_body) give bitwise
 * the logits and samples of the same steps run op by op.
 *
 * A tiny Q8_0 qwen35 model (tests/model/fixture.c) runs the same steps on
 * three model states of one CUDA backend: A (one slice, graphs on), B (one
 * slice, graphs off: the reference) and C (two chained slices, graphs on,
 * so the non-first stage copies its input outside the graph). Steps: a
 * prefill of sequence 0, 1-sequence decode, a mixed step (decode + two
 * prefills, eager), then 3-sequence decode up to ~600 positions (crossing
 * the 256-position attention splits and so the graphs' split buckets), with
 * 2-sequence steps and a freed buffer (every graph stale) in between. Even
 * steps compare all logits (model_forward_logits: layers in the graph), odd
 * steps greedy samples with top logprobs (model_forward: layers and LM head
 * in the graph). It also requires that graphs were really recorded and
 * replayed, and that steps with graphs off replayed nothing. It prints the
 * arch of the loaded kernels (a build for compute_75 run as PTX on a newer
 * card runs its sm_75 paths: no PDL, no clusters).
 * Prints "RESULT <check> PASS|FAIL err=<mismatches> (bound 0)" lines for
 * tests/gpu/run.sh. Usage: test_gpu_graph [cuda device index] (default 0).
 * Not a ctest test (needs a GPU); exits 77 when no CUDA device is present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../../kernels/cuda/launch.h"
#include "../../worker/model.h"
#include "../model/fixture.h"

#define G_PAGE 16
#define G_MAXP 40              /* pages per sequence: 640 positions */
#define G_SEQS 3
#define G_MAX_TOKENS 64
#define G_LAST_POS 600
#define G_SIDES 3              /* A: graphs, B: eager reference, C: two slices with graphs */

struct side {
    struct cs_model m[2];
    struct cs_state *st[2];
    int n_stages;
    float *hid;                /* between the stages of C */
};

static struct cs_backend *be;
static struct gguf_file *gf;
static struct side sides[G_SIDES];
static float *logits[G_SIDES];

/* One check's tally: mismatching values over the steps it covers. */
struct tally {
    const char *name;
    long steps, mismatches;
};
static struct tally t_logits1 = {.name = "graph decode 1 seq logits"};
static struct tally t_logitsn = {.name = "graph decode 2-3 seqs logits"};
static struct tally t_sample = {.name = "graph decode sampled results"};
static struct tally t_slices = {.name = "graph two slices logits+samples"};
static int n_failed;

static void result(const char *name, bool ok, double err)
{
    printf("RESULT %-34s %s err=%.3g (bound 0)\n", name, ok ? "PASS" : "FAIL", err);
    if (!ok)
        n_failed++;
}

static int side_open(struct side *s, int n_stages)
{
    struct cs_error err = {0};
    int bounds[3] = {0, n_stages == 1 ? FX_LAYERS : 2, FX_LAYERS};
    struct cs_state_config cfg = {.max_tokens = G_MAX_TOKENS, .n_slots = G_SEQS + 1,
                                  .kv_pages = G_SEQS * G_MAXP, .page_size = G_PAGE,
                                  .kv_type = CS_DTYPE_F16};
    s->n_stages = n_stages;
    for (int i = 0; i < n_stages; i++)
        if (model_load(&s->m[i], gf, be, bounds[i], bounds[i + 1], NULL, NULL, &err) ||
            state_create(&s->st[i], &s->m[i], &cfg, &err)) {
            fprintf(stderr, "test_graph: stage %d: %s\n", i, err.msg);
            return -1;
        }
    return be->alloc(be, (void **)&s->hid, (size_t)G_MAX_TOKENS * FX_E * sizeof(float));
}

static void side_close(struct side *s)
{
    for (int i = 0; i < s->n_stages; i++) {
        if (s->st[i])
            state_destroy(s->st[i]);
        model_free(&s->m[i]);
    }
    if (s->hid)
        be->free(be, s->hid);
}

/* ---- batches: sequence q uses slot q and pages q*G_MAXP .. ---- */

struct gbatch {
    int32_t tokens[G_MAX_TOKENS], pos[G_MAX_TOKENS], seq_of[G_MAX_TOKENS];
    int32_t seq_start[G_SEQS + 1], slot[G_SEQS], page_table[G_SEQS * G_MAXP];
    int seq_id[G_SEQS];        /* which sequence each batch sequence is */
    struct cs_batch b;
};

static int seq_pos[G_SEQS];

static void gbatch_init(struct gbatch *gb)
{
    memset(gb, 0, sizeof *gb);
    gb->b = (struct cs_batch){.tokens = gb->tokens, .pos = gb->pos, .seq_of = gb->seq_of,
                              .seq_start = gb->seq_start, .slot = gb->slot,
                              .page_table = gb->page_table, .max_pages = G_MAXP};
}

static void gbatch_add(struct gbatch *gb, int q, const int32_t *toks, int n)
{
    struct cs_batch *b = &gb->b;
    int k = b->n_seqs++;
    gb->seq_id[k] = q;
    gb->slot[k] = q;
    for (int p = 0; p < G_MAXP; p++)
        gb->page_table[k * G_MAXP + p] = q * G_MAXP + p;
    gb->seq_start[k] = b->n_tokens;
    for (int i = 0; i < n; i++) {
        int t = b->n_tokens++;
        gb->tokens[t] = toks[i];
        gb->pos[t] = seq_pos[q]++;
        gb->seq_of[t] = k;
    }
    gb->seq_start[b->n_seqs] = b->n_tokens;
}

/* ---- running a step on a side ---- */

static int side_logits(struct side *s, const struct cs_batch *b, float *out)
{
    const float *in = NULL;
    if (s->n_stages == 2) {
        int rc = model_forward(&s->m[0], s->st[0], b, NULL, s->hid, NULL, NULL, NULL);
        if (rc)
            return rc;
        in = s->hid;
    }
    int last = s->n_stages - 1;
    return model_forward_logits(&s->m[last], s->st[last], b, in, out);
}

static int side_sample(struct side *s, const struct cs_batch *b,
                       const struct cs_sample_params *params, struct cs_sample_result *res)
{
    const float *in = NULL;
    bool sample[G_SEQS] = {true, true, true};
    if (s->n_stages == 2) {
        int rc = model_forward(&s->m[0], s->st[0], b, NULL, s->hid, NULL, NULL, NULL);
        if (rc)
            return rc;
        in = s->hid;
    }
    int last = s->n_stages - 1;
    return model_forward(&s->m[last], s->st[last], b, in, NULL, sample, params, res);
}

static long count_diff_f(const float *a, const float *b, size_t n)
{
    long d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static long count_diff_res(const struct cs_sample_result *a, const struct cs_sample_result *b)
{
    long d = a->token != b->token;
    d += memcmp(&a->logprob, &b->logprob, sizeof(float)) != 0;
    d += a->n_top != b->n_top;
    for (int k = 0; k < a->n_top && k < b->n_top; k++)
        d += a->top_ids[k] != b->top_ids[k] ||
             memcmp(&a->top_logprobs[k], &b->top_logprobs[k], sizeof(float)) != 0;
    return d;
}

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static uint64_t replays(void)
{
    struct cs_graph_stats gs = {0};
    be->graph_stats(be, &gs);
    return gs.replayed;
}

static long replays_with_graphs_off;

/* Run one step on every side; compare with B; write each batch sequence's
 * next token into next[k]. Returns -1 when a forward fails. */
static int step_run(struct gbatch *gb, int step, int32_t *next)
{
    const struct cs_batch *b = &gb->b;
    bool decode = b->n_tokens == b->n_seqs;
    bool use_sample = decode && (step & 1);
    size_t V = FX_VOCAB;
    struct cs_sample_params params[G_SEQS];
    struct cs_sample_result res[G_SIDES][G_SEQS];
    memset(params, 0, sizeof params);
    memset(res, 0, sizeof res);
    for (int k = 0; k < G_SEQS; k++)
        params[k] = (struct cs_sample_params){.temperature = 0.0f, .top_p = 1.0f,
                                              .repetition_penalty = 1.0f, .n_logprobs = 3,
                                              .seed = 7};
    int order[G_SIDES] = {1, 0, 2};   /* B first, so its replay count is taken alone */
    for (int i = 0; i < G_SIDES; i++) {
        int sd = order[i];
        be->graph_enable(be, sd != 1);
        uint64_t r0 = replays();
        int rc = use_sample ? side_sample(&sides[sd], b, params, res[sd])
                            : side_logits(&sides[sd], b, logits[sd]);
        if (rc) {
            fprintf(stderr, "step %d side %d: forward failed (%d)\n", step, sd, rc);
            return -1;
        }
        if (sd == 1)
            replays_with_graphs_off += (long)(replays() - r0);
    }
    be->graph_enable(be, true);
    long d_a = 0, d_c = 0;
    for (int k = 0; k < b->n_seqs; k++) {
        if (use_sample) {
            d_a += count_diff_res(&res[0][k], &res[1][k]);
            d_c += count_diff_res(&res[2][k], &res[1][k]);
            next[k] = res[1][k].token;
        } else {
            next[k] = argmax(logits[1] + (size_t)(b->seq_start[k + 1] - 1) * V, (int)V);
        }
    }
    if (!use_sample) {
        d_a = count_diff_f(logits[0], logits[1], (size_t)b->n_tokens * V);
        d_c = count_diff_f(logits[2], logits[1], (size_t)b->n_tokens * V);
    }
    struct tally *t = use_sample ? &t_sample : (b->n_seqs == 1 ? &t_logits1 : &t_logitsn);
    if (decode) {
        t->steps++;
        t->mismatches += d_a;
    }
    t_slices.steps++;
    t_slices.mismatches += d_c;
    if (d_a || d_c)
        fprintf(stderr, "step %d (%d seqs, %d tokens, pos %d): %ld / %ld values differ\n", step,
                b->n_seqs, b->n_tokens, b->pos[0], d_a, d_c);
    return 0;
}

static int32_t last_tok[G_SEQS];

/* A decode step of the sequences in qs[0..n). */
static int decode_step(const int *qs, int n, int step)
{
    struct gbatch gb;
    int32_t next[G_SEQS];
    gbatch_init(&gb);
    for (int i = 0; i < n; i++)
        gbatch_add(&gb, qs[i], &last_tok[qs[i]], 1);
    if (step_run(&gb, step, next))
        return -1;
    for (int i = 0; i < n; i++)
        last_tok[qs[i]] = next[i];
    return 0;
}

static int scenario(void)
{
    static const int32_t p0[5] = {17, 3, 299, 42, 42}, p1[7] = {9, 250, 31, 31, 77, 180, 2},
                         p2[3] = {150, 7, 88};
    struct gbatch gb;
    int32_t next[G_SEQS];
    int step = 0, all[3] = {0, 1, 2}, two[2] = {0, 2};
    gbatch_init(&gb);
    gbatch_add(&gb, 0, p0, 5);
    if (step_run(&gb, step++, next))
        return -1;
    last_tok[0] = next[0];
    while (seq_pos[0] < 40)
        if (decode_step(all, 1, step++))
            return -1;
    /* mixed: a decode token and two prefills in one (eager) step */
    gbatch_init(&gb);
    gbatch_add(&gb, 0, &last_tok[0], 1);
    gbatch_add(&gb, 1, p1, 7);
    gbatch_add(&gb, 2, p2, 3);
    if (step_run(&gb, step++, next))
        return -1;
    memcpy(last_tok, next, sizeof next);
    while (seq_pos[0] < G_LAST_POS) {
        bool pair = step % 97 >= 90;   /* a few 2-sequence steps now and then */
        if (decode_step(pair ? two : all, pair ? 2 : 3, step++))
            return -1;
        if (step == 300) {   /* a freed buffer makes every graph stale */
            void *p = NULL;
            if (be->alloc(be, &p, 64) == CS_OK)
                be->free(be, p);
        }
    }
    return 0;
}

static void report(void)
{
    struct cs_graph_stats gs = {0};
    be->graph_stats(be, &gs);
    printf("graph stats: recorded %llu replayed %llu failed %llu eager %llu\n",
           (unsigned long long)gs.recorded, (unsigned long long)gs.replayed,
           (unsigned long long)gs.failed, (unsigned long long)gs.eager);
    struct tally *ts[4] = {&t_logits1, &t_logitsn, &t_sample, &t_slices};
    for (int i = 0; i < 4; i++) {
        printf("%s: %ld steps\n", ts[i]->name, ts[i]->steps);
        result(ts[i]->name, ts[i]->steps > 0 && ts[i]->mismatches == 0,
               (double)ts[i]->mismatches);
    }
    /* keys: 1/2/3 seqs x 2 variants x split buckets, two slices, re-recorded
     * after the freed buffer: many recordings; most steps replay */
    result("graph recorded and replayed", gs.recorded >= 6 && gs.replayed >= 1000 && gs.failed == 0,
           (double)gs.failed);
    result("graph off runs eagerly", replays_with_graphs_off == 0, (double)replays_with_graphs_off);
}

int main(int argc, char **argv)
{
    cs_log_set_level(CS_LOG_WARN);
    int device = argc > 1 ? atoi(argv[1]) : 0;
    if (cs_backend_cuda_create(&be, device) != CS_OK) {
        fprintf(stderr, "test_graph: no CUDA device %d\n", device);
        return 77;
    }
    if (!be->graph_begin || !be->graph_enable || !be->graph_stats) {
        result("graph hooks present", false, 1);
        be->destroy(be);
        return 1;
    }
    /* Which code the driver loaded decides PDL (launch.h): a compute_75 build
     * run on this card must say 750, and its graphs must still match. */
    int code = cuda_code_arch();
    printf("kernels compiled for sm_%d on this device (PDL %s)\n", code / 10,
           code >= 900 ? "possible" : "off");
    result("code arch probed", code >= 700, 0);
    char path[256];
    fixture_path(path, sizeof path, "graph");
    struct fixture_opts fo = {.mat_type = CS_DTYPE_Q8_0, .mixed_vectors = true, .seed = 21};
    struct cs_error err = {0};
    int rc = fixture_write(path, &fo) ? -1 : gguf_open(&gf, path, &err);
    for (int i = 0; i < G_SIDES && rc == 0; i++) {
        rc = side_open(&sides[i], i == 2 ? 2 : 1);
        logits[i] = malloc((size_t)G_MAX_TOKENS * FX_VOCAB * sizeof(float));
        if (!logits[i])
            rc = -1;
    }
    if (rc == 0)
        rc = scenario();
    if (rc != 0)
        result("graph scenario ran", false, 1);
    else
        report();
    for (int i = 0; i < G_SIDES; i++) {
        side_close(&sides[i]);
        free(logits[i]);
    }
    if (gf)
        gguf_close(gf);
    unlink(path);
    be->destroy(be);
    printf("%s\n", n_failed ? "FAILED" : "all graph checks passed");
    return n_failed ? 1 : 0;
}
