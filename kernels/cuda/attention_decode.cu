/* attention_decode.cu - the decode half of kernels/ops.h attention on CUDA:
 * tokens whose sequence has one token in the step, over paged KV (F16 or
 * F32 elements), fp32 softmax and accumulation. Flash-decoding: block
 * (split s, kv head, decode token) covers split s of the token's context
 * (cs_attn_split_len: about 64 splits of 128 to 4096 positions, boundaries
 * depending on the token's position only) and writes an unnormalised
 * partial (acc, m, l); k_attn_combine merges a (token, head)'s splits in
 * split order.
 *
 * Inside a block no shared memory stages K or V and nothing synchronises
 * until the end: each warp streams its own chunks of CHUNK positions of the
 * split (warp w takes chunks w, w + DEC_WARPS, ...) straight from global
 * memory into registers, every lane holding 8 consecutive dims of a row (a
 * warp reads a 512-byte half row in one coalesced load), for all G query
 * heads of the kv head at once (each K/V row read once for the GQA group).
 * A chunk's G x CHUNK dot products are reduced across the warp with one
 * sum-scatter (lane l ends with score l of the chunk), the online softmax
 * runs per row on those lanes, and the probabilities are broadcast back for
 * P.V. V of a chunk is in flight during its scores and the next chunk's K
 * during its P.V. The warps' partial states are merged in warp order at the
 * end, so the result depends on the position only (batch invariant).
 *
 * Why: the previous kernel staged 32-position tiles through shared memory
 * with four barriers per tile and one warp per query row, each converting
 * every K/V element for itself; on an H200 it read a 32K context at ~1.2
 * TB/s, issue-bound at 25% occupancy (docs/PERF.md). Positions whose page is
 * out of range read as zeros (no out-of-bounds). */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "attention_decode.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define DEC_WARPS 4
#define DEC_D 256      /* head_dim: every Qwen3.5/3.6 size */
#define DEC_DPL 8      /* dims per lane */
/* Positions per chunk (fp16; half for fp32) and the launch bounds' blocks
 * per SM. Measured on an H200 (9B shape, 32K context, 256-position splits):
 * 8 positions, no register cap (~218 registers, 2 blocks per SM) 69 us per
 * layer; 4 positions 81 us; 4 positions capped to 128 registers (spills) 68
 * us, but 91 us with the final splits against 55. */
#define DEC_CH 8
#define DEC_MINB 1
#define DEC_PART_MAX_BYTES ((size_t)256 << 20)

struct dec_args {
    const void *pages;
    int n_pages, page_size, n_kv;
    const float *q;
    int q_ts, q_hs, n_heads, group;
    float scale;
    const int32_t *pos, *seq_of, *page_table, *dec;
    int max_pages, max_splits;
    float *part_acc;
    float2 *part_ml;
};

/* A lane's 8 elements of one K or V row, as loaded. */
template <typename T> struct kv8;
template <> struct kv8<__half> {
    int4 v;
};
template <> struct kv8<float> {
    int4 v[2];
};

static __device__ __forceinline__ void kv8_load(kv8<__half> &r, const __half *src)
{
    r.v = __ldg((const int4 *)src);
}
static __device__ __forceinline__ void kv8_load(kv8<float> &r, const float *src)
{
    r.v[0] = __ldg((const int4 *)src);
    r.v[1] = __ldg((const int4 *)src + 1);
}
static __device__ __forceinline__ void kv8_zero(kv8<__half> &r)
{
    r.v = make_int4(0, 0, 0, 0);
}
static __device__ __forceinline__ void kv8_zero(kv8<float> &r)
{
    r.v[0] = r.v[1] = make_int4(0, 0, 0, 0);
}
static __device__ __forceinline__ float2 half2_bits_to_float2(int w)
{
    return make_float2(__half2float(__ushort_as_half((unsigned short)(w & 0xffff))),
                       __half2float(__ushort_as_half((unsigned short)((unsigned)w >> 16))));
}
static __device__ __forceinline__ void kv8_floats(float f[8], const kv8<__half> &r)
{
    float2 a = half2_bits_to_float2(r.v.x), b = half2_bits_to_float2(r.v.y);
    float2 c = half2_bits_to_float2(r.v.z), d = half2_bits_to_float2(r.v.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
    f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}
static __device__ __forceinline__ void kv8_floats(float f[8], const kv8<float> &r)
{
    f[0] = __int_as_float(r.v[0].x), f[1] = __int_as_float(r.v[0].y);
    f[2] = __int_as_float(r.v[0].z), f[3] = __int_as_float(r.v[0].w);
    f[4] = __int_as_float(r.v[1].x), f[5] = __int_as_float(r.v[1].y);
    f[6] = __int_as_float(r.v[1].z), f[7] = __int_as_float(r.v[1].w);
}

/* Rows (query heads) GM held per warp, padded to a power of two GP for the
 * reduction, and CHUNK positions per chunk so that GP x CHUNK <= 32 scores
 * are reduced at once (CHUNK <= 8 for fp16, <= 4 for fp32: registers). */
template <typename T, int GM, int CH>
struct dec_shape {
    static const int GP = GM <= 1 ? 1 : GM <= 2 ? 2 : GM <= 4 ? 4 : 8;
    static const int CMAX = sizeof(T) == 2 ? CH : CH / 2;
    static const int CHUNK = 32 / GP < CMAX ? 32 / GP : CMAX;
    static const int N = GP * CHUNK;
};

/* Sum over the warp of N values per lane (N a power of two <= 32): lane l
 * gets the sum of v[l % N]. The lanes that share l % N are summed with a
 * butterfly, then the N values are scattered with N - 1 shuffles. */
template <int N>
static __device__ __forceinline__ float warp_sum_scatter(float (&v)[N], int lane)
{
#pragma unroll
    for (int k = 0; k < 5; k++) {   /* offsets 16, 8, .., 1 (a fixed count: fully unrolled) */
        const int o = 16 >> k;
        if (o >= N) {
#pragma unroll
            for (int i = 0; i < N; i++)
                v[i] += __shfl_xor_sync(CS_FULL_MASK, v[i], o);
            continue;
        }
        bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            if (i >= o)
                break;
            float send = upper ? v[i] : v[i + o];
            float keep = upper ? v[i + o] : v[i];
            v[i] = keep + __shfl_xor_sync(CS_FULL_MASK, send, o);
        }
    }
    return v[0];
}

/* This lane's 8 elements of K (which = 0) or V (1) for the C positions
 * [p0, p0 + C) of sequence seq, kv head h; positions at or past p_end, or
 * whose page is out of range, read as zeros. p0 is a multiple of C. */
template <typename T, int C>
static __device__ __forceinline__ void chunk_fetch(kv8<T> (&r)[C], const struct dec_args &a,
                                                   int seq, int h, int p0, int p_end, int which,
                                                   int lane)
{
    size_t row = (size_t)a.n_kv * DEC_D;
    size_t page = 2 * (size_t)a.page_size * row;
    const T *pages = (const T *)a.pages;
    const int32_t *pt = a.page_table + (size_t)seq * a.max_pages;
    size_t off = (size_t)which * a.page_size * row + (size_t)h * DEC_D + lane * DEC_DPL;
    if (a.page_size % C == 0) {   /* the chunk lies in one page: one lookup */
        int pi = p0 / a.page_size;
        int pg = pi < a.max_pages ? pt[pi] : -1;
        bool ok = pg >= 0 && pg < a.n_pages;
        const T *base = pages + (size_t)(ok ? pg : 0) * page + off +
                        (size_t)(p0 - pi * a.page_size) * row;
#pragma unroll
        for (int j = 0; j < C; j++) {
            if (ok && p0 + j < p_end)
                kv8_load(r[j], base + (size_t)j * row);
            else
                kv8_zero(r[j]);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < C; j++) {
        int p = p0 + j, pi = p / a.page_size;
        int pg = p < p_end && pi < a.max_pages ? pt[pi] : -1;
        if (pg >= 0 && pg < a.n_pages)
            kv8_load(r[j], pages + (size_t)pg * page + off + (size_t)(p - pi * a.page_size) * row);
        else
            kv8_zero(r[j]);
    }
}

/* Block (split, kv head, decode token); GM >= a.group rows per warp.
 * Partials: acc [dec][n_heads][max_splits][D], ml [dec][n_heads][max_splits]. */
template <typename T, int GM, int CH, int MINB>
static __global__ void __launch_bounds__(DEC_WARPS * 32, MINB) k_attn_decode(struct dec_args a)
{
    typedef dec_shape<T, GM, CH> S;
    const int C = S::CHUNK;
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ __align__(16) float s_acc[DEC_WARPS][GM][DEC_D];
    __shared__ float2 s_ml[DEC_WARPS][GM];
    int s = blockIdx.x, h = blockIdx.y, di = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = a.dec[di], g = a.group;
    int qpos = a.pos[t];
    int len = cs_attn_split_len(qpos);
    int p_begin = s * len, p_end = min(p_begin + len, qpos + 1);
    if (p_begin >= p_end)
        return;
    int seq = a.seq_of[t];
    float q[GM][DEC_DPL], acc[GM][DEC_DPL], m[GM], l[GM];
#pragma unroll
    for (int r = 0; r < GM; r++) {
        const float4 *qr = (const float4 *)(a.q + (size_t)t * a.q_ts + (size_t)(h * g + r) * a.q_hs +
                                            lane * DEC_DPL);
        float4 x0 = make_float4(0, 0, 0, 0), x1 = x0;
        if (r < g)
            x0 = qr[0], x1 = qr[1];
        q[r][0] = x0.x * a.scale, q[r][1] = x0.y * a.scale;
        q[r][2] = x0.z * a.scale, q[r][3] = x0.w * a.scale;
        q[r][4] = x1.x * a.scale, q[r][5] = x1.y * a.scale;
        q[r][6] = x1.z * a.scale, q[r][7] = x1.w * a.scale;
#pragma unroll
        for (int d = 0; d < DEC_DPL; d++)
            acc[r][d] = 0.0f;
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    /* the score this lane holds after the reduction: row ri, position ci */
    int ri = (lane % S::N) / C, ci = lane % C;
    kv8<T> kr[C], vr[C];
    int p0 = p_begin + warp * C;
    if (p0 < p_end)
        chunk_fetch<T, C>(kr, a, seq, h, p0, p_end, 0, lane);
    for (; p0 < p_end; p0 += DEC_WARPS * C) {
        chunk_fetch<T, C>(vr, a, seq, h, p0, p_end, 1, lane);   /* flies during the scores */
        float sv[S::N];
#pragma unroll
        for (int j = 0; j < C; j++) {
            float kf[DEC_DPL];
            kv8_floats(kf, kr[j]);
#pragma unroll
            for (int r = 0; r < S::GP; r++) {
                float sum = 0.0f;
                if (r < GM) {
#pragma unroll
                    for (int d = 0; d < DEC_DPL; d++)
                        sum += q[r][d] * kf[d];
                }
                sv[r * C + j] = sum;
            }
        }
        float sc = warp_sum_scatter<S::N>(sv, lane);
        if (p0 + DEC_WARPS * C < p_end)   /* the next K flies during P.V */
            chunk_fetch<T, C>(kr, a, seq, h, p0 + DEC_WARPS * C, p_end, 0, lane);
        if (ri >= g || p0 + ci >= p_end)
            sc = -INFINITY;
        float mo = -INFINITY;   /* this lane's row's running max */
#pragma unroll
        for (int r = 0; r < GM; r++)
            mo = ri == r ? m[r] : mo;
        float mn = sc;   /* the row's max over the chunk: lanes of a row differ in the low bits */
#pragma unroll
        for (int o = C / 2; o > 0; o >>= 1)
            mn = fmaxf(mn, __shfl_xor_sync(CS_FULL_MASK, mn, o));
        mn = fmaxf(mo, mn);
        float p = mn == -INFINITY ? 0.0f : expf(sc - mn);
        float alpha = mo == -INFINITY ? 0.0f : expf(mo - mn);
        float ps = p;
#pragma unroll
        for (int o = C / 2; o > 0; o >>= 1)
            ps += __shfl_xor_sync(CS_FULL_MASK, ps, o);
#pragma unroll
        for (int r = 0; r < GM; r++) {   /* every lane takes each row's update */
            float ar = __shfl_sync(CS_FULL_MASK, alpha, r * C);
            m[r] = __shfl_sync(CS_FULL_MASK, mn, r * C);
            l[r] = l[r] * ar + __shfl_sync(CS_FULL_MASK, ps, r * C);
#pragma unroll
            for (int d = 0; d < DEC_DPL; d++)
                acc[r][d] *= ar;
        }
#pragma unroll
        for (int j = 0; j < C; j++) {
            float vf[DEC_DPL];
            kv8_floats(vf, vr[j]);
#pragma unroll
            for (int r = 0; r < GM; r++) {
                float pr = __shfl_sync(CS_FULL_MASK, p, r * C + j);
#pragma unroll
                for (int d = 0; d < DEC_DPL; d++)
                    acc[r][d] += pr * vf[d];
            }
        }
    }
    /* merge the warps' states in warp order */
#pragma unroll
    for (int r = 0; r < GM; r++) {
        float4 *o = (float4 *)&s_acc[warp][r][lane * DEC_DPL];
        o[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        o[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
        if (lane == 0)
            s_ml[warp][r] = make_float2(m[r], l[r]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < g * DEC_D; i += DEC_WARPS * 32) {
        int r = i / DEC_D, d = i - r * DEC_D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++)
            M = fmaxf(M, s_ml[w][r].x);
        float o = 0.0f, L = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            float2 ml = s_ml[w][r];
            if (ml.x == -INFINITY)
                continue;
            float wt = expf(ml.x - M);
            o += s_acc[w][r][d] * wt;
            L += ml.y * wt;
        }
        size_t idx = ((size_t)di * a.n_heads + h * g + r) * a.max_splits + s;
        a.part_acc[idx * DEC_D + d] = o;
        if (d == 0)
            a.part_ml[idx] = make_float2(M, L);
    }
}

#define ATT_COMBINE_CHUNK 1024   /* splits whose weights sit in shared memory at once */
#define ATT_COMBINE_U 16         /* partial loads in flight per thread */

/* Combine: block (query head, decode token), one thread per dim, splits
 * merged in order. The splits' maximum and weights exp(m_s - M) are
 * computed by all threads at once into shared memory (each thread once
 * walked every split's (m, l) itself: at 32K, 129 dependent L2 round trips
 * and ~40 us per layer); each thread then adds its dim's partials in split
 * order, ATT_COMBINE_U loads in flight. */
static __global__ void k_attn_combine(float *out, const float *part_acc, const float2 *part_ml,
                                      const int32_t *dec, const int32_t *pos, int n_heads, int D,
                                      int max_splits)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ float s_w[ATT_COMBINE_CHUNK], s_l[ATT_COMBINE_CHUNK], scratch[32];
    __shared__ unsigned char s_skip[ATT_COMBINE_CHUNK];
    int qh = blockIdx.x, di = blockIdx.y;
    int t = dec[di];
    int n_s = cs_attn_n_splits(pos[t]);
    size_t base = ((size_t)di * n_heads + qh) * max_splits;
    float m = -INFINITY;
    for (int s = threadIdx.x; s < n_s; s += blockDim.x)
        m = fmaxf(m, part_ml[base + s].x);
    float M = block_max(m, scratch);   /* a maximum: the same in any order */
    int d = threadIdx.x;               /* blockDim.x == D */
    float L = 0.0f, o = 0.0f;
    for (int c0 = 0; c0 < n_s; c0 += ATT_COMBINE_CHUNK) {
        int c1 = min(n_s, c0 + ATT_COMBINE_CHUNK);
        __syncthreads();   /* the previous chunk's weights are no longer read */
        for (int s = c0 + threadIdx.x; s < c1; s += blockDim.x) {
            float2 ml = part_ml[base + s];
            s_skip[s - c0] = ml.x == -INFINITY;
            s_w[s - c0] = ml.x == -INFINITY ? 0.0f : expf(ml.x - M);
            s_l[s - c0] = ml.y;
        }
        __syncthreads();
        for (int s0 = c0; s0 < c1; s0 += ATT_COMBINE_U) {
            float av[ATT_COMBINE_U];
#pragma unroll
            for (int u = 0; u < ATT_COMBINE_U; u++)
                av[u] = s0 + u < c1 ? part_acc[(base + s0 + u) * D + d] : 0.0f;
#pragma unroll
            for (int u = 0; u < ATT_COMBINE_U; u++) {
                int i = s0 + u - c0;
                if (s0 + u >= c1)
                    break;
                if (s_skip[i])
                    continue;
                float w = s_w[i];
                L += s_l[i] * w;
                o += av[u] * w;
            }
        }
    }
    out[(size_t)t * n_heads * D + (size_t)qh * D + d] = L > 0.0f ? o / L : 0.0f;
}

template <typename T, int GM>
static int dec_launch_gm(struct cuda_ctx *c, float *out, const struct dec_args &a, int n_dec)
{
    dim3 grid(a.max_splits, a.n_kv, n_dec);
    CS_CUDA_CHECK(cuda_launch(k_attn_decode<T, GM, DEC_CH, DEC_MINB>, grid, DEC_WARPS * 32, 0, c->stream, a));
    CS_CUDA_CHECK(cuda_launch(k_attn_combine, dim3(a.n_heads, n_dec), DEC_D, 0, c->stream, out,
                              (const float *)a.part_acc, (const float2 *)a.part_ml, a.dec, a.pos,
                              a.n_heads, DEC_D, a.max_splits));
    return CS_OK;
}

template <typename T>
static int dec_launch(struct cuda_ctx *c, float *out, const struct dec_args &a, int n_dec)
{
    /* rows per warp rounded up to an instantiated size: each instance costs
     * compile time for every architecture */
    if (a.group <= 2)
        return dec_launch_gm<T, 2>(c, out, a, n_dec);
    if (a.group <= 4)
        return dec_launch_gm<T, 4>(c, out, a, n_dec);
    if (a.group <= 6)
        return dec_launch_gm<T, 6>(c, out, a, n_dec);
    if (a.group <= 8)
        return dec_launch_gm<T, 8>(c, out, a, n_dec);
    LOG_ERROR("cuda", "attention: GQA group %d too large (max 8)", a.group);
    return CS_EUNSUPPORTED;
}

int cuda_attn_decode(struct cuda_ctx *c, float *out, const float *q, int q_token_stride,
                     int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale)
{
    const struct cuda_batch *cb = &c->batch;
    if (kv->head_dim != DEC_D) {
        LOG_ERROR("cuda", "attention: head_dim %d unsupported (%d)", kv->head_dim, DEC_D);
        return CS_EUNSUPPORTED;
    }
    if (kv->kv_type != CS_DTYPE_F16 && kv->kv_type != CS_DTYPE_F32) {
        LOG_ERROR("cuda", "attention: KV type %u unsupported", kv->kv_type);
        return CS_EUNSUPPORTED;
    }
    struct dec_args a;
    a.pages = kv->pages;
    a.n_pages = kv->n_pages;
    a.page_size = kv->page_size;
    a.n_kv = kv->n_kv_heads;
    a.q = q;
    a.q_ts = q_token_stride;
    a.q_hs = q_head_stride;
    a.n_heads = n_heads;
    a.group = n_heads / kv->n_kv_heads;
    a.scale = scale;
    a.pos = cb->pos;
    a.seq_of = cb->seq_of;
    a.page_table = cb->page_table;
    a.max_pages = cb->max_pages;
    a.max_splits = cb->max_dec_splits;
    /* decode tokens in chunks so the partials stay under DEC_PART_MAX_BYTES */
    size_t per_tok = (size_t)n_heads * a.max_splits * (DEC_D + 2) * sizeof(float);
    int chunk = (int)(DEC_PART_MAX_BYTES / per_tok);
    chunk = chunk < 1 ? 1 : chunk > 65535 ? 65535 : chunk;   /* grid.z */
    chunk = chunk > cb->n_dec ? cb->n_dec : chunk;
    int rc = cuda_buffer_reserve((void **)&c->attn_part, &c->attn_part_cap, per_tok * chunk);
    if (rc != CS_OK)
        return rc;
    a.part_acc = c->attn_part;
    a.part_ml = (float2 *)(c->attn_part + (size_t)chunk * n_heads * a.max_splits * DEC_D);
    for (int d0 = 0; d0 < cb->n_dec && rc == CS_OK; d0 += chunk) {
        int n = cb->n_dec - d0 < chunk ? cb->n_dec - d0 : chunk;
        a.dec = cb->dec_tokens + d0;
        rc = kv->kv_type == CS_DTYPE_F16 ? dec_launch<__half>(c, out, a, n)
                                          : dec_launch<float>(c, out, a, n);
    }
    return rc;
}
