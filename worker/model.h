/* model.h - a qwen35 text model slice: hyperparameters, weights of layers
 * [layer_begin, layer_end), the per-sequence state they need, and the forward
 * pass over a batch. The forward exists once and calls only kernels/ops.h.
 *
 * Stage roles: the stage whose slice starts at layer 0 embeds tokens; the
 * stage whose slice ends at n_layer applies the final norm and the LM head and
 * samples. A single worker owning all layers does both. */
#ifndef CS_MODEL_H
#define CS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/gguf.h"
#include "../common/status.h"
#include "../kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_MAX_LAYERS 256

struct cs_hparams {
    int n_embd;            /* E */
    int n_layer;           /* trunk layers (block_count - nextn_predict_layers) */
    int n_layer_mtp;       /* MTP blocks after the trunk (skipped) */
    int n_ff[CS_MAX_LAYERS];
    int n_head;            /* Hq */
    int n_head_kv;         /* Hkv */
    int head_dim;          /* D = 256 (key_length == value_length) */
    int rope_dims;         /* 64 */
    float rope_base;       /* 1e7 */
    float eps;             /* 1e-6 */
    int conv_kernel;       /* 4 */
    int ssm_state;         /* Sk = Sv = 128 */
    int ssm_groups;        /* Gk */
    int ssm_heads;         /* Hv */
    int ssm_inner;         /* 128 * Hv */
    int n_vocab;
    int n_ctx_train;
    bool recurrent[CS_MAX_LAYERS];  /* true: GDN layer; false: full attention */
    bool tied_output;      /* no output.weight: the LM head is token_embd */
};

/* Read and validate the hyperparameters of a qwen35 GGUF. Refuses other
 * architectures by name ("qwen35moe is not supported"). */
int model_hparams_read(struct cs_hparams *hp, const struct gguf_file *f, struct cs_error *err);

struct cs_layer_weights {
    float *attn_norm, *post_norm;                    /* device fp32 [E] */
    /* GDN */
    struct cs_weight qkv, gate, beta, alpha, ssm_out;
    float *conv1d;         /* [conv_dim][kernel] */
    float *dt_bias, *ssm_a;/* [Hv] */
    float *ssm_norm;       /* [Sv] */
    /* attention */
    struct cs_weight wq, wk, wv, wo;
    float *q_norm, *k_norm;/* [D] */
    /* FFN */
    struct cs_weight ffn_gate, ffn_up, ffn_down;
};

struct cs_model {
    struct cs_hparams hp;
    struct cs_backend *be;
    int layer_begin, layer_end;     /* this slice */
    bool first_stage, last_stage;
    struct cs_weight token_embd;    /* first stage (and last when tied) */
    struct cs_weight output;        /* last stage: LM head (token_embd when tied) */
    float *output_norm;             /* last stage */
    struct cs_layer_weights layers[CS_MAX_LAYERS];  /* indexed by absolute layer */
    uint64_t weight_bytes;          /* bytes uploaded */
    /* model_forward_io's account (CLOCK_MONOTONIC us, summed): queueing the
     * step's ops on the host, then waiting in the final sync for the device */
    uint64_t n_forward, submit_us, wait_us;
};

/* Progress of weight loading, called every few hundred MB and at the end. */
typedef void (*model_progress_cb)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);

/* Load layers [layer_begin, layer_end) of f onto be. Checks presence, shape
 * and type of every tensor the slice needs (clear error per mismatch); MTP
 * tensors are tolerated and skipped. */
int model_load(struct cs_model *m, const struct gguf_file *f, struct cs_backend *be,
               int layer_begin, int layer_end, model_progress_cb progress, void *progress_ctx,
               struct cs_error *err);
void model_free(struct cs_model *m);

/* Per-sequence state of the slice: KV pages for its attention layers and GDN
 * slots for its GDN layers, plus scratch for up to max_tokens per step. */
struct cs_state_config {
    int max_tokens;        /* largest batch (prefill chunk + decodes) */
    int n_slots;           /* GDN state slots (live sequences + snapshots) */
    int kv_pages;          /* KV pages per attention layer */
    int page_size;         /* tokens per page (256) */
    uint32_t kv_type;      /* CS_DTYPE_F32 or CS_DTYPE_F16 */
};

struct cs_state;  /* opaque: worker/state.c */

int state_create(struct cs_state **out, const struct cs_model *m, const struct cs_state_config *cfg,
                 struct cs_error *err);
void state_destroy(struct cs_state *st);
/* Zero the GDN state of a slot (a new sequence). */
int state_slot_reset(struct cs_state *st, int slot);
/* Copy a slot's GDN state (snapshot / restore for prefix caching). */
int state_slot_copy(struct cs_state *st, int dst_slot, int src_slot);
/* Copy KV pages [src_page, src_page + n_pages) to [dst_page, ..) in every
 * attention layer of the slice (a sequence's KV given to another: with
 * state_slot_copy, a second sequence continuing from the same prefix).
 * Ranges past kv_pages or overlapping: CS_EINVAL. */
int state_kv_pages_copy(struct cs_state *st, int dst_page, int src_page, int n_pages);
/* Bytes a configuration needs on the device (for capacity planning). */
uint64_t state_bytes(const struct cs_model *m, const struct cs_state_config *cfg);

/* Run the slice over a batch.
 * hidden_in: [n_tokens][E] fp32 backend memory, or NULL on the first stage
 * (tokens are embedded). hidden_out: [n_tokens][E] backend memory receiving
 * the slice's output (not used on the last stage; may be NULL there).
 * On the last stage, for each sequence s with sample[s] true, the logits of
 * its last token are sampled with params[s] into results[s] (host). */
int model_forward(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                  const float *hidden_in, float *hidden_out, const bool *sample,
                  const struct cs_sample_params *params, struct cs_sample_result *results);

/* Where a slice's hidden states come from and go to: backend memory, or host
 * memory (in_host / out_host) moved by asynchronous copies queued with the
 * step's ops and fenced by its final sync, so a pipeline stage passes its
 * edge slots and waits once a step. The host ranges must stay untouched until
 * model_forward_io returns (it syncs on failure too). */
struct model_io {
    const float *in;      /* [n_tokens][E] fp32, or NULL on the first stage */
    bool in_host;
    float *out;           /* [n_tokens][E] fp32; NULL on the last stage */
    bool out_host;
};
int model_forward_io(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                     const struct model_io *io, const bool *sample,
                     const struct cs_sample_params *params, struct cs_sample_result *results);

/* Single-stage or last stage with hidden_in: like model_forward but returns
 * the logits of every token of the batch, [n_tokens][n_vocab] fp32 in host
 * memory (tests and the reference check; not used when serving). */
int model_forward_logits(struct cs_model *m, struct cs_state *st, const struct cs_batch *b,
                         const float *hidden_in, float *host_logits);

#ifdef __cplusplus
}
#endif
#endif
