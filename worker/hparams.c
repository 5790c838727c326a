/* hparams.c - reading and validating the hyperparameters of a qwen35 GGUF
 * (model.md section 2) into struct cs_hparams.
 *
 * Owns: the architecture check (dense qwen35 only), every qwen35.* key with
 * its default, the layer kinds (interval rule or recurrent_layers array), the
 * consistency rules between keys, and n_vocab from token_embd. Tensor shapes
 * and types are checked later by weights.c. Every error names the key and the
 * values found. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "model.h"

#define ARCH "qwen35"
#define HP_MAX_EMBD 65536
#define HP_MAX_FF (1 << 20)
#define HP_MAX_HEADS 1024
#define HP_MAX_HEAD_DIM 1024
#define HP_MAX_VOCAB (1 << 24)

/* Read required key ARCH.<name> as a positive int no larger than max. */
static int hp_get_int(const struct gguf_file *f, const char *name, int max, int *out,
                      struct cs_error *err)
{
    char key[128];
    snprintf(key, sizeof key, ARCH ".%s", name);
    int64_t v;
    int rc = gguf_get_i64(f, key, &v, err);
    if (rc == CS_ENOTFOUND)
        return cs_error_set(err, CS_EFORMAT, "missing key %s", key);
    if (rc != CS_OK)
        return rc;
    if (v <= 0 || v > max)
        return cs_error_set(err, CS_EFORMAT, "%s = %lld out of range (1..%d)", key, (long long)v,
                            max);
    *out = (int)v;
    return CS_OK;
}

/* Optional integer key: def when absent; 0 <= value <= max. */
static int hp_get_int_opt(const struct gguf_file *f, const char *name, int def, int max, int *out,
                          struct cs_error *err)
{
    char key[128];
    snprintf(key, sizeof key, ARCH ".%s", name);
    int64_t v;
    int rc = gguf_get_i64(f, key, &v, err);
    if (rc == CS_ENOTFOUND) {
        *out = def;
        return CS_OK;
    }
    if (rc != CS_OK)
        return rc;
    if (v < 0 || v > max)
        return cs_error_set(err, CS_EFORMAT, "%s = %lld out of range (0..%d)", key, (long long)v,
                            max);
    *out = (int)v;
    return CS_OK;
}

/* Required positive finite float key. */
static int hp_get_float(const struct gguf_file *f, const char *name, float *out,
                        struct cs_error *err)
{
    char key[128];
    snprintf(key, sizeof key, ARCH ".%s", name);
    int rc = gguf_get_f32(f, key, out, err);
    if (rc == CS_ENOTFOUND)
        return cs_error_set(err, CS_EFORMAT, "missing key %s", key);
    if (rc != CS_OK)
        return rc;
    if (!(*out > 0.0f) || !isfinite(*out))
        return cs_error_set(err, CS_EFORMAT, "%s = %g must be positive and finite", key,
                            (double)*out);
    return CS_OK;
}

static int hp_check_arch(const struct gguf_file *f, struct cs_error *err)
{
    char *arch = NULL;
    int rc = gguf_get_str(f, "general.architecture", &arch, err);
    if (rc == CS_ENOTFOUND)
        return cs_error_set(err, CS_EFORMAT, "missing key general.architecture");
    if (rc != CS_OK)
        return rc;
    if (strcmp(arch, ARCH) != 0) {
        cs_error_set(err, CS_EUNSUPPORTED, "architecture %.100s is not supported (dense qwen35 only)",
                     arch);
        free(arch);
        return CS_EUNSUPPORTED;
    }
    free(arch);
    return CS_OK;
}

/* feed_forward_length: a scalar for every layer, or one value per block. */
static int hp_read_ff(struct cs_hparams *hp, const struct gguf_file *f, int n_block,
                      struct cs_error *err)
{
    const char *key = ARCH ".feed_forward_length";
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return cs_error_set(err, CS_EFORMAT, "missing key %s", key);
    if (kv->type != GGUF_TYPE_ARRAY) {
        int ff;
        int rc = hp_get_int(f, "feed_forward_length", HP_MAX_FF, &ff, err);
        if (rc != CS_OK)
            return rc;
        for (int i = 0; i < hp->n_layer; i++)
            hp->n_ff[i] = ff;
        return CS_OK;
    }
    if (kv->arr_len != (uint64_t)n_block && kv->arr_len != (uint64_t)hp->n_layer)
        return cs_error_set(err, CS_EFORMAT, "%s has %llu entries, expected %d (block_count)", key,
                            (unsigned long long)kv->arr_len, n_block);
    for (int i = 0; i < hp->n_layer; i++) {
        int64_t v;
        if (gguf_arr_i64(kv, (uint64_t)i, &v) != CS_OK)
            return cs_error_set(err, CS_EFORMAT, "%s[%d] is not an integer", key, i);
        if (v <= 0 || v > HP_MAX_FF)
            return cs_error_set(err, CS_EFORMAT, "%s[%d] = %lld out of range (1..%d)", key, i,
                                (long long)v, HP_MAX_FF);
        hp->n_ff[i] = (int)v;
    }
    return CS_OK;
}

/* Layer kinds: attention.recurrent_layers when present, else every
 * full_attention_interval-th layer is attention. */
static int hp_read_kinds(struct cs_hparams *hp, const struct gguf_file *f, int n_block,
                         struct cs_error *err)
{
    const char *key = ARCH ".attention.recurrent_layers";
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY ||
            (kv->arr_len != (uint64_t)n_block && kv->arr_len != (uint64_t)hp->n_layer))
            return cs_error_set(err, CS_EFORMAT, "%s must be an array of %d bools", key, n_block);
        for (int i = 0; i < hp->n_layer; i++) {
            bool b;
            uint32_t u;
            if (gguf_arr_bool(kv, (uint64_t)i, &b) == CS_OK)
                hp->recurrent[i] = b;
            else if (gguf_arr_u32(kv, (uint64_t)i, &u) == CS_OK)
                hp->recurrent[i] = u != 0;
            else
                return cs_error_set(err, CS_EFORMAT, "%s[%d] is not a bool", key, i);
        }
        return CS_OK;
    }
    int interval;
    int rc = hp_get_int_opt(f, "full_attention_interval", 4, CS_MAX_LAYERS, &interval, err);
    if (rc != CS_OK)
        return rc;
    if (interval == 0)
        return cs_error_set(err, CS_EFORMAT, ARCH ".full_attention_interval = 0 (must be >= 1)");
    for (int i = 0; i < hp->n_layer; i++)
        hp->recurrent[i] = (i + 1) % interval != 0;
    return CS_OK;
}

static int hp_read_attention(struct cs_hparams *hp, const struct gguf_file *f,
                             struct cs_error *err)
{
    int rc, vlen;
    if ((rc = hp_get_int(f, "attention.head_count", HP_MAX_HEADS, &hp->n_head, err)) ||
        (rc = hp_get_int(f, "attention.head_count_kv", HP_MAX_HEADS, &hp->n_head_kv, err)) ||
        (rc = hp_get_int(f, "attention.key_length", HP_MAX_HEAD_DIM, &hp->head_dim, err)) ||
        (rc = hp_get_int(f, "attention.value_length", HP_MAX_HEAD_DIM, &vlen, err)) ||
        (rc = hp_get_int(f, "rope.dimension_count", HP_MAX_HEAD_DIM, &hp->rope_dims, err)) ||
        (rc = hp_get_float(f, "rope.freq_base", &hp->rope_base, err)) ||
        (rc = hp_get_float(f, "attention.layer_norm_rms_epsilon", &hp->eps, err)))
        return rc;
    if (vlen != hp->head_dim)
        return cs_error_set(err, CS_EFORMAT,
                            ARCH ".attention.key_length = %d differs from value_length = %d",
                            hp->head_dim, vlen);
    if (hp->n_head % hp->n_head_kv != 0)
        return cs_error_set(err, CS_EFORMAT,
                            ARCH ".attention.head_count = %d is not a multiple of head_count_kv = %d",
                            hp->n_head, hp->n_head_kv);
    if (hp->rope_dims % 2 != 0 || hp->rope_dims > hp->head_dim)
        return cs_error_set(err, CS_EFORMAT,
                            ARCH ".rope.dimension_count = %d must be even and <= key_length = %d",
                            hp->rope_dims, hp->head_dim);
    return CS_OK;
}

static int hp_read_ssm(struct cs_hparams *hp, const struct gguf_file *f, struct cs_error *err)
{
    int rc;
    if ((rc = hp_get_int(f, "ssm.conv_kernel", 16, &hp->conv_kernel, err)) ||
        (rc = hp_get_int(f, "ssm.state_size", HP_MAX_HEAD_DIM, &hp->ssm_state, err)) ||
        (rc = hp_get_int(f, "ssm.group_count", HP_MAX_HEADS, &hp->ssm_groups, err)) ||
        (rc = hp_get_int(f, "ssm.time_step_rank", HP_MAX_HEADS, &hp->ssm_heads, err)) ||
        (rc = hp_get_int(f, "ssm.inner_size", HP_MAX_HEADS * HP_MAX_HEAD_DIM, &hp->ssm_inner,
                         err)))
        return rc;
    if (hp->ssm_inner != hp->ssm_state * hp->ssm_heads)
        return cs_error_set(err, CS_EFORMAT,
                            ARCH ".ssm.inner_size = %d, expected state_size * time_step_rank = %d * %d",
                            hp->ssm_inner, hp->ssm_state, hp->ssm_heads);
    if (hp->ssm_heads % hp->ssm_groups != 0)
        return cs_error_set(err, CS_EFORMAT,
                            ARCH ".ssm.group_count = %d does not divide time_step_rank = %d",
                            hp->ssm_groups, hp->ssm_heads);
    if (hp->conv_kernel < 2)
        return cs_error_set(err, CS_EFORMAT, ARCH ".ssm.conv_kernel = %d (must be >= 2)",
                            hp->conv_kernel);
    return CS_OK;
}

/* n_vocab from token_embd {E, V}; tokenizer.ggml.tokens must agree. */
static int hp_read_vocab(struct cs_hparams *hp, const struct gguf_file *f, struct cs_error *err)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    if (!t)
        return cs_error_set(err, CS_EFORMAT, "missing tensor token_embd.weight");
    if (t->ne[0] != hp->n_embd || t->ne[1] <= 0 || t->ne[1] > HP_MAX_VOCAB || t->ne[2] != 1 ||
        t->ne[3] != 1)
        return cs_error_set(err, CS_EFORMAT,
                            "token_embd.weight: expected shape {%d, n_vocab <= %d}, found {%lld, %lld}",
                            hp->n_embd, HP_MAX_VOCAB, (long long)t->ne[0], (long long)t->ne[1]);
    hp->n_vocab = (int)t->ne[1];
    const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (kv && (kv->type != GGUF_TYPE_ARRAY || kv->arr_len != (uint64_t)hp->n_vocab))
        return cs_error_set(err, CS_EFORMAT,
                            "tokenizer.ggml.tokens has %llu entries but token_embd.weight has %d rows",
                            (unsigned long long)(kv->type == GGUF_TYPE_ARRAY ? kv->arr_len : 0),
                            hp->n_vocab);
    hp->tied_output = gguf_find_tensor(f, "output.weight") == NULL;
    return CS_OK;
}

int model_hparams_read(struct cs_hparams *hp, const struct gguf_file *f, struct cs_error *err)
{
    if (!hp || !f)
        return cs_error_set(err, CS_EINVAL, "model_hparams_read: NULL argument");
    memset(hp, 0, sizeof *hp);
    int rc, n_block;
    if ((rc = hp_check_arch(f, err)) ||
        (rc = hp_get_int(f, "block_count", CS_MAX_LAYERS + 16, &n_block, err)) ||
        (rc = hp_get_int_opt(f, "nextn_predict_layers", 0, 16, &hp->n_layer_mtp, err)) ||
        (rc = hp_get_int(f, "embedding_length", HP_MAX_EMBD, &hp->n_embd, err)) ||
        (rc = hp_get_int_opt(f, "context_length", 262144, INT32_MAX, &hp->n_ctx_train, err)))
        return rc;
    hp->n_layer = n_block - hp->n_layer_mtp;
    if (hp->n_layer <= 0 || hp->n_layer > CS_MAX_LAYERS)
        return cs_error_set(err, CS_EFORMAT,
                            ARCH ".block_count = %d with nextn_predict_layers = %d leaves %d trunk "
                            "layers (1..%d supported)",
                            n_block, hp->n_layer_mtp, hp->n_layer, CS_MAX_LAYERS);
    if ((rc = hp_read_ff(hp, f, n_block, err)) || (rc = hp_read_kinds(hp, f, n_block, err)) ||
        (rc = hp_read_attention(hp, f, err)) || (rc = hp_read_ssm(hp, f, err)) ||
        (rc = hp_read_vocab(hp, f, err)))
        return rc;
    LOG_DEBUG("model", "qwen35: E=%d layers=%d(+%d mtp) Hq=%d Hkv=%d D=%d Gk=%d Hv=%d V=%d tied=%d",
              hp->n_embd, hp->n_layer, hp->n_layer_mtp, hp->n_head, hp->n_head_kv, hp->head_dim,
              hp->ssm_groups, hp->ssm_heads, hp->n_vocab, hp->tied_output);
    return CS_OK;
}
