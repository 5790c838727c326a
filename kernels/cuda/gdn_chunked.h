/* gdn_chunked.h - the C entry of kernels/cuda/gdn_chunked.cu: the gated
 * delta rule of kernels/ops.h (`gdn`) in the chunked (WY) form, FP32, a
 * prefill candidate measured against the sequential scan of gdn.cu
 * (tests/gpu/test_gdn_chunked.c). The gdn op (gdn.cu) hands it the
 * sequences with at least GDN_CHUNKED_MIN_TOKENS tokens in a step, where it
 * measured faster on an H200 (9B shape 1.6x, 27B 1.05x at 512-8,192 tokens);
 * shorter ones stay with the scan.
 *
 * cuda_op_gdn_chunked has exactly the arguments and semantics of
 * cuda_op_gdn (the `gdn` entry of struct cs_backend on CUDA): same inputs,
 * same recurrent-state slots read and written, out [t][Hv * 128]; equal to
 * it in exact arithmetic, not bit-equal. It returns CS_EUNSUPPORTED (nothing
 * run) on a device whose opt-in shared memory per block is under 86,016 bytes
 * (sm_6x) or for key/value dims other than 128. */
#ifndef CS_CUDA_GDN_CHUNKED_H
#define CS_CUDA_GDN_CHUNKED_H

#include <cuda_runtime_api.h>

#include "../ops.h"

#ifdef __cplusplus
extern "C" {
#endif

int cuda_op_gdn_chunked(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                        const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                        struct cs_gdn_layer *st, const struct cs_batch *b);

/* cuda_op_gdn_chunked for the sequences with at least min_len tokens in
 * this step only (the others are left to the scan: gdn.cu). */
int cuda_gdn_chunked_from(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                          const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                          struct cs_gdn_layer *st, const struct cs_batch *b, int min_len);

/* The sequential scan (gdn.cu) for every sequence of the batch, whatever its
 * length: what the chunked form is compared with and timed against. */
int cuda_gdn_scan(struct cs_backend *be, float *out, const float *y, const float *beta_raw,
                  const float *alpha_raw, const float *a, const float *dt_bias, float eps,
                  struct cs_gdn_layer *st, const struct cs_batch *b);

/* The checks every GDN entry makes (gdn.cu): the batch is the step's, and
 * the head sizes are the kernels' (128 x 128). op names the caller in logs. */
struct cuda_ctx;
int cuda_gdn_check(struct cuda_ctx *c, const struct cs_gdn_layer *st, const struct cs_batch *b,
                   const char *op);

/* The CUDA backend's compute stream, on which every op is queued (tests
 * time ops with CUDA events recorded on it). */
cudaStream_t cuda_gdn_chunked_stream(struct cs_backend *be);

#ifdef __cplusplus
}
#endif
#endif
