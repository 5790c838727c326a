/* quant.h - Q8_0 (weights, ggml layout) and Q8_1 (activations) blocks and
 * their quantize/dequantize helpers, used by the CPU matmul and by tests.
 *
 * Q8_0 (ggml, 34 bytes): fp16 scale d, then 32 int8; value = d * q.
 * Q8_1 (activations of the int8 matmul, this project's layout, 40 bytes):
 * fp32 scale d = amax / 127, fp32 s = d * sum(q) (unused by Q8_0 dots, kept
 * for llama.cpp parity), 32 int8 q = round-half-away-from-zero(x / d), or all
 * 0 when amax == 0. The scale is NOT rounded to fp16, matching the GPU path. */
#ifndef CS_KERNELS_CPU_QUANT_H
#define CS_KERNELS_CPU_QUANT_H

#include <stdint.h>

#define QUANT_BLOCK 32

struct block_q8_0 {
    uint16_t d;                 /* fp16 bits */
    int8_t qs[QUANT_BLOCK];
};

struct block_q8_1 {
    float d;
    float s;
    int8_t qs[QUANT_BLOCK];
};

_Static_assert(sizeof(struct block_q8_0) == 34, "Q8_0 block must be 34 bytes");

/* Quantize n values (n % 32 == 0) of x into n/32 Q8_0 blocks: d = amax / 127
 * rounded to fp16, q = round-half-away(x / d) (d computed in fp32). */
void quant_q8_0_quantize_row(struct block_q8_0 *out, const float *x, int64_t n);

/* Dequantize n values (n % 32 == 0) of Q8_0 blocks: out = fp32(d) * q. */
void quant_q8_0_dequantize_row(float *out, const struct block_q8_0 *in, int64_t n);

/* Quantize n values (n % 32 == 0) of x into n/32 Q8_1 blocks (see above). */
void quant_q8_1_quantize_row(struct block_q8_1 *out, const float *x, int64_t n);

/* Integer dot of one Q8_0 row with one Q8_1 row of n values (n % 32 == 0):
 * sum over blocks b = 0, 1, ... in order, in fp32, of
 * (fp32(d_w[b]) * d_x[b]) * (float)isum[b], isum the exact int32 block dot. */
float quant_q8_0_q8_1_dot(const struct block_q8_0 *w, const struct block_q8_1 *x, int64_t n);
/* The same with each segment's sum times r before it is added (kernels/
 * numerics.h: a row norm's scale applied after the dot; r = 1: the above). */
float quant_q8_0_q8_1_dot_scaled(const struct block_q8_0 *w, const struct block_q8_1 *x,
                                 int64_t n, float r);

#endif
