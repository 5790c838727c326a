/* test_mkmodel_load.c - proves that `cmpserve mkmodel --preset tiny` writes a
 * qwen35 GGUF the model loader accepts, with llama.cpp's key set and tensor
 * names/shapes/types (model.md sections 1-3) and weights of the promised
 * statistics: norms near 1, ssm_a in [-16, -1], dt_bias = softplus^-1 of a
 * value in [1e-3, 1e-1], Q8_0 blocks that dequantize to the same values as
 * the F32 file of the same seed (within half a quantization step).
 *
 * usage: test_mkmodel_load F32.gguf Q8_0.gguf (written with the same seed). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/half.h"
#include "kernels/ops.h"
#include "test_util.h"
#include "worker/model.h"

static const char *path_f32, *path_q8;

static struct gguf_file *open_or_fail(const char *path)
{
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    int rc = gguf_open(&f, path, &err);
    if (rc)
        fprintf(stderr, "gguf_open %s: %s\n", path, err.msg);
    CHECK_EQ_INT(rc, CS_OK);
    return f;
}

static void test_mkmodel_hparams(void)
{
    struct gguf_file *f = open_or_fail(path_q8);
    if (!f)
        return;
    struct cs_hparams hp;
    struct cs_error err = {0};
    int rc = model_hparams_read(&hp, f, &err);
    if (rc)
        fprintf(stderr, "model_hparams_read: %s\n", err.msg);
    CHECK_EQ_INT(rc, CS_OK);
    CHECK_EQ_INT(hp.n_embd, 128);
    CHECK_EQ_INT(hp.n_layer, 8);
    CHECK_EQ_INT(hp.n_ff[0], 384);
    CHECK_EQ_INT(hp.n_head, 2);
    CHECK_EQ_INT(hp.n_head_kv, 1);
    CHECK_EQ_INT(hp.head_dim, 256);
    CHECK_EQ_INT(hp.rope_dims, 64);
    CHECK_EQ_INT(hp.ssm_groups, 2);
    CHECK_EQ_INT(hp.ssm_heads, 4);
    CHECK_EQ_INT(hp.ssm_state, 128);
    CHECK_EQ_INT(hp.conv_kernel, 4);
    CHECK(hp.tied_output);
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(hp.recurrent[i], (i + 1) % 4 != 0);
    const struct gguf_kv *tokens = gguf_find_kv(f, "tokenizer.ggml.tokens");
    CHECK(tokens != NULL);
    if (tokens)
        CHECK_EQ_INT(tokens->arr_len, hp.n_vocab);
    char *arch = NULL;
    CHECK_EQ_INT(gguf_get_str(f, "general.architecture", &arch, NULL), CS_OK);
    CHECK(arch && strcmp(arch, "qwen35") == 0);
    free(arch);
    const struct gguf_kv *sec = gguf_find_kv(f, "qwen35.rope.dimension_sections");
    CHECK(sec && sec->type == GGUF_TYPE_ARRAY && sec->arr_len == 4);
    int32_t want[4] = {11, 11, 10, 0};
    for (uint64_t i = 0; sec && i < 4; i++) {
        int64_t v = -1;
        gguf_arr_i64(sec, i, &v);
        CHECK_EQ_INT(v, want[i]);
    }
    static const char *keys[] = {"general.file_type", "qwen35.block_count",
                                 "qwen35.context_length", "qwen35.ssm.inner_size",
                                 "qwen35.attention.layer_norm_rms_epsilon",
                                 "qwen35.rope.freq_base", "tokenizer.ggml.model",
                                 "tokenizer.ggml.pre", "tokenizer.ggml.merges",
                                 "tokenizer.ggml.eos_token_id", "tokenizer.ggml.token_type"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!gguf_find_kv(f, keys[i]))
            fprintf(stderr, "missing key %s\n", keys[i]);
        CHECK(gguf_find_kv(f, keys[i]) != NULL);
    }
    CHECK(gguf_find_tensor(f, "output.weight") == NULL);
    gguf_close(f);
}

static bool ends_with(const struct gguf_str *s, const char *suffix)
{
    size_t k = strlen(suffix);
    return s->len >= k && memcmp(s->ptr + s->len - k, suffix, k) == 0;
}

/* Expected type of a tensor in a Q8_0 file (llama.cpp's converter rules). */
static uint32_t q8_file_type(const struct gguf_tensor *t)
{
    if (t->n_dims == 1 || ends_with(&t->name, "_norm.weight") ||
        ends_with(&t->name, "ssm_conv1d.weight"))
        return CS_DTYPE_F32;
    return CS_DTYPE_Q8_0;
}

static void test_mkmodel_tensor_types(void)
{
    struct gguf_file *f = open_or_fail(path_q8);
    if (!f)
        return;
    CHECK_EQ_INT(f->n_tensors, 2 + 6 * 14 + 2 * 11);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->type != q8_file_type(t))
            fprintf(stderr, "%.*s: type %u\n", (int)t->name.len, t->name.ptr, t->type);
        CHECK_EQ_INT(t->type, q8_file_type(t));
    }
    const struct gguf_tensor *qkv = gguf_find_tensor(f, "blk.0.attn_qkv.weight");
    CHECK(qkv && qkv->ne[0] == 128 && qkv->ne[1] == 2 * 128 * 2 + 128 * 4);
    const struct gguf_tensor *q = gguf_find_tensor(f, "blk.3.attn_q.weight");
    CHECK(q && q->ne[0] == 128 && q->ne[1] == 2 * 256 * 2);
    const struct gguf_tensor *conv = gguf_find_tensor(f, "blk.1.ssm_conv1d.weight");
    CHECK(conv && conv->ne[0] == 4 && conv->ne[1] == 1024);
    const struct gguf_tensor *out = gguf_find_tensor(f, "blk.2.ssm_out.weight");
    CHECK(out && out->ne[0] == 512 && out->ne[1] == 128);
    CHECK(gguf_find_tensor(f, "blk.3.attn_qkv.weight") == NULL);
    CHECK(gguf_find_tensor(f, "blk.2.attn_q.weight") == NULL);
    gguf_close(f);
}

static const float *f32_data(const struct gguf_file *f, const char *name, int64_t n)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    CHECK(t != NULL);
    if (!t)
        return NULL;
    CHECK_EQ_INT(t->type, CS_DTYPE_F32);
    CHECK_EQ_INT(t->ne[0] * t->ne[1], n);
    return t->type == CS_DTYPE_F32 ? t->data : NULL;
}

static void test_mkmodel_value_ranges(void)
{
    struct gguf_file *f = open_or_fail(path_f32);
    if (!f)
        return;
    const float *norm = f32_data(f, "blk.0.attn_norm.weight", 128);
    const float *a = f32_data(f, "blk.0.ssm_a", 4);
    const float *dt = f32_data(f, "blk.0.ssm_dt.bias", 4);
    const float *w = f32_data(f, "blk.0.ffn_up.weight", 128 * 384);
    double mean = 0, sq = 0;
    for (int i = 0; norm && i < 128; i++)
        mean += norm[i] / 128.0;
    CHECK_NEAR(mean, 1.0, 0.03);
    for (int i = 0; a && i < 4; i++)
        CHECK(a[i] <= -1.0f && a[i] >= -16.0f);
    for (int i = 0; dt && i < 4; i++) {
        double sp = log1p(exp(dt[i]));   /* softplus */
        CHECK(sp >= 0.99e-3 && sp <= 1.01e-1);
    }
    for (int i = 0; w && i < 128 * 384; i++)
        sq += (double)w[i] * w[i];
    CHECK_NEAR(sqrt(sq / (128 * 384)), 1.0 / sqrt(128.0), 0.01);
    gguf_close(f);
}

/* The Q8_0 file holds the F32 file's values, quantized. */
static void test_mkmodel_q8_matches_f32(void)
{
    struct gguf_file *f = open_or_fail(path_f32), *q = open_or_fail(path_q8);
    if (!f || !q)
        goto out;
    const struct gguf_tensor *tf = gguf_find_tensor(f, "blk.0.attn_qkv.weight");
    const struct gguf_tensor *tq = gguf_find_tensor(q, "blk.0.attn_qkv.weight");
    CHECK(tf && tq && tq->type == CS_DTYPE_Q8_0);
    if (!tf || !tq || tq->type != CS_DTYPE_Q8_0)
        goto out;
    const float *x = tf->data;
    const uint8_t *blk = tq->data;
    int64_t n = tf->ne[0] * tf->ne[1], bad = 0;
    for (int64_t b = 0; b < n / 32; b++, blk += 34) {
        uint16_t dh;
        memcpy(&dh, blk, 2);
        float d = cs_half_to_float(dh);
        for (int j = 0; j < 32; j++) {
            float v = d * (float)(int8_t)blk[2 + j];
            /* half a step, plus the fp16 rounding of d times up to 127 */
            if (fabsf(v - x[b * 32 + j]) > 0.57f * d + 1e-6f)
                bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
out:
    if (f)
        gguf_close(f);
    if (q)
        gguf_close(q);
}

static void load_on_cpu(const char *path)
{
    struct gguf_file *f = open_or_fail(path);
    if (!f)
        return;
    struct cs_backend *be = NULL;
    struct cs_backend_cpu_options opt = {.n_threads = 1};
    CHECK_EQ_INT(cs_backend_cpu_create(&be, &opt), CS_OK);
    struct cs_model *m = calloc(1, sizeof *m);
    struct cs_error err = {0};
    int rc = be && m ? model_load(m, f, be, 0, 8, NULL, NULL, &err) : CS_ENOMEM;
    if (rc)
        fprintf(stderr, "model_load %s: %s\n", path, err.msg);
    CHECK_EQ_INT(rc, CS_OK);
    if (!rc)
        model_free(m);
    free(m);
    if (be)
        be->destroy(be);
    gguf_close(f);
}

static void test_mkmodel_loads_f32(void) { load_on_cpu(path_f32); }
static void test_mkmodel_loads_q8_0(void) { load_on_cpu(path_q8); }

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s F32.gguf Q8_0.gguf\n", argv[0]);
        return 2;
    }
    path_f32 = argv[1];
    path_q8 = argv[2];
    RUN(test_mkmodel_hparams);
    RUN(test_mkmodel_tensor_types);
    RUN(test_mkmodel_value_ranges);
    RUN(test_mkmodel_q8_matches_f32);
    RUN(test_mkmodel_loads_f32);
    RUN(test_mkmodel_loads_q8_0);
    return test_report();
}
