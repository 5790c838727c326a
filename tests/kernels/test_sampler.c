/* test_sampler.c - proves the sampler of kernels/sampler.h: the RNG gives the
 * values computed independently in Python (below); greedy picks the lowest id
 * among equal maxima; top-k, top-p and min-p keep exactly the documented sets
 * on handmade logits; repetition (CTRL), presence/frequency penalties and
 * logit_bias change the logits as documented; the allowed mask is obeyed
 * (none allowed: CS_ERANGE); the same seed and draw give the same token while
 * successive draws follow the distribution (chi-square); logprobs are the
 * pre-temperature log-softmax (they sum to 1 over the vocab, ties by lower id);
 * NaN logits never win; the backend's sample op equals sampler_sample per row;
 * a full vocabulary (radix-sorted candidates), with and without top-k, top-p
 * and min-p, picks what an independent qsort reference of step 7 picks, ties
 * and -0/+0 included; the integer steps of sampler.h give pinned values.
 *
 * Expected RNG values, from this Python (independent of the C code):
 *   M = 2**64 - 1
 *   def sm(x):
 *       z = (x + 0x9E3779B97F4A7C15) & M
 *       z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
 *       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
 *       return z ^ (z >> 31)
 *   bits = lambda seed, draw: sm(seed ^ sm((draw + 0x632BE59BD9B4E019) & M))
 *   sm(0)                  -> 0xe220a8397b1dcdaf (the published first splitmix64 output)
 *   bits(0, 0)             -> 0x88ce4b48a6765bfc, >> 40 = 8965707
 *   bits(42, 0)            -> 0xa469845270661dad, >> 40 = 10774916
 *   bits(42, 1)            -> 0x1979612563da081a, >> 40 = 1669473
 *   bits(2**64 - 1, 12345) -> 0xbb2fbce6276a5a38
 *   (bits(0, 0) * 10) >> 64                      -> 5
 *   (bits(42, 1) * (3 << 40)) >> 64              -> 328231776299
 *   (bits(2**64 - 1, 12345) * (2**63 - 5)) >> 64 -> 6744103552843853080
 *
 * Expected weights (sampler_weight), from the same steps in Python with
 * every fp32 operation rounded through struct.pack('f') (independent of the
 * C code): x = -0.5 -> 2605029376, -1 -> 1580030208, -2.5 -> 352552384,
 * -10 -> 194991, -0.125 -> 3790295296, -0.34657359 -> 3037000448,
 * -22.9 -> 0, -1e-9 -> 2^32. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/status.h"
#include "../../kernels/sampler.h"
#include "kernel_test.h"

static struct cs_sample_params greedy_params(void)
{
    return (struct cs_sample_params){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                     .n_logprobs = -1};
}

static struct cs_sample_params random_params(uint64_t seed, uint64_t draw)
{
    return (struct cs_sample_params){.temperature = 1, .top_p = 1, .repetition_penalty = 1,
                                     .seed = seed, .draw = draw, .n_logprobs = -1};
}

static int sample_one(const float *logits, int n, const struct cs_sample_params *p)
{
    float l[64];
    memcpy(l, logits, sizeof(float) * n);
    struct cs_sample_result r;
    int rc = sampler_sample(&r, l, n, p);
    return rc == CS_OK ? r.token : rc;
}

/* Counts of tokens over draws 0..n_draws-1 with params p. */
static void sample_counts(int *counts, const float *logits, int n, struct cs_sample_params p,
                          int n_draws)
{
    memset(counts, 0, sizeof(int) * n);
    for (int d = 0; d < n_draws; d++) {
        p.draw = (uint64_t)d;
        int tok = sample_one(logits, n, &p);
        if (tok >= 0 && tok < n)
            counts[tok]++;
    }
}

static void test_sampler_rng_pinned(void)
{
    CHECK(sampler_splitmix64(0) == 0xe220a8397b1dcdafull);
    CHECK(sampler_bits(0, 0) == 0x88ce4b48a6765bfcull);
    CHECK(sampler_bits(42, 0) == 0xa469845270661dadull);
    CHECK(sampler_bits(42, 1) == 0x1979612563da081aull);
    CHECK(sampler_bits(UINT64_MAX, 12345) == 0xbb2fbce6276a5a38ull);
    CHECK(sampler_draw_point(0, 0, 10) == 5);
    CHECK(sampler_draw_point(42, 1, 3ull << 40) == 328231776299ull);
    CHECK(sampler_draw_point(UINT64_MAX, 12345, (1ull << 63) - 5) == 6744103552843853080ull);
}

/* sampler.h's integer arithmetic: the weights equal the values pinned above
 * and stay within 1e-6 relative (+1 for the truncation) of 2^32 exp(x);
 * the top-p target and the min-p floor follow their formulas, 128-bit
 * product included. */
static void test_sampler_integer_steps(void)
{
    CHECK(sampler_weight(-0.5f) == 2605029376ull);
    CHECK(sampler_weight(-1.0f) == 1580030208ull);
    CHECK(sampler_weight(-2.5f) == 352552384ull);
    CHECK(sampler_weight(-10.0f) == 194991ull);
    CHECK(sampler_weight(-0.125f) == 3790295296ull);
    CHECK(sampler_weight(-0.34657359f) == 3037000448ull);
    CHECK(sampler_weight(-22.9f) == 0);
    CHECK(sampler_weight(-1e-9f) == 1ull << 32);
    CHECK(sampler_weight(0.0f) == 1ull << 32);
    CHECK(sampler_weight(-INFINITY) == 0 && sampler_weight(NAN) == 0);
    int bad = 0;
    uint64_t prev = 1ull << 32;
    for (int i = 1; i <= 230000; i++) {   /* x from 0 down to -23 */
        float x = -(float)i * 1e-4f;
        uint64_t w = sampler_weight(x);
        double e = 4294967296.0 * exp((double)x);
        bad += fabs((double)w - e) > 1e-6 * e + 1.0;
        bad += w > prev;   /* never increases as x falls */
        prev = w;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(sampler_top_p_target(0.5f, 10) == 5);
    CHECK(sampler_top_p_target(0.7f, 3) == 3);                 /* ceil(11744051 * 3 / 2^24) */
    CHECK(sampler_top_p_target(0.9f, 1ull << 62) == 15099494ull << 38);
    CHECK(sampler_top_p_target(1e-30f, 1000) == 1);            /* at least one */
    CHECK(sampler_min_p_floor(0.05f) == 214748368ull);
    CHECK(sampler_min_p_floor(0.0f) == 0 && sampler_min_p_floor(1.0f) == 1ull << 32);
    CHECK(sampler_is_greedy(0.0f) && sampler_is_greedy(-1.0f) && sampler_is_greedy(NAN) &&
          sampler_is_greedy(1e-40f) && !sampler_is_greedy(1e-30f));
    CHECK(sampler_scaled(1e-40f, 0.5f) == 0.0f && sampler_scaled(3e38f, 0.5f) == FLT_MAX);
    float z = sampler_scaled(-1e-39f * 1e-3f, 1e-3f);   /* subnormal in: +0 out */
    CHECK(z == 0.0f && !signbit(z));
}

static void test_sampler_greedy_ties(void)
{
    float l[5] = {1, 3, 3, 2, -INFINITY};
    struct cs_sample_params p = greedy_params();
    CHECK_EQ_INT(sample_one(l, 5, &p), 1);
    float m[3] = {NAN, 0.5f, 0.5f};
    CHECK_EQ_INT(sample_one(m, 3, &p), 1);
}

static void test_sampler_top_k(void)
{
    float l[4] = {5, 1, 5, 3};
    int c[4];
    struct cs_sample_params p = random_params(7, 0);
    p.top_k = 2;
    sample_counts(c, l, 4, p, 400);
    CHECK(c[0] > 100 && c[2] > 100 && c[1] == 0 && c[3] == 0);
    p.top_k = 1;   /* tie between 0 and 2: the lower id stays */
    sample_counts(c, l, 4, p, 200);
    CHECK_EQ_INT(c[0], 200);
    p.top_k = 3;
    sample_counts(c, l, 4, p, 2000);
    CHECK(c[1] == 0 && c[3] > 0);
}

static void test_sampler_top_p_and_min_p(void)
{
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int c[4];
    struct cs_sample_params p = random_params(3, 0);
    p.top_p = 0.7f;   /* 0.5 < 0.7 <= 0.8: keep {0, 1} */
    sample_counts(c, l, 4, p, 1000);
    CHECK(c[0] > 0 && c[1] > 0 && c[2] == 0 && c[3] == 0);
    p.top_p = 0.9f;   /* 0.8 < 0.9 <= 0.95: keep {0, 1, 2} */
    sample_counts(c, l, 4, p, 2000);
    CHECK(c[2] > 0 && c[3] == 0);
    p.top_p = 0.01f;  /* at least one */
    sample_counts(c, l, 4, p, 100);
    CHECK_EQ_INT(c[0], 100);
    p.top_p = 1;
    p.min_p = 0.5f;   /* drop p < 0.25: keep {0, 1} */
    sample_counts(c, l, 4, p, 1000);
    CHECK(c[0] > 0 && c[1] > 0 && c[2] == 0 && c[3] == 0);
    p.min_p = 0.2f;   /* drop p < 0.1: keep {0, 1, 2} */
    sample_counts(c, l, 4, p, 2000);
    CHECK(c[2] > 0 && c[3] == 0);
}

static void test_sampler_penalties_and_bias(void)
{
    float l[4] = {2, -2, 1, 0.5f};
    int32_t ctx[3] = {0, 1, 0}, gen[3] = {2, 2, 3};
    int32_t bias_ids[3] = {3, 99, -1};
    float bias_vals[3] = {1.0f, 50.0f, 50.0f};
    struct cs_sample_params p = greedy_params();
    p.repetition_penalty = 2;
    p.ctx_tokens = ctx;
    p.n_ctx_tokens = 3;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.gen_tokens = gen;
    p.n_gen_tokens = 3;
    p.bias_ids = bias_ids;
    p.bias_vals = bias_vals;
    p.n_bias = 3;
    struct cs_sample_result r;
    CHECK_EQ_INT(sampler_sample(&r, l, 4, &p), CS_OK);
    /* bias first: l3 = 1.5; repetition once per distinct id: l0 = 1, l1 = -4;
     * presence/frequency: l2 = 1 - (0.5 + 0.5) = 0, l3 = 1.5 - 0.75 = 0.75 */
    CHECK(l[0] == 1.0f && l[1] == -4.0f && l[2] == 0.0f && l[3] == 0.75f);
    CHECK_EQ_INT(r.token, 0);
}

static void test_sampler_allowed_mask(void)
{
    float l[10] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    uint8_t allowed[2] = {0x00, 0x02};   /* only id 9 */
    struct cs_sample_params p = greedy_params();
    p.allowed = allowed;
    CHECK_EQ_INT(sample_one(l, 10, &p), 9);
    struct cs_sample_params q = random_params(1, 0);
    q.allowed = allowed;
    int c[10];
    sample_counts(c, l, 10, q, 50);
    CHECK_EQ_INT(c[9], 50);
    uint8_t none[2] = {0, 0};
    p.allowed = none;
    CHECK_EQ_INT(sample_one(l, 10, &p), CS_ERANGE);
}

static void test_sampler_seeded_determinism_and_distribution(void)
{
    float l[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    struct cs_sample_params p = random_params(1234, 77);
    int first = sample_one(l, 4, &p);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(sample_one(l, 4, &p), first);
    int c[4];
    const int n = 8000;
    sample_counts(c, l, 4, p, n);
    const double prob[4] = {0.4, 0.3, 0.2, 0.1};
    double chi2 = 0;
    for (int i = 0; i < 4; i++)
        chi2 += (c[i] - n * prob[i]) * (c[i] - n * prob[i]) / (n * prob[i]);
    CHECK(chi2 < 25.0);   /* df 3: p ~ 1.5e-5 */
    /* temperature sharpens: T = 0.25 makes token 0 dominate */
    p.temperature = 0.25f;
    sample_counts(c, l, 4, p, 2000);
    CHECK(c[0] > 1300 && c[0] < 2000);
    /* another seed gives another sequence of draws */
    int same = 0;
    for (int d = 0; d < 64; d++) {
        struct cs_sample_params a = random_params(1, d), b = random_params(2, d);
        same += sample_one(l, 4, &a) == sample_one(l, 4, &b);
    }
    CHECK(same < 60);
}

static void test_sampler_logprobs(void)
{
    float l[20];
    for (int i = 0; i < 20; i++)
        l[i] = (float)(i % 7) * 0.5f;
    struct cs_sample_params p = random_params(5, 5);
    p.temperature = 0.5f;
    p.n_logprobs = 20;
    float work[20];
    memcpy(work, l, sizeof(l));
    struct cs_sample_result r;
    CHECK_EQ_INT(sampler_sample(&r, work, 20, &p), CS_OK);
    CHECK_EQ_INT(r.n_top, 20);
    double sum = 0, lse = 0;
    for (int i = 0; i < 20; i++)
        lse += exp(l[i]);
    lse = log(lse);
    int chosen_seen = 0;
    for (int i = 0; i < r.n_top; i++) {
        sum += exp(r.top_logprobs[i]);
        CHECK_NEAR(r.top_logprobs[i], l[r.top_ids[i]] - lse, 1e-5);   /* pre-temperature */
        if (i > 0) {
            CHECK(r.top_logprobs[i - 1] >= r.top_logprobs[i]);
            if (r.top_logprobs[i - 1] == r.top_logprobs[i])
                CHECK(r.top_ids[i - 1] < r.top_ids[i]);
        }
        if (r.top_ids[i] == r.token) {
            chosen_seen = 1;
            CHECK(r.top_logprobs[i] == r.logprob);
        }
    }
    CHECK(chosen_seen);
    CHECK_NEAR(sum, 1.0, 1e-5);
    CHECK_EQ_INT(r.top_ids[0], 6);   /* 3.0 at ids 6 and 13: lower first */
    CHECK_EQ_INT(r.top_ids[1], 13);
    p.n_logprobs = 2;
    memcpy(work, l, sizeof(l));
    CHECK_EQ_INT(sampler_sample(&r, work, 20, &p), CS_OK);
    CHECK_EQ_INT(r.n_top, 2);
    CHECK(r.top_ids[0] == 6 && r.top_ids[1] == 13);
}

static void test_sampler_backend_rows_and_large_vocab(void)
{
    struct cs_backend *be = kt_backend(2, 0);
    int V = 248320, n = 3;
    float *logits = kt_randv((size_t)V * n, 8.0f), *copy = malloc(sizeof(float) * V * n);
    memcpy(copy, logits, sizeof(float) * V * n);
    struct cs_sample_params p[3] = {random_params(9, 0), random_params(9, 1), greedy_params()};
    p[0].top_k = 20;
    p[0].top_p = 0.95f;
    p[1].min_p = 0.05f;
    p[1].n_logprobs = 5;
    struct cs_sample_result r[3], one;
    CHECK_EQ_INT(be->sample(be, r, logits, V, p, n), CS_OK);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(sampler_sample(&one, copy + (size_t)i * V, V, &p[i]), CS_OK);
        CHECK_EQ_INT(one.token, r[i].token);
        CHECK(one.logprob == r[i].logprob);
    }
    CHECK_EQ_INT(r[1].n_top, 5);
    free(logits);
    free(copy);
    be->destroy(be);
}

/* An independent reference of step 7 (qsort on value descending, id
 * ascending; a running sum in that order for top-p; the draw over ids
 * ascending), sharing only sampler.h's arithmetic helpers. */
struct ref_cand {
    float v;
    int id;
};

static int ref_cand_cmp(const void *pa, const void *pb)
{
    const struct ref_cand *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int ref_choose(const float *l, int n, const struct cs_sample_params *p)
{
    struct ref_cand *c = malloc((size_t)n * sizeof *c);
    uint8_t *keep = calloc((size_t)n, 1);
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(l[i]))
            c[nc++] = (struct ref_cand){l[i] == 0.0f ? 0.0f : l[i], i};   /* -0 is +0 */
    qsort(c, (size_t)nc, sizeof *c, ref_cand_cmp);
    for (int i = 0; i < nc; i++)   /* from here on, v is the scaled value */
        c[i].v = sampler_scaled(c[i].v, p->temperature);
    float v0 = c[0].v;
    if (p->top_k > 0 && p->top_k < nc)
        nc = p->top_k;
    if (p->top_p < 1.0f) {
        uint64_t total = 0, run = 0;
        for (int i = 0; i < nc; i++)
            total += sampler_weight(c[i].v - v0);
        for (int i = 0; i < nc; i++)
            if ((run += sampler_weight(c[i].v - v0)) >= sampler_top_p_target(p->top_p, total)) {
                nc = i + 1;
                break;
            }
    }
    uint64_t total = 0, run = 0;
    for (int i = 0; i < nc; i++)
        if (sampler_weight(c[i].v - v0) >= sampler_min_p_floor(p->min_p)) {
            keep[c[i].id] = 1;
            total += sampler_weight(c[i].v - v0);
        }
    uint64_t r = sampler_draw_point(p->seed, p->draw, total);
    int tok = -1;
    for (int i = 0; i < n && tok < 0; i++)
        if (keep[i] && (run += sampler_weight(sampler_scaled(l[i], p->temperature) - v0)) > r)
            tok = i;
    free(c);
    free(keep);
    return tok;
}

/* A full vocabulary at temperature > 0 without top-k (the candidate sort
 * then runs as a radix sort) picks the token the qsort reference picks, over
 * many draws, with heavy ties including -0 against +0 (equal: ordered by id)
 * and NaN / inf. */
static void test_sampler_full_vocab_order(void)
{
    int V = 60000, bad = 0;
    float *l = malloc(sizeof(float) * V), *work = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) {
        int k = (int)(kt_rand() * 6.0f + 6.0f);   /* few distinct values: many ties */
        l[i] = (float)(k - 6) * 0.25f;
        if (l[i] == 0.0f && (i & 1))
            l[i] = -0.0f;
    }
    l[17] = NAN;
    l[18] = -INFINITY;
    for (int d = 0; d < 200; d++) {
        struct cs_sample_params p = random_params(1234, (uint64_t)d);
        p.temperature = d % 2 ? 0.7f : 1.0f;
        p.top_p = d % 3 ? 1.0f : 0.9f;
        p.top_k = d % 5 == 1 ? 50 : d % 5 == 2 ? 5000 : 0;
        p.min_p = d % 7 == 3 ? 0.3f : 0.0f;
        struct cs_sample_result r;
        memcpy(work, l, sizeof(float) * V);
        CHECK_EQ_INT(sampler_sample(&r, work, V, &p), CS_OK);
        memcpy(work, l, sizeof(float) * V);
        work[17] = -INFINITY;   /* the sanitised values */
        bad += r.token != ref_choose(work, V, &p);
    }
    CHECK_EQ_INT(bad, 0);
    free(l);
    free(work);
}

int main(void)
{
    RUN(test_sampler_rng_pinned);
    RUN(test_sampler_integer_steps);
    RUN(test_sampler_greedy_ties);
    RUN(test_sampler_top_k);
    RUN(test_sampler_top_p_and_min_p);
    RUN(test_sampler_penalties_and_bias);
    RUN(test_sampler_allowed_mask);
    RUN(test_sampler_seeded_determinism_and_distribution);
    RUN(test_sampler_logprobs);
    RUN(test_sampler_backend_rows_and_large_vocab);
    RUN(test_sampler_full_vocab_order);
    return test_report();
}
