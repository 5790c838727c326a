/* ops_cuda.cuh - private to kernels/cuda/: the CUDA backend context and the
 * op entry points each kernel file defines (same signatures as the table in
 * kernels/ops.h). ops_cuda.cu owns the context and fills the table; the
 * matrix functions come from matmul.h (the "cudamm" files).
 *
 * Invariants: every op is asynchronous on ctx->stream; the batch given to an
 * op is the one given to the last step_begin (its device copy lives here). */
#ifndef CS_OPS_CUDA_CUH
#define CS_OPS_CUDA_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "../ops.h"

/* Attention: split of the context for decode tokens (flash-decoding). A
 * token at position pos has splits of cs_attn_split_len(pos) positions, split
 * s covering [s * len, (s + 1) * len): the boundaries depend on the token's
 * own position only, never on the batch. About 64 splits per token (128 to
 * 4096 positions each): measured on an H200 at the 9B shape (docs/PERF.md,
 * attention_decode.cu), 32K took 55 us per layer with 512-position splits,
 * 69 us with 256 and 71 us with 1024; 4K took 16 us with 128 against 17.5
 * with 64. Fewer, longer splits mean fewer blocks paying a block's fixed
 * cost, as long as the blocks still fill the GPU. */
#ifndef CS_ATTN_DEC_SPLITS   /* -D only to time variants: kernels/cpu/attention.c mirrors 64 */
#define CS_ATTN_DEC_SPLITS 64
#endif
static __host__ __device__ __forceinline__ int cs_attn_split_len(int pos)
{
    int len = 128;
    while (len < 4096 && len * CS_ATTN_DEC_SPLITS < pos)
        len <<= 1;
    return len;
}

static __host__ __device__ __forceinline__ int cs_attn_n_splits(int pos)
{
    return pos / cs_attn_split_len(pos) + 1;
}
/* Query tiles of the prefill kernel (attention_prefill.cu): up to this many
 * consecutive tokens of one sequence. */
#define CS_ATTN_PTILE 16

/* The step's batch on the device (step_begin uploads it in one copy). */
struct cuda_batch {
    int n_tokens, n_seqs, max_pages;
    int32_t *tokens, *pos, *seq_of, *seq_start, *slot, *page_table;
    /* attention work lists: decode tokens (their sequence has one token in
     * this step) and prefill query tiles (int2: first token, token count) */
    int32_t *dec_tokens;
    int n_dec;
    int max_dec_splits;         /* splits of the longest decode context */
    int2 *ptiles;               /* prefill tiles of CS_ATTN_PTILE tokens */
    int n_ptiles;
    int max_ptile_pos;          /* largest position of a token in ptiles, -1 if none */
};

/* One recorded decode step (ops_cuda.cu, "graphs"). The key is everything
 * the recorded kernel arguments and grids depend on besides fixed buffers. */
#define CUDA_GRAPH_SLOTS 48
#define CUDA_GRAPH_MAX_SEQS 16      /* decode steps of more sequences run eagerly */
enum cuda_graph_state { CUDA_GRAPH_FREE = 0, CUDA_GRAPH_SEEN, CUDA_GRAPH_READY };
struct cuda_graph_entry {
    enum cuda_graph_state state;
    const void *owner;
    uint32_t variant;
    int n_seqs, max_pages, splits;  /* batch shape; splits: attention split bucket */
    void *d_stage;                  /* batch arrays the kernels read */
    unsigned long long mem_gen;     /* cuda_mem_generation() when seen/recorded */
    cudaGraphExec_t exec;
    unsigned long long last_use;
};

struct cuda_ctx {
    int device;
    cudaStream_t stream;
    /* batch upload: one pinned staging buffer, one device buffer */
    void *h_stage, *d_stage;
    size_t stage_cap;
    cudaEvent_t stage_done;     /* the last upload from h_stage has completed */
    struct cuda_batch batch;
    /* attention partials of decode splits (grows as needed) */
    float *attn_part;
    size_t attn_part_cap;       /* bytes */
    /* Q8_1 activations of cuda_matmul (grows as needed) */
    void *mm_scratch;
    size_t mm_scratch_cap;
    void *gdnc_scratch;   /* gdn_chunked.cu: a window's per-chunk matrices */
    size_t gdnc_scratch_cap;
    int gdnc_ready;       /* gdn_chunked.cu: shared-memory attributes set (gdnc_setup) */
    /* attention_prefill.cu: partials of prefill KV splits (grows as needed),
     * and which kernel instances were allowed their shared memory */
    float *apf_part;
    size_t apf_part_cap;
    /* attention_prefill.cu: the int8 copy of the K pages for the int8 scores
     * (kernels/attn_numerics.h), rows of 64 words, then one scale per row */
    void *apf_k8;
    size_t apf_k8_cap;
    unsigned apf_smem_set;
    /* its int8 kernel with async staging per NTY (8, 12, 16): 0 not asked
     * yet, 1 ready, -1 unusable here; apf_async_off: register staging always
     * (tests) */
    signed char apf_async[3];
    bool apf_async_off;
    int smem_optin;       /* the device's opt-in shared memory per block (0: not asked yet) */
    /* attention_decode.cu: its cp.async kernel per rows-per-warp instance (2,
     * 4, 6, 8): 0 not asked yet, 1 ready (shared memory set), -1 unusable on
     * this device; dec_pipe_off: the register kernel always (tests) */
    signed char dec_pipe[4];
    bool dec_pipe_off;
    /* ffn_ring.cu: the fused FFN's exchange buffer (zeroed when it grows;
     * it carries an epoch from call to call) */
    void *ffn_buf;
    size_t ffn_buf_cap;
    bool ffn_ring_on;     /* cuda_ffn_ring_enable; CS_FFN_RING_DEFAULT at creation */
    /* sampling buffers (grow as needed) */
    void *d_sample, *h_sample;
    size_t sample_cap;
    /* decode-step graphs */
    bool graphs_off;
    struct cuda_graph_entry graphs[CUDA_GRAPH_SLOTS];
    int graph_cur;                  /* entry of the current recording/replay, or -1 */
    unsigned long long graph_clock;
    struct cs_graph_stats graph_stats;
};

static inline struct cuda_ctx *cuda_ctx_of(struct cs_backend *be)
{
    return (struct cuda_ctx *)be->ctx;
}

/* Grow a device buffer to at least bytes (contents are not kept). A move
 * bumps cuda_mem_generation. */
int cuda_buffer_reserve(void **buf, size_t *cap, size_t bytes);
/* A process-wide counter bumped whenever backend device memory is freed or a
 * backend buffer moves: recorded graphs of an older generation are stale. */
unsigned long long cuda_mem_generation(void);
void cuda_mem_generation_bump(void);

/* Check that an op's batch is the one of the last step_begin. */
int cuda_batch_check(struct cuda_ctx *c, const struct cs_batch *b, const char *op);

/* ---- op entry points (kernels/ops.h semantics) ---- */
int cuda_op_embed(struct cs_backend *be, float *out, const struct cs_weight *table,
                  const struct cs_batch *b);
int cuda_op_rmsnorm(struct cs_backend *be, float *out, float *scale, const float *x,
                    const float *w, int n_tokens, int dim, float eps);
int cuda_op_add(struct cs_backend *be, float *x, const float *y, size_t n);
int cuda_op_add_rmsnorm(struct cs_backend *be, float *x, const float *y, float *out, float *scale,
                        const float *w, int n_tokens, int dim, float eps);
/* add_rmsnorm with the sum written to x_out (== x: in place, as the op;
 * else x is only read): one launch, the same values. */
int cuda_add_rmsnorm_to(struct cs_backend *be, float *x_out, const float *x, const float *y,
                        float *out, float *scale, const float *w, int n_tokens, int dim, float eps);
int cuda_op_silu_mul(struct cs_backend *be, float *out, const float *g, const float *u, size_t n);
int cuda_op_head_norm_rope(struct cs_backend *be, float *x, int token_stride, int head_stride,
                           int n_heads, int head_dim, const float *norm_w, int rope_dims,
                           float rope_base, float eps, const struct cs_batch *b);
int cuda_op_kv_store(struct cs_backend *be, struct cs_kv_layer *kv, const float *k, int k_stride,
                     const float *v, int v_stride, const struct cs_batch *b);
int cuda_op_qk_norm_rope_store(struct cs_backend *be, float *q, int q_token_stride,
                               int q_head_stride, int n_head, float *k, const float *v,
                               int kv_stride, int n_head_kv, int head_dim, const float *q_norm,
                               const float *k_norm, int rope_dims, float rope_base, float eps,
                               struct cs_kv_layer *kv, const struct cs_batch *b);
int cuda_op_attention(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                      int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                      const struct cs_batch *b);
int cuda_op_sigmoid_gate(struct cs_backend *be, float *out, const float *gate,
                         int gate_token_stride, int gate_head_stride, int n_heads, int head_dim,
                         int n_tokens);
int cuda_op_conv1d_silu(struct cs_backend *be, float *y, const float *x, const float *w,
                        struct cs_gdn_layer *st, const struct cs_batch *b);
int cuda_op_gdn(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                struct cs_gdn_layer *st, const struct cs_batch *b);
int cuda_op_gated_rmsnorm(struct cs_backend *be, float *x, const float *z, const float *w,
                          int n_heads, int head_dim, float eps, int n_tokens);
int cuda_op_sample(struct cs_backend *be, struct cs_sample_result *results, float *logits,
                   int n_vocab, const struct cs_sample_params *params, int n);

/* ops_matmul.cu: the matrix entries (matmul.h behind them) */
int cuda_op_weight_upload(struct cs_backend *be, struct cs_weight *w, uint32_t type, int64_t n_in,
                          int64_t n_out, const void *host_data);
void cuda_op_weight_free(struct cs_backend *be, struct cs_weight *w);
int cuda_op_matmul(struct cs_backend *be, int n, float *const *ys,
                   const struct cs_weight *const *ws, const float *x, int n_tokens);
int cuda_op_matmul_scaled(struct cs_backend *be, int n, float *const *ys,
                          const struct cs_weight *const *ws, const float *x, const float *scale,
                          int n_tokens);
int cuda_op_matmul_swiglu(struct cs_backend *be, float *y, const struct cs_weight *w, float *g,
                          const float *u, int n_tokens);
int cuda_op_matmul_gated_rmsnorm(struct cs_backend *be, float *y, const struct cs_weight *w,
                                 float *x, const float *z, const float *norm_w, int n_heads,
                                 int head_dim, float eps, int n_tokens);
int cuda_op_matmul_sigmoid_gate(struct cs_backend *be, float *y, const struct cs_weight *w,
                                float *x, const float *gate, int gate_token_stride,
                                int gate_head_stride, int n_heads, int head_dim, int n_tokens);
int cuda_op_matmul_add_rmsnorm(struct cs_backend *be, int n, float *const *ys,
                               const struct cs_weight *const *ws, float *x_out, const float *x,
                               const float *y, const float *norm_w, float *normed,
                               float *norm_scale, int n_tokens, int dim, float eps);
int cuda_op_ffn_add_rmsnorm(struct cs_backend *be, float *out, const struct cs_weight *gate,
                            const struct cs_weight *up, const struct cs_weight *down, float *x_out,
                            const float *x, const float *y, const float *norm_w, int n_tokens,
                            int dim, float eps);
int cuda_op_proj_ffn_add_rmsnorm(struct cs_backend *be, float *out, const struct cs_out_proj *p,
                                 const struct cs_weight *gate, const struct cs_weight *up,
                                 const struct cs_weight *down, float *x_out, const float *x,
                                 const float *norm_w, int n_tokens, int dim, float eps);
int cuda_op_matmul_add_rmsnorm_conv1d(struct cs_backend *be, int n, float *const *ys,
                                      const struct cs_weight *const *ws, float *x_out,
                                      const float *x, const float *y, const float *norm_w,
                                      float *normed, int dim, float eps, const float *conv_w,
                                      struct cs_gdn_layer *st, const struct cs_batch *b);

#endif
