/* mkmodel.c - `cmpserve mkmodel`: write a qwen35 GGUF with seeded random
 * weights, with exactly the metadata keys and tensor names, shapes and types
 * of llama.cpp's converter (spec model.md sections 1-3).
 *
 * Determinism: every value is a pure function of (seed, tensor name, element
 * index) through a counter-based hash, so the file is byte-identical for the
 * same arguments whatever the thread count. Tensors are produced by the GGUF
 * writer's fill callback, in parallel over Q8_0 blocks, so the 9b/27b
 * benchmark models stream to disk without being held in memory.
 *
 * Weight statistics keep activations realistic over many layers: projections
 * N(0, 1/sqrt(n_in)), projections into the residual stream 0.5/sqrt(n_in),
 * embeddings N(0, 0.04), norms 1 + N(0, 0.05) (the GGUF stores norms with the
 * +1 applied), ssm_a = -U(1, 16), dt_bias = softplus^-1(logU(1e-3, 1e-1)),
 * conv1d N(0, 0.3). MTP tensors are not written. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/gguf.h"
#include "../common/half.h"
#include "../common/log.h"
#include "../common/status.h"
#include "../common/vocab_tiktoken.h"
#include "cli_common.h"
#include "commands.h"

#define MK_MAX_TENSORS (16 * 260 + 8)
#define MK_HEAD_DIM 256
#define MK_ROPE_DIMS 64
#define MK_SSM_STATE 128
#define MK_CONV_KERNEL 4

/* ---- presets (model.md section 1, plus `tiny`) ---- */

struct mk_preset {
    const char *name;
    const char *size_label;
    int n_embd, n_layer, n_ff, n_head, n_head_kv, ssm_groups, ssm_heads;
    int tied;
};

static const struct mk_preset presets[] = {
    {"tiny", "tiny", 128, 8, 384, 2, 1, 2, 4, 1},
    {"0.8b", "0.8B", 1024, 24, 3584, 8, 2, 16, 16, 1},
    {"2b", "2B", 2048, 24, 6144, 8, 2, 16, 16, 1},
    {"4b", "4B", 2560, 32, 9216, 16, 4, 16, 32, 1},
    {"9b", "9B", 4096, 32, 12288, 16, 4, 16, 32, 0},
    {"27b", "27B", 5120, 64, 17408, 24, 4, 16, 48, 0},
};

static const struct mk_preset *preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

/* ---- counter-based random numbers ---- */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The two byte sums (0..1020) of the halves of hash number h. */
static inline void rnd_pair(uint64_t key, uint64_t h, uint32_t s2[2])
{
    uint64_t r = mix64(key ^ (h * 0xd1b54a32d192ed03ull));
    uint64_t p = (r & 0x00ff00ff00ff00ffull) + ((r >> 8) & 0x00ff00ff00ff00ffull);
    p = (p & 0x0000ffff0000ffffull) + ((p >> 16) & 0x0000ffff0000ffffull);
    s2[0] = (uint32_t)p & 0xffffu;
    s2[1] = (uint32_t)(p >> 32) & 0xffffu;
}

/* Approximately N(0, 1): element i takes one 32-bit half of hash i / 2 and
 * sums its four bytes (Irwin-Hall of 4 byte uniforms: mean 510, sd 147.8). */
static inline float rnd_normal(uint64_t key, uint64_t i)
{
    uint32_t s2[2];
    rnd_pair(key, i >> 1, s2);
    return ((float)s2[i & 1] - 510.0f) * (1.0f / 147.80054f);
}

/* Uniform in [0, 1). */
static inline double rnd_uniform(uint64_t key, uint64_t i)
{
    return (double)(mix64(key ^ (i * 0xd1b54a32d192ed03ull)) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- tensor plan ---- */

enum mk_dist { DIST_NORMAL, DIST_SSM_A, DIST_DT_BIAS };

struct mk_tensor {
    char name[64];
    int64_t ne[2];
    uint32_t n_dims;
    uint32_t type;
    enum mk_dist dist;
    float mean, std;
    uint64_t key;
    int n_threads;
};

static float tensor_value(const struct mk_tensor *t, uint64_t i)
{
    switch (t->dist) {
    case DIST_SSM_A: /* A_log = log U(1, 16); ssm_a = -exp(A_log) */
        return (float)-(1.0 + 15.0 * rnd_uniform(t->key, i));
    case DIST_DT_BIAS: { /* dt ~ logU(1e-3, 1e-1); bias = softplus^-1(dt) */
        double dt = exp(log(1e-3) + (log(1e-1) - log(1e-3)) * rnd_uniform(t->key, i));
        return (float)(dt + log(-expm1(-dt)));
    }
    default:
        return t->mean + t->std * rnd_normal(t->key, i);
    }
}

/* roundf (half away from zero) for |v| < 2^31 without a libm call: v - (int)v
 * is exact in fp32 for such v. */
static inline int round_away(float v)
{
    int t = (int)v;
    float frac = v - (float)t;
    return frac >= 0.5f ? t + 1 : frac <= -0.5f ? t - 1 : t;
}

/* Fill elements [e0, e1); for Q8_0 both are multiples of 32 (whole blocks). */
static void fill_range(const struct mk_tensor *t, uint8_t *dst, uint64_t e0, uint64_t e1)
{
    if (t->type == CS_DTYPE_F32) {
        float *o = (float *)dst;
        for (uint64_t i = e0; i < e1; i++)
            o[i] = tensor_value(t, i);
    } else if (t->type == CS_DTYPE_F16) {
        uint16_t *o = (uint16_t *)dst;
        for (uint64_t i = e0; i < e1; i++)
            o[i] = cs_float_to_half(tensor_value(t, i));
    } else { /* Q8_0: quantize like llama.cpp (amax/127, round half away from zero) */
        float x[Q8_0_BLOCK];
        for (uint64_t b = e0 / Q8_0_BLOCK; b < e1 / Q8_0_BLOCK; b++) {
            float amax = 0.0f;
            if (t->dist == DIST_NORMAL) { /* the hot path: one hash per two values */
                uint64_t h0 = b * (Q8_0_BLOCK / 2);
                for (int j = 0; j < Q8_0_BLOCK / 2; j++) {
                    uint32_t s2[2];
                    rnd_pair(t->key, h0 + (uint64_t)j, s2);
                    x[2 * j] = t->mean + t->std * (((float)s2[0] - 510.0f) * (1.0f / 147.80054f));
                    x[2 * j + 1] = t->mean + t->std * (((float)s2[1] - 510.0f) * (1.0f / 147.80054f));
                }
            } else {
                for (int j = 0; j < Q8_0_BLOCK; j++)
                    x[j] = tensor_value(t, b * Q8_0_BLOCK + (uint64_t)j);
            }
            for (int j = 0; j < Q8_0_BLOCK; j++)
                amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            uint8_t *blk = dst + b * Q8_0_BLOCK_BYTES;
            uint16_t dh = cs_float_to_half(d);
            memcpy(blk, &dh, 2);
            for (int j = 0; j < Q8_0_BLOCK; j++)
                blk[2 + j] = (uint8_t)round_away(x[j] * id);
        }
    }
}

struct fill_job {
    const struct mk_tensor *t;
    uint8_t *dst;
    uint64_t e0, e1;
};

static void *fill_thread(void *arg)
{
    struct fill_job *j = arg;
    fill_range(j->t, j->dst, j->e0, j->e1);
    return NULL;
}

/* gguf_fill_cb: split the tensor over threads at block boundaries. */
static int tensor_fill_cb(void *ctx, void *dst, uint64_t n_bytes)
{
    const struct mk_tensor *t = ctx;
    uint64_t n = (uint64_t)t->ne[0] * (uint64_t)t->ne[1], want;
    if (gguf_tensor_nbytes(t->type, t->ne, t->n_dims, &want) != CS_OK || want != n_bytes)
        return CS_EINTERNAL;
    int nt = t->n_threads;
    if (n < (1u << 16) || nt < 2) {
        fill_range(t, dst, 0, n);
        return CS_OK;
    }
    if (nt > 64)
        nt = 64;
    /* whole blocks [0, n_blocks) over the threads, the tail (< 32) inline */
    struct fill_job jobs[64];
    pthread_t tids[64];
    uint64_t n_blocks = n / Q8_0_BLOCK, per = (n_blocks + (uint64_t)nt - 1) / (uint64_t)nt;
    int started = 0;
    for (int k = 0; k < nt; k++) {
        uint64_t b0 = per * (uint64_t)k, b1 = b0 + per > n_blocks ? n_blocks : b0 + per;
        if (b0 >= b1)
            break;
        jobs[k] = (struct fill_job){t, dst, b0 * Q8_0_BLOCK, b1 * Q8_0_BLOCK};
        if (pthread_create(&tids[started], NULL, fill_thread, &jobs[k]) != 0)
            fill_range(t, dst, jobs[k].e0, jobs[k].e1);
        else
            started++;
    }
    if (n_blocks * Q8_0_BLOCK < n)
        fill_range(t, dst, n_blocks * Q8_0_BLOCK, n);
    for (int k = 0; k < started; k++)
        pthread_join(tids[k], NULL);
    return CS_OK;
}

struct mk_plan {
    const struct mk_preset *p;
    int n_layer;
    int n_vocab;
    uint32_t wtype;       /* F32, F16 or Q8_0: the type of 2-D weights */
    uint64_t seed;
    int n_threads;
    int n_tensors;
    struct mk_tensor tensors[MK_MAX_TENSORS];
};

/* Append a tensor; 2-D matrices get the plan's type (F16 when a row is not a
 * multiple of 32 in a Q8_0 file), 1-D tensors and `f32` ones stay F32. */
static struct mk_tensor *plan_add(struct mk_plan *pl, const char *name, int64_t ne0, int64_t ne1,
                                  int force_f32, float mean, float std)
{
    struct mk_tensor *t = &pl->tensors[pl->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->n_dims = ne1 > 1 ? 2 : 1;
    t->type = CS_DTYPE_F32;
    if (t->n_dims == 2 && !force_f32) {
        t->type = pl->wtype;
        if (t->type == CS_DTYPE_Q8_0 && ne0 % Q8_0_BLOCK != 0)
            t->type = CS_DTYPE_F16;
    }
    t->dist = DIST_NORMAL;
    t->mean = mean;
    t->std = std;
    t->key = mix64(pl->seed ^ name_hash(name));
    t->n_threads = pl->n_threads;
    return t;
}

static void plan_add_blk(struct mk_plan *pl, int il, const char *suffix, int64_t ne0, int64_t ne1,
                         int force_f32, float mean, float std)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    plan_add(pl, name, ne0, ne1, force_f32, mean, std);
}

static float proj_std(int64_t n_in, float scale)
{
    return scale / sqrtf((float)n_in);
}

static void plan_layer_gdn(struct mk_plan *pl, int il)
{
    const struct mk_preset *p = pl->p;
    int64_t E = p->n_embd, hv = p->ssm_heads, inner = (int64_t)MK_SSM_STATE * hv;
    int64_t conv_dim = 2 * (int64_t)MK_SSM_STATE * p->ssm_groups + inner;
    plan_add_blk(pl, il, "attn_qkv.weight", E, conv_dim, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "attn_gate.weight", E, inner, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "ssm_beta.weight", E, hv, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "ssm_alpha.weight", E, hv, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "ssm_conv1d.weight", MK_CONV_KERNEL, conv_dim, 1, 0.0f, 0.3f);
    plan_add_blk(pl, il, "ssm_dt.bias", hv, 1, 1, 0.0f, 0.0f);
    pl->tensors[pl->n_tensors - 1].dist = DIST_DT_BIAS;
    plan_add_blk(pl, il, "ssm_a", hv, 1, 1, 0.0f, 0.0f);
    pl->tensors[pl->n_tensors - 1].dist = DIST_SSM_A;
    plan_add_blk(pl, il, "ssm_norm.weight", MK_SSM_STATE, 1, 1, 1.0f, 0.05f);
    plan_add_blk(pl, il, "ssm_out.weight", inner, E, 0, 0.0f, proj_std(inner, 0.5f));
}

static void plan_layer_attn(struct mk_plan *pl, int il)
{
    const struct mk_preset *p = pl->p;
    int64_t E = p->n_embd, q_out = 2 * (int64_t)MK_HEAD_DIM * p->n_head;
    int64_t kv_out = (int64_t)MK_HEAD_DIM * p->n_head_kv, o_in = (int64_t)MK_HEAD_DIM * p->n_head;
    plan_add_blk(pl, il, "attn_q.weight", E, q_out, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "attn_k.weight", E, kv_out, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "attn_v.weight", E, kv_out, 0, 0.0f, proj_std(E, 1.0f));
    plan_add_blk(pl, il, "attn_q_norm.weight", MK_HEAD_DIM, 1, 1, 1.0f, 0.05f);
    plan_add_blk(pl, il, "attn_k_norm.weight", MK_HEAD_DIM, 1, 1, 1.0f, 0.05f);
    plan_add_blk(pl, il, "attn_output.weight", o_in, E, 0, 0.0f, proj_std(o_in, 0.5f));
}

static int layer_is_attention(int il)
{
    return (il + 1) % 4 == 0;
}

static void plan_build(struct mk_plan *pl)
{
    const struct mk_preset *p = pl->p;
    int64_t E = p->n_embd, F = p->n_ff, V = pl->n_vocab;
    pl->n_tensors = 0;
    plan_add(pl, "token_embd.weight", E, V, 0, 0.0f, 0.04f);
    plan_add(pl, "output_norm.weight", E, 1, 1, 1.0f, 0.05f);
    if (!p->tied)
        plan_add(pl, "output.weight", E, V, 0, 0.0f, proj_std(E, 1.0f));
    for (int il = 0; il < pl->n_layer; il++) {
        plan_add_blk(pl, il, "attn_norm.weight", E, 1, 1, 1.0f, 0.05f);
        if (layer_is_attention(il))
            plan_layer_attn(pl, il);
        else
            plan_layer_gdn(pl, il);
        plan_add_blk(pl, il, "post_attention_norm.weight", E, 1, 1, 1.0f, 0.05f);
        plan_add_blk(pl, il, "ffn_gate.weight", E, F, 0, 0.0f, proj_std(E, 1.0f));
        plan_add_blk(pl, il, "ffn_up.weight", E, F, 0, 0.0f, proj_std(E, 1.0f));
        plan_add_blk(pl, il, "ffn_down.weight", F, E, 0, 0.0f, proj_std(F, 0.5f));
    }
}

/* ---- metadata ---- */

static uint32_t file_type_of(uint32_t wtype)
{
    return wtype == CS_DTYPE_Q8_0 ? 7 : wtype == CS_DTYPE_F16 ? 1 : 0; /* LLAMA_FTYPE_* */
}

static int meta_write(struct gguf_writer *w, const struct mk_plan *pl, const char *template_text)
{
    const struct mk_preset *p = pl->p;
    char name[96];
    snprintf(name, sizeof name, "cmpserve random %s seed %llu", p->name, (unsigned long long)pl->seed);
    int32_t sections[4] = {11, 11, 10, 0};
    int rc = 0;
    rc |= gguf_writer_set_str(w, "general.architecture", "qwen35");
    rc |= gguf_writer_set_str(w, "general.type", "model");
    rc |= gguf_writer_set_str(w, "general.name", name);
    rc |= gguf_writer_set_str(w, "general.size_label", p->size_label);
    rc |= gguf_writer_set_u32(w, "general.file_type", file_type_of(pl->wtype));
    rc |= gguf_writer_set_u32(w, "general.quantization_version", 2);
    rc |= gguf_writer_set_u32(w, "qwen35.block_count", (uint32_t)pl->n_layer);
    rc |= gguf_writer_set_u32(w, "qwen35.context_length", 262144);
    rc |= gguf_writer_set_u32(w, "qwen35.embedding_length", (uint32_t)p->n_embd);
    rc |= gguf_writer_set_u32(w, "qwen35.feed_forward_length", (uint32_t)p->n_ff);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.head_count", (uint32_t)p->n_head);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)p->n_head_kv);
    rc |= gguf_writer_set_f32(w, "qwen35.rope.freq_base", 1e7f);
    rc |= gguf_writer_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", 1e-6f);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.key_length", MK_HEAD_DIM);
    rc |= gguf_writer_set_u32(w, "qwen35.attention.value_length", MK_HEAD_DIM);
    rc |= gguf_writer_set_u32(w, "qwen35.rope.dimension_count", MK_ROPE_DIMS);
    rc |= gguf_writer_set_arr(w, "qwen35.rope.dimension_sections", GGUF_TYPE_INT32, sections, 4);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", MK_CONV_KERNEL);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.state_size", MK_SSM_STATE);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.group_count", (uint32_t)p->ssm_groups);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)p->ssm_heads);
    rc |= gguf_writer_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)(MK_SSM_STATE * p->ssm_heads));
    rc |= gguf_writer_set_u32(w, "qwen35.full_attention_interval", 4);
    if (template_text)
        rc |= gguf_writer_set_str(w, "tokenizer.chat_template", template_text);
    return rc ? CS_ENOMEM : CS_OK;
}

static int tensors_add(struct gguf_writer *w, struct mk_plan *pl)
{
    for (int i = 0; i < pl->n_tensors; i++) {
        struct mk_tensor *t = &pl->tensors[i];
        int rc = gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, NULL, tensor_fill_cb, t);
        if (rc)
            return rc;
    }
    return CS_OK;
}

/* ---- vocabulary ---- */

#define MK_QWEN35_VOCAB 248320

/* Write the vocabulary of vocab_path (a .tiktoken file, padded to the
 * Qwen3.5 size) or the tiny fallback; *n_vocab receives its size. */
static int vocab_write(struct gguf_writer *w, const char *vocab_path, int *n_vocab,
                       struct cs_error *err)
{
    struct vocab *v = NULL;
    int rc = vocab_path ? vocab_tiktoken_load(&v, vocab_path, MK_QWEN35_VOCAB, err)
                        : vocab_fallback_create(&v, 0, err);
    if (rc)
        return rc;
    rc = vocab_gguf_write(v, w);
    *n_vocab = (int)v->n_tokens;
    vocab_destroy(v);
    if (rc)
        return cs_error_set(err, rc, "cannot write the vocabulary: %s", cs_strerror(rc));
    return CS_OK;
}

/* ---- command line ---- */

struct mk_opts {
    const char *preset, *out, *vocab, *template_path;
    int n_layer;          /* 0: the preset's */
    uint32_t wtype;
    uint64_t seed;
    int n_threads;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cmpserve mkmodel --preset tiny|0.8b|2b|4b|9b|27b --type f32|f16|q8_0 --seed S\n"
            "                        --out FILE [--layers N] [--vocab FILE.tiktoken]\n"
            "                        [--template FILE.jinja] [--threads N]\n"
            "Writes a qwen35 GGUF with seeded random weights (same arguments: same bytes).\n");
}

static int parse_type(const char *s, uint32_t *out)
{
    if (strcmp(s, "f32") == 0)
        *out = CS_DTYPE_F32;
    else if (strcmp(s, "f16") == 0)
        *out = CS_DTYPE_F16;
    else if (strcmp(s, "q8_0") == 0)
        *out = CS_DTYPE_Q8_0;
    else
        return -1;
    return 0;
}

static int opts_parse(struct mk_opts *o, int argc, char **argv)
{
    struct cli_args a;
    cli_args_init(&a, argc, argv);
    int have_type = 0, have_seed = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = ncpu > 0 ? (int)ncpu : 1;
    while (cli_args_peek(&a) && !a.error) {
        if (cli_args_flag(&a, "help") || cli_args_flag(&a, "h")) {
            usage(stdout);
            return 1;
        } else if (cli_args_opt(&a, "preset")) {
            o->preset = a.value;
        } else if (cli_args_opt(&a, "out")) {
            o->out = a.value;
        } else if (cli_args_opt(&a, "vocab")) {
            o->vocab = a.value;
        } else if (cli_args_opt(&a, "template")) {
            o->template_path = a.value;
        } else if (cli_args_opt(&a, "layers")) {
            cli_parse_int(&a, "layers", 1, MK_MAX_TENSORS / 16 - 4, &o->n_layer);
        } else if (cli_args_opt(&a, "threads")) {
            cli_parse_int(&a, "threads", 1, 64, &o->n_threads);
        } else if (cli_args_opt(&a, "seed")) {
            cli_parse_u64(&a, "seed", &o->seed);
            have_seed = 1;
        } else if (cli_args_opt(&a, "type")) {
            have_type = 1;
            if (parse_type(a.value, &o->wtype)) {
                fprintf(stderr, "cmpserve mkmodel: --type must be f32, f16 or q8_0\n");
                a.error = true;
            }
        } else if (!a.error) {
            cli_args_unknown(&a);
        }
    }
    if (!a.error && (!o->preset || !o->out || !have_type || !have_seed)) {
        fprintf(stderr, "cmpserve mkmodel: --preset, --type, --seed and --out are required\n");
        a.error = true;
    }
    if (!a.error && !preset_find(o->preset)) {
        fprintf(stderr, "cmpserve mkmodel: unknown preset '%s'\n", o->preset);
        a.error = true;
    }
    if (a.error) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Read a whole text file (the chat template) into a malloc'd string. */
static int read_text(const char *path, char **out, struct cs_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cs_error_set(err, CS_EIO, "cannot open %s", path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *g = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        if (got == 0)
            break;
        n += got;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return cs_error_set(err, CS_EIO, "cannot read %s", path);
    }
    buf[n] = '\0';
    *out = buf;
    return CS_OK;
}

static int mkmodel_run(const struct mk_opts *o, struct mk_plan *pl, struct cs_error *err)
{
    struct gguf_writer *w = NULL;
    char *tmpl = NULL;
    int rc = CS_OK;
    if (o->template_path && (rc = read_text(o->template_path, &tmpl, err)))
        return rc;
    if ((rc = gguf_writer_create(&w))) {
        free(tmpl);
        return cs_error_set(err, rc, "cannot create the GGUF writer");
    }
    rc = meta_write(w, pl, tmpl);
    if (!rc)
        rc = vocab_write(w, o->vocab, &pl->n_vocab, err);
    else
        cs_error_set(err, rc, "cannot set metadata");
    if (!rc) {
        plan_build(pl);
        if ((rc = tensors_add(w, pl)))
            cs_error_set(err, rc, "cannot add tensors");
    }
    if (!rc)
        rc = gguf_writer_write(w, o->out, err);
    gguf_writer_destroy(w);
    free(tmpl);
    return rc;
}

int mkmodel_main(int argc, char **argv)
{
    struct mk_opts o;
    memset(&o, 0, sizeof o);
    int prc = opts_parse(&o, argc, argv);
    if (prc)
        return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    struct mk_plan *pl = calloc(1, sizeof *pl);
    if (!pl) {
        cli_fail("mkmodel", "out of memory");
        return CLI_EXIT_ERROR;
    }
    pl->p = preset_find(o.preset);
    pl->n_layer = o.n_layer ? o.n_layer : pl->p->n_layer;
    pl->wtype = o.wtype;
    pl->seed = o.seed;
    pl->n_threads = o.n_threads;
    struct cs_error err = {0};
    double t0 = cli_now_s();
    int rc = mkmodel_run(&o, pl, &err);
    double dt = cli_now_s() - t0;
    free(pl);
    if (rc) {
        cli_fail("mkmodel", "%s", err.msg[0] ? err.msg : cs_strerror(rc));
        return CLI_EXIT_ERROR;
    }
    struct stat sb;
    double mb = stat(o.out, &sb) == 0 ? (double)sb.st_size / 1e6 : 0.0;
    fprintf(stderr, "cmpserve mkmodel: wrote %s: %.1f MB in %.2f s (%.0f MB/s)\n", o.out, mb, dt,
            dt > 0 ? mb / dt : 0.0);
    return CLI_EXIT_OK;
}
