/* bench_model.c - what `cmpserve bench --model`'s prefill (tools/bench.c) and
 * decode rows (tools/bench_decode.c) share: the byte and parameter counts a
 * token costs, and a chunked run of one sequence. Backend-agnostic (no CUDA
 * here), so tests/tools runs the decode rows on the CPU backend. */
#include <string.h>

#include "../common/status.h"
#include "../worker/model.h"
#include "bench_model.h"

/* bench_model.h */
void bench_model_count(struct mcount *mc, const struct cs_model *m, double kv_elem_bytes)
{
    memset(mc, 0, sizeof *mc);
    const struct cs_hparams *hp = &m->hp;
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        const struct cs_layer_weights *L = &m->layers[l];
        const struct cs_weight *ws[] = {&L->qkv, &L->gate, &L->beta, &L->alpha, &L->ssm_out, &L->wq,
                                        &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data) {
                mc->trunk_params += (double)ws[i]->n_in * (double)ws[i]->n_out;
                mc->read_bytes += (double)ws[i]->bytes;
            }
        if (hp->recurrent[l])
            mc->gdn_state_bytes += 2.0 * hp->ssm_heads * hp->ssm_state * hp->ssm_state * 4;
        else
            mc->kv_bytes_per_pos += 2.0 * hp->n_head_kv * hp->head_dim * kv_elem_bytes;
    }
    mc->read_bytes += (double)m->output.bytes;
}

/* bench_model.h */
int bench_model_run(struct cli_session *s, int32_t *tokens, int n, int pos0, int chunk, int32_t *next)
{
    struct cs_sample_params sp;
    memset(&sp, 0, sizeof sp);
    sp.temperature = 0.0f;
    sp.top_p = 1.0f;
    sp.repetition_penalty = 1.0f;
    sp.n_logprobs = -1;
    struct cs_sample_result res;
    for (int c0 = 0; c0 < n; c0 += chunk) {
        int m = n - c0 < chunk ? n - c0 : chunk;
        struct cli_batch cb;
        int rc = cli_batch_init(&cb, tokens + c0, m, pos0 + c0, s->max_pages);
        if (rc)
            return rc;
        bool sample = c0 + m == n;
        rc = model_forward(s->m, s->st, &cb.b, NULL, NULL, &sample, &sp, &res);
        cli_batch_free(&cb);
        if (rc)
            return rc;
        if (sample)
            *next = res.token;
    }
    return s->be->sync(s->be);
}

