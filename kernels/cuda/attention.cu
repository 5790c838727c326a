/* attention.cu - causal GQA attention of kernels/ops.h on CUDA, over paged
 * KV (F16 or F32 elements), fp32 softmax and accumulation.
 *
 * One block (4 warps) works on one KV head and every query head of its GQA
 * group (G = n_heads / n_kv_heads), so each K/V row is read once for all of
 * them. K and V arrive in tiles of 32 positions in shared memory; each warp
 * owns up to RPW query rows (row = token x group head) with q, the running
 * max m, the sum l and the output accumulator in registers (online softmax).
 * A lane holds DPL = head_dim/32 dims of a row: dims 64*(i/2) + 2*lane + i%2,
 * so shared-memory reads are 2-element vectors.
 *
 * Prefill (a sequence with several tokens in the step): block (query tile
 * of up to CS_ATTN_QTILE consecutive tokens, kv head) runs over all
 * positions 0..max pos of the tile, masking each row causally, and writes
 * the normalised output; per sequence, so batch invariant (ops.h). Decode
 * tokens go to attention_decode.cu.
 * Positions whose page is out of range read as zeros (no out-of-bounds). */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "attention_decode.h"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define ATT_WARPS 4
#define ATT_TK 32

/* Two consecutive elements of a tile row as floats. */
static __device__ __forceinline__ float2 tile_pair(const float *row, int d)
{
    return *(const float2 *)(row + d);
}
static __device__ __forceinline__ float2 tile_pair(const __half *row, int d)
{
    return __half22float2(*(const __half2 *)(row + d));
}

static __device__ __forceinline__ int lane_dim(int lane, int i)
{
    return 64 * (i >> 1) + 2 * lane + (i & 1);
}

/* Sum-scatter: v[j] summed over the warp lands on lane j (31 shuffles). */
static __device__ __forceinline__ float warp_sum_scatter32(float v[32], int lane)
{
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) {
        bool upper = (lane & s) != 0;
#pragma unroll
        for (int i = 0; i < s; i++) {
            float send = upper ? v[i] : v[i + s];
            float keep = upper ? v[i + s] : v[i];
            v[i] = keep + __shfl_xor_sync(CS_FULL_MASK, send, s);
        }
    }
    return v[0];
}

struct att_args {
    const void *pages;
    int n_pages, page_size, n_kv, head_dim;
    const float *q;
    int q_ts, q_hs, n_heads, group;
    float scale;
    const int32_t *pos, *seq_of, *page_table;
    int max_pages;
};

/* A tile of TK rows of K or V is fetched into registers first (every load
 * of the tile in flight at once) and stored to shared memory later, so the
 * fetch of the next K or V tile overlaps the math on the current one
 * instead of stalling the block for a memory round trip per tile. */
template <typename T, int D>
struct tile_regs {
    static const int VEC = 16 / sizeof(T);                      /* elements per int4 */
    static const int N = ATT_TK * (D / VEC) / (ATT_WARPS * 32);  /* int4 per thread */
    int4 v[N];
};

/* Fetch TK rows of K (which = 0) or V (which = 1) of kv head h for positions
 * [p0, p0 + TK) of sequence seq; rows at or past p_end, or whose page is out
 * of range, read as zeros. */
template <typename T, int D>
static __device__ __forceinline__ void tile_fetch(tile_regs<T, D> &r, const struct att_args &a,
                                                  int seq, int h, int p0, int p_end, int which)
{
    const int vec = tile_regs<T, D>::VEC, per_row = D / vec;
    size_t row_elems = (size_t)a.n_kv * D;
    size_t page_elems = 2 * (size_t)a.page_size * row_elems;
    const T *pages = (const T *)a.pages;
    if (a.page_size % ATT_TK == 0 && p0 % ATT_TK == 0) {
        /* the tile lies in one page: one page-table lookup and one division
         * for the tile instead of one per load (the address arithmetic was
         * a large share of the decode kernel's instructions) */
        int pi = p0 / a.page_size;
        int pg = pi < a.max_pages ? a.page_table[(size_t)seq * a.max_pages + pi] : -1;
        bool ok = pg >= 0 && pg < a.n_pages;
        const T *base = pages + (size_t)(ok ? pg : 0) * page_elems +
                        (size_t)which * a.page_size * row_elems +
                        (size_t)(p0 - pi * a.page_size) * row_elems + (size_t)h * D;
#pragma unroll
        for (int it = 0; it < tile_regs<T, D>::N; it++) {
            int c = threadIdx.x + it * ATT_WARPS * 32;
            int j = c / per_row, e = (c - j * per_row) * vec;
            r.v[it] = make_int4(0, 0, 0, 0);
            if (ok && p0 + j < p_end)
                r.v[it] = __ldg((const int4 *)(base + (size_t)j * row_elems + e));
        }
        return;
    }
#pragma unroll
    for (int it = 0; it < tile_regs<T, D>::N; it++) {
        int c = threadIdx.x + it * ATT_WARPS * 32;
        int j = c / per_row, e = (c - j * per_row) * vec;
        int p = p0 + j;
        r.v[it] = make_int4(0, 0, 0, 0);
        if (p < p_end) {
            int pi = p / a.page_size;
            int pg = pi < a.max_pages ? a.page_table[(size_t)seq * a.max_pages + pi] : -1;
            if (pg >= 0 && pg < a.n_pages) {
                const T *src = pages + (size_t)pg * page_elems +
                               (size_t)which * a.page_size * row_elems +
                               (size_t)(p % a.page_size) * row_elems + (size_t)h * D + e;
                r.v[it] = __ldg((const int4 *)src);
            }
        }
    }
}

template <typename T, int D>
static __device__ __forceinline__ void tile_put(T *tile, const tile_regs<T, D> &r)
{
    const int vec = tile_regs<T, D>::VEC, per_row = D / vec;
#pragma unroll
    for (int it = 0; it < tile_regs<T, D>::N; it++) {
        int c = threadIdx.x + it * ATT_WARPS * 32;
        int j = c / per_row, e = (c - j * per_row) * vec;
        *(int4 *)(tile + j * D + e) = r.v[it];
    }
}

/* The online-softmax pass of one block over positions [p_begin, p_end):
 * rows r = warp + ATT_WARPS * k (k < RPW, r < n_rows) of query token
 * t0 + r / group, query head h * group + r % group. */
template <typename T, int D, int RPW>
struct att_state {
    float q[RPW][D / 32], acc[RPW][D / 32], m[RPW], l[RPW];
    int qpos[RPW];
};

template <typename T, int D, int RPW>
static __device__ void att_pass(att_state<T, D, RPW> &st, T *tile, const struct att_args &a,
                                int seq, int h, int t0, int n_rows, int p_begin, int p_end)
{
    const int DPL = D / 32;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < RPW; k++) {
        int r = warp + ATT_WARPS * k;
        int t = t0 + (r < n_rows ? r / a.group : 0);
        int qh = h * a.group + (r < n_rows ? r % a.group : 0);
        const float *qr = a.q + (size_t)t * a.q_ts + (size_t)qh * a.q_hs;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            st.q[k][i] = r < n_rows ? qr[lane_dim(lane, i)] * a.scale : 0.0f;
            st.acc[k][i] = 0.0f;
        }
        st.m[k] = -INFINITY;
        st.l[k] = 0.0f;
        st.qpos[k] = r < n_rows ? a.pos[t] : -1;
    }
    float p[RPW];
    tile_regs<T, D> fetched;
    if (p_begin < p_end)
        tile_fetch<T, D>(fetched, a, seq, h, p_begin, p_end, 0);
    for (int p0 = p_begin; p0 < p_end; p0 += ATT_TK) {
        tile_put<T, D>(tile, fetched);   /* K of this tile */
        __syncthreads();
        tile_fetch<T, D>(fetched, a, seq, h, p0, p_end, 1);   /* V flies during the scores */
#pragma unroll
        for (int k = 0; k < RPW; k++) {
            p[k] = 0.0f;
            if (warp + ATT_WARPS * k >= n_rows)
                continue;
            float s[32];
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const T *kr = tile + j * D;
                float sum = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i += 2) {
                    float2 kv = tile_pair(kr, lane_dim(lane, i));
                    sum += st.q[k][i] * kv.x + st.q[k][i + 1] * kv.y;
                }
                s[j] = sum;
            }
            float sc = warp_sum_scatter32(s, lane);
            int pj = p0 + lane;
            if (pj >= p_end || pj > st.qpos[k])
                sc = -INFINITY;
            float m_new = fmaxf(st.m[k], warp_max(sc));
            float pk = m_new == -INFINITY ? 0.0f : expf(sc - m_new);
            float alpha = st.m[k] == -INFINITY ? 0.0f : expf(st.m[k] - m_new);
            st.l[k] = st.l[k] * alpha + warp_sum(pk);
            st.m[k] = m_new;
#pragma unroll
            for (int i = 0; i < DPL; i++)
                st.acc[k][i] *= alpha;
            p[k] = pk;
        }
        __syncthreads();
        tile_put<T, D>(tile, fetched);   /* V of this tile */
        __syncthreads();
        if (p0 + ATT_TK < p_end)         /* the next K flies during P.V */
            tile_fetch<T, D>(fetched, a, seq, h, p0 + ATT_TK, p_end, 0);
#pragma unroll
        for (int k = 0; k < RPW; k++) {
            if (warp + ATT_WARPS * k >= n_rows)
                continue;
            for (int j = 0; j < 32; j++) {
                float pj = __shfl_sync(CS_FULL_MASK, p[k], j);
                const T *vr = tile + j * D;
#pragma unroll
                for (int i = 0; i < DPL; i += 2) {
                    float2 vv = tile_pair(vr, lane_dim(lane, i));
                    st.acc[k][i] += pj * vv.x;
                    st.acc[k][i + 1] += pj * vv.y;
                }
            }
        }
        __syncthreads();
    }
}

/* Prefill: block (query tile, kv head). out: [t][n_heads * D]. */
template <typename T, int D, int RPW>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attn_prefill(float *out, struct att_args a, const int2 *qtiles)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ __align__(16) T tile[ATT_TK * D];
    int2 qt = qtiles[blockIdx.x];
    int h = blockIdx.y;
    int t0 = qt.x, nt = qt.y;
    int seq = a.seq_of[t0];
    int p_end = 0;
    for (int i = 0; i < nt; i++)
        p_end = max(p_end, a.pos[t0 + i] + 1);
    att_state<T, D, RPW> st;
    int n_rows = nt * a.group;
    att_pass<T, D, RPW>(st, tile, a, seq, h, t0, n_rows, 0, p_end);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < RPW; k++) {
        int r = warp + ATT_WARPS * k;
        if (r >= n_rows)
            continue;
        int t = t0 + r / a.group, qh = h * a.group + r % a.group;
        float inv = st.l[k] > 0.0f ? 1.0f / st.l[k] : 0.0f;
        float *o = out + (size_t)t * a.n_heads * D + (size_t)qh * D;
#pragma unroll
        for (int i = 0; i < D / 32; i++)
            o[lane_dim(lane, i)] = st.acc[k][i] * inv;
    }
}

template <typename T, int D, int RPW>
static int attn_launch_rpw(struct cuda_ctx *c, float *out, const struct att_args &a)
{
    dim3 grid(c->batch.n_qtiles, a.n_kv);
    CS_CUDA_CHECK(cuda_launch(k_attn_prefill<T, D, RPW>, grid, ATT_WARPS * 32, 0, c->stream, out,
                              a, c->batch.qtiles));
    return CS_OK;
}

template <typename T, int D>
static int attn_launch(struct cuda_ctx *c, float *out, const struct att_args &a)
{
    int rpw = (CS_ATTN_QTILE * a.group + ATT_WARPS - 1) / ATT_WARPS;
    switch (rpw) {
    case 1: return attn_launch_rpw<T, D, 1>(c, out, a);
    case 2: return attn_launch_rpw<T, D, 2>(c, out, a);
    case 3: return attn_launch_rpw<T, D, 3>(c, out, a);
    case 4: return attn_launch_rpw<T, D, 4>(c, out, a);
    default:
        LOG_ERROR("cuda", "attention: GQA group %d too large (max %d)", a.group,
                  4 * ATT_WARPS / CS_ATTN_QTILE);
        return CS_EUNSUPPORTED;
    }
}

/* Every Qwen3.5/3.6 size has head_dim 256; the kernels take any multiple of
 * 64 as a template argument, instantiated only where needed (each instance
 * costs compile time for every architecture). */
static int attn_prefill(struct cuda_ctx *c, float *out, const struct att_args &a, uint32_t kv_type)
{
    if (a.head_dim != 256) {
        LOG_ERROR("cuda", "attention: head_dim %d unsupported (256)", a.head_dim);
        return CS_EUNSUPPORTED;
    }
    if (kv_type == CS_DTYPE_F16)
        return attn_launch<__half, 256>(c, out, a);
    if (kv_type == CS_DTYPE_F32)
        return attn_launch<float, 256>(c, out, a);
    LOG_ERROR("cuda", "attention: KV type %u unsupported", kv_type);
    return CS_EUNSUPPORTED;
}

int cuda_op_attention(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                      int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                      const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "attention");
    if (rc != CS_OK)
        return rc;
    if (kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads != 0) {
        LOG_ERROR("cuda", "attention: %d query heads over %d kv heads", n_heads, kv->n_kv_heads);
        return CS_EINVAL;
    }
    const struct cuda_batch *cb = &c->batch;
    struct att_args a;
    a.pages = kv->pages;
    a.n_pages = kv->n_pages;
    a.page_size = kv->page_size;
    a.n_kv = kv->n_kv_heads;
    a.head_dim = kv->head_dim;
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
    if (cb->n_qtiles > 0)
        rc = attn_prefill(c, out, a, kv->kv_type);
    if (rc == CS_OK && cb->n_dec > 0)
        rc = cuda_attn_decode(c, out, q, q_token_stride, q_head_stride, n_heads, kv, scale);
    return rc;
}
