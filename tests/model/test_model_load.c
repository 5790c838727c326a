/* test_model_load.c - proves that model_hparams_read and model_load read the
 * fixture's hyperparameters exactly, load only the tensors a slice needs
 * (MTP tensors ignored), and refuse bad files with the precise message: wrong
 * architecture, missing tensor, wrong shape, unsupported type, vocabulary
 * mismatch, bad layer range; also state sizing, the KV page allocator and
 * rejection of malformed batches. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "fixture.h"
#include "harness.h"
#include "tests/test_util.h"
#include "worker/state.h"

static struct cs_backend *be;

/* Write a fixture with opts, load [lb, le); returns the status, err filled. */
static int load_with(const struct fixture_opts *o, int lb, int le, struct cs_error *err)
{
    char path[256];
    fixture_path(path, sizeof path, "load");
    if (fixture_write(path, o) != 0) {
        unlink(path);
        return cs_error_set(err, -1000, "fixture_write failed");
    }
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, path, err);
    if (rc == CS_OK) {
        struct cs_model *m = calloc(1, sizeof *m);
        rc = model_load(m, f, be, lb, le, NULL, NULL, err);
        if (rc == CS_OK)
            model_free(m);
        free(m);
        gguf_close(f);
    }
    unlink(path);
    return rc;
}

static void expect_error(const struct fixture_opts *o, int lb, int le, const char *msg)
{
    struct cs_error err = {0};
    int rc = load_with(o, lb, le, &err);
    CHECK(rc < 0);
    CHECK(strstr(err.msg, msg) != NULL);
    if (!strstr(err.msg, msg))
        fprintf(stderr, "  expected \"%s\"\n  got      \"%s\"\n", msg, err.msg);
}

static void test_model_hparams_values(void)
{
    char path[256];
    fixture_path(path, sizeof path, "hp");
    struct fixture_opts o = {.mat_type = CS_DTYPE_F32, .tied = true};
    CHECK_EQ_INT(fixture_write(path, &o), 0);
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(gguf_open(&f, path, &err), CS_OK);
    struct cs_hparams hp;
    CHECK_EQ_INT(model_hparams_read(&hp, f, &err), CS_OK);
    CHECK_EQ_INT(hp.n_embd, FX_E);
    CHECK_EQ_INT(hp.n_layer, FX_LAYERS);
    CHECK_EQ_INT(hp.n_layer_mtp, 1);
    CHECK_EQ_INT(hp.n_head, FX_HQ);
    CHECK_EQ_INT(hp.n_head_kv, FX_HKV);
    CHECK_EQ_INT(hp.head_dim, FX_D);
    CHECK_EQ_INT(hp.rope_dims, FX_ROPE);
    CHECK_NEAR(hp.rope_base, 1e7, 1);
    CHECK_NEAR(hp.eps, 1e-6, 1e-12);
    CHECK_EQ_INT(hp.ssm_groups, FX_GK);
    CHECK_EQ_INT(hp.ssm_heads, FX_HV);
    CHECK_EQ_INT(hp.ssm_inner, FX_S * FX_HV);
    CHECK_EQ_INT(hp.n_vocab, FX_VOCAB);
    CHECK_EQ_INT(hp.n_ctx_train, 4096);
    CHECK(hp.tied_output);
    for (int l = 0; l < FX_LAYERS; l++) {
        CHECK_EQ_INT(hp.n_ff[l], fx_ff[l]);
        CHECK_EQ_INT(hp.recurrent[l], l != 3);
    }
    gguf_close(f);
    unlink(path);
}

static void test_model_load_errors(void)
{
    struct fixture_opts o = {.mat_type = CS_DTYPE_Q8_0};
    struct fixture_opts bad = o;
    bad.arch = "qwen35moe";
    expect_error(&bad, 0, 4, "architecture qwen35moe is not supported (dense qwen35 only)");
    bad.arch = "llama";
    expect_error(&bad, 0, 4, "architecture llama is not supported (dense qwen35 only)");
    bad = o;
    bad.drop = "blk.2.ffn_up.weight";
    expect_error(&bad, 0, 4, "missing tensor blk.2.ffn_up.weight");
    bad = o;
    bad.reshape = "blk.3.attn_q.weight";
    expect_error(&bad, 0, 4, "blk.3.attn_q.weight: expected shape {64, 1024}, found {64, 512}");
    bad = o;
    bad.reshape = "blk.1.ssm_norm.weight";
    expect_error(&bad, 0, 4, "blk.1.ssm_norm.weight: expected shape {128}, found {64}");
    bad = o;
    bad.retype_q4 = "blk.0.ffn_up.weight";
    expect_error(&bad, 0, 4, "blk.0.ffn_up.weight: type q4_0 not supported (f32, f16, bf16, q8_0)");
    bad = o;
    bad.drop = "output_norm.weight";
    expect_error(&bad, 3, 4, "missing tensor output_norm.weight");
    bad = o;
    bad.n_vocab_tokens = 299;
    expect_error(&bad, 0, 4, "tokenizer.ggml.tokens has 299 entries but token_embd.weight has 300");
    bad = o;
    bad.attention_at_1 = true; /* recurrent_layers overrides the interval rule */
    expect_error(&bad, 0, 4, "missing tensor blk.1.attn_q.weight");
    bad = o;
    bad.bad_key = "qwen35.ssm.inner_size";
    bad.bad_val = 500;
    expect_error(&bad, 0, 4,
                 "qwen35.ssm.inner_size = 500, expected state_size * time_step_rank = 128 * 4");
    bad.bad_key = "qwen35.ssm.group_count";
    bad.bad_val = 3;
    expect_error(&bad, 0, 4, "qwen35.ssm.group_count = 3 does not divide time_step_rank = 4");
    bad.bad_key = "qwen35.attention.head_count_kv";
    expect_error(&bad, 0, 4, "qwen35.attention.head_count = 2 is not a multiple of head_count_kv = 3");
    bad.bad_key = "qwen35.attention.value_length";
    bad.bad_val = 128;
    expect_error(&bad, 0, 4, "qwen35.attention.key_length = 256 differs from value_length = 128");
    bad.bad_key = "qwen35.block_count";
    bad.bad_val = 100000;
    expect_error(&bad, 0, 4, "qwen35.block_count = 100000 out of range");
    bad.bad_key = "qwen35.embedding_length";
    bad.bad_val = 0;
    expect_error(&bad, 0, 4, "qwen35.embedding_length = 0 out of range");
    expect_error(&o, 2, 2, "layer range [2, 2) invalid");
    expect_error(&o, -1, 2, "layer range [-1, 2) invalid");
    expect_error(&o, 0, 5, "layer range [0, 5) invalid: need 0 <= begin < end <= 4");
    expect_error(&o, 3, 1, "layer range [3, 1) invalid");
}

static void test_model_load_slice_needs_only_its_tensors(void)
{
    struct cs_error err = {0};
    /* a middle slice of an untied model needs neither embedding nor head */
    struct fixture_opts o = {.mat_type = CS_DTYPE_Q8_0};
    o.drop = "blk.0.ffn_up.weight";
    CHECK_EQ_INT(load_with(&o, 1, 3, &err), CS_OK);
    o.drop = "output.weight"; /* now tied: the last stage uses token_embd */
    CHECK_EQ_INT(load_with(&o, 3, 4, &err), CS_OK);
    o.drop = "output_norm.weight";
    CHECK_EQ_INT(load_with(&o, 0, 3, &err), CS_OK);
    o.drop = "blk.4.nextn.eh_proj.weight"; /* MTP is never looked at */
    CHECK_EQ_INT(load_with(&o, 0, 4, &err), CS_OK);
}

struct progress {
    int calls;
    uint64_t done, total;
};

static void progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    struct progress *p = ctx;
    p->calls++;
    p->done = done;
    p->total = total;
}

static void test_model_load_progress_and_state_bytes(void)
{
    char path[256];
    fixture_path(path, sizeof path, "prog");
    struct fixture_opts o = {.mat_type = CS_DTYPE_Q8_0, .tied = true, .mixed_vectors = true};
    CHECK_EQ_INT(fixture_write(path, &o), 0);
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(gguf_open(&f, path, &err), CS_OK);
    struct cs_model *m = calloc(1, sizeof *m);
    struct progress p = {0};
    CHECK_EQ_INT(model_load(m, f, be, 0, 4, progress_cb, &p, &err), CS_OK);
    CHECK(p.calls >= 1);
    CHECK(p.total > 0 && p.done == p.total);
    CHECK_EQ_INT(m->weight_bytes, p.total);
    CHECK(m->output.data == m->token_embd.data);
    struct cs_state_config cfg = {.max_tokens = 8, .n_slots = 2, .kv_pages = 3, .page_size = 16,
                                  .kv_type = CS_DTYPE_F16};
    uint64_t b2 = state_bytes(m, &cfg);
    cfg.n_slots = 3;
    uint64_t b3 = state_bytes(m, &cfg);
    /* one more slot: 3 GDN layers of (3 conv columns + a 128x128 state per v head) */
    CHECK_EQ_INT(b3 - b2, 3ull * (3 * FX_CONV + FX_HV * FX_S * FX_S) * 4);
    cfg.kv_pages = 4;
    /* one more page: 1 attention layer of K and V, 16 tokens, fp16 */
    CHECK_EQ_INT(state_bytes(m, &cfg) - b3, 2ull * 16 * FX_HKV * FX_D * 2);
    struct cs_state *st = NULL;
    CHECK_EQ_INT(state_create(&st, m, &cfg, &err), CS_OK);
    CHECK_EQ_INT(state_slot_copy(st, 0, 3), CS_EINVAL);
    CHECK_EQ_INT(state_slot_reset(st, -1), CS_EINVAL);
    cfg.kv_type = CS_DTYPE_Q8_0;
    CHECK(state_create(&st, m, &cfg, &err) == CS_EINVAL);
    state_destroy(st);
    model_free(m);
    free(m);
    gguf_close(f);
    unlink(path);
}

static void test_model_kv_pages(void)
{
    struct kv_pages p;
    int32_t a[4], b[4];
    CHECK_EQ_INT(kv_pages_init(&p, 5), CS_OK);
    CHECK_EQ_INT(kv_pages_alloc(&p, a, 0, 3), CS_OK);
    CHECK_EQ_INT(kv_pages_alloc(&p, b, 0, 3), CS_EFULL);
    CHECK_EQ_INT(kv_pages_alloc(&p, b, 0, 2), CS_OK);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            CHECK(a[i] != b[j]);
    kv_pages_free(&p, a, 3);
    CHECK_EQ_INT(kv_pages_alloc(&p, b, 2, 4), CS_OK);
    CHECK_EQ_INT(kv_pages_for_tokens(17, 16), 2);
    CHECK_EQ_INT(kv_pages_for_tokens(16, 16), 1);
    kv_pages_deinit(&p);
}

static void test_model_rejects_bad_batch(void)
{
    char path[256];
    fixture_path(path, sizeof path, "batch");
    struct fixture_opts o = {.mat_type = CS_DTYPE_F32};
    CHECK_EQ_INT(fixture_write(path, &o), 0);
    struct harness h;
    int bounds[2] = {0, FX_LAYERS};
    CHECK_EQ_INT(harness_open(&h, path, bounds, 1, false), 0);
    struct hseq s;
    struct hbatch hb;
    float *logits = malloc(sizeof(float) * 4 * FX_VOCAB);
    int32_t toks[4] = {1, 2, 3, 4};
    harness_seq_start(&h, &s, 0);
    hbatch_init(&hb);
    hbatch_add(&h, &hb, &s, toks, 4);
    CHECK_EQ_INT(harness_logits(&h, &hb, logits), CS_OK);
    hb.tokens[2] = FX_VOCAB;               /* token out of range */
    CHECK_EQ_INT(harness_logits(&h, &hb, logits), CS_EINVAL);
    hb.tokens[2] = 3;
    hb.page_table[0] = H_KV_PAGES;         /* page out of range */
    CHECK_EQ_INT(harness_logits(&h, &hb, logits), CS_EINVAL);
    hb.page_table[0] = 0;
    hb.slot[0] = H_SLOTS;                  /* slot out of range */
    CHECK_EQ_INT(harness_logits(&h, &hb, logits), CS_EINVAL);
    hb.slot[0] = 0;
    hb.pos[3] = 7;                         /* positions not consecutive */
    CHECK_EQ_INT(harness_logits(&h, &hb, logits), CS_EINVAL);
    hb.pos[3] = 3;
    hb.b.n_tokens = H_MAX_TOKENS + 1;      /* more than max_tokens */
    CHECK_EQ_INT(harness_logits(&h, &hb, logits), CS_EINVAL);
    free(logits);
    harness_close(&h);
    unlink(path);
}

int main(void)
{
    struct cs_backend_cpu_options opt = {.n_threads = 2};
    if (cs_backend_cpu_create(&be, &opt) != CS_OK) {
        fprintf(stderr, "no CPU backend\n");
        return 1;
    }
    cs_log_set_level(CS_LOG_ERROR);
    RUN(test_model_hparams_values);
    RUN(test_model_load_errors);
    RUN(test_model_load_slice_needs_only_its_tensors);
    RUN(test_model_load_progress_and_state_bytes);
    RUN(test_model_kv_pages);
    RUN(test_model_rejects_bad_batch);
    be->destroy(be);
    return test_report();
}
