/* quant.c - Q8_0/Q8_1 quantization, the int8 block dot, and conversion of
 * weight rows of every supported type to fp32 (see quant.h, cpu.h). */
#include "quant.h"

#include "../numerics.h"

#include <math.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "cpu.h"

static float block_amax(const float *x)
{
    float amax = 0.0f;
    for (int i = 0; i < QUANT_BLOCK; i++) {
        float a = fabsf(x[i]);
        if (a > amax)
            amax = a;
    }
    return amax;
}

void quant_q8_0_quantize_row(struct block_q8_0 *out, const float *x, int64_t n)
{
    for (int64_t b = 0; b < n / QUANT_BLOCK; b++) {
        const float *xb = x + b * QUANT_BLOCK;
        float d = block_amax(xb) / 127.0f;
        out[b].d = cs_float_to_half(d);
        for (int i = 0; i < QUANT_BLOCK; i++)
            out[b].qs[i] = d == 0.0f ? 0 : (int8_t)roundf(xb[i] / d);
    }
}

void quant_q8_0_dequantize_row(float *out, const struct block_q8_0 *in, int64_t n)
{
    for (int64_t b = 0; b < n / QUANT_BLOCK; b++) {
        float d = cs_half_to_float(in[b].d);
        const int8_t *restrict q = in[b].qs;
        float *restrict o = out + b * QUANT_BLOCK;
        for (int i = 0; i < QUANT_BLOCK; i++)
            o[i] = d * (float)q[i];
    }
}

void quant_q8_1_quantize_row(struct block_q8_1 *out, const float *x, int64_t n)
{
    for (int64_t b = 0; b < n / QUANT_BLOCK; b++) {
        const float *xb = x + b * QUANT_BLOCK;
        float d = block_amax(xb) / 127.0f;
        int sum = 0;
        for (int i = 0; i < QUANT_BLOCK; i++) {
            int q = d == 0.0f ? 0 : (int)roundf(xb[i] / d);
            out[b].qs[i] = (int8_t)q;
            sum += q;
        }
        out[b].d = d;
        out[b].s = d * (float)sum;
    }
}

float quant_q8_0_q8_1_dot(const struct block_q8_0 *w, const struct block_q8_1 *x, int64_t n)
{
    return quant_q8_0_q8_1_dot_scaled(w, x, n, 1.0f);   /* p * 1 == p: the same bits */
}

float quant_q8_0_q8_1_dot_scaled(const struct block_q8_0 *w, const struct block_q8_1 *x,
                                 int64_t n, float r)
{
    /* kernels/numerics.h: per-segment sums, each times r, added in segment order */
    float total = 0.0f;
    int64_t nb = n / QUANT_BLOCK;
    for (int64_t b0 = 0; b0 < nb; b0 += CS_DOT_SEG_BLOCKS) {
        int64_t b1 = b0 + CS_DOT_SEG_BLOCKS < nb ? b0 + CS_DOT_SEG_BLOCKS : nb;
        float p = 0.0f;
        for (int64_t b = b0; b < b1; b++) {
            int32_t isum = 0;
            for (int i = 0; i < QUANT_BLOCK; i++)
                isum += (int32_t)w[b].qs[i] * (int32_t)x[b].qs[i];
            float s = cs_half_to_float(w[b].d) * x[b].d;
            p = fmaf(s, (float)isum, p);   /* numerics.h: the one fused step */
        }
        total = total + p * r;   /* -ffp-contract=off: the product rounded, then the sum */
    }
    return total;
}

size_t cpu_row_bytes(uint32_t type, int64_t n)
{
    if (n < 0)
        return 0;
    switch (type) {
    case CS_DTYPE_F32: return (size_t)n * 4;
    case CS_DTYPE_F16:
    case CS_DTYPE_BF16: return (size_t)n * 2;
    case CS_DTYPE_Q8_0:
        return n % QUANT_BLOCK ? 0 : (size_t)(n / QUANT_BLOCK) * sizeof(struct block_q8_0);
    default: return 0;
    }
}

void cpu_row_to_float(float *out, const void *row, uint32_t type, int64_t n)
{
    const uint16_t *h = row;
    switch (type) {
    case CS_DTYPE_F32:
        memcpy(out, row, (size_t)n * 4);
        break;
    case CS_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = cs_half_to_float(h[i]);
        break;
    case CS_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = cs_bf16_to_float(h[i]);
        break;
    case CS_DTYPE_Q8_0:
        quant_q8_0_dequantize_row(out, row, n);
        break;
    default:
        memset(out, 0, (size_t)n * 4);
    }
}
