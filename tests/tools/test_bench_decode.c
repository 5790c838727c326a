/* test_bench_decode.c - proves that `cmpserve bench --batch`'s decode rows
 * (tools/bench_decode.c) run on any backend and that their token check
 * holds where it should: on the CPU backend and the tiny q8_0 model, 1, 3
 * and 4 sequences decoding together from copies of one prefilled state
 * (depths 0, 5 and 300: a prefix over two KV pages of 256) all emit the
 * first row's 9 greedy tokens. Depth 5 is the sharp one: with the KV page
 * copy left out of the restore, its rows of 3 and 4 differ (checked by hand
 * when this test was written); over 300 random tokens a random model's
 * attention averages to little, so there only a gross error would show.
 * It also proves the argument checks: more sequences than the session
 * holds, or no spare slot for the snapshot, is CS_EINVAL.
 *
 * usage: test_bench_decode TINY_Q8_0.gguf */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/status.h"
#include "test_util.h"
#include "tools/bench_model.h"

static const char *path;

static int open_session(struct cli_session *s, int n_seqs, int spare, int max_ctx)
{
    struct cli_session_options so = {.model_path = path, .device = "cpu", .n_threads = 2,
                                     .max_tokens = 512, .max_ctx = max_ctx, .n_seqs = n_seqs,
                                     .n_spare_slots = spare};
    struct cs_error err = {0};
    int rc = cli_session_open(s, &so, &err);
    if (rc)
        fprintf(stderr, "cli_session_open: %s\n", err.msg);
    return rc;
}

static void test_rows_same_tokens(void)
{
    struct cli_session s;
    enum { GEN = 8, DEEP = 300 };
    CHECK_EQ_INT(open_session(&s, 4, 1, DEEP + GEN + 2), CS_OK);
    if (!s.m)
        return;
    CHECK_EQ_INT(s.page_size, 256);
    int32_t tokens[DEEP];
    for (int i = 0; i < DEEP; i++)
        tokens[i] = (int32_t)((i * 7919 + 13) % s.m->hp.n_vocab);
    struct mcount mc;
    bench_model_count(&mc, s.m, 4.0);
    CHECK(mc.read_bytes > 0 && mc.kv_bytes_per_pos > 0 && mc.gdn_state_bytes > 0);
    const int depths[] = {0, 5, DEEP}, batches[] = {1, 3, 4};
    struct bench_decode_opts o = {.depths = depths, .n_depths = 3, .batches = batches,
                                  .n_batches = 3, .gen = GEN, .chunk = 128};
    bool same = true;
    CHECK_EQ_INT(bench_decode(&s, &o, &mc, 1.0, tokens, &same), CS_OK);
    CHECK(same);
    cli_session_close(&s);
}

static void test_bad_arguments(void)
{
    struct cli_session s;
    const int depths[] = {0}, batches[] = {1, 3};
    struct bench_decode_opts o = {.depths = depths, .n_depths = 1, .batches = batches,
                                  .n_batches = 2, .gen = 2, .chunk = 16};
    struct mcount mc = {0};
    int32_t tokens[1] = {5};
    bool same = true;
    CHECK_EQ_INT(open_session(&s, 2, 1, 8), CS_OK);   /* 3 sequences asked, 2 held */
    if (s.m)
        CHECK_EQ_INT(bench_decode(&s, &o, &mc, 1.0, tokens, &same), CS_EINVAL);
    cli_session_close(&s);
    CHECK_EQ_INT(open_session(&s, 3, 0, 8), CS_OK);   /* no spare slot */
    if (s.m)
        CHECK_EQ_INT(bench_decode(&s, &o, &mc, 1.0, tokens, &same), CS_EINVAL);
    cli_session_close(&s);
    CHECK(same);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_bench_decode TINY_Q8_0.gguf\n");
        return 2;
    }
    path = argv[1];
    cs_log_set_level(CS_LOG_ERROR);
    RUN(test_rows_same_tokens);
    RUN(test_bad_arguments);
    return test_report();
}
