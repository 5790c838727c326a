/* sample_select.cuh - the block-wide pieces of the CUDA sampler's
 * selections: exact integer block sums and scans, warp-aggregated histogram
 * adds, and one radix select over the 64-bit order key
 *     q = (~code(key) << 32) | id      (ascending q = key descending, id ascending)
 * used by k_samp_select (the sorted top-C lists, sample.cu) and by step 7's
 * full cut (sample_draw.cu). One block runs a select; every thread calls in.
 *
 * Costs, per pass over a row of V logits in one block: the key (and for a
 * weighted select, sampler.h's weight) of every id and one native 32-bit
 * shared atomic per id (three when weighted). 11-bit digits: 3 passes for
 * the key, then 1-2 for the id only when the cut splits a group of ids with
 * equal keys. */
#ifndef CS_CUDA_SAMPLE_SELECT_CUH
#define CS_CUDA_SAMPLE_SELECT_CUH

#include "cuda_util.cuh"
#include "sample.cuh"

typedef unsigned long long samp_u64;

#define SAMP_RADIX_BITS 11
#define SAMP_RADIX (1 << SAMP_RADIX_BITS)

/* Sum of v over the block, returned to every thread. s: 32 words of smem. */
static __device__ samp_u64 samp_block_sum(samp_u64 v, samp_u64 *s)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(CS_FULL_MASK, v, o);
    __syncthreads();   /* s may still be read from a previous call */
    if (lane == 0)
        s[warp] = v;
    __syncthreads();
    samp_u64 t = 0;
    for (int w = 0; w < nw; w++)
        t += s[w];
    return t;
}

/* Exclusive prefix sum of v over the threads in order, and the block total. */
static __device__ samp_u64 samp_block_exscan(samp_u64 v, samp_u64 *s, samp_u64 *total)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    samp_u64 inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        samp_u64 y = __shfl_up_sync(CS_FULL_MASK, inc, o);
        if (lane >= o)
            inc += y;
    }
    __syncthreads();
    if (lane == 31)
        s[warp] = inc;
    __syncthreads();
    samp_u64 before = 0, all = 0;
    for (int w = 0; w < nw; w++) {
        before += w < warp ? s[w] : 0;
        all += s[w];
    }
    *total = all;
    return before + inc - v;
}

/* Which ids a select sees and by what key:
 *   SAMP_KEYS_LOGIT  every id, the logit itself (the top-logprob list);
 *   SAMP_KEYS_ORDER  every id, sampler_order_value of a finite logit, -inf
 *                    otherwise (step 7's sorted list);
 *   SAMP_KEYS_CUT    finite logits only, by sampler_order_value, and only
 *                    q <= limit (step 7's full cut). */
enum samp_keys { SAMP_KEYS_LOGIT, SAMP_KEYS_ORDER, SAMP_KEYS_CUT };

struct samp_sel {
    const float *l;
    int V;
    enum samp_keys keys;
    bool weighted;        /* weight of an id: sampler.h's w (else 1) */
    float T, v0;          /* for the weights */
    samp_u64 limit;
};

/* The float whose samp_code is code. */
static __device__ __forceinline__ float samp_uncode(unsigned code)
{
    return __uint_as_float((code & 0x80000000u) ? (code & 0x7fffffffu) : ~code);
}

/* Id i's key and q; false when the select does not see it. */
static __device__ __forceinline__ bool samp_sel_key(const struct samp_sel *s, int i, float *key,
                                                    samp_u64 *q)
{
    float x = s->l[i];
    if (s->keys != SAMP_KEYS_LOGIT) {
        if (isfinite(x))
            x = sampler_order_value(x);
        else if (s->keys == SAMP_KEYS_CUT)
            return false;
        else
            x = -INFINITY;
    }
    *key = x;
    *q = samp_order(x, i);
    return *q <= s->limit;
}

/* The weight of an id whose (finite, order-value) key is x. */
static __device__ __forceinline__ samp_u64 samp_sel_weight(const struct samp_sel *s, float x)
{
    return sampler_weight(SAMPLER_SUB(sampler_scaled(x, s->T), s->v0));
}

/* Histograms in native 32-bit shared atomics (64-bit ones are CAS loops):
 * counts in h[0]; a weight w <= 2^32 as three 11-bit pieces in h[0..2],
 * each piece sum below 2^32 for V < 2^21 ids. */
#define SAMP_PIECE_BITS 11
#define SAMP_PIECE_MASK ((1u << SAMP_PIECE_BITS) - 1)

struct samp_sel_smem {
    unsigned h[3][SAMP_RADIX];
    samp_u64 scan[32];
    samp_u64 q, need, group;
    unsigned count;
};

static __device__ __forceinline__ samp_u64 samp_bucket(const struct samp_sel_smem *sm, int d,
                                                       bool weighted)
{
    if (!weighted)
        return sm->h[0][d];
    return (samp_u64)sm->h[0][d] + ((samp_u64)sm->h[1][d] << SAMP_PIECE_BITS) +
           ((samp_u64)sm->h[2][d] << (2 * SAMP_PIECE_BITS));
}

/* One radix pass: the digit of q at [shift, shift + width) among the seen
 * ids matching prefix above it, where the running sum (ascending digits)
 * first reaches *need; updates *prefix and *need, and sm->group = the sum
 * in the chosen bucket. */
static __device__ void samp_sel_pass(const struct samp_sel *s, struct samp_sel_smem *sm,
                                     int shift, int width, bool weighted, samp_u64 *prefix,
                                     samp_u64 *need)
{
    int nb = 1 << width, pieces = weighted ? 3 : 1;
    samp_u64 hi_mask = shift + width >= 64 ? 0ull : ~0ull << (shift + width);
    for (int k = 0; k < pieces; k++)
        for (int d = threadIdx.x; d < nb; d += blockDim.x)
            sm->h[k][d] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < s->V; i += blockDim.x) {
        float x;
        samp_u64 q;
        if (!samp_sel_key(s, i, &x, &q) || (q & hi_mask) != *prefix)
            continue;
        unsigned d = (unsigned)(q >> shift) & (unsigned)(nb - 1);
        if (!weighted) {
            atomicAdd(&sm->h[0][d], 1u);
            continue;
        }
        samp_u64 w = samp_sel_weight(s, x);
        if (w == 0)
            continue;
        atomicAdd(&sm->h[0][d], (unsigned)w & SAMP_PIECE_MASK);
        atomicAdd(&sm->h[1][d], (unsigned)(w >> SAMP_PIECE_BITS) & SAMP_PIECE_MASK);
        atomicAdd(&sm->h[2][d], (unsigned)(w >> (2 * SAMP_PIECE_BITS)));
    }
    __syncthreads();
    /* consecutive buckets per thread, a scan, and the thread where the sum crosses */
    int per = nb > (int)blockDim.x ? nb / (int)blockDim.x : 1;
    int d0 = threadIdx.x * per;
    samp_u64 mine = 0, total;
    for (int k = 0; k < per && d0 + k < nb; k++)
        mine += samp_bucket(sm, d0 + k, weighted);
    samp_u64 before = samp_block_exscan(mine, sm->scan, &total);
    if (mine > 0 && before < *need && before + mine >= *need) {
        samp_u64 acc = before, b;
        int d = d0;
        while (acc + (b = samp_bucket(sm, d, weighted)) < *need) {
            acc += b;
            d++;
        }
        sm->q = *prefix | ((samp_u64)d << shift);
        sm->need = *need - acc;
        sm->group = b;
    }
    __syncthreads();
    *prefix = sm->q;
    *need = sm->need;
    __syncthreads();
}

/* The smallest q whose running sum of weights over the seen ids in q order
 * (1 each, or w when s->weighted) reaches need (1 <= need <= the sum over
 * all seen ids). After the key's 32 bits every id left has the same key,
 * hence the same weight w, so the id passes count ceil(need / w) of them,
 * and are skipped when that is the whole group (the cut then takes every
 * id of the key). */
static __device__ samp_u64 samp_select(const struct samp_sel *s, struct samp_sel_smem *sm,
                                       samp_u64 need)
{
    samp_u64 prefix = 0;
    samp_sel_pass(s, sm, 53, 11, s->weighted, &prefix, &need);
    samp_sel_pass(s, sm, 42, 11, s->weighted, &prefix, &need);
    samp_sel_pass(s, sm, 32, 10, s->weighted, &prefix, &need);
    samp_u64 group = sm->group;   /* ids of the key (weighted: their weight) */
    if (s->weighted) {
        samp_u64 w = samp_sel_weight(s, samp_uncode(~(unsigned)(prefix >> 32)));
        need = (need + w - 1) / w;   /* w > 0: the chosen key's bucket had weight */
        group /= w;
    }
    if (need == group)
        return prefix | 0xffffffffull;
    int id_bits = 32 - __clz(s->V > 1 ? s->V - 1 : 1);
    if (id_bits > SAMP_RADIX_BITS)
        samp_sel_pass(s, sm, SAMP_RADIX_BITS, id_bits - SAMP_RADIX_BITS, false, &prefix, &need);
    samp_sel_pass(s, sm, 0, id_bits < SAMP_RADIX_BITS ? id_bits : SAMP_RADIX_BITS, false,
                  &prefix, &need);
    return prefix;
}

#endif
