/* half.h - fp16 and bf16 <-> fp32 conversions on the host (IEEE, round to
 * nearest even), shared by the GGUF writer, the CPU backend and tools. */
#ifndef CS_HALF_H
#define CS_HALF_H

#include <stdint.h>
#include <string.h>

static inline float cs_fp32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t cs_fp32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float cs_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0)
            return cs_fp32_from_bits(sign);
        /* subnormal: normalise */
        float f = (float)mant * (1.0f / 16777216.0f); /* 2^-24 */
        return sign ? -f : f;
    }
    if (exp == 31)
        return cs_fp32_from_bits(sign | 0x7f800000u | (mant << 13));
    return cs_fp32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t cs_float_to_half(float f)
{
    uint32_t x = cs_fp32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t exp = (x >> 23) & 0xff;
    uint32_t mant = x & 0x7fffff;
    if (exp == 0xff) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half_mant = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half_mant & 1)))
            half_mant++;
        return (uint16_t)(sign | half_mant);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is still correct */
    return (uint16_t)h;
}

static inline float cs_bf16_to_float(uint16_t b)
{
    return cs_fp32_from_bits((uint32_t)b << 16);
}

static inline uint16_t cs_float_to_bf16(float f)
{
    uint32_t x = cs_fp32_to_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
