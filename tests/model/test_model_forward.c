/* test_model_forward.c - proves the forward of worker/model.c on the CPU
 * backend: (b) it matches the independent naive reference (ref_model.c) on a
 * 12-token prompt for an F32 tied model and a Q8_0 untied model with F16/BF16
 * vectors; (c) prefill in one batch equals token-by-token decoding; (d) two
 * sequences in one batch equal each alone, bit for bit; (e) three chained
 * slices equal one slice, bit for bit; (f) a GDN slot snapshot restored gives
 * the same continuation; and greedy sampling picks the argmax.
 * Usage: test_model_forward [device] (default cpu; "0" runs the same checks on
 * CUDA device 0, with the reference tolerance of int8 activations). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "ref_model.h"
#include "tests/test_util.h"

#define N_PROMPT 12

static const int32_t prompt[N_PROMPT] = {17, 3, 299, 42, 42, 0, 150, 7, 88, 201, 5, 123};
static const int32_t other[N_PROMPT] = {9, 250, 31, 31, 77, 180, 2, 64, 111, 222, 13, 4};
static char path_f32[256], path_q8[256];

static int all_layers[2] = {0, FX_LAYERS};
static bool on_gpu;

/* Open a single-stage harness; a failure is a failed check. */
static bool open_or_fail(struct harness *h, const char *path, bool int8)
{
    int rc = harness_open(h, path, all_layers, 1, int8);
    CHECK_EQ_INT(rc, 0);
    if (rc)
        harness_close(h);
    return rc == 0;
}

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* Logits of prompt[0..n) run as one prefill batch on a fresh sequence. */
static int prefill_logits(struct harness *h, int slot, const int32_t *toks, int n, float *out)
{
    struct hseq s;
    struct hbatch hb;
    harness_seq_start(h, &s, slot);
    hbatch_init(&hb);
    int rc = hbatch_add(h, &hb, &s, toks, n) ? -1 : harness_logits(h, &hb, out);
    harness_seq_end(h, &s);
    return rc;
}

static void check_against_reference(const char *path, bool int8, double tol)
{
    struct harness h;
    if (!open_or_fail(&h, path, int8))
        return;
    struct ref_model *r = ref_model_load(path);
    CHECK(r != NULL);
    if (!r || !h.m[0]) {
        harness_close(&h);
        return;
    }
    float *got = malloc(sizeof(float) * N_PROMPT * FX_VOCAB);
    float *want = malloc(sizeof(float) * N_PROMPT * FX_VOCAB);
    CHECK_EQ_INT(prefill_logits(&h, 0, prompt, N_PROMPT, got), CS_OK);
    ref_model_reset(r);
    for (int t = 0; t < N_PROMPT; t++)
        ref_model_step(r, prompt[t], want + t * FX_VOCAB);
    double worst = 0;
    int top1 = 0;
    for (int t = 0; t < N_PROMPT; t++) {
        worst = fmax(worst, test_rel_diff(got + t * FX_VOCAB, want + t * FX_VOCAB, FX_VOCAB));
        top1 += argmax(got + t * FX_VOCAB, FX_VOCAB) == argmax(want + t * FX_VOCAB, FX_VOCAB);
    }
    fprintf(stderr, "  %s int8=%d: max rel diff %.3g, top-1 %d/%d\n", path, int8, worst, top1,
            N_PROMPT);
    CHECK(worst <= tol);
    CHECK(int8 || on_gpu || top1 == N_PROMPT);
    CHECK(top1 >= N_PROMPT - 2);
    /* a non-trivial model: logits are not flat */
    CHECK(fabs(want[0] - want[1]) > 1e-3 || fabs(want[2] - want[3]) > 1e-3);
    free(got);
    free(want);
    ref_model_free(r);
    harness_close(&h);
}

static void test_model_matches_reference(void)
{
    check_against_reference(path_f32, false, on_gpu ? 8e-2 : 1e-4);
    check_against_reference(path_q8, false, on_gpu ? 8e-2 : 1e-4);
    /* int8 activations (Q8_0 x Q8_1 like the GPU): quantization error only */
    check_against_reference(path_q8, true, 8e-2);
}

static void test_model_prefill_equals_decode(void)
{
    struct harness h;
    if (!open_or_fail(&h, path_q8, false))
        return;
    float *pre = malloc(sizeof(float) * N_PROMPT * FX_VOCAB);
    float *dec = malloc(sizeof(float) * N_PROMPT * FX_VOCAB);
    CHECK_EQ_INT(prefill_logits(&h, 1, prompt, N_PROMPT, pre), CS_OK);
    struct hseq s;
    harness_seq_start(&h, &s, 2);
    for (int t = 0; t < N_PROMPT; t++) {
        struct hbatch hb;
        hbatch_init(&hb);
        CHECK_EQ_INT(hbatch_add(&h, &hb, &s, prompt + t, 1), 0);
        CHECK_EQ_INT(harness_logits(&h, &hb, dec + t * FX_VOCAB), CS_OK);
    }
    harness_seq_end(&h, &s);
    bool bitwise = memcmp(pre, dec, sizeof(float) * N_PROMPT * FX_VOCAB) == 0;
    double d = test_rel_diff(pre, dec, (size_t)N_PROMPT * FX_VOCAB);
    fprintf(stderr, "  prefill vs decode: %s (max rel diff %.3g)\n",
            bitwise ? "bit-identical" : "not bit-identical", d);
    CHECK(d <= (on_gpu ? 1e-2 : 1e-5));
    free(pre);
    free(dec);
    harness_close(&h);
}

static void test_model_two_sequences_equal_alone(void)
{
    struct harness h;
    if (!open_or_fail(&h, path_q8, false))
        return;
    float alone_a[8 * FX_VOCAB], alone_b[5 * FX_VOCAB], both[13 * FX_VOCAB];
    float step_a[FX_VOCAB], step_b[FX_VOCAB], step_both[2 * FX_VOCAB];
    struct hseq a, b;
    struct hbatch hb;
    /* each alone: prefill, then one decode step */
    harness_seq_start(&h, &a, 3);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &a, prompt, 8);
    CHECK_EQ_INT(harness_logits(&h, &hb, alone_a), CS_OK);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &a, prompt + 8, 1);
    CHECK_EQ_INT(harness_logits(&h, &hb, step_a), CS_OK);
    harness_seq_end(&h, &a);
    harness_seq_start(&h, &b, 4);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &b, other, 5);
    CHECK_EQ_INT(harness_logits(&h, &hb, alone_b), CS_OK);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &b, other + 5, 1);
    CHECK_EQ_INT(harness_logits(&h, &hb, step_b), CS_OK);
    harness_seq_end(&h, &b);
    /* together, in other slots and other pages */
    harness_seq_start(&h, &b, 6);
    harness_seq_start(&h, &a, 5);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &b, other, 5);
    hbatch_add(&h, &hb, &a, prompt, 8);
    CHECK_EQ_INT(harness_logits(&h, &hb, both), CS_OK);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &a, prompt + 8, 1);
    hbatch_add(&h, &hb, &b, other + 5, 1);
    CHECK_EQ_INT(harness_logits(&h, &hb, step_both), CS_OK);
    CHECK(memcmp(both, alone_b, sizeof alone_b) == 0);
    CHECK(memcmp(both + 5 * FX_VOCAB, alone_a, sizeof alone_a) == 0);
    CHECK(memcmp(step_both, step_a, sizeof step_a) == 0);
    CHECK(memcmp(step_both + FX_VOCAB, step_b, sizeof step_b) == 0);
    harness_seq_end(&h, &a);
    harness_seq_end(&h, &b);
    harness_close(&h);
}

/* Prefill 10 tokens then decode 2, logits of all 12 into out. */
static int run_split(const char *path, const int *bounds, int n_stages, float *out)
{
    struct harness h;
    if (harness_open(&h, path, bounds, n_stages, false)) {
        harness_close(&h);
        return -1;
    }
    struct hseq s;
    struct hbatch hb;
    int rc = harness_seq_start(&h, &s, 0);
    hbatch_init(&hb);
    rc |= hbatch_add(&h, &hb, &s, prompt, 10) || harness_logits(&h, &hb, out);
    for (int t = 10; t < 12; t++) {
        hbatch_init(&hb);
        rc |= hbatch_add(&h, &hb, &s, prompt + t, 1) || harness_logits(&h, &hb, out + t * FX_VOCAB);
    }
    harness_close(&h);
    return rc;
}

static void test_model_slices_equal_one(void)
{
    static float one[N_PROMPT * FX_VOCAB], three[N_PROMPT * FX_VOCAB], two[N_PROMPT * FX_VOCAB];
    int b3[4] = {0, 1, 3, FX_LAYERS}, b2[3] = {0, 3, FX_LAYERS};
    CHECK_EQ_INT(run_split(path_f32, all_layers, 1, one), 0);
    CHECK_EQ_INT(run_split(path_f32, b3, 3, three), 0);
    CHECK_EQ_INT(run_split(path_f32, b2, 2, two), 0);
    CHECK(memcmp(one, three, sizeof one) == 0);
    CHECK(memcmp(one, two, sizeof one) == 0);
}

static void test_model_slot_snapshot_restore(void)
{
    struct harness h;
    if (!open_or_fail(&h, path_q8, false))
        return;
    float prefix[6 * FX_VOCAB], first[4 * FX_VOCAB], again[4 * FX_VOCAB], diverged[4 * FX_VOCAB];
    struct hseq s;
    struct hbatch hb;
    harness_seq_start(&h, &s, 0);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &s, prompt, 6);
    CHECK_EQ_INT(harness_logits(&h, &hb, prefix), CS_OK);
    CHECK_EQ_INT(state_slot_copy(h.st[0], 7, 0), CS_OK);   /* snapshot */
    /* continue with 4 tokens */
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &s, prompt + 6, 4);
    CHECK_EQ_INT(harness_logits(&h, &hb, first), CS_OK);
    /* restore, continue with other tokens: the state must differ from the first run */
    CHECK_EQ_INT(state_slot_copy(h.st[0], 0, 7), CS_OK);
    s.pos = 6;
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &s, other, 4);
    CHECK_EQ_INT(harness_logits(&h, &hb, diverged), CS_OK);
    CHECK(memcmp(first, diverged, sizeof first) != 0);
    /* restore again, the same 4 tokens: identical logits */
    CHECK_EQ_INT(state_slot_copy(h.st[0], 0, 7), CS_OK);
    s.pos = 6;
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &s, prompt + 6, 4);
    CHECK_EQ_INT(harness_logits(&h, &hb, again), CS_OK);
    CHECK(memcmp(first, again, sizeof first) == 0);
    harness_seq_end(&h, &s);
    harness_close(&h);
}

/* state_kv_pages_copy with state_slot_copy hands one sequence's prefix to
 * another: both then decode the same tokens to bitwise the same logits, in
 * one batch. A control sequence given only the GDN slot (its KV pages left
 * unwritten) must differ, so the KV copy is what makes them equal. Ranges
 * past the cache or overlapping are refused. */
static void test_model_kv_pages_copy(void)
{
    struct harness h;
    if (!open_or_fail(&h, path_q8, false))
        return;
    enum { NP = N_PROMPT + 8, NC = 4 };   /* a prefix over two pages of H_PAGE_SIZE */
    int32_t prefix[NP];
    memcpy(prefix, prompt, sizeof prompt);
    memcpy(prefix + N_PROMPT, other, 8 * sizeof(int32_t));
    float *buf = malloc(sizeof(float) * NP * FX_VOCAB);
    float *three = malloc(sizeof(float) * 3 * NC * FX_VOCAB);
    CHECK(buf && three);
    if (!buf || !three)
        goto out;
    struct hseq a, b, c;
    struct hbatch hb;
    harness_seq_start(&h, &a, 0);
    harness_seq_start(&h, &b, 1);
    harness_seq_start(&h, &c, 2);
    hbatch_init(&hb);
    CHECK_EQ_INT(hbatch_add(&h, &hb, &a, prefix, NP), 0);
    CHECK_EQ_INT(harness_logits(&h, &hb, buf), CS_OK);
    int need = kv_pages_for_tokens(NP, H_PAGE_SIZE);
    CHECK_EQ_INT(need, 2);
    CHECK_EQ_INT(kv_pages_alloc(&h.pages, b.pages, 0, need), 0);
    CHECK_EQ_INT(kv_pages_alloc(&h.pages, c.pages, 0, need), 0);
    b.n_pages = c.n_pages = need;
    b.pos = c.pos = NP;
    for (int s = 0; s < h.n_stages; s++) {
        for (int i = 0; i < need; i++)
            CHECK_EQ_INT(state_kv_pages_copy(h.st[s], b.pages[i], a.pages[i], 1), CS_OK);
        CHECK_EQ_INT(state_slot_copy(h.st[s], 1, 0), CS_OK);
        CHECK_EQ_INT(state_slot_copy(h.st[s], 2, 0), CS_OK);   /* c: the slot only */
    }
    hbatch_init(&hb);
    CHECK_EQ_INT(hbatch_add(&h, &hb, &a, other + 8, NC), 0);
    CHECK_EQ_INT(hbatch_add(&h, &hb, &b, other + 8, NC), 0);
    CHECK_EQ_INT(hbatch_add(&h, &hb, &c, other + 8, NC), 0);
    CHECK_EQ_INT(harness_logits(&h, &hb, three), CS_OK);
    size_t one = (size_t)NC * FX_VOCAB;
    CHECK(memcmp(three, three + one, one * sizeof(float)) == 0);
    CHECK(memcmp(three, three + 2 * one, one * sizeof(float)) != 0);
    CHECK_EQ_INT(state_kv_pages_copy(h.st[0], H_KV_PAGES - 1, 0, 2), CS_EINVAL);
    CHECK_EQ_INT(state_kv_pages_copy(h.st[0], 0, H_KV_PAGES - 1, 2), CS_EINVAL);
    CHECK_EQ_INT(state_kv_pages_copy(h.st[0], 1, 0, 2), CS_EINVAL);   /* overlapping */
    CHECK_EQ_INT(state_kv_pages_copy(h.st[0], -1, 0, 1), CS_EINVAL);
    CHECK_EQ_INT(state_kv_pages_copy(h.st[0], 0, 1, -1), CS_EINVAL);
    CHECK_EQ_INT(state_kv_pages_copy(h.st[0], 3, 3, 1), CS_OK);
    harness_seq_end(&h, &a);
    harness_seq_end(&h, &b);
    harness_seq_end(&h, &c);
out:
    free(buf);
    free(three);
    harness_close(&h);
}

static void test_model_greedy_sampling(void)
{
    struct harness h;
    if (!open_or_fail(&h, path_q8, false))
        return;
    float la[7 * FX_VOCAB], lb[4 * FX_VOCAB];
    CHECK_EQ_INT(prefill_logits(&h, 0, prompt, 7, la), CS_OK);
    CHECK_EQ_INT(prefill_logits(&h, 1, other, 4, lb), CS_OK);
    struct hseq a, b;
    struct hbatch hb;
    harness_seq_start(&h, &a, 0);
    harness_seq_start(&h, &b, 1);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &a, prompt, 7);
    hbatch_add(&h, &hb, &b, other, 4);
    struct cs_sample_params p[2] = {{.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                     .n_logprobs = -1},
                                    {.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                     .n_logprobs = -1}};
    struct cs_sample_result res[2] = {{0}};
    CHECK_EQ_INT(harness_sample(&h, &hb, p, res), CS_OK);
    CHECK_EQ_INT(res[0].token, argmax(la + 6 * FX_VOCAB, FX_VOCAB));
    CHECK_EQ_INT(res[1].token, argmax(lb + 3 * FX_VOCAB, FX_VOCAB));
    harness_seq_end(&h, &a);
    harness_seq_end(&h, &b);
    harness_close(&h);
}

int main(int argc, char **argv)
{
    cs_log_set_level(CS_LOG_ERROR);
    harness_device = argc > 1 ? argv[1] : "cpu";
    on_gpu = strcmp(harness_device, "cpu") != 0;
    fixture_path(path_f32, sizeof path_f32, "f32");
    fixture_path(path_q8, sizeof path_q8, "q8");
    struct fixture_opts f32 = {.mat_type = CS_DTYPE_F32, .tied = true, .seed = 11};
    struct fixture_opts q8 = {.mat_type = CS_DTYPE_Q8_0, .mixed_vectors = true, .seed = 12};
    if (fixture_write(path_f32, &f32) || fixture_write(path_q8, &q8)) {
        fprintf(stderr, "cannot write fixtures\n");
        return 1;
    }
    RUN(test_model_matches_reference);
    RUN(test_model_prefill_equals_decode);
    RUN(test_model_two_sequences_equal_alone);
    RUN(test_model_slices_equal_one);
    RUN(test_model_slot_snapshot_restore);
    RUN(test_model_kv_pages_copy);
    RUN(test_model_greedy_sampling);
    unlink(path_f32);
    unlink(path_q8);
    return test_report();
}
