/* ops.h - the one operation interface between the model code and a backend.
 *
 * worker/model.c computes the forward pass once, calling only this table;
 * kernels/cpu fills it with plain C loops (the reference), kernels/cuda with
 * CUDA kernels. Nothing else knows which backend runs.
 *
 * Conventions
 * - Every pointer an op takes is backend memory ("device" memory: host memory
 *   on the CPU backend), allocated with be->alloc, unless it is marked host.
 * - Activations are fp32, row-major [n_tokens][dim]; a batch is the tokens of
 *   several sequences concatenated (struct cs_batch says which is which).
 * - Weights are struct cs_weight, uploaded once with be->weight_upload, which
 *   may repack them (the layout behind w->data is the backend's own).
 * - Batch invariance: the value computed for one token never depends on which
 *   other tokens share the batch, nor on n_tokens (no split-K chosen by batch
 *   size, no atomics in reductions). This makes N stages == 1 stage, replay
 *   after a crash and seeded sampling under load exactly reproducible.
 * - Every op returns CS_OK or a negative status (CS_ECUDA after logging the
 *   failing call); ops are asynchronous on the CUDA backend, be->sync waits.
 */
#ifndef CS_OPS_H
#define CS_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A matrix of n_out rows of n_in values (ggml {n_in, n_out}); y = W x. */
struct cs_weight {
    uint32_t type;        /* enum cs_dtype: F32, F16, BF16 or Q8_0 */
    int64_t n_in;         /* ne0, contiguous */
    int64_t n_out;        /* ne1, rows */
    void *data;           /* backend memory in the backend's layout */
    size_t bytes;         /* bytes behind data */
    void *aux;            /* backend-private (e.g. repacked scales); NULL if unused */
};

/* KV cache of one attention layer, in pages of page_size tokens.
 * Layout of page p: K [page_size][n_kv_heads][head_dim] then V likewise, of
 * kv_type elements (F32 or F16; 3-bit pages arrive as a later type). A
 * sequence's token at position pos lives in page page_table[pos / page_size],
 * row pos % page_size. Pages are shared by no two live sequences today; prefix
 * sharing only needs the page table to point at the same page. */
struct cs_kv_layer {
    void *pages;          /* n_pages pages, each 2 * page_size * n_kv_heads * head_dim elems */
    uint32_t kv_type;     /* CS_DTYPE_F32 or CS_DTYPE_F16 */
    int n_pages;
    int page_size;
    int n_kv_heads;
    int head_dim;
};

/* Recurrent state of one GDN layer, in slots (one per live sequence, plus
 * snapshot slots). conv: [n_slots][kernel-1][conv_dim] pre-conv columns,
 * oldest first; rec: [n_slots][n_v_heads][key_dim][value_dim], fp32. */
struct cs_gdn_layer {
    float *conv;
    float *rec;
    int n_slots;
    int conv_dim;
    int conv_kernel;      /* 4 */
    int n_k_heads;        /* Gk */
    int n_v_heads;        /* Hv; value head h uses key head h % Gk */
    int key_dim;          /* 128 */
    int value_dim;        /* 128 */
};

/* The sequences of one step. All arrays are host memory; be->step_begin copies
 * what a backend needs to the device once per step. Tokens of one sequence
 * are contiguous and in position order. */
struct cs_batch {
    int n_tokens;
    int n_seqs;
    const int32_t *tokens;      /* [n_tokens] token ids (stage 0 embeds them) */
    const int32_t *pos;         /* [n_tokens] position of each token in its sequence */
    const int32_t *seq_of;      /* [n_tokens] index of its sequence in this batch */
    const int32_t *seq_start;   /* [n_seqs + 1] first token of each sequence; last = n_tokens */
    const int32_t *slot;        /* [n_seqs] GDN state slot of each sequence */
    const int32_t *page_table;  /* [n_seqs][max_pages] KV pages of each sequence */
    int max_pages;
};

/* Sampling parameters of one sequence (host memory). The RNG is documented in
 * kernels/sampler.h so CPU and GPU draw the same numbers. */
struct cs_sample_params {
    float temperature;          /* <= 0: greedy (argmax, lowest id wins ties) */
    int top_k;                  /* <= 0: off */
    float top_p;                /* >= 1: off */
    float min_p;                /* <= 0: off */
    float presence_penalty;     /* OpenAI: on tokens generated so far */
    float frequency_penalty;
    float repetition_penalty;   /* 1: off; on prompt and generated tokens (CTRL rule) */
    uint64_t seed;
    uint64_t draw;              /* index of this draw in the sequence: the RNG counter */
    int n_logprobs;             /* -1: none; 0: the chosen token's; n: plus top n (<= 20) */
    const int32_t *gen_tokens;  /* tokens generated so far (presence/frequency) */
    int n_gen_tokens;
    const int32_t *ctx_tokens;  /* prompt + generated (repetition) */
    int n_ctx_tokens;
    const int32_t *bias_ids;    /* logit_bias: ids and values */
    const float *bias_vals;
    int n_bias;
    const uint8_t *allowed;     /* optional vocab bitmask (constrained decoding); NULL: all */
};

#define CS_MAX_TOP_LOGPROBS 20

struct cs_sample_result {
    int32_t token;
    float logprob;               /* log-softmax of the chosen token over the logits after penalties
                                 * and bias, before temperature and truncation (vLLM's convention) */
    int n_top;
    int32_t top_ids[CS_MAX_TOP_LOGPROBS];
    float top_logprobs[CS_MAX_TOP_LOGPROBS];
};

/* Modes returned by be->graph_begin (see there). */
/* A mixer's output projection y = W g(a), left for the op that runs it:
 * g is gated_rmsnorm's transform (per head: rmsnorm(a) * norm_w * silu(aux),
 * the GDN layer) or sigmoid_gate's (a * sigmoid(aux) with the gate laid out
 * as sigmoid_gate takes it, the attention layer). W's n_in = n_heads *
 * head_dim. a is scratch, as matmul_gated_rmsnorm and matmul_sigmoid_gate
 * take it. */
enum cs_out_proj_kind { CS_OUT_PROJ_GATED_RMSNORM = 1, CS_OUT_PROJ_SIGMOID_GATE = 2 };
struct cs_out_proj {
    int kind;                  /* enum cs_out_proj_kind */
    const struct cs_weight *w;
    float *a;
    const float *aux;          /* z, or the gate */
    const float *norm_w;       /* GATED_RMSNORM: [head_dim] */
    int aux_token_stride;      /* SIGMOID_GATE: the gate's layout */
    int aux_head_stride;
    int n_heads, head_dim;
    float eps;                 /* GATED_RMSNORM */
};

enum cs_graph_mode { CS_GRAPH_EAGER = 0, CS_GRAPH_RECORD = 1, CS_GRAPH_REPLAYED = 2 };

struct cs_graph_stats {
    uint64_t recorded;          /* graphs recorded and instantiated */
    uint64_t replayed;          /* steps run by replaying a graph */
    uint64_t failed;            /* recordings that failed (the step ran eagerly) */
    uint64_t eager;             /* decode steps run eagerly (warm-up, graphs off) */
};

struct cs_backend {
    const char *name;           /* "cpu" or "cuda:N" */
    void *ctx;                  /* backend-private */

    /* ---- memory ---- */
    int (*alloc)(struct cs_backend *be, void **ptr, size_t bytes);    /* zero-filled */
    void (*free)(struct cs_backend *be, void *ptr);
    /* Returns once host_src has been read (it may be reused or freed at return). */
    int (*upload)(struct cs_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*download)(struct cs_backend *be, void *host_dst, const void *src, size_t bytes);
    /* The same copies queued in order with the ops, not waited for: the host
     * range must stay valid and untouched until the next be->sync returns
     * (a pipeline stage moves its edge slots this way: one fence a step). */
    int (*upload_async)(struct cs_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*download_async)(struct cs_backend *be, void *host_dst, const void *src, size_t bytes);
    int (*copy)(struct cs_backend *be, void *dst, const void *src, size_t bytes); /* device to device */
    int (*zero)(struct cs_backend *be, void *dst, size_t bytes);
    int (*sync)(struct cs_backend *be);
    /* Free and total device memory in bytes (CPU: the machine's). */
    int (*mem_info)(struct cs_backend *be, size_t *free_bytes, size_t *total_bytes);
    /* Upload a ggml-layout tensor (host, e.g. the mmap) as a weight. */
    int (*weight_upload)(struct cs_backend *be, struct cs_weight *w, uint32_t type,
                         int64_t n_in, int64_t n_out, const void *host_data);
    /* Optional hook, NULL unless a loader sets it around weight_upload: the
     * backend reads a weight's host bytes in pieces and calls it after each
     * with the bytes of that weight read so far, so progress moves inside one
     * large tensor (a 27B token_embd is ~1.3 GB: seconds on a PCIe Gen1 x1). */
    void (*upload_progress)(void *ctx, uint64_t bytes_read);
    void *upload_progress_ctx;
    void (*weight_free)(struct cs_backend *be, struct cs_weight *w);
    /* Called before the ops of a step; the batch stays valid until the next call. */
    int (*step_begin)(struct cs_backend *be, const struct cs_batch *b);

    /* ---- ops ---- */
    /* out[t] = row tokens[t] of the embedding table, dequantized. */
    int (*embed)(struct cs_backend *be, float *out, const struct cs_weight *table,
                 const struct cs_batch *b);
    /* RMSNorm of token rows, left for the projection to finish
     * (kernels/numerics.h): out[t] = x[t] * w and scale[t] = 1 / sqrt(mean(
     * x[t]^2) + eps), over dim, so that the norm is out[t] * scale[t];
     * matmul_scaled applies the scale after its dot. out may equal x. */
    int (*rmsnorm)(struct cs_backend *be, float *out, float *scale, const float *x, const float *w,
                   int n_tokens, int dim, float eps);
    /* ys[i][t] = Ws[i] x[t] for i < n: several weights reading the same input
     * (GDN's four input projections; gate and up), so a backend may fuse them. */
    int (*matmul)(struct cs_backend *be, int n, float *const *ys, const struct cs_weight *const *ws,
                  const float *x, int n_tokens);
    /* matmul with ys[i][t] scaled by scale[t] (scale NULL: matmul): the
     * projections of an rmsnorm's out with its scale, applied to each
     * segment's partial sum as kernels/numerics.h says. Bitwise what a fused
     * norm-and-projection op gives. */
    int (*matmul_scaled)(struct cs_backend *be, int n, float *const *ys,
                         const struct cs_weight *const *ws, const float *x, const float *scale,
                         int n_tokens);
    /* x += y over n values. */
    int (*add)(struct cs_backend *be, float *x, const float *y, size_t n);
    /* The residual add fused with the next RMSNorm: x += y over n_tokens * dim
     * values, then out and scale from x as rmsnorm leaves them. Bitwise equal
     * to add then rmsnorm on the same backend (one launch instead of two).
     * out must not overlap x or y. */
    int (*add_rmsnorm)(struct cs_backend *be, float *x, const float *y, float *out, float *scale,
                       const float *w, int n_tokens, int dim, float eps);
    /* out = silu(g) * u over n values; out may equal g. */
    int (*silu_mul)(struct cs_backend *be, float *out, const float *g, const float *u, size_t n);
    /* Optional (NULL: the model runs silu_mul, then matmul): y = W (silu(g)
     * * u) for n_tokens tokens of W's n_in values, the FFN down projection.
     * g is scratch (it may hold silu(g) * u afterwards). Bitwise equal to
     * silu_mul then matmul on the same backend; a backend fuses the product
     * into the matmul where it can (CUDA: one decode token). */
    int (*matmul_swiglu)(struct cs_backend *be, float *y, const struct cs_weight *w, float *g,
                         const float *u, int n_tokens);
    /* Optional (NULL: the model runs gated_rmsnorm, then matmul): y = W g(x)
     * with g gated_rmsnorm's transform (per head: rmsnorm(x) * norm_w *
     * silu(z)); W's n_in = n_heads * head_dim: the GDN output projection. x
     * is scratch (it may hold g(x) afterwards). Bitwise equal to the two ops
     * on the same backend (CUDA fuses one decode token). */
    int (*matmul_gated_rmsnorm)(struct cs_backend *be, float *y, const struct cs_weight *w,
                                float *x, const float *z, const float *norm_w, int n_heads,
                                int head_dim, float eps, int n_tokens);
    /* Optional (NULL: sigmoid_gate, then matmul): y = W (x * sigmoid(gate)),
     * the gate laid out as sigmoid_gate takes it: the attention output
     * projection. x is scratch. Bitwise equal to the two ops. */
    int (*matmul_sigmoid_gate)(struct cs_backend *be, float *y, const struct cs_weight *w,
                               float *x, const float *gate, int gate_token_stride,
                               int gate_head_stride, int n_heads, int head_dim, int n_tokens);
    /* Optional (NULL: the model runs add_rmsnorm, then matmul): the residual
     * add and the RMSNorm fused into the projections that read the norm:
     * x_out = x + y, normed = rmsnorm(x_out) * norm_w over dim, ys[i] = Ws[i]
     * normed for i < n (as matmul; every W's n_in = dim). x_out must not
     * overlap x, y or normed (x is only read: the model alternates two
     * residual buffers); normed (n_tokens * dim) and norm_scale (n_tokens)
     * are scratch (they may hold add_rmsnorm's out and scale afterwards, or
     * not). Bitwise equal to add_rmsnorm then matmul_scaled on the same
     * backend (CUDA fuses one decode token where the GEMV applies: one
     * launch instead of two). */
    int (*matmul_add_rmsnorm)(struct cs_backend *be, int n, float *const *ys,
                              const struct cs_weight *const *ws, float *x_out, const float *x,
                              const float *y, const float *norm_w, float *normed,
                              float *norm_scale, int n_tokens, int dim, float eps);
    /* Optional (NULL, or CS_EUNSUPPORTED with nothing run: the model runs
     * matmul_add_rmsnorm on gate and up, then matmul_swiglu): the whole FFN
     * of one decode token, x_out = x + y, n = rmsnorm(x_out) * norm_w, out =
     * W_down (silu(W_gate n) * (W_up n)). out may equal y; x_out must not
     * overlap x or y. Bitwise equal to those ops (CUDA: one kernel, sm_90+,
     * taken only when switched on: kernels/cuda/ffn_ring.h). */
    int (*ffn_add_rmsnorm)(struct cs_backend *be, float *out, const struct cs_weight *gate,
                           const struct cs_weight *up, const struct cs_weight *down,
                           float *x_out, const float *x, const float *y, const float *norm_w,
                           int n_tokens, int dim, float eps);
    /* Optional (NULL, or CS_EUNSUPPORTED with nothing run: the model runs
     * p's projection, then ffn_add_rmsnorm): the mixer's output projection p
     * (y = W g(a), as matmul_gated_rmsnorm or matmul_sigmoid_gate, below)
     * and then ffn_add_rmsnorm on its y, in one op; y is never stored. out
     * and x_out must not overlap p's a. Bitwise equal to the two ops (CUDA:
     * one decode token, in ffn_add_rmsnorm's kernel, when that is on). */
    int (*proj_ffn_add_rmsnorm)(struct cs_backend *be, float *out, const struct cs_out_proj *p,
                                const struct cs_weight *gate, const struct cs_weight *up,
                                const struct cs_weight *down, float *x_out, const float *x,
                                const float *norm_w, int n_tokens, int dim, float eps);
    /* Optional (NULL, or CS_EUNSUPPORTED with nothing run: the model runs
     * matmul_add_rmsnorm, then conv1d_silu on ys[0]): matmul_add_rmsnorm
     * whose first projection goes through GDN's conv1d_silu (conv_w, the
     * conv state of st, batch b) on its way out, so ys[0] receives the conv
     * output and the raw projection is never stored. Bitwise equal to the
     * two ops (CUDA: one decode token, in the GEMV's epilogue). */
    int (*matmul_add_rmsnorm_conv1d)(struct cs_backend *be, int n, float *const *ys,
                                     const struct cs_weight *const *ws, float *x_out,
                                     const float *x, const float *y, const float *norm_w,
                                     float *normed, int dim, float eps, const float *conv_w,
                                     struct cs_gdn_layer *st, const struct cs_batch *b);

    /* Attention layer. Per token t and head h the head vector is at
     * x + t * token_stride + h * head_stride (in floats). Applies
     * rmsnorm(head) * norm_w then NeoX RoPE on its first rope_dims dims
     * (dim i pairs with i + rope_dims/2; theta_i = pos * base^(-2i/rope_dims)). */
    int (*head_norm_rope)(struct cs_backend *be, float *x, int token_stride, int head_stride,
                          int n_heads, int head_dim, const float *norm_w, int rope_dims,
                          float rope_base, float eps, const struct cs_batch *b);
    /* Write k, v ([t][n_kv_heads * head_dim], token stride k_stride/v_stride)
     * of every token into its sequence's pages at its position. */
    int (*kv_store)(struct cs_backend *be, struct cs_kv_layer *kv, const float *k, int k_stride,
                    const float *v, int v_stride, const struct cs_batch *b);
    /* Optional (NULL: the model runs the three ops): head_norm_rope of q
     * (n_head heads) with q_norm and of k (n_head_kv heads, token stride
     * kv_stride, head stride head_dim) with k_norm, then kv_store of k and v
     * (token stride kv_stride). Bitwise equal to the three ops (CUDA: one
     * launch). */
    int (*qk_norm_rope_store)(struct cs_backend *be, float *q, int q_token_stride,
                              int q_head_stride, int n_head, float *k, const float *v,
                              int kv_stride, int n_head_kv, int head_dim, const float *q_norm,
                              const float *k_norm, int rope_dims, float rope_base, float eps,
                              struct cs_kv_layer *kv, const struct cs_batch *b);
    /* Causal attention of every token over positions 0..pos of its sequence
     * (read from the pages, so kv_store first). q head h of token t at
     * q + t*q_token_stride + h*q_head_stride; query head h uses kv head
     * h / (n_heads / n_kv_heads). out: [t][n_heads * head_dim]. Softmax in fp32. */
    int (*attention)(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                     int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                     const struct cs_batch *b);
    /* out[t][h][d] *= sigmoid(gate[t*gate_token_stride + h*gate_head_stride + d]). */
    int (*sigmoid_gate)(struct cs_backend *be, float *out, const float *gate, int gate_token_stride,
                        int gate_head_stride, int n_heads, int head_dim, int n_tokens);

    /* GDN layer. conv1d_silu: causal depthwise conv of x [t][conv_dim] with
     * w [conv_dim][kernel] over each sequence's stored columns then x, SiLU,
     * into y; updates the conv state of each sequence's slot. */
    int (*conv1d_silu)(struct cs_backend *be, float *y, const float *x, const float *w,
                       struct cs_gdn_layer *st, const struct cs_batch *b);
    /* The gated delta rule over y = [q (Gk*Dk) | k (Gk*Dk) | v (Hv*Dv)] per token:
     * L2-normalise q and k heads (eps), scale q by 1/sqrt(Dk), beta =
     * sigmoid(beta_raw), g = a * softplus(alpha_raw + dt_bias), then per value
     * head S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q.
     * Reads/writes each sequence's recurrent state; out: [t][Hv * Dv]. A
     * backend may run prefill in the chunked form (equal in exact arithmetic). */
    int (*gdn)(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
               const float *alpha_raw, const float *a, const float *dt_bias, float eps,
               struct cs_gdn_layer *st, const struct cs_batch *b);
    /* Per head of head_dim: x = rmsnorm(x) * w * silu(z), n_tokens * n_heads heads. */
    int (*gated_rmsnorm)(struct cs_backend *be, float *x, const float *z, const float *w,
                         int n_heads, int head_dim, float eps, int n_tokens);

    /* Sample one token from each of n rows of logits [n][n_vocab] (modified in
     * place by penalties, bias and the mask; temperature is not written back).
     * The algorithm and RNG are defined in kernels/sampler.h. params and results
     * are host. */
    int (*sample)(struct cs_backend *be, struct cs_sample_result *results, float *logits,
                  int n_vocab, const struct cs_sample_params *params, int n);

    /* ---- optional: decode steps recorded once and replayed (CUDA graphs) ----
     * NULL on backends without it (CPU). After step_begin of a pure decode step
     * (every sequence has one token), model.c calls graph_begin(owner,
     * variant): owner and variant name the op sequence that follows (the
     * model state and which ops it includes); the backend adds the batch shape
     * (n_seqs, max_pages, attention split bucket) to the key. It returns:
     *   CS_GRAPH_EAGER    run the ops normally (first sight of a key, graphs
     *                     off, not a decode step);
     *   CS_GRAPH_RECORD   the ops that follow are recorded, not run; call
     *                     graph_end, which runs them (or says it did not);
     *   CS_GRAPH_REPLAYED the recorded ops of this key were queued: skip them;
     * or a negative status. In every mode the results are bitwise those of
     * the eager ops. Recordings die when backend memory is freed or a
     * backend buffer moves (re-recorded on the next steps). */
    int (*graph_begin)(struct cs_backend *be, const void *owner, uint32_t variant);
    /* End a recording. ops_ok: every op returned CS_OK. Returns CS_OK when
     * the recorded ops were queued; else a negative status and nothing ran
     * (the caller runs the ops again eagerly). */
    int (*graph_end)(struct cs_backend *be, bool ops_ok);
    /* Turn recording/replay on or off (on by default where supported). */
    void (*graph_enable)(struct cs_backend *be, bool on);
    /* Optional (NULL: not supported): let a kernel start while the previous
     * one finishes, where the device can (CUDA sm_90+: programmatic dependent
     * launch, kernels/cuda/launch.cuh). On by default; the same results. */
    void (*pdl_enable)(struct cs_backend *be, bool on);
    /* Counters since creation (tests, benches); fills what it knows. */
    void (*graph_stats)(struct cs_backend *be, struct cs_graph_stats *out);

    /* ---- optional: pinned host memory ----
     * NULL on backends without it (CPU). host_register page-locks an existing
     * host range (page-aligned, e.g. a shared-memory mapping) so copies to and
     * from it are DMA; CS_OK, or a negative status with nothing registered (the
     * range stays usable, unpinned). host_unregister undoes it; call it before
     * the range is unmapped, with the pointer that was registered. */
    int (*host_register)(struct cs_backend *be, void *ptr, size_t bytes);
    void (*host_unregister)(struct cs_backend *be, void *ptr);

    void (*destroy)(struct cs_backend *be);
};

/* Backend constructors. device: "cpu", or a CUDA device index as "0", "1".
 * cs_backend_cuda_create returns CS_EUNSUPPORTED when built without CUDA. */
struct cs_backend_cpu_options {
    int n_threads;        /* 0: all cores */
    bool int8_matmul;     /* Q8_0 x Q8_1 integer dots like the GPU; false: dequantize to fp32 (reference) */
};
int cs_backend_cpu_create(struct cs_backend **out, const struct cs_backend_cpu_options *opt);
int cs_backend_cuda_create(struct cs_backend **out, int device);
int cs_backend_create(struct cs_backend **out, const char *device, int n_threads);

#ifdef __cplusplus
}
#endif
#endif
