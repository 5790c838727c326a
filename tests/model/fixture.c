/* fixture.c - writes the tiny qwen35 GGUF described in fixture.h with the
 * GGUF writer: metadata of model.md section 2, tensors of section 3 with
 * deterministic random values, Q8_0 quantized as llama.cpp does (amax/127,
 * round half away from zero). */
#include "fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/half.h"

#define FX_MAX_BUFS 256

const int fx_ff[FX_LAYERS + 1] = {128, 96, 128, 160, 128};

struct fx {
    struct gguf_writer *w;
    const struct fixture_opts *o;
    uint64_t rng;
    void *bufs[FX_MAX_BUFS];
    int n_bufs;
    int rc;
};

static float fx_uniform(struct fx *x)
{
    x->rng ^= x->rng << 13;
    x->rng ^= x->rng >> 7;
    x->rng ^= x->rng << 17;
    return (float)((x->rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void *fx_keep(struct fx *x, size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || x->n_bufs == FX_MAX_BUFS) {
        free(p);
        x->rc = -1;
        return NULL;
    }
    x->bufs[x->n_bufs++] = p;
    return p;
}

static void q8_0_quantize(uint8_t *dst, const float *src, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) {
        const float *v = src + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t h = cs_float_to_half(d);
        uint8_t *blk = dst + b * 34;
        memcpy(blk, &h, 2);
        for (int i = 0; i < 32; i++)
            blk[2 + i] = (uint8_t)(int8_t)roundf(v[i] * id);
    }
}

/* Encode n floats as type into a kept buffer. */
static void *fx_encode(struct fx *x, const float *v, int64_t n, uint32_t type, size_t *bytes)
{
    size_t sz = type == CS_DTYPE_F32 ? 4 * (size_t)n
              : type == CS_DTYPE_Q8_0 ? (size_t)n / 32 * 34
              : type == 2 /* q4_0 */ ? (size_t)n / 32 * 18 : 2 * (size_t)n;
    uint8_t *p = fx_keep(x, sz);
    if (!p)
        return NULL;
    *bytes = sz;
    if (type == CS_DTYPE_F32)
        memcpy(p, v, sz);
    else if (type == CS_DTYPE_Q8_0)
        q8_0_quantize(p, v, n);
    else if (type == CS_DTYPE_F16 || type == CS_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = type == CS_DTYPE_F16 ? cs_float_to_half(v[i]) : cs_float_to_bf16(v[i]);
            memcpy(p + 2 * i, &h, 2);
        }
    /* q4_0: zero blocks are fine, the loader must refuse the type */
    return p;
}

/* Add tensor name {ne0[, ne1]} with values base + scale * uniform. */
static void fx_tensor(struct fx *x, const char *name, int64_t ne0, int64_t ne1, uint32_t type,
                      float base, float scale)
{
    const struct fixture_opts *o = x->o;
    if (x->rc || (o->drop && strcmp(o->drop, name) == 0))
        return;
    int64_t ne[2] = {ne0, ne1};
    int n_dims = ne1 > 0 ? 2 : 1;
    if (n_dims == 1)
        ne[1] = 1;
    if (o->reshape && strcmp(o->reshape, name) == 0)
        ne[n_dims - 1] /= 2;
    if (o->retype_q4 && strcmp(o->retype_q4, name) == 0)
        type = 2;
    int64_t n = ne[0] * ne[1];
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        x->rc = -1;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = base + scale * fx_uniform(x);
    size_t bytes;
    void *data = fx_encode(x, v, n, type, &bytes);
    free(v);
    if (data && gguf_writer_add_tensor(x->w, name, type, ne, (uint32_t)n_dims, data, NULL, NULL))
        x->rc = -1;
}

static void fx_matrix(struct fx *x, const char *name, int64_t n_in, int64_t n_out)
{
    fx_tensor(x, name, n_in, n_out, x->o->mat_type, 0.0f, 1.7f / sqrtf((float)n_in));
}

static void fx_norm(struct fx *x, const char *name, int64_t n, uint32_t type)
{
    fx_tensor(x, name, n, 0, x->o->mixed_vectors ? type : CS_DTYPE_F32, 1.0f, 0.3f);
}

static void fx_metadata(struct fx *x)
{
    struct gguf_writer *w = x->w;
    const struct fixture_opts *o = x->o;
    uint32_t ff[FX_LAYERS + 1];
    for (int i = 0; i <= FX_LAYERS; i++)
        ff[i] = (uint32_t)fx_ff[i];
    int rc = gguf_writer_set_str(w, "general.architecture", o->arch ? o->arch : "qwen35") ||
             gguf_writer_set_u32(w, "qwen35.block_count", FX_LAYERS + 1) ||
             gguf_writer_set_u32(w, "qwen35.nextn_predict_layers", 1) ||
             gguf_writer_set_u32(w, "qwen35.context_length", 4096) ||
             gguf_writer_set_u32(w, "qwen35.embedding_length", FX_E) ||
             gguf_writer_set_arr(w, "qwen35.feed_forward_length", GGUF_TYPE_UINT32, ff,
                                 FX_LAYERS + 1) ||
             gguf_writer_set_u32(w, "qwen35.attention.head_count", FX_HQ) ||
             gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", FX_HKV) ||
             gguf_writer_set_u32(w, "qwen35.attention.key_length", FX_D) ||
             gguf_writer_set_u32(w, "qwen35.attention.value_length", FX_D) ||
             gguf_writer_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", 1e-6f) ||
             gguf_writer_set_u32(w, "qwen35.rope.dimension_count", 64) ||
             gguf_writer_set_f32(w, "qwen35.rope.freq_base", 1e7f) ||
             gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", 4) ||
             gguf_writer_set_u32(w, "qwen35.ssm.state_size", FX_S) ||
             gguf_writer_set_u32(w, "qwen35.ssm.group_count", FX_GK) ||
             gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", FX_HV) ||
             gguf_writer_set_u32(w, "qwen35.ssm.inner_size", FX_S * FX_HV) ||
             gguf_writer_set_u32(w, "qwen35.full_attention_interval", 4);
    int n_tok = o->n_vocab_tokens ? o->n_vocab_tokens : FX_VOCAB;
    char **toks = fx_keep(x, (size_t)n_tok * sizeof *toks);
    char *text = fx_keep(x, (size_t)n_tok * 12);
    if (toks && text) {
        for (int i = 0; i < n_tok; i++) {
            toks[i] = text + 12 * i;
            snprintf(toks[i], 12, "t%d", i);
        }
        rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") ||
              gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks,
                                      (uint64_t)n_tok);
    }
    if (o->bad_key)
        rc |= gguf_writer_set_u32(w, o->bad_key, o->bad_val);
    if (o->attention_at_1) {
        bool rec[FX_LAYERS + 1] = {true, false, true, false, true};
        rc |= gguf_writer_set_arr(w, "qwen35.attention.recurrent_layers", GGUF_TYPE_BOOL, rec,
                                  FX_LAYERS + 1);
    }
    if (rc)
        x->rc = -1;
}

static void fx_layer(struct fx *x, int l)
{
    char n[96];
    int F = fx_ff[l];
#define T(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
    fx_norm(x, T("attn_norm.weight"), FX_E, CS_DTYPE_F16);
    fx_norm(x, T("post_attention_norm.weight"), FX_E, CS_DTYPE_BF16);
    if ((l + 1) % 4 != 0) {
        fx_matrix(x, T("attn_qkv.weight"), FX_E, FX_CONV);
        fx_matrix(x, T("attn_gate.weight"), FX_E, FX_S * FX_HV);
        fx_matrix(x, T("ssm_beta.weight"), FX_E, FX_HV);
        fx_matrix(x, T("ssm_alpha.weight"), FX_E, FX_HV);
        fx_tensor(x, T("ssm_conv1d.weight"), 4, FX_CONV,
                  x->o->mixed_vectors ? CS_DTYPE_F16 : CS_DTYPE_F32, 0.0f, 0.5f);
        fx_tensor(x, T("ssm_dt.bias"), FX_HV, 0, CS_DTYPE_F32, 0.0f, 0.5f);
        fx_tensor(x, T("ssm_a"), FX_HV, 0, CS_DTYPE_F32, -1.0f, 0.6f);
        fx_norm(x, T("ssm_norm.weight"), FX_S, CS_DTYPE_F16);
        fx_matrix(x, T("ssm_out.weight"), FX_S * FX_HV, FX_E);
    } else {
        fx_matrix(x, T("attn_q.weight"), FX_E, 2 * FX_D * FX_HQ);
        fx_matrix(x, T("attn_k.weight"), FX_E, FX_D * FX_HKV);
        fx_matrix(x, T("attn_v.weight"), FX_E, FX_D * FX_HKV);
        fx_norm(x, T("attn_q_norm.weight"), FX_D, CS_DTYPE_BF16);
        fx_norm(x, T("attn_k_norm.weight"), FX_D, CS_DTYPE_F16);
        fx_matrix(x, T("attn_output.weight"), FX_D * FX_HQ, FX_E);
    }
    fx_matrix(x, T("ffn_gate.weight"), FX_E, F);
    fx_matrix(x, T("ffn_up.weight"), FX_E, F);
    fx_matrix(x, T("ffn_down.weight"), F, FX_E);
#undef T
}

int fixture_write(const char *path, const struct fixture_opts *o)
{
    struct fx x = {.o = o, .rng = o->seed ? o->seed : 0x9e3779b97f4a7c15ull};
    if (gguf_writer_create(&x.w))
        return -1;
    fx_metadata(&x);
    fx_tensor(&x, "token_embd.weight", FX_E, FX_VOCAB, o->mat_type, 0.0f, 1.0f);
    for (int l = 0; l < FX_LAYERS; l++)
        fx_layer(&x, l);
    /* MTP block: the loader must ignore it */
    fx_norm(&x, "blk.4.attn_norm.weight", FX_E, CS_DTYPE_F32);
    fx_matrix(&x, "blk.4.nextn.eh_proj.weight", 2 * FX_E, FX_E);
    fx_norm(&x, "output_norm.weight", FX_E, CS_DTYPE_F16);
    if (!o->tied)
        fx_matrix(&x, "output.weight", FX_E, FX_VOCAB);
    struct cs_error err = {0};
    if (!x.rc && gguf_writer_write(x.w, path, &err)) {
        fprintf(stderr, "fixture: %s\n", err.msg);
        x.rc = -1;
    }
    gguf_writer_destroy(x.w);
    for (int i = 0; i < x.n_bufs; i++)
        free(x.bufs[i]);
    return x.rc;
}

void fixture_path(char *buf, int size, const char *tag)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, (size_t)size, "%s/cs_model_%d_%s.gguf", dir && *dir ? dir : "/tmp", (int)getpid(),
             tag);
}
