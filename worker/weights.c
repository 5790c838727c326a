/* weights.c - loading the tensors of a layer slice onto a backend
 * (model_load, model_free).
 *
 * Owns: which tensors a slice needs (model.md section 3), the checks of
 * presence, exact shape (ggml order, ne0 = input dim) and type, the host-side
 * conversion of 1-D vectors (and conv1d) to fp32, and progress reporting. All
 * tensors are checked before anything is uploaded, so a bad file fails fast
 * and the byte total for progress is known. MTP tensors (blk.<n_layer>.*,
 * nextn.*) are never looked at. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "../common/log.h"
#include "model.h"

/* The progress callback runs each time another 64 MiB have been read (and at
 * the end): 64 MiB is about 0.25 s on a PCIe Gen1 x1 link (~250 MB/s), so a
 * reporter that writes a line a second (worker/load_progress.h) stays smooth
 * there; on fast links the calls are cheap next to the copies. Inside one
 * large tensor (a 27B token_embd, ~1.3 GB) the backend's upload_progress
 * hook reports its pieces. */
#define PROGRESS_STEP_BYTES (64ull << 20)

enum job_kind { JOB_MATRIX, JOB_VECTOR };

/* One tensor to upload: into a weight (matrix) or an fp32 buffer (vector). */
struct load_job {
    const struct gguf_tensor *t;
    enum job_kind kind;
    struct cs_weight *w;
    float **vec;
};

struct loader {
    struct cs_model *m;
    const struct gguf_file *f;
    struct load_job *jobs;
    int n_jobs, cap_jobs;
    uint64_t total_bytes;
    struct cs_error *err;
};

static bool type_supported(uint32_t type)
{
    return type == CS_DTYPE_F32 || type == CS_DTYPE_F16 || type == CS_DTYPE_BF16 ||
           type == CS_DTYPE_Q8_0;
}

static void shape_format(char *buf, size_t size, const int64_t *ne, int n_dims)
{
    int n = snprintf(buf, size, "{");
    for (int i = 0; i < n_dims && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "}");
}

/* Check tensor name against shape {ne0[, ne1]} and queue it. */
static int loader_add(struct loader *ld, const char *name, int64_t ne0, int64_t ne1, int n_dims,
                      enum job_kind kind, struct cs_weight *w, float **vec)
{
    const struct gguf_tensor *t = gguf_find_tensor(ld->f, name);
    if (!t)
        return cs_error_set(ld->err, CS_EFORMAT, "missing tensor %s", name);
    int64_t want[GGUF_MAX_DIMS] = {ne0, n_dims > 1 ? ne1 : 1, 1, 1};
    if (memcmp(want, t->ne, sizeof want) != 0) {
        char a[96], b[96];
        shape_format(a, sizeof a, want, n_dims);
        shape_format(b, sizeof b, t->ne, t->n_dims ? (int)t->n_dims : 1);
        return cs_error_set(ld->err, CS_EFORMAT, "%s: expected shape %s, found %s", name, a, b);
    }
    if (!type_supported(t->type))
        return cs_error_set(ld->err, CS_EUNSUPPORTED,
                            "%s: type %s not supported (f32, f16, bf16, q8_0)", name,
                            gguf_type_name(t->type));
    if (t->type == CS_DTYPE_Q8_0 && ne0 % Q8_0_BLOCK != 0)
        return cs_error_set(ld->err, CS_EFORMAT, "%s: q8_0 row of %lld values is not a multiple of 32",
                            name, (long long)ne0);
    if (ld->n_jobs == ld->cap_jobs) {
        int cap = ld->cap_jobs ? 2 * ld->cap_jobs : 64;
        struct load_job *j = realloc(ld->jobs, (size_t)cap * sizeof *j);
        if (!j)
            return cs_error_set(ld->err, CS_ENOMEM, "out of host memory");
        ld->jobs = j;
        ld->cap_jobs = cap;
    }
    ld->jobs[ld->n_jobs++] = (struct load_job){t, kind, w, vec};
    ld->total_bytes += t->n_bytes;
    return CS_OK;
}

static int add_matrix(struct loader *ld, const char *name, int64_t n_in, int64_t n_out,
                      struct cs_weight *w)
{
    return loader_add(ld, name, n_in, n_out, 2, JOB_MATRIX, w, NULL);
}

static int add_vector(struct loader *ld, const char *name, int64_t n, float **vec)
{
    return loader_add(ld, name, n, 1, 1, JOB_VECTOR, NULL, vec);
}

static int add_ffn(struct loader *ld, int l, struct cs_layer_weights *lw)
{
    const struct cs_hparams *hp = &ld->m->hp;
    char n[96];
    int rc, E = hp->n_embd, F = hp->n_ff[l];
    snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
    if ((rc = add_vector(ld, n, E, &lw->attn_norm)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.post_attention_norm.weight", l);
    if ((rc = add_vector(ld, n, E, &lw->post_norm)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l);
    if ((rc = add_matrix(ld, n, E, F, &lw->ffn_gate)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l);
    if ((rc = add_matrix(ld, n, E, F, &lw->ffn_up)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
    return add_matrix(ld, n, F, E, &lw->ffn_down);
}

static int add_gdn(struct loader *ld, int l, struct cs_layer_weights *lw)
{
    const struct cs_hparams *hp = &ld->m->hp;
    int64_t E = hp->n_embd, Hv = hp->ssm_heads, Sv = hp->ssm_state;
    int64_t conv_dim = 2 * (int64_t)hp->ssm_state * hp->ssm_groups + hp->ssm_inner;
    char n[96];
    int rc;
#define NAME(suffix) snprintf(n, sizeof n, "blk.%d." suffix, l)
    NAME("attn_qkv.weight");
    if ((rc = add_matrix(ld, n, E, conv_dim, &lw->qkv)))
        return rc;
    NAME("attn_gate.weight");
    if ((rc = add_matrix(ld, n, E, hp->ssm_inner, &lw->gate)))
        return rc;
    NAME("ssm_beta.weight");
    if ((rc = add_matrix(ld, n, E, Hv, &lw->beta)))
        return rc;
    NAME("ssm_alpha.weight");
    if ((rc = add_matrix(ld, n, E, Hv, &lw->alpha)))
        return rc;
    NAME("ssm_conv1d.weight");
    if ((rc = loader_add(ld, n, hp->conv_kernel, conv_dim, 2, JOB_VECTOR, NULL, &lw->conv1d)))
        return rc;
    NAME("ssm_dt.bias");
    if ((rc = add_vector(ld, n, Hv, &lw->dt_bias)))
        return rc;
    NAME("ssm_a");
    if ((rc = add_vector(ld, n, Hv, &lw->ssm_a)))
        return rc;
    NAME("ssm_norm.weight");
    if ((rc = add_vector(ld, n, Sv, &lw->ssm_norm)))
        return rc;
    NAME("ssm_out.weight");
    return add_matrix(ld, n, hp->ssm_inner, E, &lw->ssm_out);
#undef NAME
}

static int add_attention(struct loader *ld, int l, struct cs_layer_weights *lw)
{
    const struct cs_hparams *hp = &ld->m->hp;
    int64_t E = hp->n_embd, D = hp->head_dim;
    char n[96];
    int rc;
#define NAME(suffix) snprintf(n, sizeof n, "blk.%d." suffix, l)
    NAME("attn_q.weight");
    if ((rc = add_matrix(ld, n, E, 2 * D * hp->n_head, &lw->wq)))
        return rc;
    NAME("attn_k.weight");
    if ((rc = add_matrix(ld, n, E, D * hp->n_head_kv, &lw->wk)))
        return rc;
    NAME("attn_v.weight");
    if ((rc = add_matrix(ld, n, E, D * hp->n_head_kv, &lw->wv)))
        return rc;
    NAME("attn_q_norm.weight");
    if ((rc = add_vector(ld, n, D, &lw->q_norm)))
        return rc;
    NAME("attn_k_norm.weight");
    if ((rc = add_vector(ld, n, D, &lw->k_norm)))
        return rc;
    NAME("attn_output.weight");
    return add_matrix(ld, n, D * hp->n_head, E, &lw->wo);
#undef NAME
}

/* Queue every tensor of the slice, checking each. */
static int loader_plan(struct loader *ld)
{
    struct cs_model *m = ld->m;
    const struct cs_hparams *hp = &m->hp;
    int rc;
    bool need_embd = m->first_stage || (m->last_stage && hp->tied_output);
    if (need_embd &&
        (rc = add_matrix(ld, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->token_embd)))
        return rc;
    if (m->last_stage) {
        if ((rc = add_vector(ld, "output_norm.weight", hp->n_embd, &m->output_norm)))
            return rc;
        if (!hp->tied_output &&
            (rc = add_matrix(ld, "output.weight", hp->n_embd, hp->n_vocab, &m->output)))
            return rc;
    }
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        struct cs_layer_weights *lw = &m->layers[l];
        rc = hp->recurrent[l] ? add_gdn(ld, l, lw) : add_attention(ld, l, lw);
        if (rc == CS_OK)
            rc = add_ffn(ld, l, lw);
        if (rc != CS_OK)
            return rc;
    }
    return CS_OK;
}

/* Host conversion of any supported type to fp32. */
static void tensor_to_f32(float *dst, const struct gguf_tensor *t, size_t n)
{
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->type) {
        case CS_DTYPE_F32:
            memcpy(&dst[i], src + 4 * i, 4);
            break;
        case CS_DTYPE_F16:
            memcpy(&h, src + 2 * i, 2);
            dst[i] = cs_half_to_float(h);
            break;
        case CS_DTYPE_BF16:
            memcpy(&h, src + 2 * i, 2);
            dst[i] = cs_bf16_to_float(h);
            break;
        default: { /* Q8_0 */
            const uint8_t *blk = src + (i / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES;
            memcpy(&h, blk, 2);
            dst[i] = cs_half_to_float(h) * (float)(int8_t)blk[2 + i % Q8_0_BLOCK];
        }
        }
    }
}

static int job_upload_vector(struct cs_backend *be, const struct load_job *j, struct cs_error *err)
{
    size_t n = (size_t)(j->t->ne[0] * j->t->ne[1]);
    float *host = malloc(n * sizeof *host);
    if (!host)
        return cs_error_set(err, CS_ENOMEM, "out of host memory");
    tensor_to_f32(host, j->t, n);
    void *dev = NULL;
    int rc = be->alloc(be, &dev, n * sizeof(float));
    if (rc == CS_OK) {
        *j->vec = dev;
        rc = be->upload(be, dev, host, n * sizeof(float));
    }
    free(host);
    return rc;
}

/* Progress of a load: bytes of the tensors before the current one (done),
 * the last figure reported, where to report. */
struct load_tally {
    model_progress_cb cb;
    void *ctx;
    uint64_t done, reported, total;
};

static void tally_report(struct load_tally *t, uint64_t now)
{
    if (t->cb && now - t->reported >= PROGRESS_STEP_BYTES && now < t->total) {
        t->cb(t->ctx, now, t->total);
        t->reported = now;
    }
}

/* The backend's upload_progress hook during one matrix: its bytes read so far. */
static void tally_piece(void *arg, uint64_t bytes_read)
{
    struct load_tally *t = arg;
    tally_report(t, t->done + bytes_read);
}

static int loader_run(struct loader *ld, model_progress_cb progress, void *ctx)
{
    struct cs_backend *be = ld->m->be;
    struct load_tally tally = {.cb = progress, .ctx = ctx, .total = ld->total_bytes};
    uint64_t done = 0;
    for (int i = 0; i < ld->n_jobs; i++) {
        const struct load_job *j = &ld->jobs[i];
        int rc;
        if (j->kind == JOB_MATRIX) {
            tally.done = done;
            be->upload_progress = tally_piece;
            be->upload_progress_ctx = &tally;
            rc = be->weight_upload(be, j->w, j->t->type, j->t->ne[0], j->t->ne[1], j->t->data);
            be->upload_progress = NULL;
            be->upload_progress_ctx = NULL;
        } else
            rc = job_upload_vector(be, j, ld->err);
        if (rc != CS_OK) {
            if (ld->err && ld->err->code != rc)
                cs_error_set(ld->err, rc, "uploading %.*s to %s failed: %s",
                             (int)j->t->name.len, j->t->name.ptr, be->name, cs_strerror(rc));
            return rc;
        }
        done += j->t->n_bytes;
        tally_report(&tally, done);
    }
    if (progress)
        progress(ctx, done, ld->total_bytes);
    ld->m->weight_bytes = done;
    return CS_OK;
}

int model_load(struct cs_model *m, const struct gguf_file *f, struct cs_backend *be,
               int layer_begin, int layer_end, model_progress_cb progress, void *progress_ctx,
               struct cs_error *err)
{
    if (!m || !f || !be)
        return cs_error_set(err, CS_EINVAL, "model_load: NULL argument");
    memset(m, 0, sizeof *m);
    m->be = be;
    int rc = model_hparams_read(&m->hp, f, err);
    if (rc != CS_OK)
        return rc;
    if (layer_begin < 0 || layer_begin >= layer_end || layer_end > m->hp.n_layer)
        return cs_error_set(err, CS_EINVAL,
                            "layer range [%d, %d) invalid: need 0 <= begin < end <= %d", layer_begin,
                            layer_end, m->hp.n_layer);
    m->layer_begin = layer_begin;
    m->layer_end = layer_end;
    m->first_stage = layer_begin == 0;
    m->last_stage = layer_end == m->hp.n_layer;
    if (err)
        err->code = CS_OK;
    struct loader ld = {.m = m, .f = f, .err = err};
    rc = loader_plan(&ld);
    if (rc == CS_OK)
        rc = loader_run(&ld, progress, progress_ctx);
    free(ld.jobs);
    if (rc != CS_OK) {
        model_free(m);
        return rc;
    }
    if (m->last_stage && m->hp.tied_output)
        m->output = m->token_embd;
    LOG_INFO("model", "loaded layers [%d, %d) of %d: %.1f MiB on %s", layer_begin, layer_end,
             m->hp.n_layer, (double)m->weight_bytes / (1 << 20), be->name);
    return CS_OK;
}

static void weight_release(struct cs_backend *be, struct cs_weight *w)
{
    if (w->data || w->aux)
        be->weight_free(be, w);
    memset(w, 0, sizeof *w);
}

static void vec_release(struct cs_backend *be, float **p)
{
    if (*p)
        be->free(be, *p);
    *p = NULL;
}

void model_free(struct cs_model *m)
{
    if (!m || !m->be)
        return;
    struct cs_backend *be = m->be;
    bool shared = m->output.data && m->output.data == m->token_embd.data;
    weight_release(be, &m->token_embd);
    if (shared)
        memset(&m->output, 0, sizeof m->output);
    weight_release(be, &m->output);
    vec_release(be, &m->output_norm);
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        struct cs_layer_weights *lw = &m->layers[l];
        struct cs_weight *ws[] = {&lw->qkv, &lw->gate, &lw->beta, &lw->alpha, &lw->ssm_out,
                                  &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                  &lw->ffn_gate, &lw->ffn_up, &lw->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            weight_release(be, ws[i]);
        float **vs[] = {&lw->attn_norm, &lw->post_norm, &lw->conv1d, &lw->dt_bias, &lw->ssm_a,
                        &lw->ssm_norm, &lw->q_norm, &lw->k_norm};
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
            vec_release(be, vs[i]);
    }
    m->weight_bytes = 0;
}
