/* test_engine_local.c - proves the in-process engine (engine_local.c) keeps
 * the contract of coordinator/engine.h on the CPU backend with the tiny
 * mkmodel model:
 *  (a) one greedy request gives the tokens, logprobs and finish of a direct
 *      single-sequence loop over model_forward; explicit stop ids stop it;
 *  (b) concurrent requests (more than max_seqs, so some queue; a step budget
 *      that mixes decodes with prefill chunks) each give exactly what they give
 *      alone, greedy and seeded (batch invariance through the scheduler);
 *  (c) cancel mid-generation, cancel of a queued request and on_token
 *      returning false each end with exactly one done (CANCELED / STOP) and
 *      free the slot (stats back to 0 running);
 *  (d) a full queue gives CS_EFULL; prompt + max_tokens over ctx_size gives
 *      CS_ERANGE with both numbers in the message; bad tokens CS_EINVAL;
 *  (e) scripted output replaces the sampled tokens (texts and id lists,
 *      script k mod N in submit order) and is refused without
 *      allow_test_options;
 *  (f) shutdown cancels what outlives the grace, refuses new work, and calls
 *      its done callback after every request's done.
 * usage: test_engine_local MODEL.gguf WORKDIR [DEVICE] (the model is written
 * if missing; DEVICE "cpu" by default, or a CUDA index to run both the engine
 * and the reference on a GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_harness.h"
#include "test_util.h"

#define WAIT_MS 30000

static const char *model_path, *work_dir;
static uv_loop_t loop;
static struct cli_session ref;          /* the reference model */
static int32_t stop_default[2];         /* <|endoftext|>, <|im_end|> */

/* A prompt of n byte tokens derived from seed (ids below 256). */
static void make_prompt(int32_t *p, int n, int seed)
{
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)((seed * 37 + i * (11 + seed) + i * i) % 256);
}

static struct engine *engine_make(const struct cs_config *cfg)
{
    struct engine *e = NULL;
    struct cs_error err = {0};
    int rc = engine_local_create(&e, &loop, cfg, &err);
    if (rc)
        fprintf(stderr, "engine_local_create: %s\n", err.msg);
    CHECK_EQ_INT(rc, CS_OK);
    return e;
}

static void check_same(const struct eh_gen *got, const struct eh_gen *want, const char *what)
{
    int bad = got->n != want->n || got->finish != want->finish || got->n_done != 1;
    for (int i = 0; !bad && i < want->n; i++)
        bad = got->toks[i] != want->toks[i] || got->logprobs[i] != want->logprobs[i];
    if (bad) {
        fprintf(stderr, "%s: engine gave %d tokens (finish %d, dones %d), reference %d (finish %d)\n",
                what, got->n, got->finish, got->n_done, want->n, want->finish);
        for (int i = 0; i < got->n || i < want->n; i++)
            fprintf(stderr, "  %2d: %5d %5d\n", i, i < got->n ? got->toks[i] : -1,
                    i < want->n ? want->toks[i] : -1);
    }
    CHECK(!bad);
}

static void test_engine_single_greedy(void)
{
    struct cs_config cfg;
    eh_config(&cfg, model_path, 128, 2, 8, 16, 4);
    struct engine *e = engine_make(&cfg);
    if (!e)
        return;
    int32_t prompt[21];
    make_prompt(prompt, 21, 1);
    struct cs_sample_params sp = eh_greedy();
    struct eh_gen want, got = {0};
    CHECK_EQ_INT(eh_reference(&ref, prompt, 21, 24, &sp, stop_default, 2, 8, &want), 0);
    struct engine_request r = eh_request(&got, prompt, 21, 24, &sp);
    struct cs_error err = {0};
    CHECK_EQ_INT(eh_submit(e, &got, &r, &err), CS_OK);
    CHECK(eh_wait_done(&loop, &got, 1, WAIT_MS));
    check_same(&got, &want, "single greedy");
    CHECK(want.n >= 3);
    /* explicit stop ids: the third generated token ends the request */
    if (want.n >= 3) {
        struct eh_gen g2 = {0};
        int32_t stop = want.toks[2];
        int first = 0;
        while (want.toks[first] != stop)
            first++;
        r = eh_request(&g2, prompt, 21, 24, &sp);
        r.stop_ids = &stop;
        r.n_stop_ids = 1;
        CHECK_EQ_INT(eh_submit(e, &g2, &r, &err), CS_OK);
        CHECK(eh_wait_done(&loop, &g2, 1, WAIT_MS));
        CHECK_EQ_INT(g2.finish, ENGINE_FINISH_STOP);
        CHECK_EQ_INT(g2.n, first);
    }
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.ctx_size, 128);
    CHECK(st.gen_tokens_total >= (uint64_t)want.n);
    CHECK_EQ_INT(st.prompt_tokens_total, 42);
    CHECK(st.ready);
    eh_engine_destroy(&loop, e);
}

/* n requests of different lengths at once; each must equal its reference. */
static void run_concurrent(const struct cs_sample_params *base, bool seeded, const char *what)
{
    enum { N = 5 };
    struct cs_config cfg;
    eh_config(&cfg, model_path, 96, 3, 8, 10, 8);
    struct engine *e = engine_make(&cfg);
    if (!e)
        return;
    static const int lens[N] = {5, 13, 21, 30, 8};
    int32_t prompts[N][32];
    int32_t ban[2] = {stop_default[0], stop_default[1]};
    float ban_vals[2] = {-1e4f, -1e4f};
    struct cs_sample_params sp[N];
    static struct eh_gen want[N], got[N];
    memset(got, 0, sizeof got);
    struct cs_error err = {0};
    for (int i = 0; i < N; i++) {
        make_prompt(prompts[i], lens[i], 10 + i);
        sp[i] = *base;
        sp[i].seed = seeded ? 1000 + (uint64_t)i * 7 : 0;
        if (i % 2 == 0) {   /* half of them never stop early */
            sp[i].bias_ids = ban;
            sp[i].bias_vals = ban_vals;
            sp[i].n_bias = 2;
        }
        CHECK_EQ_INT(eh_reference(&ref, prompts[i], lens[i], 20, &sp[i], stop_default, 2, 8,
                                  &want[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        struct engine_request r = eh_request(&got[i], prompts[i], lens[i], 20, &sp[i]);
        CHECK_EQ_INT(eh_submit(e, &got[i], &r, &err), CS_OK);
    }
    CHECK(eh_wait_done(&loop, got, N, WAIT_MS));
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s request %d", what, i);
        check_same(&got[i], &want[i], name);
    }
    eh_engine_destroy(&loop, e);
}

static void test_engine_concurrent_greedy(void)
{
    struct cs_sample_params sp = eh_greedy();
    run_concurrent(&sp, false, "greedy");
}

static void test_engine_concurrent_seeded(void)
{
    struct cs_sample_params sp = eh_greedy();
    sp.temperature = 1.0f;
    sp.top_p = 0.95f;
    sp.top_k = 40;
    sp.presence_penalty = 0.3f;
    sp.repetition_penalty = 1.1f;
    run_concurrent(&sp, true, "seeded");
}

static void test_engine_cancel(void)
{
    struct cs_config cfg;
    eh_config(&cfg, model_path, 128, 1, 8, 8, 4);
    struct engine *e = engine_make(&cfg);
    if (!e)
        return;
    int32_t prompt[12];
    make_prompt(prompt, 12, 3);
    int32_t ban[2] = {stop_default[0], stop_default[1]};
    float ban_vals[2] = {-1e4f, -1e4f};
    struct cs_sample_params sp = eh_greedy();
    sp.bias_ids = ban;
    sp.bias_vals = ban_vals;
    sp.n_bias = 2;
    struct eh_gen a = {.cancel_after = 3}, b = {0}, c = {.stop_after = 2};
    struct cs_error err = {0};
    struct engine_request ra = eh_request(&a, prompt, 12, 100, &sp);
    struct engine_request rb = eh_request(&b, prompt, 12, 100, &sp);
    CHECK_EQ_INT(eh_submit(e, &a, &ra, &err), CS_OK);
    CHECK_EQ_INT(eh_submit(e, &b, &rb, &err), CS_OK);   /* waits: max_seqs is 1 */
    CHECK_EQ_INT(engine_cancel(e, b.id), CS_OK);
    CHECK(eh_wait_done(&loop, &b, 1, WAIT_MS));
    CHECK_EQ_INT(b.finish, ENGINE_FINISH_CANCELED);
    CHECK_EQ_INT(b.status, CS_ECANCELED);
    CHECK_EQ_INT(b.n, 0);
    CHECK(eh_wait_done(&loop, &a, 1, WAIT_MS));
    CHECK_EQ_INT(a.finish, ENGINE_FINISH_CANCELED);
    CHECK_EQ_INT(a.n, 3);                               /* nothing after the cancel */
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.queued, 0);
    CHECK_EQ_INT(engine_cancel(e, a.id), CS_ENOTFOUND); /* gone after its done */
    /* the slot is free again: a new request runs; on_token false stops it */
    struct engine_request rc = eh_request(&c, prompt, 12, 100, &sp);
    CHECK_EQ_INT(eh_submit(e, &c, &rc, &err), CS_OK);
    CHECK(eh_wait_done(&loop, &c, 1, WAIT_MS));
    CHECK_EQ_INT(c.finish, ENGINE_FINISH_STOP);
    CHECK_EQ_INT(c.n, 2);
    eh_run_for(&loop, 50);
    CHECK_EQ_INT(a.n_done + b.n_done + c.n_done, 3);    /* exactly one done each */
    engine_stats(e, &st);
    CHECK_EQ_INT(st.running, 0);
    eh_engine_destroy(&loop, e);
}

static void test_engine_limits(void)
{
    struct cs_config cfg;
    eh_config(&cfg, model_path, 128, 1, 8, 8, 2);
    struct engine *e = engine_make(&cfg);
    if (!e)
        return;
    int32_t prompt[100];
    make_prompt(prompt, 100, 4);
    struct cs_sample_params sp = eh_greedy();
    struct eh_gen g[4];
    memset(g, 0, sizeof g);
    struct cs_error err = {0};
    for (int i = 0; i < 3; i++) {   /* one runs, two wait */
        struct engine_request r = eh_request(&g[i], prompt, 10, 100, &sp);
        CHECK_EQ_INT(eh_submit(e, &g[i], &r, &err), CS_OK);
    }
    struct engine_request r = eh_request(&g[3], prompt, 10, 100, &sp);
    CHECK_EQ_INT(eh_submit(e, &g[3], &r, &err), CS_EFULL);
    r = eh_request(&g[3], prompt, 100, 40, &sp);
    memset(&err, 0, sizeof err);
    CHECK_EQ_INT(eh_submit(e, &g[3], &r, &err), CS_ERANGE);
    CHECK(strstr(err.msg, "100") && strstr(err.msg, "40") && strstr(err.msg, "128"));
    int32_t bad[2] = {1, 100000};
    r = eh_request(&g[3], bad, 2, 4, &sp);
    CHECK_EQ_INT(eh_submit(e, &g[3], &r, &err), CS_EINVAL);
    r = eh_request(&g[3], prompt, 4, 0, &sp);
    CHECK_EQ_INT(eh_submit(e, &g[3], &r, &err), CS_EINVAL);
    uint8_t none[64] = {0};   /* an allowed mask with no id would fail the whole step */
    r = eh_request(&g[3], prompt, 4, 4, &sp);
    r.sample.allowed = none;
    CHECK_EQ_INT(eh_submit(e, &g[3], &r, &err), CS_EINVAL);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK_EQ_INT(st.max_running, 1);
    CHECK_EQ_INT(st.queue_size, 2);
    CHECK(st.running + st.queued == 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(engine_cancel(e, g[i].id), CS_OK);
    CHECK(eh_wait_done(&loop, g, 3, WAIT_MS));
    for (int i = 0; i < 3; i++)
        CHECK(g[i].n_done == 1 && g[i].finish == ENGINE_FINISH_CANCELED);
    eh_engine_destroy(&loop, e);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static void test_engine_script(void)
{
    char path[200];
    snprintf(path, sizeof path, "%.150s/engine-script.json", work_dir);
    CHECK_EQ_INT(write_file(path, "{\"scripts\": [\"hi<|im_end|>\", [5, 6, 7], \"abc\"]}"), 0);
    struct cs_config cfg;
    eh_config(&cfg, model_path, 128, 2, 8, 16, 8);
    snprintf(cfg.test_script, sizeof cfg.test_script, "%s", path);
    struct engine *e = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(engine_local_create(&e, &loop, &cfg, &err), CS_EINVAL);
    CHECK(e == NULL && strstr(err.msg, "allow_test_options"));
    cfg.allow_test_options = true;
    e = engine_make(&cfg);
    if (!e)
        return;
    int32_t prompt[6];
    make_prompt(prompt, 6, 5);
    struct cs_sample_params sp = eh_greedy();
    struct eh_gen g[4];
    memset(g, 0, sizeof g);
    int max_tokens[4] = {10, 10, 2, 10};
    for (int i = 0; i < 4; i++) {
        struct engine_request r = eh_request(&g[i], prompt, 6, max_tokens[i], &sp);
        CHECK_EQ_INT(eh_submit(e, &g[i], &r, &err), CS_OK);
    }
    CHECK(eh_wait_done(&loop, g, 4, WAIT_MS));
    int32_t h = 'h', i_ = 'i', a = 'a', b = 'b';   /* the tiny vocabulary: id = byte */
    CHECK(g[0].n == 2 && g[0].toks[0] == h && g[0].toks[1] == i_);
    CHECK_EQ_INT(g[0].finish, ENGINE_FINISH_STOP);
    CHECK(g[1].n == 3 && g[1].toks[0] == 5 && g[1].toks[1] == 6 && g[1].toks[2] == 7);
    CHECK_EQ_INT(g[1].finish, ENGINE_FINISH_STOP);
    CHECK(g[2].n == 2 && g[2].toks[0] == a && g[2].toks[1] == b);
    CHECK_EQ_INT(g[2].finish, ENGINE_FINISH_LENGTH);
    CHECK(g[3].n == 2 && g[3].toks[0] == h && g[3].toks[1] == i_);   /* script 3 mod 3 */
    eh_engine_destroy(&loop, e);
    /* a bad script file is a clear error */
    CHECK_EQ_INT(write_file(path, "{\"scripts\": [[1, -4]]}"), 0);
    memset(&err, 0, sizeof err);
    CHECK_EQ_INT(engine_local_create(&e, &loop, &cfg, &err), CS_EFORMAT);
    CHECK(strstr(err.msg, "element 1") != NULL);
}

static int shutdown_calls, shutdown_dones_before;
static struct eh_gen *shutdown_gens;

static void on_shutdown(void *ctx)
{
    (void)ctx;
    shutdown_calls++;
    shutdown_dones_before = shutdown_gens[0].n_done + shutdown_gens[1].n_done;
}

static void test_engine_shutdown(void)
{
    struct cs_config cfg;
    eh_config(&cfg, model_path, 128, 1, 8, 8, 4);
    struct engine *e = engine_make(&cfg);
    if (!e)
        return;
    int32_t prompt[8];
    make_prompt(prompt, 8, 6);
    int32_t ban[2] = {stop_default[0], stop_default[1]};
    float ban_vals[2] = {-1e4f, -1e4f};
    struct cs_sample_params sp = eh_greedy();
    sp.bias_ids = ban;
    sp.bias_vals = ban_vals;
    sp.n_bias = 2;
    struct eh_gen g[3];
    memset(g, 0, sizeof g);
    shutdown_gens = g;
    struct cs_error err = {0};
    for (int i = 0; i < 2; i++) {
        struct engine_request r = eh_request(&g[i], prompt, 8, 110, &sp);
        CHECK_EQ_INT(eh_submit(e, &g[i], &r, &err), CS_OK);
    }
    e->ops->shutdown(e, 30, on_shutdown, NULL);
    struct engine_request r = eh_request(&g[2], prompt, 8, 4, &sp);
    CHECK_EQ_INT(eh_submit(e, &g[2], &r, &err), CS_ECLOSED);
    CHECK(eh_wait_done(&loop, g, 2, WAIT_MS));
    eh_run_for(&loop, 20);
    CHECK_EQ_INT(shutdown_calls, 1);
    CHECK_EQ_INT(shutdown_dones_before, 2);
    CHECK(g[0].finish == ENGINE_FINISH_CANCELED || g[0].finish == ENGINE_FINISH_LENGTH);
    CHECK_EQ_INT(g[1].n_done, 1);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK(!st.ready && st.running == 0 && st.queued == 0);
    eh_engine_destroy(&loop, e);
}

static int ref_open(void)
{
    struct cli_session_options so = {.model_path = model_path, .device = eh_device, .n_threads = 2,
                                     .need_tokenizer = true};
    struct cs_error err = {0};
    int rc = cli_session_open(&ref, &so, &err);
    if (rc) {
        fprintf(stderr, "reference: %s\n", err.msg);
        return rc;
    }
    stop_default[0] = tokenizer_token_find(ref.tok, "<|endoftext|>", 13);
    stop_default[1] = tokenizer_token_find(ref.tok, "<|im_end|>", 10);
    return stop_default[0] >= 0 && stop_default[1] >= 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf WORKDIR [DEVICE]\n", argv[0]);
        return 2;
    }
    model_path = argv[1];
    work_dir = argv[2];
    if (argc == 4)
        eh_device = argv[3];
    if (eh_model_ensure(model_path) != 0 || ref_open() != 0) {
        fprintf(stderr, "cannot prepare the tiny model %s\n", model_path);
        return 1;
    }
    uv_loop_init(&loop);
    RUN(test_engine_single_greedy);
    RUN(test_engine_concurrent_greedy);
    RUN(test_engine_concurrent_seeded);
    RUN(test_engine_cancel);
    RUN(test_engine_limits);
    RUN(test_engine_script);
    RUN(test_engine_shutdown);
    cli_session_close(&ref);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    return test_report();
}
