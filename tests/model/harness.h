/* harness.h - drives worker/model.h on the CPU backend for the model tests:
 * a model split into 1..3 stages chained through backend hidden buffers,
 * sequences with KV pages from kv_pages.h, and batch building. */
#ifndef CS_TEST_MODEL_HARNESS_H
#define CS_TEST_MODEL_HARNESS_H

#include "worker/kv_pages.h"
#include "worker/model.h"

#define H_MAX_TOKENS 64
#define H_MAX_SEQS 8
#define H_PAGE_SIZE 16
#define H_MAX_PAGES 8      /* pages per sequence: 128 positions */
#define H_SLOTS 8
#define H_KV_PAGES 40

/* Backend of harness_open: NULL or "cpu" for the CPU backend, else a CUDA
 * device index ("0"); set by a test's main from its command line. */
extern const char *harness_device;

struct harness {
    struct gguf_file *f;
    struct cs_backend *be;
    int n_stages;
    struct cs_model *m[3];
    struct cs_state *st[3];
    float *hid[2];                /* backend [H_MAX_TOKENS][E] between stages */
    struct kv_pages pages;
};

struct hseq {
    int slot;
    int pos;                      /* next position */
    int32_t pages[H_MAX_PAGES];
    int n_pages;
};

struct hbatch {
    int32_t tokens[H_MAX_TOKENS], pos[H_MAX_TOKENS], seq_of[H_MAX_TOKENS];
    int32_t seq_start[H_MAX_SEQS + 1], slot[H_MAX_SEQS];
    int32_t page_table[H_MAX_SEQS * H_MAX_PAGES];
    struct cs_batch b;
};

/* Open path on harness_device (int8_matmul: CPU only), split at bounds[0..n_stages] (bounds[0] = 0,
 * bounds[n_stages] = n_layer). 0 on success. */
int harness_open(struct harness *h, const char *path, const int *bounds, int n_stages,
                 bool int8_matmul);
void harness_close(struct harness *h);
/* A new sequence in slot (state zeroed, no pages). */
int harness_seq_start(struct harness *h, struct hseq *s, int slot);
void harness_seq_end(struct harness *h, struct hseq *s);

void hbatch_init(struct hbatch *hb);
/* Append n tokens of sequence s (allocating its pages); advances s->pos. */
int hbatch_add(struct harness *h, struct hbatch *hb, struct hseq *s, const int32_t *tokens, int n);
/* Run all stages; logits [n_tokens][n_vocab] on the host. */
int harness_logits(struct harness *h, struct hbatch *hb, float *logits);
/* Run all stages and sample the last token of each sequence. */
int harness_sample(struct harness *h, struct hbatch *hb, const struct cs_sample_params *params,
                   struct cs_sample_result *results);

#endif
