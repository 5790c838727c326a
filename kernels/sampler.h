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
 *  6. temperature <= 0: greedy, the id of the largest logit, lowest id on ties.
 *  7. Otherwise: candidates are the ids with a finite logit, each with
 *     l / T (fp32, clamped to +-FLT_MAX), in descending order (that value
 *     descending, then id ascending). The logits array keeps the values of
 *     step 4 (temperature is not written back).
 *     a. top_k > 0: keep the first top_k candidates.
 *     b. p_i = expf(l_i - l_0) in fp32 (so p_0 = 1); total = fp32 sum of the
 *        kept p_i in candidate order.
 *     c. top_p < 1: keep the shortest prefix whose fp32 running sum c_j
 *        satisfies c_j >= top_p * total (at least one candidate).
 *     d. min_p > 0: drop candidates with p_i < min_p * p_0 (a suffix, so the
 *        kept set stays a prefix; p_0 always stays).
 *     e. total = fp32 sum of the kept p_i in order; u = sampler_uniform(seed,
 *        draw); pick the first kept candidate whose fp32 running sum is
 *        > u * total; if rounding leaves none, the last kept candidate.
 *
 * RNG (counter based: a draw depends only on seed and draw index, so replay,
 * batching and the backend do not change it):
 *     splitmix64(x): z = x + 0x9E3779B97F4A7C15;
 *                    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *                    z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *                    return z ^ (z >> 31);           (all mod 2^64)
 *     z = splitmix64(seed ^ splitmix64(draw + 0x632BE59BD9B4E019))
 *     u = (float)(z >> 40) * 2^-24, in [0, 1) and exact in fp32.
 */
#ifndef CS_SAMPLER_H
#define CS_SAMPLER_H

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

/* The uniform u in [0, 1) of that draw: top 24 bits times 2^-24 (exact in fp32). */
static inline SAMPLER_HD float sampler_uniform(uint64_t seed, uint64_t draw)
{
    return (float)(sampler_bits(seed, draw) >> 40) * (1.0f / 16777216.0f);
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
