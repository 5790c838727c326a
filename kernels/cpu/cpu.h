/* cpu.h - private to the CPU backend: its context, per-thread scratch, the
 * scalar math every op file shares, and the op entry points that ops_cpu.c
 * puts in the struct cs_backend table (contracts in kernels/ops.h).
 *
 * Fixed arithmetic order (the root of batch and thread-count invariance):
 * every reduction below runs in one documented order per output element, in
 * fp32, on one thread. cpu_dot is the fp32 path's dot product: 8 lanes, lane j
 * sums the products i = j mod 8 in ascending i, then
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
 *
 * Bitwise agreement with the CUDA backend: everything between two int8
 * quantizations (norms, SiLU, sigmoid, the GDN recurrence, the conv, RoPE,
 * attention) follows the CUDA kernels' arithmetic step for step: their
 * lane-by-lane FFMA chains (fmaf here; the files compile with
 * -ffp-contract=off, so a plain a * b + c stays two roundings), their
 * shuffle-tree sums (cpu_warp_sum) and kernels/exact_math.h for exp, log1p,
 * division and square roots. Each op file names the kernel it mirrors; a
 * change on either side must change the other (tests/gpu compares bitwise). */
#ifndef CS_KERNELS_CPU_CPU_H
#define CS_KERNELS_CPU_CPU_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/half.h"
#include "../exact_math.h"
#include "../numerics.h"
#include "../ops.h"
#include "threadpool.h"

struct cpu_scratch {
    float *buf;
    size_t cap;           /* floats */
};

struct cpu_ctx {
    struct threadpool *pool;
    int n_threads;
    bool int8_matmul;
    struct cpu_scratch *scratch;   /* [n_threads] */
    void *xq;                      /* int8 matmul: quantized activations */
    size_t xq_bytes;
};

static inline struct cpu_ctx *cpu_ctx_of(struct cs_backend *be)
{
    return (struct cpu_ctx *)be->ctx;
}

/* Make every thread's scratch hold at least n floats (called on the caller's
 * thread before a parallel loop). CS_OK or CS_ENOMEM. */
int cpu_scratch_reserve(struct cpu_ctx *ctx, size_t n);

/* Grow ctx->xq to at least bytes. CS_OK or CS_ENOMEM. */
int cpu_xq_reserve(struct cpu_ctx *ctx, size_t bytes);

/* 64-byte aligned, zero-filled host memory; NULL on failure. */
void *cpu_aligned_alloc(size_t bytes);

/* ---- shared math ---- */

static inline float cpu_dot(const float *a, const float *b, int64_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            l[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        l[i & 7] += a[i] * b[i];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static inline float cpu_sigmoid(float x)
{
    return xm_sigmoid(x);
}

static inline float cpu_silu(float x)
{
    return xm_silu(x);
}

/* torch.nn.functional.softplus with beta 1, threshold 20. */
static inline float cpu_softplus(float x)
{
    return xm_softplus(x);
}

/* The value kernels/cuda/cuda_util.cuh's warp_sum leaves in every lane, for
 * lane values v[0..31] (overwritten): the xor butterfly with offsets 16, 8,
 * 4, 2, 1, lane l adding lane l + o's value (the lanes l and l ^ o hold the
 * same sum, fp addition being commutative). */
static inline float cpu_warp_sum(float *v)
{
    for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < o; l++)
            v[l] = v[l] + v[l + o];
    return v[0];
}

/* The sum of squares of x[0..n) as the CUDA kernels form it with T lanes
 * (T = 32: one warp, the per-head norms and the GDN's L2 norms): lane t's FFMA chain over x[t], x[t + T], ...,
 * warp_sum of each 32 lanes, then (T > 32) warp_sum of the warp sums
 * (block_sum, padded with zeros to 32). T is 32 or a multiple of 32 up to
 * 1024. */
static inline float cpu_sumsq_lanes(const float *x, int64_t n, int T)
{
    float lanes[32], warps[32];
    int nw = T / 32;
    for (int w = 0; w < nw; w++) {
        for (int l = 0; l < 32; l++) {
            float p = 0.0f;
            for (int64_t i = (int64_t)w * 32 + l; i < n; i += T)
                p = fmaf(x[i], x[i], p);
            lanes[l] = p;
        }
        warps[w] = cpu_warp_sum(lanes);
    }
    if (nw == 1)
        return warps[0];
    for (int w = nw; w < 32; w++)
        warps[w] = 0.0f;
    return cpu_warp_sum(warps);
}

#define CPU_HEAD_NORM_LANES 32    /* one warp per head: rope.cuh, gated_norm.cuh, gdn.cu */

/* The sum of squares of a token row in kernels/numerics.h's span order
 * (rmsnorm, add_rmsnorm, the final norm; kernels/cuda/rms_row.cuh). */
static inline float cpu_row_sumsq(const float *x, int64_t n)
{
    const int64_t seg_len = (int64_t)CS_NORM_SEG_SPANS * CS_NORM_SPAN;
    float total = 0.0f;
    for (int64_t s0 = 0; s0 < n; s0 += seg_len) {
        float seg = 0.0f;
        for (int64_t j0 = s0; j0 < s0 + seg_len && j0 < n; j0 += CS_NORM_SPAN) {
            float lanes[32];
            for (int l = 0; l < 32; l++) {
                float p = 0.0f;
                for (int u = 0; u < CS_NORM_SPAN / 32; u++) {
                    int64_t i = j0 + u * 32 + l;
                    float v = i < n ? x[i] : 0.0f;
                    p = fmaf(v, v, p);
                }
                lanes[l] = p;
            }
            seg = seg + cpu_warp_sum(lanes);
        }
        total = total + seg;
    }
    return total;
}

/* The RMSNorm scale of one head (q/k norms, the GDN gated norm), as the
 * CUDA kernels. */
static inline float cpu_rms_scale_lanes(const float *x, int64_t n, float eps, int lanes)
{
    return xm_rms_scale(cpu_sumsq_lanes(x, n, lanes), (int)n, eps);
}

/* Convert n values of a row of type (F32, F16, BF16, Q8_0) to fp32. */
void cpu_row_to_float(float *out, const void *row, uint32_t type, int64_t n);

/* Bytes of a row of n values of type; 0 when the type is unsupported or n
 * is not a whole number of blocks. */
size_t cpu_row_bytes(uint32_t type, int64_t n);

/* ---- ops (ops.h contracts) ---- */
int cpu_embed(struct cs_backend *be, float *out, const struct cs_weight *table,
              const struct cs_batch *b);
int cpu_rmsnorm(struct cs_backend *be, float *out, float *scale, const float *x, const float *w,
                int n_tokens, int dim, float eps);
int cpu_matmul(struct cs_backend *be, int n, float *const *ys, const struct cs_weight *const *ws,
               const float *x, int n_tokens);
int cpu_matmul_scaled(struct cs_backend *be, int n, float *const *ys,
                      const struct cs_weight *const *ws, const float *x, const float *scale,
                      int n_tokens);
int cpu_add(struct cs_backend *be, float *x, const float *y, size_t n);
int cpu_add_rmsnorm(struct cs_backend *be, float *x, const float *y, float *out, float *scale,
                    const float *w, int n_tokens, int dim, float eps);
int cpu_silu_mul(struct cs_backend *be, float *out, const float *g, const float *u, size_t n);
int cpu_head_norm_rope(struct cs_backend *be, float *x, int token_stride, int head_stride,
                       int n_heads, int head_dim, const float *norm_w, int rope_dims,
                       float rope_base, float eps, const struct cs_batch *b);
int cpu_kv_store(struct cs_backend *be, struct cs_kv_layer *kv, const float *k, int k_stride,
                 const float *v, int v_stride, const struct cs_batch *b);
int cpu_attention(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                  int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                  const struct cs_batch *b);
int cpu_sigmoid_gate(struct cs_backend *be, float *out, const float *gate, int gate_token_stride,
                     int gate_head_stride, int n_heads, int head_dim, int n_tokens);
int cpu_conv1d_silu(struct cs_backend *be, float *y, const float *x, const float *w,
                    struct cs_gdn_layer *st, const struct cs_batch *b);
int cpu_gdn(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
            const float *alpha_raw, const float *a, const float *dt_bias, float eps,
            struct cs_gdn_layer *st, const struct cs_batch *b);
int cpu_gated_rmsnorm(struct cs_backend *be, float *x, const float *z, const float *w,
                      int n_heads, int head_dim, float eps, int n_tokens);
int cpu_sample(struct cs_backend *be, struct cs_sample_result *results, float *logits,
               int n_vocab, const struct cs_sample_params *params, int n);

/* gdn_chunked.c: the chunked GDN form of kernels/cuda/gdn_chunked.cu for
 * one (sequence, value head) item, tokens [t0, t1) of the step, S the head's
 * [128][128] state (key_dim = value_dim = 128 only), scratch of
 * cpu_gdn_chunked_scratch() floats. Same bits as the CUDA kernels. */
size_t cpu_gdn_chunked_scratch(void);
void cpu_gdn_chunked_seq(float *out, const float *y, const float *beta_raw, const float *alpha_raw,
                         const float *a, const float *dt_bias, float eps,
                         const struct cs_gdn_layer *st, int t0, int t1, int h, float *S,
                         float *scratch);

/* Check a batch's arrays (counts, seq_start, seq_of, positions >= 0). */
int cpu_batch_check(const struct cs_batch *b);

/* Check a GDN state and the batch's slots (CS_ERANGE for a slot out of range). */
int cpu_gdn_state_check(const struct cs_gdn_layer *st, const struct cs_batch *b);

#endif
