/* sample.cu - the sample op of kernels/ops.h on CUDA, step for step as
 * kernels/sampler.h defines it, so a seeded draw picks the same token as the
 * CPU reference (kernels/cpu/sample.c). Logits stay on the device; only the
 * parameter lists go up and the results (token, logprobs) come down.
 *
 * Per row, kernels in order. "Blocks" below: each row is cut into B chunks of
 * `chunk` ids (host: samp_split), B ~ 2x the SM count, chosen from V and the
 * device only (never from the batch), so a row's result does not depend on
 * the batch size. Grids are (B, rows) for the streaming kernels.
 * 1. steps 0-4, in one of two ways (same values either way):
 *    - no row has a list (bias, repetition, presence/frequency): the
 *      sanitise and the mask are fused into k_samp_stats<true> (one pass);
 *    - else k_samp_prep (grid-wide: sanitise + mask), then k_samp_lists (one
 *      block per row: bias in list order by one thread; repetition and
 *      presence/frequency over DISTINCT ids, which the host deduplicates),
 *      then k_samp_stats<false>.
 *    Masking before the lists gives the values of sampler.h's order 0-4:
 *    sanitise and mask touch every id independently, the lists touch single
 *    ids. An allowed id sees sanitise, then the lists in their order, as in
 *    0-4. A disallowed id ends at -inf in 0-4 whatever steps 1-3 did (step
 *    4 assigns -inf); k_samp_lists skips disallowed ids, so it stays at the
 *    -inf the mask wrote (not, say, -inf + inf = NaN for an infinite bias).
 * 2. k_samp_stats: per block, the max m_b, its lowest id, the finite count
 *    and S_b = sum of exp(l - m_b) in double over the chunk (a fixed
 *    thread/warp tree). k_samp_choose combines the B partials of its row in
 *    a fixed order that depends only on B: max M, argmax = the argmax of the
 *    lowest block with m_b == M (blocks cover ascending ids, so the lowest
 *    id on ties), count, S = sum_b S_b * exp(m_b - M) in double. Neither
 *    uses float atomics: deterministic and batch invariant. The CPU sums
 *    exp(l - M) in ascending order; both are equal up to double rounding
 *    (the split and the per-block rescale change the last bits of S), which
 *    the fp32 logprob hides except in rare last-bit cases.
 * 3. k_samp_select: the top SAMP_C candidates by (key descending, id
 *    ascending), sorted, through the radix select of sample_select.cuh on
 *    the 64-bit order key and a bitonic sort. Keys: step 7's order value
 *    (sampler_order_value) for the top-k/top-p cut (rows without top-k and
 *    top-p skip it), the logit itself for the top logprobs. (Still one
 *    block of SAMP_THREADS per row and per list.)
 * 4. Step 7 for the rows with temperature: sample_draw.cu, exact over the
 *    whole vocabulary (integer weights and sums), nothing sent to the host.
 * 5. k_samp_choose (one block per row): the combine of 2, the greedy token
 *    or step 7's draw, and the logprobs.
 * Logits are modified in place by steps 0-4 (not by temperature). */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"
#include "sample.cuh"
#include "sample_select.cuh"

#define SAMP_MAX_DEV 64      /* devices whose SM count samp_split caches */

struct samp_out {
    int token, n_top;
    float logprob;
    int top_ids[CS_MAX_TOP_LOGPROBS];
    float top_lp[CS_MAX_TOP_LOGPROBS];
};

/* ---- 1. steps 0-4 ---- */

/* Is id i allowed by the mask (NULL: all are)? */
static __device__ __forceinline__ bool samp_allowed(const uint8_t *mask, int i)
{
    return !mask || ((mask[i >> 3] >> (i & 7)) & 1);
}

/* The row's allowed mask, or NULL. */
static __device__ const uint8_t *samp_mask(const struct samp_row *p, const int32_t *data)
{
    return p->mask_off >= 0 ? (const uint8_t *)(data + p->mask_off) : NULL;
}

/* Steps 0 and 4 of one logit: sanitise, then the mask. */
static __device__ __forceinline__ float samp_clean(float v, const uint8_t *mask, int i)
{
    v = isnan(v) ? -INFINITY : (v == INFINITY ? FLT_MAX : v);
    return samp_allowed(mask, i) ? v : -INFINITY;
}

/* Grid (B, rows): sanitise and mask chunk blockIdx.x of row blockIdx.y. */
static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_prep(float *logits, int V, int chunk, const struct samp_row *rows, const int32_t *data)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    float *l = logits + (size_t)blockIdx.y * V;
    const uint8_t *mask = samp_mask(&rows[blockIdx.y], data);
    int i1 = min(V, (int)blockIdx.x * chunk + chunk);
    for (int i = blockIdx.x * chunk + threadIdx.x; i < i1; i += blockDim.x) {
        float v = l[i], w = samp_clean(v, mask, i);
        if (__float_as_uint(w) != __float_as_uint(v))
            l[i] = w;
    }
}

/* One block per row: steps 1-3 after k_samp_prep, skipping disallowed ids
 * (see the header: they stay at -inf, as step 4 leaves them). */
static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_lists(float *logits, int V, const struct samp_row *rows, const int32_t *data)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    const struct samp_row *p = &rows[blockIdx.x];
    float *l = logits + (size_t)blockIdx.x * V;
    const uint8_t *mask = samp_mask(p, data);
    if (threadIdx.x == 0)
        for (int i = 0; i < p->n_bias; i++) {
            int id = data[p->bias_off + 2 * i];
            if (id >= 0 && id < V && samp_allowed(mask, id))
                l[id] = __fadd_rn(l[id], __int_as_float(data[p->bias_off + 2 * i + 1]));
        }
    __syncthreads();
    for (int i = threadIdx.x; i < p->n_rep; i += blockDim.x) {
        int id = data[p->rep_off + i];
        if (!samp_allowed(mask, id))
            continue;
        float v = l[id];
        l[id] = v > 0.0f ? __fdiv_rn(v, p->rep) : __fmul_rn(v, p->rep);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < p->n_gen; i += blockDim.x) {
        int id = data[p->gen_off + 2 * i];
        if (!samp_allowed(mask, id))
            continue;
        float cnt = (float)data[p->gen_off + 2 * i + 1];
        float pen = __fadd_rn(__fmul_rn(p->presence, 1.0f), __fmul_rn(p->frequency, cnt));
        l[id] = __fsub_rn(l[id], pen);
    }
}

/* ---- 2. max, argmax, finite count, sum of exp: per-block partials ---- */

/* (max, lowest id) pair: b replaces a when larger, or equal with a lower id. */
static __device__ __forceinline__ void samp_argmax_merge(float *best, int *arg, float ob, int oa)
{
    if (ob > *best || (ob == *best && oa < *arg)) {
        *best = ob;
        *arg = oa;
    }
}

/* Grid (B, rows): the partial of chunk blockIdx.x of row blockIdx.y into
 * part[row * B + block]. PREP: apply steps 0 and 4 first and store the
 * result (no row has lists, see the header). The argmax of a chunk with no
 * value above -inf is INT_MAX (never chosen: its max loses or M is -inf). */
template <bool PREP>
static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_stats(struct samp_part *part, float *logits, int V, int chunk,
                 const struct samp_row *rows, const int32_t *data)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ float s_max[SAMP_PT / 32];
    __shared__ int s_arg[SAMP_PT / 32], s_cnt[SAMP_PT / 32];
    __shared__ double s_sum[SAMP_PT / 32];
    float *l = logits + (size_t)blockIdx.y * V;
    const uint8_t *mask = PREP ? samp_mask(&rows[blockIdx.y], data) : NULL;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int i0 = blockIdx.x * chunk, i1 = min(V, i0 + chunk);
    float best = -INFINITY;
    int arg = 0x7fffffff, cnt = 0;
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        float v = l[i];
        if (PREP) {
            float w = samp_clean(v, mask, i);
            if (__float_as_uint(w) != __float_as_uint(v))
                l[i] = w;
            v = w;
        }
        if (v > best) {   /* ascending i per thread: keeps the lowest id of a tie */
            best = v;
            arg = i;
        }
        cnt += isfinite(v) ? 1 : 0;
    }
    for (int o = 16; o > 0; o >>= 1) {
        samp_argmax_merge(&best, &arg, __shfl_xor_sync(CS_FULL_MASK, best, o),
                          __shfl_xor_sync(CS_FULL_MASK, arg, o));
        cnt += __shfl_xor_sync(CS_FULL_MASK, cnt, o);
    }
    if (lane == 0) {
        s_max[warp] = best;
        s_arg[warp] = arg;
        s_cnt[warp] = cnt;
    }
    __syncthreads();
    if (warp == 0) {
        best = lane < nw ? s_max[lane] : -INFINITY;
        arg = lane < nw ? s_arg[lane] : 0x7fffffff;
        cnt = lane < nw ? s_cnt[lane] : 0;
        for (int o = 16; o > 0; o >>= 1) {
            samp_argmax_merge(&best, &arg, __shfl_xor_sync(CS_FULL_MASK, best, o),
                              __shfl_xor_sync(CS_FULL_MASK, arg, o));
            cnt += __shfl_xor_sync(CS_FULL_MASK, cnt, o);
        }
        if (lane == 0) {
            s_max[0] = best;
            s_arg[0] = arg;
            s_cnt[0] = cnt;
        }
    }
    __syncthreads();
    float mb = s_max[0];
    double m = (double)mb, sum = 0.0;
    if (isfinite(mb))   /* the values are this thread's own (or its own stores) */
        for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x)
            sum += exp((double)l[i] - m);
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(CS_FULL_MASK, sum, o);
    if (lane == 0)
        s_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < nw; w++)
            t += s_sum[w];
        struct samp_part *o = &part[(size_t)blockIdx.y * gridDim.x + blockIdx.x];
        o->max = mb;
        o->argmax = s_arg[0];
        o->n_finite = s_cnt[0];
        o->sum = t;
    }
}

/* ---- 3. top-C selection ---- */

/* One block per row: cand_key/cand_id [row][C] receive the top C ids by
 * (key desc, id asc), sorted; rows with fewer ids pad with (-inf, INT_MAX).
 * Keys: step 7's order value (use_temperature; rows without top-k and top-p
 * return, step 7 reads no list for them) or the logit (the logprob list).
 * A radix select (sample_select.cuh) finds the C-th order key q; the ids
 * with q at or before it are exactly C, gathered and sorted by q (unique:
 * it holds the id). */
template <int C>
static __global__ void __launch_bounds__(SAMP_THREADS)
    k_samp_select(float *cand_key, int *cand_id, const float *logits, int V,
                  const struct samp_row *rows, int use_temperature)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ struct samp_sel_smem sm;
    __shared__ samp_u64 sq[C];
    const struct samp_row *p = &rows[blockIdx.x];
    if (use_temperature && (sampler_is_greedy(p->temperature) ||
                            (p->top_k <= 0 && !(p->top_p < 1.0f))))
        return;
    struct samp_sel s;
    s.l = logits + (size_t)blockIdx.x * V;
    s.V = V;
    s.keys = use_temperature ? SAMP_KEYS_ORDER : SAMP_KEYS_LOGIT;
    s.weighted = false;
    s.T = s.v0 = 0.0f;
    s.limit = ~0ull;
    int need = C < V ? C : V;
    samp_u64 cut = samp_select(&s, &sm, (samp_u64)need);
    /* gather (exactly need ids have q <= cut; their order here does not matter) */
    int tid = threadIdx.x;
    if (tid == 0)
        sm.count = 0;
    __syncthreads();
    for (int i = tid; i < V; i += blockDim.x) {
        float x;
        samp_u64 q;
        if (samp_sel_key(&s, i, &x, &q) && q <= cut)
            sq[atomicAdd(&sm.count, 1u)] = q;
    }
    for (int k = need + tid; k < C; k += blockDim.x)
        sq[k] = ~0ull;   /* sorts last */
    __syncthreads();
    /* bitonic sort of C keys, ascending q */
    for (int size = 2; size <= C; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int k = tid; k < C; k += blockDim.x) {
                int partner = k ^ stride;
                if (partner > k) {
                    bool up = (k & size) == 0;
                    samp_u64 a = sq[k], b = sq[partner];
                    if (up ? b < a : a < b) {
                        sq[k] = b;
                        sq[partner] = a;
                    }
                }
            }
            __syncthreads();
        }
    for (int k = tid; k < C; k += blockDim.x) {
        samp_u64 q = sq[k];
        bool pad = k >= need;
        cand_key[(size_t)blockIdx.x * C + k] = pad ? -INFINITY : samp_uncode(~(unsigned)(q >> 32));
        cand_id[(size_t)blockIdx.x * C + k] = pad ? 0x7fffffff : (int)(unsigned)q;
    }
}

/* ---- 5. the token and the logprobs ---- */

/* One block of SAMP_PT per row: the combine of the row's B partials (fixed
 * order: thread t takes blocks t, t + SAMP_PT, ... ascending, then the fixed
 * shuffle tree and the warps in order), then thread 0 takes the greedy
 * token or step 7's draw (cut[r].token) and fills the logprobs. */
static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_choose(struct samp_out *out, const float *logits, int V,
                  const struct samp_row *rows, const struct samp_part *part, int B,
                  const struct samp_cut *cut, const float *lp_key, const int *lp_id)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ float s_max[SAMP_PT / 32];
    __shared__ int s_arg[SAMP_PT / 32], s_cnt[SAMP_PT / 32];
    __shared__ double s_sum[SAMP_PT / 32];
    int r = blockIdx.x;
    const struct samp_part *pt = part + (size_t)r * B;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float best = -INFINITY;
    int arg = 0x7fffffff, n_fin = 0;
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        samp_argmax_merge(&best, &arg, pt[b].max, pt[b].argmax);
        n_fin += pt[b].n_finite;
    }
    for (int o = 16; o > 0; o >>= 1) {
        samp_argmax_merge(&best, &arg, __shfl_xor_sync(CS_FULL_MASK, best, o),
                          __shfl_xor_sync(CS_FULL_MASK, arg, o));
        n_fin += __shfl_xor_sync(CS_FULL_MASK, n_fin, o);
    }
    if (lane == 0) {
        s_max[warp] = best;
        s_arg[warp] = arg;
        s_cnt[warp] = n_fin;
    }
    __syncthreads();
    best = s_max[0];
    arg = s_arg[0];
    n_fin = s_cnt[0];
    for (int w = 1; w < nw; w++) {   /* every thread, same order: same result */
        samp_argmax_merge(&best, &arg, s_max[w], s_arg[w]);
        n_fin += s_cnt[w];
    }
    double sum = 0.0;
    if (isfinite(best))
        for (int b = threadIdx.x; b < B; b += blockDim.x)
            if (pt[b].sum > 0.0)   /* also skips chunks whose max is -inf */
                sum += pt[b].sum * exp((double)pt[b].max - (double)best);
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(CS_FULL_MASK, sum, o);
    if (lane == 0)
        s_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    double total = 0.0;
    for (int w = 0; w < nw; w++)
        total += s_sum[w];   /* S */
    const struct samp_row *p = &rows[r];
    struct samp_out *o = &out[r];
    o->n_top = 0;
    int tok = sampler_is_greedy(p->temperature) ? arg : cut[r].token;
    if (!isfinite(best) || tok < 0) {
        o->token = -1;   /* CS_ERANGE: nothing allowed */
        return;
    }
    o->token = tok;
    double base = (double)best + log(total);
    const float *l = logits + (size_t)r * V;
    o->logprob = (float)((double)l[tok] - base);
    int want = p->n_logprobs > CS_MAX_TOP_LOGPROBS ? CS_MAX_TOP_LOGPROBS : p->n_logprobs;
    if (want <= 0)
        return;
    /* the lp_key list is sorted by logit; order it by (fp32 logprob desc, id asc) */
    const float *lk = lp_key + (size_t)r * SAMP_LP_C;
    const int *li = lp_id + (size_t)r * SAMP_LP_C;
    float lps[SAMP_LP_C];
    int ids[SAMP_LP_C];
    int cnt = 0;
    for (int i = 0; i < SAMP_LP_C && li[i] < V; i++) {
        float lp = (float)((double)lk[i] - base);
        int k = cnt++;
        while (k > 0 && (lp > lps[k - 1] || (lp == lps[k - 1] && li[i] < ids[k - 1]))) {
            lps[k] = lps[k - 1];
            ids[k] = ids[k - 1];
            k--;
        }
        lps[k] = lp;
        ids[k] = li[i];
    }
    cnt = cnt < want ? cnt : want;
    for (int k = 0; k < cnt; k++) {
        o->top_lp[k] = lps[k];
        o->top_ids[k] = ids[k];
    }
    o->n_top = cnt;
}

/* ---- host side ---- */

/* Pack every row's lists (bias, distinct repetition ids, distinct generated
 * ids with counts, mask) after the row descriptors; returns int32 words used,
 * or -1 when words is too small (with words_needed set) / on no memory. */
static long samp_pack(int32_t *data, long cap, struct samp_row *rows,
                      const struct cs_sample_params *params, int n, int V, uint8_t *seen,
                      int32_t *count)
{
    long at = 0;
    for (int r = 0; r < n; r++) {
        const struct cs_sample_params *p = &params[r];
        struct samp_row *d = &rows[r];
        memset(d, 0, sizeof(*d));
        d->temperature = p->temperature;
        d->top_p = p->top_p;
        d->min_p = p->min_p;
        d->rep = p->repetition_penalty;
        d->presence = p->presence_penalty;
        d->frequency = p->frequency_penalty;
        d->top_k = p->top_k;
        d->n_logprobs = p->n_logprobs;
        d->seed = p->seed;
        d->draw = p->draw;
        d->mask_off = -1;
        d->bias_off = (int)at;
        for (int i = 0; p->bias_ids && p->bias_vals && i < p->n_bias; i++) {
            if (data && at + 2 <= cap) {
                data[at] = p->bias_ids[i];
                memcpy(&data[at + 1], &p->bias_vals[i], 4);
            }
            at += 2;
            d->n_bias++;
        }
        d->rep_off = (int)at;
        float rp = p->repetition_penalty;
        if (rp != 1.0f && rp > 0.0f && p->ctx_tokens) {
            memset(seen, 0, (size_t)V);
            for (int i = 0; i < p->n_ctx_tokens; i++) {
                int32_t id = p->ctx_tokens[i];
                if (id < 0 || id >= V || seen[id])
                    continue;
                seen[id] = 1;
                if (data && at < cap)
                    data[at] = id;
                at++;
                d->n_rep++;
            }
        }
        d->gen_off = (int)at;
        if ((p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) && p->gen_tokens) {
            for (int i = 0; i < p->n_gen_tokens; i++)
                if (p->gen_tokens[i] >= 0 && p->gen_tokens[i] < V)
                    count[p->gen_tokens[i]]++;
            for (int i = 0; i < p->n_gen_tokens; i++) {
                int32_t id = p->gen_tokens[i];
                if (id < 0 || id >= V || count[id] == 0)
                    continue;
                if (data && at + 2 <= cap) {
                    data[at] = id;
                    data[at + 1] = count[id];
                }
                at += 2;
                count[id] = 0;
                d->n_gen++;
            }
        }
        if (p->allowed) {
            d->mask_off = (int)at;
            long words = ((long)V + 31) / 32;
            if (data && at + words <= cap) {
                memset(&data[at], 0, (size_t)words * 4);
                memcpy(&data[at], p->allowed, ((size_t)V + 7) / 8);
            }
            at += words;
        }
    }
    return at;
}

/* The split of a row into *blocks chunks of *chunk ids (a multiple of
 * SAMP_PT): about 2 blocks per SM for one row. It depends on V and the
 * device's SM count only, never on the batch, so a row's partials and sums
 * are the same at any batch size. The SM count is asked once per device. */
static int samp_split(struct cuda_ctx *c, int V, int *chunk, int *blocks)
{
    static int sm_cache[SAMP_MAX_DEV];   /* 0: not asked yet */
    bool cached = c->device >= 0 && c->device < SAMP_MAX_DEV;
    int sm = cached ? __atomic_load_n(&sm_cache[c->device], __ATOMIC_RELAXED) : 0;
    if (sm <= 0) {
        CS_CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, c->device));
        sm = sm > 0 ? sm : 1;
        if (cached)
            __atomic_store_n(&sm_cache[c->device], sm, __ATOMIC_RELAXED);
    }
    long want = 2L * sm, ch = ((long)V + want - 1) / want;
    ch = (ch + SAMP_PT - 1) / SAMP_PT * SAMP_PT;
    *chunk = (int)ch;
    *blocks = (int)(((long)V + ch - 1) / ch);
    return CS_OK;
}

/* A failed CUDA call inside cuda_op_sample: log it, leave through `done`. */
#define SAMP_CUDA(call)                                                                 \
    do {                                                                                \
        cudaError_t _e = (call);                                                        \
        if (_e != cudaSuccess) {                                                        \
            LOG_ERROR("cuda", "%s failed: %s (%s:%d)", #call, cudaGetErrorString(_e),   \
                      __FILE__, __LINE__);                                              \
            rc = CS_ECUDA;                                                              \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* Host staging (c->h_sample) needs no wait for the stream before packing:
 * every return of this function, error paths included, leaves no queued
 * copy that reads or writes it (the final cudaStreamSynchronize, or the one
 * at `done` once anything was queued), and nothing else uses it. So the
 * host packs while the stream still runs the forward pass that makes the
 * logits; the upload is queued behind it. */
int cuda_op_sample(struct cs_backend *be, struct cs_sample_result *results, float *logits,
                   int n_vocab, const struct cs_sample_params *params, int n)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (!results || !logits || !params || n < 0 || n > 65535 || n_vocab <= 0)
        return CS_EINVAL;
    if (n == 0)
        return CS_OK;
    int V = n_vocab, chunk, B;
    int rc = samp_split(c, V, &chunk, &B);
    if (rc != CS_OK)
        return rc;
    bool queued = false, any_list = false, any_t = false, any_lp = false;
    uint8_t *seen = (uint8_t *)malloc((size_t)V);
    int32_t *count = (int32_t *)calloc((size_t)V, sizeof(int32_t));
    struct samp_row *rows_h = (struct samp_row *)calloc((size_t)n, sizeof(*rows_h));
    if (!seen || !count || !rows_h) {
        rc = CS_ENOMEM;
        goto done;
    }
    {
        long words = samp_pack(NULL, 0, rows_h, params, n, V, seen, count);
        /* device layout: rows | data | partials | out | weight partials | step-7
         * states | cand keys/ids | lp keys/ids */
        size_t o_rows = 0;
        size_t o_data = o_rows + (((size_t)n * sizeof(struct samp_row) + 255) & ~255ul);
        size_t o_part = o_data + (((size_t)words * 4 + 255) & ~255ul);
        size_t o_out = o_part + (((size_t)n * B * sizeof(struct samp_part) + 255) & ~255ul);
        size_t o_wp = o_out + (((size_t)n * sizeof(struct samp_out) + 255) & ~255ul);
        size_t o_cut = o_wp + (((size_t)n * B * sizeof(struct samp_wpart) + 255) & ~255ul);
        size_t o_ck = o_cut + (((size_t)n * sizeof(struct samp_cut) + 255) & ~255ul);
        size_t o_ci = o_ck + (size_t)n * SAMP_C * 4;
        size_t o_lk = o_ci + (size_t)n * SAMP_C * 4;
        size_t o_li = o_lk + (size_t)n * SAMP_LP_C * 4;
        size_t total = o_li + (size_t)n * SAMP_LP_C * 4;
        if (total > c->sample_cap) {
            SAMP_CUDA(cudaStreamSynchronize(c->stream));
            cudaFree(c->d_sample);
            cudaFreeHost(c->h_sample);
            c->d_sample = c->h_sample = NULL;
            c->sample_cap = 0;
            SAMP_CUDA(cudaMalloc(&c->d_sample, total * 2));
            SAMP_CUDA(cudaMallocHost(&c->h_sample, total * 2));
            c->sample_cap = total * 2;
        }
        char *h = (char *)c->h_sample, *d = (char *)c->d_sample;
        memcpy(h + o_rows, rows_h, (size_t)n * sizeof(struct samp_row));
        samp_pack((int32_t *)(h + o_data), words, rows_h, params, n, V, seen, count);
        for (int r = 0; r < n; r++) {
            any_list |= rows_h[r].n_bias > 0 || rows_h[r].n_rep > 0 || rows_h[r].n_gen > 0;
            any_t |= !sampler_is_greedy(params[r].temperature);
            any_lp |= params[r].n_logprobs > 0;
        }
        const struct samp_row *rows_d = (const struct samp_row *)(d + o_rows);
        const int32_t *data_d = (const int32_t *)(d + o_data);
        struct samp_part *part_d = (struct samp_part *)(d + o_part);
        struct samp_out *out_d = (struct samp_out *)(d + o_out);
        dim3 grid((unsigned)B, (unsigned)n);
        queued = true;
        SAMP_CUDA(cudaMemcpyAsync(d, h, o_part, cudaMemcpyHostToDevice, c->stream));
        cuda_pdl_barrier();   /* launch.cuh: the launch after a copy is plain */
        if (any_list) {
            SAMP_CUDA(cuda_launch(k_samp_prep, grid, SAMP_PT, 0, c->stream, logits, V, chunk,
                                  rows_d, data_d));
            SAMP_CUDA(cuda_launch(k_samp_lists, n, SAMP_PT, 0, c->stream, logits, V, rows_d,
                                  data_d));
            SAMP_CUDA(cuda_launch(k_samp_stats<false>, grid, SAMP_PT, 0, c->stream, part_d, logits,
                                  V, chunk, rows_d, data_d));
        } else
            SAMP_CUDA(cuda_launch(k_samp_stats<true>, grid, SAMP_PT, 0, c->stream, part_d, logits,
                                  V, chunk, rows_d, data_d));
        if (any_t) {
            SAMP_CUDA(cuda_launch(k_samp_select<SAMP_C>, n, SAMP_THREADS, 0, c->stream,
                                  (float *)(d + o_ck), (int *)(d + o_ci), logits, V, rows_d, 1));
        }
        if (any_lp) {
            SAMP_CUDA(cuda_launch(k_samp_select<SAMP_LP_C>, n, SAMP_THREADS, 0, c->stream,
                                  (float *)(d + o_lk), (int *)(d + o_li), logits, V, rows_d, 0));
        }
        struct samp_cut *cut_d = (struct samp_cut *)(d + o_cut);
        if (any_t) {
            rc = samp_step7_queue(c->stream, (struct samp_wpart *)(d + o_wp), cut_d, logits, V,
                                  chunk, B, n, rows_d, part_d, (const float *)(d + o_ck),
                                  (const int *)(d + o_ci));
            if (rc != CS_OK)
                goto done;
        }
        SAMP_CUDA(cuda_launch(k_samp_choose, n, SAMP_PT, 0, c->stream, out_d, logits, V, rows_d,
                              part_d, B, cut_d, (const float *)(d + o_lk),
                              (const int *)(d + o_li)));
        struct samp_out *out_h = (struct samp_out *)(h + o_out);
        SAMP_CUDA(cudaMemcpyAsync(out_h, out_d, (size_t)n * sizeof(struct samp_out),
                                  cudaMemcpyDeviceToHost, c->stream));
        cuda_pdl_barrier();
        SAMP_CUDA(cudaStreamSynchronize(c->stream));
        queued = false;
        for (int r = 0; r < n && rc == CS_OK; r++) {
            struct cs_sample_result *res = &results[r];
            const struct samp_out *o = &out_h[r];
            if (o->token < 0) {
                rc = CS_ERANGE;
                break;
            }
            memset(res, 0, sizeof(*res));
            res->token = o->token;
            res->logprob = o->logprob;
            res->n_top = o->n_top;
            for (int k = 0; k < o->n_top; k++) {
                res->top_ids[k] = o->top_ids[k];
                res->top_logprobs[k] = o->top_lp[k];
            }
        }
    }
done:
    if (queued)   /* an error after queueing: h_sample must be free for the next call */
        cudaStreamSynchronize(c->stream);
    free(seen);
    free(count);
    free(rows_h);
    return rc;
}
