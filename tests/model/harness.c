/* harness.c - the test driver of harness.h. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *harness_device;

static int harness_backend(struct harness *h, bool int8_matmul)
{
    if (harness_device && strcmp(harness_device, "cpu") != 0)
        return cs_backend_create(&h->be, harness_device, 2);
    struct cs_backend_cpu_options opt = {.n_threads = 2, .int8_matmul = int8_matmul};
    return cs_backend_cpu_create(&h->be, &opt);
}

int harness_open(struct harness *h, const char *path, const int *bounds, int n_stages,
                 bool int8_matmul)
{
    memset(h, 0, sizeof *h);
    struct cs_error err = {0};
    if (gguf_open(&h->f, path, &err) || harness_backend(h, int8_matmul)) {
        fprintf(stderr, "harness: %s\n", err.msg);
        return -1;
    }
    h->n_stages = n_stages;
    struct cs_state_config cfg = {.max_tokens = H_MAX_TOKENS, .n_slots = H_SLOTS,
                                  .kv_pages = H_KV_PAGES, .page_size = H_PAGE_SIZE,
                                  .kv_type = CS_DTYPE_F32};
    for (int i = 0; i < n_stages; i++) {
        h->m[i] = calloc(1, sizeof *h->m[i]);
        if (!h->m[i] ||
            model_load(h->m[i], h->f, h->be, bounds[i], bounds[i + 1], NULL, NULL, &err) ||
            state_create(&h->st[i], h->m[i], &cfg, &err)) {
            fprintf(stderr, "harness: stage %d: %s\n", i, err.msg);
            return -1;
        }
    }
    for (int i = 0; i < 2; i++)
        if (h->be->alloc(h->be, (void **)&h->hid[i], H_MAX_TOKENS * sizeof(float) *
                                                         (size_t)h->m[0]->hp.n_embd))
            return -1;
    return kv_pages_init(&h->pages, H_KV_PAGES);
}

void harness_close(struct harness *h)
{
    for (int i = 0; i < 3; i++) {
        if (h->st[i])
            state_destroy(h->st[i]);
        if (h->m[i])
            model_free(h->m[i]);
        free(h->m[i]);
    }
    for (int i = 0; i < 2; i++)
        if (h->hid[i])
            h->be->free(h->be, h->hid[i]);
    kv_pages_deinit(&h->pages);
    if (h->be)
        h->be->destroy(h->be);
    if (h->f)
        gguf_close(h->f);
    memset(h, 0, sizeof *h);
}

int harness_seq_start(struct harness *h, struct hseq *s, int slot)
{
    memset(s, 0, sizeof *s);
    s->slot = slot;
    for (int i = 0; i < h->n_stages; i++)
        if (state_slot_reset(h->st[i], slot))
            return -1;
    return 0;
}

void harness_seq_end(struct harness *h, struct hseq *s)
{
    kv_pages_free(&h->pages, s->pages, s->n_pages);
    s->n_pages = 0;
}

void hbatch_init(struct hbatch *hb)
{
    memset(hb, 0, sizeof *hb);
    hb->b = (struct cs_batch){.tokens = hb->tokens, .pos = hb->pos, .seq_of = hb->seq_of,
                              .seq_start = hb->seq_start, .slot = hb->slot,
                              .page_table = hb->page_table, .max_pages = H_MAX_PAGES};
}

int hbatch_add(struct harness *h, struct hbatch *hb, struct hseq *s, const int32_t *tokens, int n)
{
    struct cs_batch *b = &hb->b;
    if (b->n_tokens + n > H_MAX_TOKENS || b->n_seqs == H_MAX_SEQS)
        return -1;
    int need = kv_pages_for_tokens(s->pos + n, H_PAGE_SIZE);
    if (need > H_MAX_PAGES || kv_pages_alloc(&h->pages, s->pages, s->n_pages, need))
        return -1;
    s->n_pages = need;
    int q = b->n_seqs;
    memcpy(hb->page_table + q * H_MAX_PAGES, s->pages, sizeof s->pages);
    hb->slot[q] = s->slot;
    hb->seq_start[q] = b->n_tokens;
    for (int i = 0; i < n; i++) {
        int t = b->n_tokens++;
        hb->tokens[t] = tokens[i];
        hb->pos[t] = s->pos++;
        hb->seq_of[t] = q;
    }
    b->n_seqs++;
    hb->seq_start[b->n_seqs] = b->n_tokens;
    return 0;
}

/* Run stages 0..n_stages-2, leaving the input of the last stage. */
static int harness_front(struct harness *h, struct hbatch *hb, const float **in)
{
    *in = NULL;
    for (int i = 0; i + 1 < h->n_stages; i++) {
        float *out = h->hid[i % 2];
        int rc = model_forward(h->m[i], h->st[i], &hb->b, *in, out, NULL, NULL, NULL);
        if (rc)
            return rc;
        *in = out;
    }
    return 0;
}

int harness_logits(struct harness *h, struct hbatch *hb, float *logits)
{
    const float *in;
    int rc = harness_front(h, hb, &in);
    int last = h->n_stages - 1;
    return rc ? rc : model_forward_logits(h->m[last], h->st[last], &hb->b, in, logits);
}

int harness_sample(struct harness *h, struct hbatch *hb, const struct cs_sample_params *params,
                   struct cs_sample_result *results)
{
    const float *in;
    bool sample[H_MAX_SEQS];
    for (int i = 0; i < H_MAX_SEQS; i++)
        sample[i] = true;
    int rc = harness_front(h, hb, &in);
    int last = h->n_stages - 1;
    return rc ? rc
              : model_forward(h->m[last], h->st[last], &hb->b, in, NULL, sample, params, results);
}
