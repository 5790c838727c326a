/* model.c - the forward pass of a qwen35 layer slice over a batch, written
 * once against the op table of kernels/ops.h (model.md section 5).
 *
 * Owns: batch validation (bad input never reaches an op), the per-layer
 * block (pre-norm mixer, residual, pre-norm SwiGLU FFN, residual), the GDN and
 * gated-attention mixers, and the last stage's final norm, LM head and
 * sampling. Loading is weights.c, state and scratch are state.c.
 *
 * A step is slice_begin (checks, batch upload, embed or copy-in) then a step
 * body (the layers, and for a decode step sampling every sequence also the
 * head) that a backend with graph hooks records once per batch shape and
 * replays (step_body), then sampling or the logits download. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "state.h"

static uint64_t model_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Check everything the ops will index with; CS_EINVAL on any violation. */
static int batch_check(const struct cs_model *m, const struct cs_state *st,
                       const struct cs_batch *b, bool need_tokens, bool need_pages)
{
    if (!b || b->n_tokens <= 0 || b->n_tokens > st->cfg.max_tokens || b->n_seqs <= 0 ||
        b->n_seqs > b->n_tokens || !b->pos || !b->seq_of || !b->seq_start || !b->slot)
        return CS_EINVAL;
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return CS_EINVAL;
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->seq_start[s + 1] <= b->seq_start[s] || b->slot[s] < 0 ||
            b->slot[s] >= st->cfg.n_slots)
            return CS_EINVAL;
        for (int t = b->seq_start[s]; t < b->seq_start[s + 1]; t++) {
            if (b->seq_of[t] != s || b->pos[t] < 0 ||
                (t > b->seq_start[s] && b->pos[t] != b->pos[t - 1] + 1))
                return CS_EINVAL;
            if (need_tokens && (!b->tokens || b->tokens[t] < 0 || b->tokens[t] >= m->hp.n_vocab))
                return CS_EINVAL;
            if (!need_pages)
                continue;
            int p = b->pos[t] / st->cfg.page_size;
            if (!b->page_table || p >= b->max_pages)
                return CS_EINVAL;
            int32_t page = b->page_table[(size_t)s * (size_t)b->max_pages + (size_t)p];
            if (page < 0 || page >= st->cfg.kv_pages)
                return CS_EINVAL;
        }
    }
    return CS_OK;
}

static bool slice_has_attention(const struct cs_model *m)
{
    for (int l = m->layer_begin; l < m->layer_end; l++)
        if (!m->hp.recurrent[l])
            return true;
    return false;
}

/* The input projections of layer l's mixer, all reading the normed row:
 * GDN's qkv, z, beta, alpha or attention's q, k, v. Returns how many. */
static int mixer_inputs(struct cs_model *m, struct cs_state *st, int l, float **ys,
                        const struct cs_weight **ws)
{
    struct cs_layer_weights *w = &m->layers[l];
    if (m->hp.recurrent[l]) {
        ys[0] = st->qkv, ys[1] = st->z, ys[2] = st->beta, ys[3] = st->alpha;
        ws[0] = &w->qkv, ws[1] = &w->gate, ws[2] = &w->beta, ws[3] = &w->alpha;
        return 4;
    }
    ys[0] = st->q, ys[1] = st->k, ys[2] = st->v;
    ws[0] = &w->wq, ws[1] = &w->wk, ws[2] = &w->wv;
    return 3;
}

/* The mixer's output projection p into st->tmp, fused where the backend
 * can (bitwise the same). */
static int out_proj(struct cs_backend *be, struct cs_state *st, const struct cs_out_proj *p, int T)
{
    const struct cs_weight *wo[1] = {p->w};
    float *out[1] = {st->tmp};
    int rc;
    if (p->kind == CS_OUT_PROJ_GATED_RMSNORM) {
        if (be->matmul_gated_rmsnorm)
            return be->matmul_gated_rmsnorm(be, st->tmp, p->w, p->a, p->aux, p->norm_w,
                                            p->n_heads, p->head_dim, p->eps, T);
        rc = be->gated_rmsnorm(be, p->a, p->aux, p->norm_w, p->n_heads, p->head_dim, p->eps, T);
    } else {
        if (be->matmul_sigmoid_gate)
            return be->matmul_sigmoid_gate(be, st->tmp, p->w, p->a, p->aux, p->aux_token_stride,
                                           p->aux_head_stride, p->n_heads, p->head_dim, T);
        rc = be->sigmoid_gate(be, p->a, p->aux, p->aux_token_stride, p->aux_head_stride,
                              p->n_heads, p->head_dim, T);
    }
    return rc ? rc : be->matmul(be, 1, out, wo, p->a, T);
}

/* Gated DeltaNet mixer after its input projections, up to its output
 * projection, which it leaves in *p. conv_done: the projections already
 * left conv1d_silu's output in st->conv_out. */
static int mixer_gdn(struct cs_model *m, struct cs_state *st, int l, const struct cs_batch *b,
                     bool conv_done, struct cs_out_proj *p)
{
    struct cs_backend *be = m->be;
    const struct cs_hparams *hp = &m->hp;
    struct cs_layer_weights *w = &m->layers[l];
    int rc;
    if ((!conv_done &&
         (rc = be->conv1d_silu(be, st->conv_out, st->qkv, w->conv1d, &st->gdn[l], b))) ||
        (rc = be->gdn(be, st->gdn_out, st->conv_out, st->beta, st->alpha, w->ssm_a, w->dt_bias,
                      hp->eps, &st->gdn[l], b)))
        return rc;
    memset(p, 0, sizeof *p);
    p->kind = CS_OUT_PROJ_GATED_RMSNORM;
    p->w = &w->ssm_out;
    p->a = st->gdn_out;
    p->aux = st->z;
    p->norm_w = w->ssm_norm;
    p->n_heads = hp->ssm_heads;
    p->head_dim = hp->ssm_state;
    p->eps = hp->eps;
    return CS_OK;
}

/* Gated attention mixer after its input projections, up to its output
 * projection, which it leaves in *p. W_q rows per head: D query rows then
 * D gate rows, so head h's query is at h*2D and its gate at h*2D+D. */
static int mixer_attention(struct cs_model *m, struct cs_state *st, int l, const struct cs_batch *b,
                           struct cs_out_proj *p)
{
    struct cs_backend *be = m->be;
    const struct cs_hparams *hp = &m->hp;
    struct cs_layer_weights *w = &m->layers[l];
    int D = hp->head_dim, rc;
    int q_stride = 2 * D * hp->n_head, kv_stride = D * hp->n_head_kv;
    if (be->qk_norm_rope_store)   /* the three ops below in one launch (bitwise the same) */
        rc = be->qk_norm_rope_store(be, st->q, q_stride, 2 * D, hp->n_head, st->k, st->v,
                                    kv_stride, hp->n_head_kv, D, w->q_norm, w->k_norm,
                                    hp->rope_dims, hp->rope_base, hp->eps, &st->kv[l], b);
    else if (!(rc = be->head_norm_rope(be, st->q, q_stride, 2 * D, hp->n_head, D, w->q_norm,
                                       hp->rope_dims, hp->rope_base, hp->eps, b)) &&
             !(rc = be->head_norm_rope(be, st->k, kv_stride, D, hp->n_head_kv, D, w->k_norm,
                                       hp->rope_dims, hp->rope_base, hp->eps, b)))
        rc = be->kv_store(be, &st->kv[l], st->k, kv_stride, st->v, kv_stride, b);
    if (rc || (rc = be->attention(be, st->attn_out, st->q, q_stride, 2 * D, hp->n_head,
                                  &st->kv[l], 1.0f / sqrtf((float)D), b)))
        return rc;
    memset(p, 0, sizeof *p);
    p->kind = CS_OUT_PROJ_SIGMOID_GATE;
    p->w = &w->wo;
    p->a = st->attn_out;
    p->aux = st->q + D;
    p->aux_token_stride = q_stride;
    p->aux_head_stride = 2 * D;
    p->n_heads = hp->n_head;
    p->head_dim = D;
    return CS_OK;
}

/* After a fused add (the sum written to st->hidden_alt): the sum becomes
 * the residual stream. */
static void swap_residual(struct cs_state *st)
{
    float *t = st->hidden;
    st->hidden = st->hidden_alt;
    st->hidden_alt = t;
}

/* The residual add st->hidden += st->tmp, then ys = ws (rmsnorm(st->hidden)
 * * norm_w) through normed. With the backend's fused op the sum is written
 * to st->hidden_alt and the two swap (one launch for a decode token); the
 * swaps of a step depend only on its op sequence, so every run of it, and
 * the graph recorded from one, uses the same buffers. */
static int add_norm_matmul(struct cs_model *m, struct cs_state *st, int n, float *const *ys,
                           const struct cs_weight *const *ws, const float *norm_w, float *normed,
                           int T)
{
    struct cs_backend *be = m->be;
    const struct cs_hparams *hp = &m->hp;
    int rc;
    if (be->matmul_add_rmsnorm) {
        rc = be->matmul_add_rmsnorm(be, n, ys, ws, st->hidden_alt, st->hidden, st->tmp, norm_w,
                                    normed, st->norm_scale, T, hp->n_embd, hp->eps);
        swap_residual(st);
        return rc;
    }
    if ((rc = be->add_rmsnorm(be, st->hidden, st->tmp, normed, st->norm_scale, norm_w, T,
                              hp->n_embd, hp->eps)))
        return rc;
    return be->matmul_scaled(be, n, ys, ws, normed, st->norm_scale, T);
}

/* One block on st->hidden: h = x + Mixer(norm(x)); out = h + FFN(norm(h)).
 * pending: the previous layer's last add is still to do (st->hidden +
 * st->tmp): it runs here, fused with this layer's attn_norm and input
 * projections. This layer's own last add is left pending in st->tmp for the
 * caller (the next layer, the head, or a plain add). */
static int layer_forward(struct cs_model *m, struct cs_state *st, int l, const struct cs_batch *b,
                         bool pending)
{
    struct cs_backend *be = m->be;
    const struct cs_hparams *hp = &m->hp;
    struct cs_layer_weights *w = &m->layers[l];
    int T = b->n_tokens, E = hp->n_embd, rc;
    float *ys[4];
    const struct cs_weight *ws[4];
    int n_in = mixer_inputs(m, st, l, ys, ws);
    bool conv_done = false;
    rc = CS_EUNSUPPORTED;
    if (pending && hp->recurrent[l] && be->matmul_add_rmsnorm_conv1d) {
        ys[0] = st->conv_out;   /* the projection's conv output, the raw one never stored */
        rc = be->matmul_add_rmsnorm_conv1d(be, n_in, ys, ws, st->hidden_alt, st->hidden, st->tmp,
                                           w->attn_norm, st->normed, E, hp->eps, w->conv1d,
                                           &st->gdn[l], b);
        if (rc == CS_OK) {
            swap_residual(st);
            conv_done = true;
        }
        ys[0] = st->qkv;
    }
    if (rc == CS_EUNSUPPORTED) {   /* not fused: the norm and the projections */
        if (pending)
            rc = add_norm_matmul(m, st, n_in, ys, ws, w->attn_norm, st->normed, T);
        else if (!(rc = be->rmsnorm(be, st->normed, st->norm_scale, st->hidden, w->attn_norm, T,
                                    E, hp->eps)))
            rc = be->matmul_scaled(be, n_in, ys, ws, st->normed, st->norm_scale, T);
    }
    struct cs_out_proj p;
    if (rc || (rc = hp->recurrent[l] ? mixer_gdn(m, st, l, b, conv_done, &p)
                                     : mixer_attention(m, st, l, b, &p)))
        return rc;
    if (be->proj_ffn_add_rmsnorm) {   /* the projection and the FFN in one op where it can */
        rc = be->proj_ffn_add_rmsnorm(be, st->tmp, &p, &w->ffn_gate, &w->ffn_up, &w->ffn_down,
                                      st->hidden_alt, st->hidden, w->post_norm, T, E, hp->eps);
        if (rc != CS_EUNSUPPORTED) {
            if (rc == CS_OK)
                swap_residual(st);
            return rc;
        }
    }
    if ((rc = out_proj(be, st, &p, T)))
        return rc;
    if (be->ffn_add_rmsnorm) {   /* the whole FFN in one op where the backend can */
        rc = be->ffn_add_rmsnorm(be, st->tmp, &w->ffn_gate, &w->ffn_up, &w->ffn_down,
                                 st->hidden_alt, st->hidden, st->tmp, w->post_norm, T, E, hp->eps);
        if (rc != CS_EUNSUPPORTED) {
            if (rc == CS_OK)
                swap_residual(st);
            return rc;
        }
    }
    float *yf[2] = {st->ffn_gate, st->ffn_up};
    const struct cs_weight *wf[2] = {&w->ffn_gate, &w->ffn_up};
    const struct cs_weight *wd[1] = {&w->ffn_down};
    float *out[1] = {st->tmp};
    if ((rc = add_norm_matmul(m, st, 2, yf, wf, w->post_norm, st->normed, T)))
        return rc;
    if (be->matmul_swiglu)
        return be->matmul_swiglu(be, st->tmp, &w->ffn_down, st->ffn_gate, st->ffn_up, T);
    if ((rc = be->silu_mul(be, st->ffn_gate, st->ffn_gate, st->ffn_up, (size_t)T * hp->n_ff[l])))
        return rc;
    return be->matmul(be, 1, out, wd, st->ffn_gate, T);
}

/* Validate, upload the batch, and put the slice's input in st->hidden. */
static int slice_begin(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                       const float *hidden_in, bool in_host)
{
    if (!m || !st || st->m != m)
        return CS_EINVAL;
    if (!m->first_stage && !hidden_in)
        return CS_EINVAL;
    int rc = batch_check(m, st, b, m->first_stage && !hidden_in, slice_has_attention(m));
    if (rc != CS_OK) {
        LOG_WARN("model", "invalid batch rejected (n_tokens=%d n_seqs=%d)", b ? b->n_tokens : -1,
                 b ? b->n_seqs : -1);
        return rc;
    }
    struct cs_backend *be = m->be;
    size_t n = (size_t)b->n_tokens * (size_t)m->hp.n_embd;
    /* every step starts on the same residual buffer (add_norm_matmul) */
    st->hidden = st->hidden_buf[0];
    st->hidden_alt = st->hidden_buf[1];
    if ((rc = be->step_begin(be, b)))
        return rc;
    if (hidden_in && in_host)
        return be->upload_async(be, st->hidden, hidden_in, n * sizeof(float));
    if (hidden_in)
        return be->copy(be, st->hidden, hidden_in, n * sizeof(float));
    return be->embed(be, st->hidden, &m->token_embd, b);
}

/* What a step body runs after slice_begin (the graph_begin variant):
 * STEP_LAYERS every layer of the slice on st->hidden; STEP_LAYERS_HEAD then
 * also the final norm and LM head of all n_tokens rows into st->logits (a
 * decode step sampling every sequence, n_tokens <= n_logit_rows). */
enum step_variant { STEP_LAYERS = 0, STEP_LAYERS_HEAD = 1 };

/* Each layer's last residual add is fused with the norm that follows it in
 * this step and the projections reading that norm: the next layer's
 * attn_norm and input projections, or for the slice's last layer in
 * STEP_LAYERS_HEAD the final norm (into st->rows) and the LM head. In
 * STEP_LAYERS the slice's last add is a plain one (the norm that follows
 * runs elsewhere, in another stage or on gathered rows). */
static int step_ops(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                    enum step_variant v)
{
    int rc = CS_OK;
    for (int l = m->layer_begin; l < m->layer_end && rc == CS_OK; l++)
        rc = layer_forward(m, st, l, b, l > m->layer_begin);
    if (rc != CS_OK)
        return rc;
    if (v == STEP_LAYERS_HEAD) {
        float *ys[1] = {st->logits};
        const struct cs_weight *ws[1] = {&m->output};
        return add_norm_matmul(m, st, 1, ys, ws, m->output_norm, st->rows, b->n_tokens);
    }
    return m->be->add(m->be, st->hidden, st->tmp, (size_t)b->n_tokens * (size_t)m->hp.n_embd);
}

/* Run the step body, recorded once and replayed on backends with graph hooks
 * (a pure decode step: the backend decides, see kernels/ops.h graph_begin).
 * A failed recording runs the same ops eagerly; results are bitwise equal.
 * The residual buffers: each run of step_ops starts from slice_begin's and
 * notes where it ended; a replay, which runs the ops recorded from such a
 * run, ends there too. */
static int step_body(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                     enum step_variant v)
{
    struct cs_backend *be = m->be;
    float *h0 = st->hidden, *a0 = st->hidden_alt;
    int mode = CS_GRAPH_EAGER;
    if (be->graph_begin && be->graph_end && b->n_tokens == b->n_seqs)
        mode = be->graph_begin(be, st, (uint32_t)v);
    if (mode < 0)
        return mode;
    if (mode == CS_GRAPH_REPLAYED) {
        if (!st->hidden_end[v])
            return CS_EINVAL;   /* a replay always follows a recording: cannot happen */
        st->hidden = st->hidden_end[v];
        st->hidden_alt = st->hidden == st->hidden_buf[0] ? st->hidden_buf[1] : st->hidden_buf[0];
        return CS_OK;
    }
    int rc = step_ops(m, st, b, v);
    if (rc == CS_OK)
        st->hidden_end[v] = st->hidden;
    if (mode != CS_GRAPH_RECORD)
        return rc;
    int rc_end = be->graph_end(be, rc == CS_OK);
    if (rc == CS_OK && rc_end == CS_OK)
        return CS_OK;
    st->hidden = h0;   /* nothing ran: again from the start */
    st->hidden_alt = a0;
    rc = step_ops(m, st, b, v);
    if (rc == CS_OK)
        st->hidden_end[v] = st->hidden;
    return rc;
}

/* LM head on n final-normed rows of st->rows into st->logits. */
static int lm_head_matmul(struct cs_model *m, struct cs_state *st, int n)
{
    float *ys[1] = {st->logits};
    const struct cs_weight *ws[1] = {&m->output};
    return m->be->matmul_scaled(m->be, 1, ys, ws, st->rows, st->norm_scale, n);
}

/* Final norm of n rows of x into st->rows, then the LM head into st->logits. */
static int lm_head_rows(struct cs_model *m, struct cs_state *st, const float *x, int n)
{
    const struct cs_hparams *hp = &m->hp;
    int rc = m->be->rmsnorm(m->be, st->rows, st->norm_scale, x, m->output_norm, n, hp->n_embd,
                            hp->eps);
    return rc ? rc : lm_head_matmul(m, st, n);
}

/* Gather the last token of each sampled sequence, run the head, sample. */
static int sample_last_tokens(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                              const bool *sample, const struct cs_sample_params *params,
                              struct cs_sample_result *results)
{
    struct cs_backend *be = m->be;
    size_t E = (size_t)m->hp.n_embd;
    int n_rows = 0;
    for (int s = 0; s < b->n_seqs; s++)
        if (sample[s])
            st->host_rows[n_rows++] = s;
    for (int c = 0; c < n_rows; c += st->n_logit_rows) {
        int n = n_rows - c < st->n_logit_rows ? n_rows - c : st->n_logit_rows, rc;
        for (int i = 0; i < n; i++) {
            int s = st->host_rows[c + i];
            const float *src = st->hidden + (size_t)(b->seq_start[s + 1] - 1) * E;
            if ((rc = be->copy(be, st->normed + (size_t)i * E, src, E * sizeof(float))))
                return rc;
            st->host_params[i] = params[s];
        }
        if ((rc = lm_head_rows(m, st, st->normed, n)) ||
            (rc = be->sample(be, st->host_results, st->logits, m->hp.n_vocab, st->host_params, n)))
            return rc;
        for (int i = 0; i < n; i++)
            results[st->host_rows[c + i]] = st->host_results[i];
    }
    return CS_OK;
}

/* True when the step's head can join the step body: a decode step (one
 * token per sequence) sampling every sequence, in one chunk of logit rows.
 * Row s of st->hidden is then sequence s's last token, so the head reads
 * st->hidden directly (the same values sample_last_tokens gathers). */
static bool head_in_body(const struct cs_model *m, const struct cs_state *st,
                         const struct cs_batch *b, const bool *sample)
{
    if (!m->last_stage || !sample || b->n_tokens != b->n_seqs || b->n_seqs > st->n_logit_rows)
        return false;
    for (int s = 0; s < b->n_seqs; s++)
        if (!sample[s])
            return false;
    return true;
}

int model_forward_io(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                     const struct model_io *io, const bool *sample,
                     const struct cs_sample_params *params, struct cs_sample_result *results)
{
    if (m && !m->last_stage && !io->out)
        return CS_EINVAL;
    if (m && m->last_stage && sample && (!params || !results))
        return CS_EINVAL;
    uint64_t t0 = model_now_us();
    int rc = slice_begin(m, st, b, io->in, io->in_host);
    bool head = rc == CS_OK && head_in_body(m, st, b, sample);
    if (rc == CS_OK)
        rc = step_body(m, st, b, head ? STEP_LAYERS_HEAD : STEP_LAYERS);
    size_t out_bytes = (size_t)b->n_tokens * (size_t)m->hp.n_embd * sizeof(float);
    if (rc == CS_OK && io->out)
        rc = io->out_host ? m->be->download_async(m->be, io->out, st->hidden, out_bytes)
                          : m->be->copy(m->be, io->out, st->hidden, out_bytes);
    if (rc == CS_OK && head)
        rc = m->be->sample(m->be, results, st->logits, m->hp.n_vocab, params, b->n_seqs);
    else if (rc == CS_OK && m->last_stage && sample)
        rc = sample_last_tokens(m, st, b, sample, params, results);
    uint64_t t1 = model_now_us();
    if (rc == CS_OK)
        rc = m->be->sync(m->be);
    else if (m && m->be)
        m->be->sync(m->be);   /* queued copies may still read or write io's host memory */
    if (m) {
        m->n_forward++;
        m->submit_us += t1 - t0;
        m->wait_us += model_now_us() - t1;
    }
    return rc;
}

int model_forward(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                  const float *hidden_in, float *hidden_out, const bool *sample,
                  const struct cs_sample_params *params, struct cs_sample_result *results)
{
    struct model_io io = {.in = hidden_in, .out = hidden_out};
    return model_forward_io(m, st, b, &io, sample, params, results);
}

int model_forward_logits(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                         const float *hidden_in, float *host_logits)
{
    if (!m || !m->last_stage || !host_logits)
        return CS_EINVAL;
    int rc = slice_begin(m, st, b, hidden_in, false);
    if (rc == CS_OK)
        rc = step_body(m, st, b, STEP_LAYERS);
    size_t E = (size_t)m->hp.n_embd, V = (size_t)m->hp.n_vocab;
    for (int c = 0; c < b->n_tokens && rc == CS_OK; c += st->n_logit_rows) {
        int n = b->n_tokens - c < st->n_logit_rows ? b->n_tokens - c : st->n_logit_rows;
        rc = lm_head_rows(m, st, st->hidden + (size_t)c * E, n);
        if (rc == CS_OK)
            rc = m->be->download(m->be, host_logits + (size_t)c * V, st->logits,
                                 (size_t)n * V * sizeof(float));
    }
    if (rc == CS_OK)
        rc = m->be->sync(m->be);
    return rc;
}
