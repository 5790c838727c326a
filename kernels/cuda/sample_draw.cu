/* sample_draw.cu - step 7 of kernels/sampler.h on CUDA: the same token as
 * the CPU reference (kernels/cpu/sample.c) for every row, over the whole
 * vocabulary, with nothing sent back to the host.
 *
 * The definition makes this parallel: weights are integers computed by
 * sampler.h's fixed fp32 sequence, and every sum is a uint64 sum, exact in
 * any order. Only the top-k/top-p cut needs the candidate order. Kernels in
 * order (rows without temperature return at once):
 * 1. k_samp_weights, grid (B, rows): per block, the sums of w over every
 *    finite candidate and over those min-p keeps.
 * 2. k_samp_cut, one block per row: where the cut lies. No top-k/top-p: none.
 *    Else from the row's sorted top SAMP_C candidates (k_samp_select), when
 *    the top-k set fits in them and top-p's prefix ends inside them (almost
 *    always on a real model); otherwise the row is marked for 3.
 * 3. k_samp_cut_full, one block of SAMP_THREADS per marked row (the others
 *    return): radix selects on the 64-bit order key over the whole row,
 *    counting (top-k) and weighted (top-p), sample_select.cuh. Flat rows
 *    (many candidates near the top) take this path.
 * 4. k_samp_keptsum, grid (B, rows): per block, the sum of w over the kept
 *    (cut and min-p), for rows with a cut.
 * 5. k_samp_draw, one block per row: r from the RNG and the kept total, the
 *    block whose running sum passes r, then the id inside it. */
#include <float.h>

#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"
#include "sample.cuh"
#include "sample_select.cuh"

typedef samp_u64 u64;

/* The weight of id i (logit l) in row state c, 0 unless kept: finite, past
 * min-p and, with a cut, at or before it in candidate order. */
static __device__ __forceinline__ u64 samp_kept_weight(float l, int i, float T,
                                                       const struct samp_cut *c, bool use_cut)
{
    if (!isfinite(l))
        return 0;
    u64 w = sampler_weight(SAMPLER_SUB(sampler_scaled(l, T), c->v0));
    if (w < c->floor_w || (use_cut && samp_order(sampler_order_value(l), i) > c->cut))
        return 0;
    return w;
}

/* ---- 1. weights ---- */

static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_weights(struct samp_wpart *wp, struct samp_cut *cut, const float *logits, int V,
                   int chunk, const struct samp_row *rows, const struct samp_part *part, int B)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ u64 s[32];
    __shared__ float s_max[32];
    const struct samp_row *p = &rows[blockIdx.y];
    float T = p->temperature;
    if (sampler_is_greedy(T))
        return;
    const struct samp_part *pt = part + (size_t)blockIdx.y * B;
    float m = -INFINITY;   /* the row's max: max is exact in any order */
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        m = fmaxf(m, pt[b].max);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(CS_FULL_MASK, m, o));
    if ((threadIdx.x & 31) == 0)
        s_max[threadIdx.x >> 5] = m;
    __syncthreads();
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        m = fmaxf(m, s_max[w]);
    struct samp_cut c;
    c.v0 = isfinite(m) ? sampler_scaled(m, T) : 0.0f;   /* scaling is monotone */
    c.floor_w = sampler_min_p_floor(p->min_p);
    const float *l = logits + (size_t)blockIdx.y * V;
    int i1 = min(V, (int)blockIdx.x * chunk + chunk);
    u64 all = 0, minp = 0;
    for (int i = blockIdx.x * chunk + threadIdx.x; i < i1; i += blockDim.x) {
        float x = l[i];
        if (!isfinite(x))
            continue;
        u64 w = sampler_weight(SAMPLER_SUB(sampler_scaled(x, T), c.v0));
        all += w;
        minp += w >= c.floor_w ? w : 0;
    }
    all = samp_block_sum(all, s);
    minp = samp_block_sum(minp, s);
    if (threadIdx.x == 0) {
        struct samp_wpart *o = &wp[(size_t)blockIdx.y * gridDim.x + blockIdx.x];
        o->all = all;
        o->minp = minp;
        o->kept = 0;
        if (blockIdx.x == 0) {
            struct samp_cut *d = &cut[blockIdx.y];
            d->v0 = c.v0;
            d->floor_w = c.floor_w;
            d->mode = SAMP_CUT_NONE;
            d->token = -1;
        }
    }
}

/* ---- 2. the cut from the sorted candidate list ---- */

#define SAMP_CUT_PER (SAMP_C / SAMP_PT)   /* list entries per thread, contiguous */

static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_cut(struct samp_cut *cut, const struct samp_wpart *wp, int B,
               const struct samp_row *rows, const struct samp_part *part, const float *cand_key,
               const int *cand_id)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ u64 s[32];
    __shared__ int s_first;
    int r = blockIdx.x;
    const struct samp_row *p = &rows[r];
    float T = p->temperature;
    if (sampler_is_greedy(T))
        return;
    struct samp_cut *c = &cut[r];
    u64 total = 0, nf = 0;
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        total += wp[(size_t)r * B + b].all;
        nf += (u64)part[(size_t)r * B + b].n_finite;
    }
    total = samp_block_sum(total, s);
    int n_fin = (int)samp_block_sum(nf, s);
    int K = p->top_k > 0 && p->top_k < n_fin ? p->top_k : n_fin;
    bool top_p = p->top_p < 1.0f;
    if (threadIdx.x == 0) {
        c->total = total;
        c->n_finite = n_fin;
    }
    if (n_fin == 0 || (K == n_fin && !top_p))
        return;   /* mode stays SAMP_CUT_NONE */
    int L = n_fin < SAMP_C ? n_fin : SAMP_C;   /* valid list entries */
    if (K > L && K < n_fin) {   /* the top-k cut itself lies past the list */
        if (threadIdx.x == 0)
            c->mode = SAMP_CUT_FULL;
        return;
    }
    /* the list's weights in order, SAMP_CUT_PER per thread; the first n of them count */
    int n = K < L ? K : L;
    const float *key = cand_key + (size_t)r * SAMP_C;
    const int *id = cand_id + (size_t)r * SAMP_C;
    u64 w[SAMP_CUT_PER], mine = 0;
    for (int k = 0; k < SAMP_CUT_PER; k++) {
        int j = threadIdx.x * SAMP_CUT_PER + k;
        w[k] = j < n ? sampler_weight(SAMPLER_SUB(sampler_scaled(key[j], T), c->v0)) : 0;
        mine += w[k];
    }
    u64 list_sum, before = samp_block_exscan(mine, s, &list_sum);
    /* the kept set before top-p: the first K candidates, all inside the list
     * when K <= L; else (K = n_fin > L) every finite candidate */
    u64 wk = K <= L ? list_sum : total;
    int last = n - 1;
    if (top_p) {
        u64 target = sampler_top_p_target(p->top_p, wk);
        if (threadIdx.x == 0)
            s_first = 0x7fffffff;
        __syncthreads();
        u64 run = before;
        for (int k = 0; k < SAMP_CUT_PER; k++) {
            int j = threadIdx.x * SAMP_CUT_PER + k;
            run += w[k];
            if (j < n && run >= target) {
                atomicMin(&s_first, j);
                break;
            }
        }
        __syncthreads();
        last = s_first;
        if (last == 0x7fffffff) {   /* the prefix ends past the list (K > L) */
            if (threadIdx.x == 0)
                c->mode = SAMP_CUT_FULL;
            return;
        }
    }
    if (threadIdx.x == 0) {
        c->cut = samp_order(key[last], id[last]);
        c->mode = SAMP_CUT_AT;
    }
}

/* ---- 3. the cut by radix select over the whole row ---- */

static __global__ void __launch_bounds__(SAMP_THREADS)
    k_samp_cut_full(struct samp_cut *cut, const float *logits, int V, const struct samp_row *rows)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ struct samp_sel_smem sm;
    int r = blockIdx.x;
    struct samp_cut *c = &cut[r];
    const struct samp_row *p = &rows[r];
    if (sampler_is_greedy(p->temperature) || c->mode != SAMP_CUT_FULL)
        return;
    struct samp_sel s;
    s.l = logits + (size_t)r * V;
    s.V = V;
    s.keys = SAMP_KEYS_CUT;
    s.T = p->temperature;
    s.v0 = c->v0;
    s.limit = ~0ull;
    u64 wk = c->total;
    if (p->top_k > 0 && p->top_k < c->n_finite) {   /* counting: the top_k-th candidate */
        s.weighted = false;
        s.limit = samp_select(&s, &sm, (u64)p->top_k);
        u64 sum = 0;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float x;
            u64 q;
            if (samp_sel_key(&s, i, &x, &q))
                sum += samp_sel_weight(&s, x);
        }
        wk = samp_block_sum(sum, sm.scan);
    }
    if (p->top_p < 1.0f) {   /* weighted, among those */
        s.weighted = true;
        s.limit = samp_select(&s, &sm, sampler_top_p_target(p->top_p, wk));
    }
    if (threadIdx.x == 0) {
        c->cut = s.limit;
        c->mode = SAMP_CUT_AT;
    }
}

/* ---- 4. kept sums ---- */

static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_keptsum(struct samp_wpart *wp, const struct samp_cut *cut, const float *logits, int V,
                   int chunk, const struct samp_row *rows)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ u64 s[32];
    const struct samp_row *p = &rows[blockIdx.y];
    const struct samp_cut *c = &cut[blockIdx.y];
    if (sampler_is_greedy(p->temperature) || c->mode != SAMP_CUT_AT)
        return;
    const float *l = logits + (size_t)blockIdx.y * V;
    int i1 = min(V, (int)blockIdx.x * chunk + chunk);
    u64 kept = 0;
    for (int i = blockIdx.x * chunk + threadIdx.x; i < i1; i += blockDim.x)
        kept += samp_kept_weight(l[i], i, p->temperature, c, true);
    kept = samp_block_sum(kept, s);
    if (threadIdx.x == 0)
        wp[(size_t)blockIdx.y * gridDim.x + blockIdx.x].kept = kept;
}

/* ---- 5. the draw ---- */

static __global__ void __launch_bounds__(SAMP_PT)
    k_samp_draw(struct samp_cut *cut, const struct samp_wpart *wp, const float *logits, int V,
                int chunk, int B, const struct samp_row *rows)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ u64 s[32], s_r;
    __shared__ int s_block, s_token;
    int r = blockIdx.x;
    const struct samp_row *p = &rows[r];
    struct samp_cut *c = &cut[r];
    if (sampler_is_greedy(p->temperature))
        return;
    bool use_cut = c->mode == SAMP_CUT_AT;
    const struct samp_wpart *pw = wp + (size_t)r * B;
    u64 total = 0;
    for (int b = threadIdx.x; b < B; b += blockDim.x)
        total += use_cut ? pw[b].kept : pw[b].minp;
    total = samp_block_sum(total, s);
    if (total == 0)
        return;   /* nothing finite: token stays -1, the row reports CS_ERANGE */
    u64 point = sampler_draw_point(p->seed, p->draw, total);
    /* the block whose running sum first exceeds point, SAMP_PT blocks at a time */
    if (threadIdx.x == 0)
        s_block = -1;
    u64 base = 0;
    for (int b0 = 0; b0 < B; b0 += blockDim.x) {
        int b = b0 + threadIdx.x;
        u64 v = b < B ? (use_cut ? pw[b].kept : pw[b].minp) : 0, sum;
        u64 before = base + samp_block_exscan(v, s, &sum);
        if (v > 0 && before <= point && point < before + v) {
            s_block = b;
            s_r = point - before;
        }
        base += sum;
        __syncthreads();
        if (s_block >= 0)
            break;
    }
    /* inside that block's chunk: contiguous ids per thread, a scan, a walk */
    int b = s_block;
    u64 rest = s_r;
    int per = chunk / blockDim.x;   /* chunk is a multiple of SAMP_PT */
    int i0 = b * chunk + threadIdx.x * per, i1 = min(V, i0 + per);
    const float *l = logits + (size_t)r * V;
    float T = p->temperature;
    u64 mine = 0, sum;
    for (int i = i0; i < i1; i++)
        mine += samp_kept_weight(l[i], i, T, c, use_cut);
    u64 run = samp_block_exscan(mine, s, &sum);
    if (mine > 0 && run <= rest && rest < run + mine)
        for (int i = i0; i < i1; i++) {
            run += samp_kept_weight(l[i], i, T, c, use_cut);
            if (run > rest) {
                s_token = i;
                break;
            }
        }
    __syncthreads();
    if (threadIdx.x == 0)
        c->token = s_token;
}

int samp_step7_queue(cudaStream_t st, struct samp_wpart *wp, struct samp_cut *cut,
                     const float *logits, int V, int chunk, int B, int n,
                     const struct samp_row *rows, const struct samp_part *part,
                     const float *cand_key, const int *cand_id)
{
    dim3 grid((unsigned)B, (unsigned)n);
    CS_CUDA_CHECK(cuda_launch(k_samp_weights, grid, SAMP_PT, 0, st, wp, cut, logits, V, chunk, rows,
                              part, B));
    CS_CUDA_CHECK(cuda_launch(k_samp_cut, n, SAMP_PT, 0, st, cut, wp, B, rows, part, cand_key,
                              cand_id));
    CS_CUDA_CHECK(cuda_launch(k_samp_cut_full, n, SAMP_THREADS, 0, st, cut, logits, V, rows));
    CS_CUDA_CHECK(cuda_launch(k_samp_keptsum, grid, SAMP_PT, 0, st, wp, cut, logits, V, chunk,
                              rows));
    CS_CUDA_CHECK(cuda_launch(k_samp_draw, n, SAMP_PT, 0, st, cut, wp, logits, V, chunk, B, rows));
    return CS_OK;
}
