/* state.c - the per-sequence state of a model slice and the forward's
 * scratch: KV pages for each attention layer, GDN slots (conv + recurrent
 * state) for each GDN layer, activation buffers for cfg.max_tokens tokens.
 *
 * Owns allocation, slot reset/copy and the byte count used for capacity
 * planning; one list of buffers (state_scratch_list) serves both state_create
 * and state_bytes so the two never disagree. Page allocation belongs to the
 * caller (the scheduler, or kv_pages.h for single-process users). */
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "state.h"

#define STATE_MAX_LOGIT_ROWS 32
#define STATE_MAX_TOKENS (1 << 20)
#define STATE_MAX_SLOTS (1 << 16)

struct scratch_item {
    float **ptr;
    size_t elems;
};

enum { SCRATCH_MAX = 24 };

static size_t kv_dtype_size(uint32_t t)
{
    return t == CS_DTYPE_F16 ? 2 : 4;
}

/* Dimensions every buffer depends on; st->m and st->cfg must be set. */
static void state_dims_set(struct cs_state *st)
{
    const struct cs_hparams *hp = &st->m->hp;
    st->conv_dim = 2 * hp->ssm_state * hp->ssm_groups + hp->ssm_inner;
    st->max_ff = 1;
    for (int l = st->m->layer_begin; l < st->m->layer_end; l++)
        if (hp->n_ff[l] > st->max_ff)
            st->max_ff = hp->n_ff[l];
    st->n_logit_rows = st->cfg.max_tokens < STATE_MAX_LOGIT_ROWS ? st->cfg.max_tokens
                                                                 : STATE_MAX_LOGIT_ROWS;
}

/* The scratch buffers and their sizes in floats. */
static int state_scratch_list(struct cs_state *st, struct scratch_item *it)
{
    const struct cs_hparams *hp = &st->m->hp;
    size_t T = (size_t)st->cfg.max_tokens, E = (size_t)hp->n_embd;
    size_t D = (size_t)hp->head_dim, vin = (size_t)hp->ssm_inner;
    int n = 0;
#define ITEM(field, count) it[n++] = (struct scratch_item){&st->field, (count)}
    ITEM(hidden_buf[0], T * E);
    if (st->m->be->matmul_add_rmsnorm)   /* the fused add writes out of place (model.c) */
        ITEM(hidden_buf[1], T * E);
    ITEM(normed, T * E);
    ITEM(norm_scale, T);
    ITEM(tmp, T * E);
    ITEM(ffn_gate, T * (size_t)st->max_ff);
    ITEM(ffn_up, T * (size_t)st->max_ff);
    ITEM(qkv, T * (size_t)st->conv_dim);
    ITEM(conv_out, T * (size_t)st->conv_dim);
    ITEM(z, T * vin);
    ITEM(beta, T * (size_t)hp->ssm_heads);
    ITEM(alpha, T * (size_t)hp->ssm_heads);
    ITEM(gdn_out, T * vin);
    ITEM(q, T * 2 * D * (size_t)hp->n_head);
    ITEM(k, T * D * (size_t)hp->n_head_kv);
    ITEM(v, T * D * (size_t)hp->n_head_kv);
    ITEM(attn_out, T * D * (size_t)hp->n_head);
    if (st->m->last_stage) {
        ITEM(rows, (size_t)st->n_logit_rows * E);
        ITEM(logits, (size_t)st->n_logit_rows * (size_t)hp->n_vocab);
    }
#undef ITEM
    return n;
}

static size_t kv_page_bytes(const struct cs_hparams *hp, const struct cs_state_config *cfg)
{
    return 2 * (size_t)cfg->page_size * (size_t)hp->n_head_kv * (size_t)hp->head_dim *
           kv_dtype_size(cfg->kv_type);
}

static size_t gdn_conv_floats(const struct cs_state *st)
{
    return (size_t)(st->m->hp.conv_kernel - 1) * (size_t)st->conv_dim;
}

static size_t gdn_rec_floats(const struct cs_hparams *hp)
{
    return (size_t)hp->ssm_heads * (size_t)hp->ssm_state * (size_t)hp->ssm_state;
}

static int state_config_check(const struct cs_model *m, const struct cs_state_config *cfg,
                              struct cs_error *err)
{
    if (!m || !cfg || !m->be)
        return cs_error_set(err, CS_EINVAL, "state: no model or configuration");
    if (cfg->max_tokens <= 0 || cfg->max_tokens > STATE_MAX_TOKENS)
        return cs_error_set(err, CS_EINVAL, "state: max_tokens = %d out of range (1..%d)",
                            cfg->max_tokens, STATE_MAX_TOKENS);
    if (cfg->n_slots <= 0 || cfg->n_slots > STATE_MAX_SLOTS)
        return cs_error_set(err, CS_EINVAL, "state: n_slots = %d out of range (1..%d)",
                            cfg->n_slots, STATE_MAX_SLOTS);
    if (cfg->kv_pages <= 0 || cfg->page_size <= 0 || cfg->page_size > 65536)
        return cs_error_set(err, CS_EINVAL, "state: kv_pages = %d, page_size = %d must be positive",
                            cfg->kv_pages, cfg->page_size);
    if (cfg->kv_type != CS_DTYPE_F32 && cfg->kv_type != CS_DTYPE_F16)
        return cs_error_set(err, CS_EINVAL, "state: kv_type %s not supported (f32, f16)",
                            gguf_type_name(cfg->kv_type));
    return CS_OK;
}

uint64_t state_bytes(const struct cs_model *m, const struct cs_state_config *cfg)
{
    if (state_config_check(m, cfg, NULL) != CS_OK)
        return 0;
    struct cs_state *st = calloc(1, sizeof *st);
    if (!st)
        return 0;
    st->m = m;
    st->cfg = *cfg;
    state_dims_set(st);
    struct scratch_item items[SCRATCH_MAX];
    int n = state_scratch_list(st, items);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += items[i].elems * sizeof(float);
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        if (m->hp.recurrent[l])
            total += (uint64_t)cfg->n_slots * (gdn_conv_floats(st) + gdn_rec_floats(&m->hp)) * 4;
        else
            total += (uint64_t)cfg->kv_pages * kv_page_bytes(&m->hp, cfg);
    }
    free(st);
    return total;
}

static int state_alloc_floats(struct cs_state *st, float **p, size_t elems)
{
    void *ptr = NULL;
    int rc = st->m->be->alloc(st->m->be, &ptr, elems * sizeof(float));
    *p = ptr;
    return rc;
}

static int state_layers_create(struct cs_state *st)
{
    const struct cs_hparams *hp = &st->m->hp;
    struct cs_backend *be = st->m->be;
    for (int l = st->m->layer_begin; l < st->m->layer_end; l++) {
        int rc;
        if (hp->recurrent[l]) {
            struct cs_gdn_layer *g = &st->gdn[l];
            *g = (struct cs_gdn_layer){.n_slots = st->cfg.n_slots, .conv_dim = st->conv_dim,
                                       .conv_kernel = hp->conv_kernel,
                                       .n_k_heads = hp->ssm_groups, .n_v_heads = hp->ssm_heads,
                                       .key_dim = hp->ssm_state, .value_dim = hp->ssm_state};
            size_t slots = (size_t)st->cfg.n_slots;
            if ((rc = state_alloc_floats(st, &g->conv, slots * gdn_conv_floats(st))) ||
                (rc = state_alloc_floats(st, &g->rec, slots * gdn_rec_floats(hp))))
                return rc;
        } else {
            struct cs_kv_layer *kv = &st->kv[l];
            *kv = (struct cs_kv_layer){.kv_type = st->cfg.kv_type, .n_pages = st->cfg.kv_pages,
                                       .page_size = st->cfg.page_size,
                                       .n_kv_heads = hp->n_head_kv, .head_dim = hp->head_dim};
            size_t bytes = (size_t)st->cfg.kv_pages * kv_page_bytes(hp, &st->cfg);
            if ((rc = be->alloc(be, &kv->pages, bytes)))
                return rc;
        }
    }
    return CS_OK;
}

int state_create(struct cs_state **out, const struct cs_model *m, const struct cs_state_config *cfg,
                 struct cs_error *err)
{
    int rc = state_config_check(m, cfg, err);
    if (rc != CS_OK)
        return rc;
    struct cs_state *st = calloc(1, sizeof *st);
    if (!st)
        return cs_error_set(err, CS_ENOMEM, "state: out of host memory");
    st->m = m;
    st->cfg = *cfg;
    state_dims_set(st);
    size_t T = (size_t)cfg->max_tokens;
    st->host_params = calloc(T, sizeof *st->host_params);
    st->host_results = calloc(T, sizeof *st->host_results);
    st->host_rows = calloc(T, sizeof *st->host_rows);
    if (!st->host_params || !st->host_results || !st->host_rows) {
        state_destroy(st);
        return cs_error_set(err, CS_ENOMEM, "state: out of host memory");
    }
    struct scratch_item items[SCRATCH_MAX];
    int n = state_scratch_list(st, items);
    for (int i = 0; i < n && rc == CS_OK; i++)
        rc = state_alloc_floats(st, items[i].ptr, items[i].elems);
    st->hidden = st->hidden_buf[0];
    st->hidden_alt = st->hidden_buf[1];
    if (rc == CS_OK)
        rc = state_layers_create(st);
    if (rc != CS_OK) {
        uint64_t need = state_bytes(m, cfg);
        state_destroy(st);
        return cs_error_set(err, rc, "state: cannot allocate %llu bytes on %s (%s)",
                            (unsigned long long)need, m->be->name, cs_strerror(rc));
    }
    *out = st;
    return CS_OK;
}

void state_destroy(struct cs_state *st)
{
    if (!st)
        return;
    struct cs_backend *be = st->m->be;
    struct scratch_item items[SCRATCH_MAX];
    int n = state_scratch_list(st, items);
    for (int i = 0; i < n; i++)
        if (*items[i].ptr)
            be->free(be, *items[i].ptr);
    for (int l = st->m->layer_begin; l < st->m->layer_end; l++) {
        if (st->kv[l].pages)
            be->free(be, st->kv[l].pages);
        if (st->gdn[l].conv)
            be->free(be, st->gdn[l].conv);
        if (st->gdn[l].rec)
            be->free(be, st->gdn[l].rec);
    }
    free(st->host_params);
    free(st->host_results);
    free(st->host_rows);
    free(st);
}

int state_slot_reset(struct cs_state *st, int slot)
{
    if (!st || slot < 0 || slot >= st->cfg.n_slots)
        return CS_EINVAL;
    struct cs_backend *be = st->m->be;
    size_t cf = gdn_conv_floats(st), rf = gdn_rec_floats(&st->m->hp);
    for (int l = st->m->layer_begin; l < st->m->layer_end; l++) {
        if (!st->m->hp.recurrent[l])
            continue;
        int rc;
        if ((rc = be->zero(be, st->gdn[l].conv + (size_t)slot * cf, cf * sizeof(float))) ||
            (rc = be->zero(be, st->gdn[l].rec + (size_t)slot * rf, rf * sizeof(float))))
            return rc;
    }
    return CS_OK;
}

int state_slot_copy(struct cs_state *st, int dst_slot, int src_slot)
{
    if (!st || dst_slot < 0 || dst_slot >= st->cfg.n_slots || src_slot < 0 ||
        src_slot >= st->cfg.n_slots)
        return CS_EINVAL;
    if (dst_slot == src_slot)
        return CS_OK;
    struct cs_backend *be = st->m->be;
    size_t cf = gdn_conv_floats(st), rf = gdn_rec_floats(&st->m->hp);
    for (int l = st->m->layer_begin; l < st->m->layer_end; l++) {
        if (!st->m->hp.recurrent[l])
            continue;
        const struct cs_gdn_layer *g = &st->gdn[l];
        int rc;
        if ((rc = be->copy(be, g->conv + (size_t)dst_slot * cf, g->conv + (size_t)src_slot * cf,
                           cf * sizeof(float))) ||
            (rc = be->copy(be, g->rec + (size_t)dst_slot * rf, g->rec + (size_t)src_slot * rf,
                           rf * sizeof(float))))
            return rc;
    }
    return CS_OK;
}

int state_kv_pages_copy(struct cs_state *st, int dst_page, int src_page, int n_pages)
{
    if (!st || n_pages < 0 || dst_page < 0 || src_page < 0 ||
        dst_page > st->cfg.kv_pages - n_pages || src_page > st->cfg.kv_pages - n_pages)
        return CS_EINVAL;
    /* overlapping ranges would depend on the backend's copy order */
    if (n_pages == 0 || dst_page == src_page)
        return CS_OK;
    if (dst_page < src_page + n_pages && src_page < dst_page + n_pages)
        return CS_EINVAL;
    struct cs_backend *be = st->m->be;
    size_t pb = kv_page_bytes(&st->m->hp, &st->cfg);
    for (int l = st->m->layer_begin; l < st->m->layer_end; l++) {
        if (st->m->hp.recurrent[l])
            continue;
        char *pages = st->kv[l].pages;
        int rc = be->copy(be, pages + (size_t)dst_page * pb, pages + (size_t)src_page * pb,
                          (size_t)n_pages * pb);
        if (rc)
            return rc;
    }
    return CS_OK;
}
