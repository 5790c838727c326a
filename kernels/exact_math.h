/* exact_math.h - the scalar functions the CPU and CUDA backends both use
 * before an activation is quantized to int8 (exp, log1p, sigmoid, silu,
 * softplus, the norms' scale), written as one fixed sequence of correctly
 * rounded IEEE operations (add, sub, mul, fma, div, sqrt) and integer bit
 * operations, so that both backends produce the same bits.
 *
 * Why: the int8 path quantizes the activations before every matrix, and a
 * last-bit difference before a rounding can flip an int8 value by one step,
 * which the next layers then amplify (docs/VALIDATION.md, "Why the tiny
 * preset fails item 9"). The GPU build runs --use_fast_math, where expf,
 * x / y and sqrtf become hardware approximations (MUFU) whose bits the CPU
 * cannot reproduce; the XM_* operations below are the explicit intrinsics
 * that fast math leaves alone on the GPU and plain C operations on the CPU
 * (the CPU kernels compile with -ffp-contract=off, so a * b + c stays two
 * roundings there unless written as XM_FMA).
 *
 * Accuracy: xm_exp and xm_log within 2 ulp on their domains (checked against
 * libm in tests/kernels/test_exact_math.c). Denormals: the GPU flushes them
 * (fast math implies -ftz=true), the CPU does not; xm_exp returns 0 below
 * -87 so that it never produces one itself.
 *
 * Include from C (static inline functions) or from CUDA device code
 * (__device__ functions); nothing here allocates or fails. */
#ifndef CS_KERNELS_EXACT_MATH_H
#define CS_KERNELS_EXACT_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define XM_FN static __device__ __forceinline__
#define XM_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define XM_MUL(a, b) __fmul_rn((a), (b))
#define XM_ADD(a, b) __fadd_rn((a), (b))
#define XM_SUB(a, b) __fsub_rn((a), (b))
#define XM_DIV(a, b) __fdiv_rn((a), (b))
#define XM_SQRT(a) __fsqrt_rn(a)
XM_FN int32_t xm_bits(float x) { return __float_as_int(x); }
XM_FN float xm_float(int32_t i) { return __int_as_float(i); }
#else
#include <math.h>
#include <string.h>
#define XM_FN static inline
#define XM_FMA(a, b, c) fmaf((a), (b), (c))
#define XM_MUL(a, b) ((float)(a) * (float)(b))
#define XM_ADD(a, b) ((float)(a) + (float)(b))
#define XM_SUB(a, b) ((float)(a) - (float)(b))
#define XM_DIV(a, b) ((float)(a) / (float)(b))
#define XM_SQRT(a) sqrtf(a)
XM_FN int32_t xm_bits(float x)
{
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i;
}
XM_FN float xm_float(int32_t i)
{
    float x;
    memcpy(&x, &i, sizeof x);
    return x;
}
#endif

/* e^x. Below -87 (e^-87 = 1.6e-38, just above FLT_MIN) it is 0, above
 * 88.72 +inf, NaN stays NaN. x = n ln2 + r with n = rint(x / ln2) by the
 * 1.5 * 2^23 shifter, r by a two-constant Cody-Waite reduction (|r| <=
 * 0.347), e^r by its Taylor polynomial to degree 7 (truncation < 6e-9
 * relative), then two exact power-of-two scalings. */
XM_FN float xm_exp(float x)
{
    if (!(x > -87.0f))
        return x != x ? x : 0.0f;
    if (x > 88.72283f)
        return xm_float(0x7f800000);   /* +inf */
    const float shifter = 12582912.0f;
    float t = XM_FMA(x, 1.44269502f, shifter);
    float n = XM_SUB(t, shifter);
    float r = XM_FMA(n, -0.693145751953125f, x);   /* ln2 high part: 16 significant bits */
    r = XM_FMA(n, -1.42860677e-06f, r);             /* ln2 - high part */
    float p = 1.98412698e-04f;                      /* 1/5040 */
    p = XM_FMA(p, r, 1.38888889e-03f);              /* 1/720 */
    p = XM_FMA(p, r, 8.33333333e-03f);              /* 1/120 */
    p = XM_FMA(p, r, 4.16666667e-02f);              /* 1/24 */
    p = XM_FMA(p, r, 1.66666667e-01f);              /* 1/6 */
    p = XM_FMA(p, r, 0.5f);
    p = XM_FMA(p, r, 1.0f);
    p = XM_FMA(p, r, 1.0f);
    int32_t k = xm_bits(t) - xm_bits(shifter);      /* n as an integer, -126..128 */
    int32_t k1 = k / 2, k2 = k - k1;                /* each within -63..64 */
    p = XM_MUL(p, xm_float((k1 + 127) << 23));
    return XM_MUL(p, xm_float((k2 + 127) << 23));
}

/* xm_exp for the softmax's arguments x <= 0 (a score minus a running
 * maximum), with the same bits as xm_exp there, in fewer instructions: no
 * overflow test and one scaling (n >= -126, so 2^n is a normal float; for
 * x >= -87 the result is at least 1.6e-38, a normal too, so both products
 * are exact in both functions). NaN propagates; -inf and x < -87 give 0. */
/* xm_exp_nonpos's polynomial and scaling for any x, without the range
 * test: equal to xm_exp_nonpos(x) wherever x >= -87 (or NaN); a value of no
 * meaning below. For callers that select 0 themselves without a branch
 * (kernels/cuda/attention_prefill_q8.cuh). The exponent is shifted as
 * unsigned so that out-of-range x stay defined behaviour. */
XM_FN float xm_exp_nonpos_poly(float x)
{
    const float shifter = 12582912.0f;
    float t = XM_FMA(x, 1.44269502f, shifter);
    float n = XM_SUB(t, shifter);
    float r = XM_FMA(n, -0.693145751953125f, x);
    r = XM_FMA(n, -1.42860677e-06f, r);
    float p = 1.98412698e-04f;
    p = XM_FMA(p, r, 1.38888889e-03f);
    p = XM_FMA(p, r, 8.33333333e-03f);
    p = XM_FMA(p, r, 4.16666667e-02f);
    p = XM_FMA(p, r, 1.66666667e-01f);
    p = XM_FMA(p, r, 0.5f);
    p = XM_FMA(p, r, 1.0f);
    p = XM_FMA(p, r, 1.0f);
    uint32_t k = (uint32_t)xm_bits(t) - (uint32_t)xm_bits(shifter);
    return XM_MUL(p, xm_float((int32_t)((k + 127u) << 23)));
}

XM_FN float xm_exp_nonpos(float x)
{
    if (x < -87.0f)
        return 0.0f;
    return xm_exp_nonpos_poly(x);
}

/* The int8 quantization of a vector for attention's DP4A scores (prefill
 * over an F16 KV cache: kernels/cuda/attention_prefill.cu and its CPU
 * mirror): one scale per vector, d = amax / 127, q = rint(x * (127 / amax))
 * to nearest even by the 1.5 * 2^23 shifter in one fused rounding (|q| <=
 * 127). An all-zero vector has d = 0 and q = 0. */
XM_FN float xm_q8_scale(float amax) { return XM_DIV(amax, 127.0f); }
XM_FN float xm_q8_inv_scale(float amax) { return amax > 0.0f ? XM_DIV(127.0f, amax) : 0.0f; }
XM_FN int32_t xm_q8_round(float x, float inv_scale)
{
    return xm_bits(XM_FMA(x, inv_scale, 12582912.0f)) - 0x4B400000;
}

/* The same for a vector of non-negative values on 0..255 (attention's P
 * weights in its DP4A P.V): d = amax / 255, q = xm_q8_round(x, 255 / amax)
 * (x * (255 / amax) stays below 255.5: one rounding of an error under 2^-16). */
XM_FN float xm_u8_scale(float amax) { return XM_DIV(amax, 255.0f); }
XM_FN float xm_u8_inv_scale(float amax) { return amax > 0.0f ? XM_DIV(255.0f, amax) : 0.0f; }

/* ln x for a positive normal finite x (the only inputs it gets here), as
 * fdlibm's logf: x = (1 + f) 2^k with 1 + f in [sqrt(1/2), sqrt(2)); s = f /
 * (2 + f), R = the series of 2 atanh(s) - 2s in z = s^2 to z^5, then
 * ln(1 + f) = f - (f^2/2 - s (f^2/2 + R)), which keeps f's bits exact. */
XM_FN float xm_log(float x)
{
    int32_t ix = xm_bits(x);
    int32_t k = (ix - 0x3f3504f3) >> 23;
    float f = XM_SUB(xm_float(ix - (k << 23)), 1.0f);   /* exact */
    float s = XM_DIV(f, XM_ADD(2.0f, f));
    float z = XM_MUL(s, s);
    float r = 1.81818182e-01f;                            /* 2/11 */
    r = XM_FMA(r, z, 2.22222222e-01f);                    /* 2/9 */
    r = XM_FMA(r, z, 2.85714286e-01f);                    /* 2/7 */
    r = XM_FMA(r, z, 4.00000000e-01f);                    /* 2/5 */
    r = XM_FMA(r, z, 6.66666667e-01f);                    /* 2/3 */
    r = XM_MUL(r, z);
    float hfsq = XM_MUL(XM_MUL(0.5f, f), f);
    float lm = XM_SUB(f, XM_SUB(hfsq, XM_MUL(s, XM_ADD(hfsq, r))));
    float kf = (float)k;
    float hi = XM_FMA(kf, 0.693145751953125f, lm);
    return XM_FMA(kf, 1.42860677e-06f, hi);
}

/* ln(1 + e) for e >= 0 (finite): ln(u) e / (u - 1) with u = 1 + e rounded,
 * which cancels the rounding of u (the classic log1p correction). */
XM_FN float xm_log1p_pos(float e)
{
    float u = XM_ADD(1.0f, e);
    if (u == 1.0f)
        return e;
    return XM_MUL(xm_log(u), XM_DIV(e, XM_SUB(u, 1.0f)));
}

/* torch's softplus (beta 1, threshold 20). */
XM_FN float xm_softplus(float x)
{
    return x > 20.0f ? x : xm_log1p_pos(xm_exp(x));
}

XM_FN float xm_sigmoid(float x)
{
    return XM_DIV(1.0f, XM_ADD(1.0f, xm_exp(-x)));
}

XM_FN float xm_silu(float x)
{
    return XM_DIV(x, XM_ADD(1.0f, xm_exp(-x)));
}

/* The RMSNorm scale from a row's sum of squares ss over n values:
 * 1 / sqrt(ss * (1/n) + eps), 1/n rounded once, the product and eps fused. */
XM_FN float xm_rms_scale(float ss, int n, float eps)
{
    float m = XM_FMA(ss, XM_DIV(1.0f, (float)n), eps);
    return XM_DIV(1.0f, XM_SQRT(m));
}

/* The L2-norm scale of GDN's q and k: 1 / sqrt(ss + eps). */
XM_FN float xm_l2_scale(float ss, float eps)
{
    return XM_DIV(1.0f, XM_SQRT(XM_ADD(ss, eps)));
}

#endif
