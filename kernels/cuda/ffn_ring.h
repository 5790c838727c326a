/* ffn_ring.h - the whole FFN of one decode token as one kernel (ffn_ring.cu,
 * sm_90+): x_out = x + y, n = rmsnorm(x_out) * norm_w, out = W_down
 * (silu(W_gate n) * (W_up n)), bitwise the launches it replaces; optionally
 * with the mixer's output projection y = W_o pro(a) in front, in the same
 * kernel. Includable from C. */
#ifndef CS_CUDA_FFN_RING_H
#define CS_CUDA_FFN_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ops.h"
#include "matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* Whether a new CUDA backend's ffn_add_rmsnorm runs the fused kernel (1) or
 * declines (0, the model's two fused matmuls). Off: in the whole 9B decode
 * step it measured no faster than the two launches (329 against 331 tok/s,
 * docs/PERF.md fourteenth session), and with the output projection in front
 * slower (H100: 224 against 264 tok/s, fifteenth session); the same bits
 * either way. The switch covers both ops. */
#ifndef CS_FFN_RING_DEFAULT
#define CS_FFN_RING_DEFAULT 0
#endif

/* Switch the fused FFN on or off for be (tests and benchmarks compare the
 * two; the bits are the same). A recorded decode-step graph keeps what it
 * was recorded with. */
void cuda_ffn_ring_enable(struct cs_backend *be, bool on);

/* Bytes of the exchange buffer (two sync words, then down's quantized input
 * and the output projection's rows as 8-byte entries) for an FFN of n_ff
 * rows over dim values. It must be zeroed when allocated and then kept
 * between calls (it carries an epoch). */
size_t cuda_ffn_ring_buffer_bytes(int64_t n_ff, int64_t dim);

/* Run the FFN on stream, or CS_EUNSUPPORTED with nothing launched where the
 * kernel does not apply (before sm_90, not Q8_0, shapes not multiples of 32,
 * dim > 8192, x_out overlapping x or y, built with -DCS_FFN_RING=0): the
 * caller then runs the separate ops. out may equal y (the model's pending
 * residual); x_out must not overlap x or y. */
int cuda_ffn_ring(float *out, const struct cs_weight *gate, const struct cs_weight *up,
                  const struct cs_weight *down, float *x_out, const float *x, const float *y,
                  const float *norm_w, int dim, float eps, void *buffer, size_t buffer_bytes,
                  struct CUstream_st *stream);

/* y = wo pro(a) (pro: CUDA_MM_PRO_GATED_RMSNORM or _SIGMOID_GATE of one
 * token, as cuda_matmul_pro_1 takes it), then cuda_ffn_ring on that y, in
 * one kernel: y itself is never stored. Bitwise the fused GEMV of the
 * projection followed by cuda_ffn_ring. CS_EUNSUPPORTED, nothing launched,
 * where cuda_ffn_ring would decline, where wo is not Q8_0 of dim rows with
 * n_in a multiple of 128, for a head size the GEMV's prologue does not take,
 * or where out or x_out overlaps a. */
int cuda_proj_ffn_ring(float *out, const struct cs_weight *wo, const float *a,
                       const struct cuda_mm_pro *pro, const struct cs_weight *gate,
                       const struct cs_weight *up, const struct cs_weight *down, float *x_out,
                       const float *x, const float *norm_w, int dim, float eps, void *buffer,
                       size_t buffer_bytes, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
