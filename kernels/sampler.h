/* sampler.h - THE definition of token sampling, shared by the CPU and GPU
 * backends so that a seeded request draws the same token on either.
 *
 * It owns: the order of the logit transforms, the tie-breaking rules, the
 * precision of every sum, and the counter-based RNG. kernels/cpu/sample.c is
 * the reference implementation (sampler_sample); kernels/cuda implements the
 * same steps. Change this text and both implementations together.
 *
 * Per row of logits l[0..V) with struct cs_sample_params p (ops.h):
 *
 *  0. Sanitise: NaN becomes -inf, +inf becomes FLT_MAX.
 *  1. logit_bias: l[bias_ids[i]] += bias_vals[i], in list order. Ids outside
 *     [0, V) are ignored (the API layer rejects them first).
 *  2. Repetition penalty r (skipped when r == 1 or r <= 0), CTRL rule, applied
 *     once per DISTINCT id of ctx_tokens: l = l > 0 ? l / r : l * r.
 *  3. Presence/frequency over gen_tokens, per id with count c > 0:
 *     l = l - (presence * 1 + frequency * (float)c). Ids out of range ignored.
 *  4. Allowed mask (when allowed != NULL): bit i is (allowed[i >> 3] >> (i & 7)) & 1
 *     (LSB first); a disallowed id gets l = -inf. If no id is left with a
 *     finite logit, the sampler fails with CS_ERANGE.
 *  5. Log-probabilities of these logits (vLLM convention: after penalties and
 *     bias, before temperature and truncation): m = max l, S = sum over ids in
 *     ascending order of exp(l - m) accumulated in DOUBLE, logprob(i) =
 *     (float)((double)l[i] - m - log(S)). The chosen token's logprob is always
 *     filled; n_top = min(n_logprobs, 20) entries (0 when n_logprobs <= 0) of
 *     the highest logprobs, ties by lower id, in descending order.
 *  6. Greedy when temperature is below FLT_MIN (0, negative, NaN or
 *     subnormal): the id of the largest logit, lowest id on ties.
 *  7. Otherwise, sampling. Every weight is an integer and every sum an exact
 *     uint64 sum, so any order of summing (serial on the CPU, parallel blocks
 *     on a GPU) gives the same value; only steps c and d need the candidate
 *     order, and the draw walks the ids in ascending order.
 *     a. Candidates: the ids with a finite logit. Candidate order: the
 *        order value sampler_order_value(l) (the logit with a subnormal or
 *        -0 read as +0) descending, then id ascending. Each has the scaled
 *        value v_i = sampler_scaled(l_i, T): l / T in IEEE fp32 after that
 *        flush, clamped to +-FLT_MAX, a subnormal result flushed to +0.
 *        Scaling is monotone, so v never increases along the order; v_0 =
 *        the v of the first candidate. The logits array keeps the values of
 *        step 4 (temperature is not written back).
 *     b. Weights: w_i = sampler_weight(v_i - v_0) (fp32 subtraction), an
 *        integer in [0, 2^32]: 2^32 * exp(v_i - v_0) to ~1e-7 relative, 0
 *        once that is below ~1 (v_i - v_0 < -23), 2^32 for v_i = v_0. It is a
 *        fixed sequence of IEEE fp32 operations, no fused multiply-add, so
 *        every backend computes the same integer.
 *     c. top_k > 0: keep the first top_k candidates in candidate order.
 *     d. top_p < 1: with W = the sum of w over the kept, keep the shortest
 *        prefix (candidate order) of the kept whose sum of w reaches
 *        sampler_top_p_target(top_p, W) = ceil(P * W / 2^24), where P is
 *        top_p * 2^24 truncated to an integer; at least one candidate.
 *     e. min_p > 0: drop the kept ids with w_i < sampler_min_p_floor(min_p)
 *        = ceil(min_p * 2^32) (at most 2^32, so the first candidate stays).
 *     f. Draw: with W = the sum of w over the kept (>= 2^32),
 *        r = floor(sampler_bits(seed, draw) * W / 2^64), so 0 <= r < W; the
 *        token is the kept id, in ASCENDING ID order, at which the running
 *        sum of w first exceeds r.
 *     Why this form: a GPU computes b, e and f over the whole vocabulary in
 *     parallel and still agrees with the CPU bit for bit; fp32 running sums
 *     in candidate order (the earlier definition) had to be serial and made
 *     the GPU send flat rows back to the host.
 *
 * RNG (counter based: a draw depends only on seed and draw index, so replay,
 * batching and the backend do not change it):
 *     splitmix64(x): z = x + 0x9E3779B97F4A7C15;
 *                    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *                    z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *                    return z ^ (z >> 31);           (all mod 2^64)
 *     bits = splitmix64(seed ^ splitmix64(draw + 0x632BE59BD9B4E019))
 */
#ifndef CS_SAMPLER_H
#define CS_SAMPLER_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops.h"

#ifdef __CUDACC__
#define SAMPLER_HD __host__ __device__
#else
#define SAMPLER_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The splitmix64 finaliser with its golden-ratio increment (see above). */
static inline SAMPLER_HD uint64_t sampler_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The 64 random bits of draw number `draw` of a sequence seeded with seed. */
static inline SAMPLER_HD uint64_t sampler_bits(uint64_t seed, uint64_t draw)
{
    return sampler_splitmix64(seed ^ sampler_splitmix64(draw + 0x632BE59BD9B4E019ull));
}

/* IEEE fp32 operations that a CUDA build (--use_fast_math) must not turn
 * into approximations or fused multiply-adds; on the host kernels/cpu/sample.c
 * is compiled with -ffp-contract=off for the same reason. */
#ifdef __CUDA_ARCH__
#define SAMPLER_MUL(a, b) __fmul_rn((a), (b))
#define SAMPLER_ADD(a, b) __fadd_rn((a), (b))
#define SAMPLER_SUB(a, b) __fsub_rn((a), (b))
#define SAMPLER_DIV(a, b) __fdiv_rn((a), (b))
#else
#define SAMPLER_MUL(a, b) ((a) * (b))
#define SAMPLER_ADD(a, b) ((a) + (b))
#define SAMPLER_SUB(a, b) ((a) - (b))
#define SAMPLER_DIV(a, b) ((a) / (b))
#endif

#define SAMPLER_FLT_MIN 1.17549435e-38f
#define SAMPLER_FLT_MAX 3.40282347e+38f
#define SAMPLER_W_ONE (1ull << 32)   /* the weight of the first candidate */

/* Step 6: true when temperature T means greedy (below FLT_MIN, or NaN). */
static inline SAMPLER_HD bool sampler_is_greedy(float T)
{
    return !(T >= SAMPLER_FLT_MIN);
}

/* floor(a * b / 2^64). */
static inline SAMPLER_HD uint64_t sampler_mulhi(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
    return __umul64hi(a, b);
#else
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#endif
}

/* Step 7a: the order value of a finite logit: subnormals and -0 are +0 (a
 * GPU with flush-to-zero reads a subnormal as 0: so do all backends). */
static inline SAMPLER_HD float sampler_order_value(float l)
{
    return l > -SAMPLER_FLT_MIN && l < SAMPLER_FLT_MIN ? 0.0f : l;
}

/* Step 7a: the scaled value of a finite logit l at temperature T (not greedy). */
static inline SAMPLER_HD float sampler_scaled(float l, float T)
{
    if (l > -SAMPLER_FLT_MIN && l < SAMPLER_FLT_MIN)
        return 0.0f;
    float v = SAMPLER_DIV(l, T);
    if (v > SAMPLER_FLT_MAX)
        return SAMPLER_FLT_MAX;
    if (v < -SAMPLER_FLT_MAX)
        return -SAMPLER_FLT_MAX;
    return v > -SAMPLER_FLT_MIN && v < SAMPLER_FLT_MIN ? 0.0f : v;
}

/* Step 7b: the weight of a candidate at x = v - v_0 <= 0 (fp32): 2^32 exp(x)
 * truncated to an integer. exp by Cody-Waite reduction, x = k ln2 + r with
 * |r| <= ln2/2 (ln2 split in a 15-bit head, so k * head is exact), and the
 * degree-7 Taylor polynomial of exp(r) (error ~5e-9 relative, below fp32's
 * rounding), all in IEEE fp32. Every intermediate is a normal number. */
static inline SAMPLER_HD uint64_t sampler_weight(float x)
{
    if (!(x > -23.0f))
        return 0;   /* 2^32 e^-23 < 1; also -inf and NaN */
    if (x > -1.49011612e-08f)
        return SAMPLER_W_ONE;   /* |x| < 2^-26: exp(x) rounds to 1 */
    float k = rintf(SAMPLER_MUL(x, 1.44269502f));   /* round(x / ln2), -33..0 */
    float r = SAMPLER_SUB(SAMPLER_SUB(x, SAMPLER_MUL(k, 0.693145752f)),   /* 0x3f317200 */
                          SAMPLER_MUL(k, 1.42860677e-06f));               /* 0x35bfbe8e */
    float p = 1.98412698e-04f;                     /* 1/7! */
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 1.38888889e-03f);   /* 1/6! */
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 8.33333377e-03f);   /* 1/5! */
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 4.16666679e-02f);   /* 1/4! */
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 1.66666672e-01f);   /* 1/3! */
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 0.5f);
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 1.0f);
    p = SAMPLER_ADD(SAMPLER_MUL(p, r), 1.0f);
    /* 2^(k + 32) exactly: k + 32 is in -1..32 */
    uint32_t scale_bits = (uint32_t)((int)k + 32 + 127) << 23;
#ifdef __CUDA_ARCH__
    float scale = __uint_as_float(scale_bits);
#else
    union {
        uint32_t u;
        float f;
    } cv;
    cv.u = scale_bits;
    float scale = cv.f;
#endif
    float w = SAMPLER_MUL(p, scale);
    return w >= 4294967296.0f ? SAMPLER_W_ONE : (uint64_t)w;
}

/* Step 7d: the weight the kept prefix must reach, ceil(P * total / 2^24)
 * with P = top_p * 2^24 truncated (top_p in (0, 1)), at least 1. */
static inline SAMPLER_HD uint64_t sampler_top_p_target(float top_p, uint64_t total)
{
    uint64_t P = top_p > 0.0f ? (uint64_t)SAMPLER_MUL(top_p, 16777216.0f) : 0;
    P = P > (1u << 24) ? (1u << 24) : P;
    uint64_t lo = P * total, hi = sampler_mulhi(P, total);
    uint64_t lo2 = lo + 0xffffffull;
    hi += lo2 < lo;
    uint64_t t = (hi << 40) | (lo2 >> 24);
    return t > 0 ? t : 1;
}

/* Step 7e: the smallest weight min_p keeps, ceil(min_p * 2^32), at most 2^32. */
static inline SAMPLER_HD uint64_t sampler_min_p_floor(float min_p)
{
    if (!(min_p > 0.0f))
        return 0;
    if (!(min_p < 1.0f))
        return SAMPLER_W_ONE;
    return (uint64_t)ceilf(SAMPLER_MUL(min_p, 4294967296.0f));
}

/* Step 7f: the point r in [0, total) of draw `draw`. */
static inline SAMPLER_HD uint64_t sampler_draw_point(uint64_t seed, uint64_t draw, uint64_t total)
{
    return sampler_mulhi(sampler_bits(seed, draw), total);
}

/* Sample one token from logits[0..n_vocab) (host memory, modified in place by
 * steps 0-4 above) with params; fills *result. Returns CS_OK,
 * CS_EINVAL (NULL pointers, n_vocab <= 0), CS_ERANGE (no allowed token with a
 * finite logit) or CS_ENOMEM. Thread-safe; allocates its scratch per call. */
int sampler_sample(struct cs_sample_result *result, float *logits, int n_vocab,
                   const struct cs_sample_params *params);

#ifdef __cplusplus
}
#endif
#endif
