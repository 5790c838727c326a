/* matmul.h - the C interface of the CUDA matrix work: weight upload (with
 * repacking), weight free, and y = W x for one or several weights reading the
 * same activations. kernels/cuda/ops_matmul.cu calls these from its struct
 * cs_backend entries (weight_upload, weight_free, matmul); tools/bench.c and
 * tests/gpu/test_matmul call them directly.
 *
 * Every pointer is device memory unless marked host. Every function works on
 * the calling thread's current CUDA device (the caller does cudaSetDevice) and
 * queues its work on `stream` (NULL: the legacy default stream). Errors are
 * logged once here and returned as CS_ECUDA / CS_ENOMEM / CS_EINVAL /
 * CS_EUNSUPPORTED (common/status.h).
 *
 * Device layouts (what weight_upload leaves behind w->data / w->aux)
 * - Q8_0: rows padded to a multiple of 32 ("groups" of 32 rows, padding rows
 *   are zero). Quants: int8 [group][block][half][lane][16], i.e. 1024
 *   contiguous bytes per (group, 32-value block), half h holding values
 *   16h..16h+15 of row 32*group+lane. Scales (w->aux, inside the same
 *   allocation): fp16 [group][block][lane]. w->type stays CS_DTYPE_Q8_0.
 * - F16: fp16 [n_out][n_in] (as in the file); w->type CS_DTYPE_F16.
 * - F32 and BF16: fp32 [n_out][n_in] (BF16 is widened exactly at upload, as
 *   sm_70 has no bf16 math); w->type becomes CS_DTYPE_F32.
 * w->bytes is the size of the one allocation behind w->data.
 *
 * Numerics (the contract the CPU int8 path can reproduce bit for bit)
 * - Activations are quantized once per call to Q8_1 blocks of 32 values
 *   (kernels/cpu/quant.h's rule): amax = max |x|, d = amax / 127 (fp32),
 *   q = round-half-away-from-zero(x / d) with a correctly rounded division,
 *   q = 0 when amax == 0.
 * - Q8_0 output element y[t][r]: the segmented order of kernels/numerics.h
 *   (per segment of 32 blocks p = fma(s, (float)isum, p) in block order,
 *   s = fp32(d_w[r][b]) * d_x[t][b]; y = sum of the p in segment order; every
 *   other operation rounded separately). Every kernel (plain
 *   and segmented GEMV for few tokens, GEMM for many) follows this order, so
 *   y[t] is bitwise independent of n_tokens and of the other tokens and
 *   weights in the call.
 * - F16/F32 weights use fp32 x directly: per output a fixed-order sum (lane
 *   l of a warp sums k = l, l+32, ... with FMA, then a fixed xor-shuffle
 *   tree), the same for every n_tokens; not bit-equal to a CPU loop. */
#ifndef CS_CUDA_MATMUL_H
#define CS_CUDA_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "../ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;  /* = cudaStream_t, so C callers need no CUDA header */

/* Largest number of weights one cuda_matmul call may take. */
#define CUDA_MATMUL_MAX_WEIGHTS 8

/* Upload host_data (ggml layout, e.g. the GGUF mmap; host memory) of a
 * type (CS_DTYPE_Q8_0, F16, F32 or BF16) matrix of n_out rows of n_in values
 * into a new device allocation in the layout above, filling *w. Q8_0 needs
 * n_in % 32 == 0. The repack runs on the GPU through a bounded staging
 * buffer; the function returns once the upload is complete (host_data may be
 * unmapped afterwards). Returns CS_OK, CS_EINVAL (bad shape), CS_EUNSUPPORTED
 * (type), CS_ENOMEM (device memory) or CS_ECUDA; on error *w is zeroed. */
int cuda_weight_upload(struct cs_weight *w, uint32_t type, int64_t n_in, int64_t n_out,
                       const void *host_data, struct CUstream_st *stream);

/* The same, calling progress(progress_ctx, bytes) after each piece of host
 * data it has read (64 MiB pieces; progress may be NULL). */
int cuda_weight_upload_progress(struct cs_weight *w, uint32_t type, int64_t n_in, int64_t n_out,
                                const void *host_data, struct CUstream_st *stream,
                                void (*progress)(void *ctx, uint64_t bytes_read),
                                void *progress_ctx);

/* Free what cuda_weight_upload allocated and zero *w; NULL-safe, idempotent. */
void cuda_weight_free(struct cs_weight *w);

/* Scratch bytes cuda_matmul needs for n_tokens activations of n_in values
 * (the Q8_1 copy of x). Allocate once for the largest n_in * n_tokens. */
size_t cuda_matmul_scratch_bytes(int64_t n_in, int n_tokens);

/* ys[i] = ws[i] x for i < n (n <= CUDA_MATMUL_MAX_WEIGHTS): x is fp32
 * [n_tokens][n_in] (all ws[i] share n_in), ys[i] fp32 [n_tokens][ws[i]->n_out].
 * Weights of one type are fused into one launch over their concatenated rows;
 * x is quantized once into scratch (>= cuda_matmul_scratch_bytes bytes,
 * device memory, may be NULL when no weight is Q8_0). Asynchronous on stream.
 * Returns CS_OK, CS_EINVAL (shapes, scratch too small) or CS_ECUDA (launch
 * error, logged). */
int cuda_matmul(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                int n_tokens, void *scratch, size_t scratch_bytes, struct CUstream_st *stream);

/* cuda_matmul with each output scaled by scale[t] (device [n_tokens]; NULL:
 * cuda_matmul): ops.h matmul_scaled, the row norm applied after the dot,
 * each segment's partial scaled before it is added (kernels/numerics.h). */
int cuda_matmul_scaled(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                       const float *scale, int n_tokens, void *scratch, size_t scratch_bytes,
                       struct CUstream_st *stream);

/* Quantize x fp32 [n_tokens][n_in] (n_in % 32 == 0) to Q8_1 in scratch:
 * int8 quants [n_tokens][n_in] at offset 0, then fp32 scales
 * [n_tokens][n_in / 32] at offset cuda_q8_1_scales_offset(n_in, n_tokens).
 * cuda_matmul does this itself; exposed for tests. */
int cuda_quantize_q8_1(void *scratch, const float *x, int64_t n_in, int n_tokens,
                       struct CUstream_st *stream);
size_t cuda_q8_1_scales_offset(int64_t n_in, int n_tokens);
/* Where cuda_quantize_pro's ADD_RMSNORM leaves the n_tokens row scales in
 * scratch (after the Q8_1 scales; cuda_matmul_scratch_bytes counts them). */
size_t cuda_row_scale_offset(int64_t n_in, int n_tokens);

/* Kernel choice for Q8_0, for benches and tests: CUDA_MM_AUTO picks by shape
 * and n_tokens (all choices give bitwise equal results). */
enum cuda_mm_kernel { CUDA_MM_AUTO = 0, CUDA_MM_GEMV = 1, CUDA_MM_GEMM = 2, CUDA_MM_GEMV_SEG = 3 };

/* Free the segmented GEMV's workspace kept for stream (call before
 * destroying the stream; a later call on it allocates again). */
void cuda_matmul_release_stream(struct CUstream_st *stream);

/* What a fused one-token GEMV computes from its input x while it quantizes
 * it, each exactly as the named op does (the same device code), so the
 * product is bitwise that op then cuda_matmul. */
enum cuda_mm_pro_kind {
    CUDA_MM_PRO_NONE = 0,
    CUDA_MM_PRO_SWIGLU = 1,        /* silu(x) * aux: k_silu_mul (FFN down) */
    CUDA_MM_PRO_GATED_RMSNORM = 2, /* per head: rmsnorm(x) * norm_w * silu(aux): k_gated_rmsnorm
                                    * (GDN output; head_dim 128 only) */
    CUDA_MM_PRO_SIGMOID_GATE = 3,  /* x * sigmoid(aux[h * aux_head_stride + d]): k_sigmoid_gate
                                    * (attention output) */
    CUDA_MM_PRO_ADD_RMSNORM = 4    /* rmsnorm(x + aux) * norm_w over the whole row (n_in <=
                                    * 8192), x + aux also written to x_out: k_add_rmsnorm
                                    * then matmul_scaled (the input projections after a
                                    * residual add; the row's scale applied after the dot) */
};
struct cuda_mm_pro {
    int kind;
    const float *aux;     /* u, z, the gate, or the residual's y (one token) */
    const float *norm_w;  /* GATED_RMSNORM: [head_dim]; ADD_RMSNORM: [n_in] */
    int head_dim;
    int aux_head_stride;  /* SIGMOID_GATE */
    float eps;            /* GATED_RMSNORM, ADD_RMSNORM */
    float *x_out;         /* ADD_RMSNORM: x + aux [n_in], overlapping neither x nor aux (other
                           * blocks still read them); each value written by one block */
    int aux_token_stride; /* SIGMOID_GATE over several tokens (cuda_matmul_pro_tokens) */
    /* An epilogue on part 0 (cuda_matmul_pro_n only, one decode token): the
     * GDN's conv1d_silu (conv.cu k_conv1d_step, the same expressions) on each
     * of its conv_dim rows as the row is written: ys[0][c] = silu(conv of the
     * slot's 3 stored columns then the row's value), and the slot's columns
     * shift by one. NULL conv_w: none. */
    const float *conv_w;        /* [conv_dim][4] */
    float *conv_state;          /* [n_slots][3][conv_dim] */
    const int32_t *conv_slot;   /* device: [0] is the token's slot */
    int conv_n_slots;
    int conv_dim;               /* = ys[0]'s rows */
};

/* y = w pro(x) for one token, fused into the segmented GEMV. Returns
 * CS_EUNSUPPORTED, having launched nothing, when that kernel does not apply
 * (not Q8_0, K of one segment, too many rows, a head size the prologue does
 * not take, or its workspace cannot grow while capturing): the caller then
 * runs the op and the matmul. */
int cuda_matmul_pro_1(float *y, const struct cs_weight *w, const float *x,
                      const struct cuda_mm_pro *pro, struct CUstream_st *stream);

/* ys[i] = ws[i] pro(x) for i < n (n <= CUDA_MATMUL_MAX_WEIGHTS, all Q8_0
 * of one n_in), one token, one launch: cuda_matmul_pro_1 over several
 * weights (as cuda_matmul fuses them). The same CS_EUNSUPPORTED cases, and
 * any weight not Q8_0. */
int cuda_matmul_pro_n(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                      const struct cuda_mm_pro *pro, struct CUstream_st *stream);

/* ys[i] = ws[i] pro(x) for n_tokens tokens that take the GEMM (a prompt):
 * pro(x) computed and quantized to Q8_1 into scratch (>=
 * cuda_matmul_scratch_bytes) in one pass (cuda_quantize_pro), where the op
 * and the quantization would each pass over the activations. x is [n_tokens]
 * [n_in]; aux and x_out the same (SIGMOID_GATE: aux_token_stride apart), z
 * of GATED_RMSNORM [n_tokens][n_in] by heads. Bitwise the op then
 * cuda_matmul. Returns CS_EUNSUPPORTED, having launched nothing, when it
 * does not apply: a weight not Q8_0, few enough tokens for the GEMV, n_in
 * not a multiple of 128 (8192 at most for ADD_RMSNORM), a head size other
 * than 128 (GATED_RMSNORM), x_out overlapping x or aux. */
int cuda_matmul_pro_tokens(int n, float *const *ys, const struct cs_weight *const *ws,
                           const float *x, int n_tokens, const struct cuda_mm_pro *pro,
                           void *scratch, size_t scratch_bytes, struct CUstream_st *stream);

/* pro(x) over n_tokens tokens quantized to Q8_1 into scratch (the layout of
 * cuda_quantize_q8_1); the ADD_RMSNORM sum also written to x_out, its
 * (x + aux) * norm_w quantized and the rows' scales left in scratch at
 * cuda_row_scale_offset (cuda_matmul_pro_tokens applies them). The
 * checks and CS_EUNSUPPORTED cases of cuda_matmul_pro_tokens (quantize_pro.cu). */
int cuda_quantize_pro(void *scratch, const float *x, int64_t n_in, int n_tokens,
                      const struct cuda_mm_pro *pro, struct CUstream_st *stream);

/* cuda_matmul_pro_1 with the SwiGLU prologue: y = w (silu(g) * u). */
int cuda_matmul_swiglu_1(float *y, const struct cs_weight *w, const float *g, const float *u,
                         struct CUstream_st *stream);

/* out = silu(g) * u over n values (out may equal g), on stream. */
int cuda_silu_mul(float *out, const float *g, const float *u, size_t n, struct CUstream_st *stream);

/* cuda_matmul with the Q8_0 kernel forced (tests: GEMV == GEMM bitwise). */
int cuda_matmul_with(int n, float *const *ys, const struct cs_weight *const *ws, const float *x,
                     int n_tokens, void *scratch, size_t scratch_bytes, struct CUstream_st *stream,
                     enum cuda_mm_kernel kernel);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* The Q8_1 rule of one value v of a 32-value block, for every kernel that
 * quantizes (quantize.cu, the GEMV's fused prologue): all 32 lanes of a warp
 * call it with their value; returns q, sets *d. Bitwise the same everywhere. */
static __device__ __forceinline__ int cuda_q8_1_quantize_lane(float v, float *d)
{
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    *d = __fdiv_rn(amax, 127.0f);
    if (!(amax > 0.0f))
        return 0;
    int q = (int)roundf(__fdiv_rn(v, *d));
    return q > 127 ? 127 : (q < -127 ? -127 : q);
}
#endif
#endif
