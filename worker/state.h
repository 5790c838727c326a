/* state.h - the inside of struct cs_state (worker/state.c), shared with the
 * forward pass (worker/model.c) only; everyone else sees it as opaque through
 * model.h.
 *
 * All float buffers are backend memory. Scratch is sized for cfg.max_tokens
 * tokens per step; the LM head works on at most n_logit_rows rows at a time. */
#ifndef CS_STATE_H
#define CS_STATE_H

#include "model.h"

struct cs_state {
    const struct cs_model *m;
    struct cs_state_config cfg;
    struct cs_kv_layer kv[CS_MAX_LAYERS];   /* attention layers of the slice (absolute index) */
    struct cs_gdn_layer gdn[CS_MAX_LAYERS]; /* GDN layers of the slice (absolute index) */
    int n_logit_rows;      /* rows of the logits scratch */
    int max_ff;            /* largest n_ff of the slice */
    int conv_dim;          /* 2 * Sk * Gk + Sv * Hv */
    /* scratch, [max_tokens][dim] unless noted */
    float *hidden;         /* E: the residual stream: hidden_buf[0] or [1] (model.c) */
    float *hidden_alt;     /* E: the other one, where the next fused add writes */
    float *hidden_buf[2];  /* E: allocated; [1] only for a backend with matmul_add_rmsnorm */
    float *hidden_end[2];  /* where a step body of each variant leaves the stream (model.c) */
    float *normed;         /* E: rmsnorm output (mixer, FFN and final norm input) */
    float *norm_scale;     /* 1: its per-token scale, applied after the projection (numerics.h) */
    float *tmp;            /* E: mixer and FFN down outputs before the residual add */
    float *qkv;            /* conv_dim: GDN input projection */
    float *conv_out;       /* conv_dim */
    float *z;              /* Hv * Sv */
    float *beta;           /* Hv */
    float *alpha;          /* Hv */
    float *gdn_out;        /* Hv * Sv */
    float *q;              /* 2 * D * Hq: per head query then gate */
    float *k;              /* D * Hkv */
    float *v;              /* D * Hkv */
    float *attn_out;       /* D * Hq */
    float *ffn_gate;       /* max_ff */
    float *ffn_up;         /* max_ff */
    float *rows;           /* [n_logit_rows][E]: gathered last-token rows */
    float *logits;         /* [n_logit_rows][n_vocab] */
    /* host arrays of max_tokens entries for compacting the sampled rows */
    struct cs_sample_params *host_params;
    struct cs_sample_result *host_results;
    int32_t *host_rows;
};

#endif
