/* attention_decode.cu - the decode half of kernels/ops.h attention on CUDA:
 * tokens whose sequence has one token in the step, over paged KV (F16 or
 * F32 elements), fp32 softmax and accumulation. Flash-decoding: block
 * (split s, kv head, decode token) covers split s of the token's context
 * (cs_attn_split_len: about 64 splits of 128 to 4096 positions, boundaries
 * depending on the token's position only) and writes an unnormalised
 * partial (acc, m, l); k_attn_combine merges a (token, head)'s splits in
 * split order.
 *
 * Inside a block the warps never wait for each other until the end: each
 * warp streams its own chunks of CHUNK positions of the split (warp w takes
 * chunks w, w + DEC_WARPS, ...), every lane holding 8 consecutive dims of a
 * row (a warp reads a 512-byte half row in one coalesced load), for all G
 * query heads of the kv head at once (each K/V row read once for the GQA
 * group). A chunk's G x CHUNK dot products are reduced across the warp with
 * one sum-scatter (lane l ends with score l of the chunk), the online
 * softmax runs per row on those lanes, and the probabilities are broadcast
 * back for P.V. The warps' partial states are merged in warp order at the
 * end, so the result depends on the position only (batch invariant).
 *
 * Two kernels run that one arithmetic (dec_block) and differ only in where a
 * chunk's rows come from:
 *  - k_attn_decode_pipe (F16 KV, sm_80+): each warp owns a ring of
 *    DEC_NSTAGE chunk slots in shared memory that cp.async fills, and keeps
 *    DEC_NSTAGE - 1 chunks (16 KB at 3) in flight while it computes on one;
 *    each lane reads its 16 bytes of a row back with one shared load. Why:
 *    the register kernel has about one chunk (4 KB of K or V) per warp in
 *    flight, its K and V arrays take 64 registers and leave no room for
 *    more, and at 32K it read 2.4 TB/s of the H200's 4.4 (55 us per layer
 *    against a ~30 us floor); Little's law wants 32 KB or more in flight per
 *    SM. Measured on an H200 (docs/PERF.md, fifth session, 9B shape, one
 *    token): 32K context 0.0465 ms per layer (2.9 TB/s of KV) against the
 *    register kernel's 0.0553; 4K 0.0136 against 0.0154.
 *  - k_attn_decode (F32 KV; or no cp.async in the loaded code, or too little
 *    shared memory: dec_pipe_ready): the rows go straight from global memory
 *    into registers, V of a chunk in flight during its scores and the next
 *    chunk's K during its P.V.
 * Both give the same bits (tests/gpu/test_attention_decode.c compares them).
 *
 * Why this shape: the kernel before these staged 32-position tiles through
 * shared memory with four barriers per tile and one warp per query row, each
 * converting every K/V element for itself; on an H200 it read a 32K context
 * at ~1.2 TB/s, issue-bound at 25% occupancy (docs/PERF.md). Positions whose
 * page is out of range read as zeros (no out-of-bounds). */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../exact_math.h"
#include "attention_decode.h"
#include "cp_async.cuh"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

/* Build-time tuning, -D on the nvcc line to time variants: DEC_WARPS warps
 * per block (both kernels; at most 5: the register kernel's static acc, 8 KB
 * per warp at G 8, must fit in 48 KB); DEC_NSTAGE chunk slots per warp of
 * the cp.async kernel (2 or more: DEC_NSTAGE - 1 chunks in flight while one
 * is computed on; 3: 96 KB per block at G 3-4, two blocks per H200 SM; 2
 * measured the same at 9B and 4 slower, docs/PERF.md); DEC_PIPE_MAXB the most blocks per SM its
 * launch bounds ask for (a register cap of 65536 / (32 DEC_WARPS x blocks)). */
#ifndef DEC_WARPS
#define DEC_WARPS 4
#endif
#ifndef DEC_NSTAGE
#define DEC_NSTAGE 3
#endif
#ifndef DEC_PIPE_MAXB
#define DEC_PIPE_MAXB 3
#endif
#define DEC_D 256      /* head_dim: every Qwen3.5/3.6 size */
#define DEC_DPL 8      /* dims per lane */
/* Positions per chunk (fp16; half for fp32) and the register kernel's launch
 * bounds' blocks per SM. Measured on an H200 with the register kernel (9B
 * shape, 32K context, 256-position splits): 8 positions, no register cap
 * (~218 registers, 2 blocks per SM) 69 us per layer; 4 positions 81 us; 4
 * positions capped to 128 registers (spills) 68 us, but 91 us with the final
 * splits against 55. */
#define DEC_CH 8
#define DEC_MINB 1
#if DEC_NSTAGE < 2
#error "DEC_NSTAGE: at least 2 slots (one computed on, one in flight)"
#endif
#if DEC_WARPS < 1 || DEC_WARPS > 5
#error "DEC_WARPS: 1 to 5 (the register kernel's static shared memory)"
#endif
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

/* The C positions [p0, p0 + C) of sequence seq, kv head h, row by row:
 * f(j, ok, src) with src this lane's 8 elements of K (which = 0) or V (1) of
 * position p0 + j; ok is false at or past p_end or where the page is out of
 * range (the row reads as zeros, src must not be read). p0 is a multiple of
 * C. */
template <typename T, int C, typename F>
static __device__ __forceinline__ void chunk_rows(const struct dec_args &a, int seq, int h, int p0,
                                                  int p_end, int which, int lane, F f)
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
        for (int j = 0; j < C; j++)
            f(j, ok && p0 + j < p_end, base + (size_t)j * row);
        return;
    }
#pragma unroll
    for (int j = 0; j < C; j++) {
        int p = p0 + j, pi = p / a.page_size;
        int pg = p < p_end && pi < a.max_pages ? pt[pi] : -1;
        bool ok = pg >= 0 && pg < a.n_pages;
        f(j, ok, pages + (size_t)pg * page + off + (size_t)(p - pi * a.page_size) * row);
    }
}

/* What a warp's loop needs to find its rows: sequence, kv head, the split's
 * end, lane. */
struct dec_span {
    int seq, h, p_end, lane;
};

/* K/V source of the register kernel: a chunk's rows are loaded from global
 * memory into registers, V of chunk c during c's scores and K of the warp's
 * next chunk during c's P.V (the hooks are called at those points). */
template <typename T, int C>
struct dec_src_regs {
    kv8<T> kr[C], vr[C];

    __device__ __forceinline__ void fetch(kv8<T> (&r)[C], const struct dec_args &a,
                                          const struct dec_span &w, int p0, int which)
    {
        chunk_rows<T, C>(a, w.seq, w.h, p0, w.p_end, which, w.lane,
                         [&](int j, bool ok, const T *src) {
                             if (ok)
                                 kv8_load(r[j], src);
                             else
                                 kv8_zero(r[j]);
                         });
    }
    /* before the loop; p0: the warp's first chunk */
    __device__ __forceinline__ void start(const struct dec_args &a, const struct dec_span &w, int p0)
    {
        if (p0 < w.p_end)
            fetch(kr, a, w, p0, 0);
    }
    __device__ __forceinline__ void before_scores(const struct dec_args &a,
                                                  const struct dec_span &w, int p0)
    {
        fetch(vr, a, w, p0, 1);   /* flies during the scores */
    }
    __device__ __forceinline__ void after_scores(const struct dec_args &a,
                                                 const struct dec_span &w, int p0)
    {
        if (p0 + DEC_WARPS * C < w.p_end)   /* the next K flies during P.V */
            fetch(kr, a, w, p0 + DEC_WARPS * C, 0);
    }
    __device__ __forceinline__ void k_floats(float f[DEC_DPL], int j) const
    {
        kv8_floats(f, kr[j]);
    }
    __device__ __forceinline__ void v_floats(float f[DEC_DPL], int j) const
    {
        kv8_floats(f, vr[j]);
    }
    __device__ __forceinline__ void finish(void) {}
};

/* Shared memory of the cp.async kernel with GM rows per warp (fp16 KV).
 * Each warp owns WARP_BYTES: a ring of DEC_NSTAGE slots, a slot holding the
 * K rows then the V rows of one chunk (C rows of 512 bytes each), and at the
 * end the warp's acc [GM][DEC_D] floats for the merge (the ring is free by
 * then; without the reuse the merge's 16-32 KB would keep a second 96 KB
 * block off an H200 SM). MINB, the launch bounds' blocks per SM: as many as
 * the shared memory allows on an H200 (228 KB, 1 KB reserved per block), at
 * most DEC_PIPE_MAXB, and no more than registers allow without spilling (q
 * and acc are 16 GM registers per lane, the rest about 72: sm_90 used 96,
 * 137, 167 registers for GM 2, 4, 6). */
template <int GM>
struct dec_pipe_shape {
    static const int C = dec_shape<__half, GM, DEC_CH>::CHUNK;
    static const int ROW_BYTES = DEC_D * 2;
    static const int SLOT_BYTES = 2 * C * ROW_BYTES;
    static const int RING_BYTES = DEC_NSTAGE * SLOT_BYTES;
    static const int ACC_BYTES = GM * DEC_D * 4;
    static const int WARP_BYTES = RING_BYTES > ACC_BYTES ? RING_BYTES : ACC_BYTES;
    static const int BLOCK_BYTES = DEC_WARPS * WARP_BYTES;
    static const int FIT = (228 << 10) / (BLOCK_BYTES + (1 << 10) + DEC_WARPS * GM * 8);
    static const int REG_FIT = 65536 / (32 * DEC_WARPS * (16 * GM + 72));
    static const int MAXB = REG_FIT < DEC_PIPE_MAXB ? REG_FIT : DEC_PIPE_MAXB;
    static const int MINB = FIT < 1 ? 1 : FIT > MAXB ? MAXB : FIT;
};

/* K/V source of the cp.async kernel (fp16): the warp keeps DEC_NSTAGE - 1
 * chunks in flight while it computes on one. Chunk i of the warp lives in
 * slot i % DEC_NSTAGE; at chunk i the slot chunk i - 1 used is refilled with
 * chunk i + DEC_NSTAGE - 1, one commit group per chunk (empty past the
 * split's end, so the group count and the wait stay fixed). Each lane copies
 * and later reads the same 16 bytes of each row (its 8 dims), so a lane's
 * own wait_group makes its data visible and no barrier is needed for it; a
 * 512-byte row is written and read by the warp in 4 conflict-free
 * wavefronts. The __syncwarp before a refill orders the lanes' reads of the
 * old chunk before the copies that overwrite it, and the one at the end
 * before the acc that overwrites the ring. */
template <int GM>
struct dec_src_pipe {
    typedef dec_pipe_shape<GM> P;
    static const int C = P::C;
    const unsigned char *lane_row;   /* this lane's 16 bytes of slot 0, row 0 */
    uint32_t lane_row_s;             /* the same as a shared-window address (cp.async) */
    int cur;                         /* slot of the chunk being computed on */

    __device__ __forceinline__ dec_src_pipe(unsigned char *warp_ring, int lane)
    {
        lane_row = warp_ring + lane * 16;
        lane_row_s = (uint32_t)__cvta_generic_to_shared(lane_row);
        cur = DEC_NSTAGE - 1;
    }
    /* the chunk at p0 (nothing at or past the split's end) into slot, as one group */
    __device__ __forceinline__ void issue(const struct dec_args &a, const struct dec_span &w,
                                          int p0, int slot)
    {
        if (p0 < w.p_end) {
            uint32_t dst = lane_row_s + slot * P::SLOT_BYTES;
            size_t v_off = (size_t)a.page_size * a.n_kv * DEC_D;   /* V rows follow K in a page */
            chunk_rows<__half, C>(a, w.seq, w.h, p0, w.p_end, 0, w.lane,
                                  [&](int j, bool ok, const __half *k) {
                                      const __half *src = ok ? k : (const __half *)a.pages;
                                      cp_async16(dst + j * P::ROW_BYTES, src, ok ? 16 : 0);
                                      cp_async16(dst + (C + j) * P::ROW_BYTES,
                                                 ok ? k + v_off : src, ok ? 16 : 0);
                                  });
        }
        cp_async_commit();
    }
    __device__ __forceinline__ void start(const struct dec_args &a, const struct dec_span &w, int p0)
    {
#pragma unroll
        for (int i = 0; i < DEC_NSTAGE - 1; i++)
            issue(a, w, p0 + i * DEC_WARPS * C, i);
    }
    __device__ __forceinline__ void before_scores(const struct dec_args &a,
                                                  const struct dec_span &w, int p0)
    {
        __syncwarp();   /* the lanes are done reading slot cur (chunk i - 1) */
        issue(a, w, p0 + (DEC_NSTAGE - 1) * DEC_WARPS * C, cur);
        cur = cur + 1 == DEC_NSTAGE ? 0 : cur + 1;
        cp_async_wait<DEC_NSTAGE - 1>();   /* chunk i has landed */
    }
    __device__ __forceinline__ void after_scores(const struct dec_args &, const struct dec_span &,
                                                 int)
    {
    }
    __device__ __forceinline__ void k_floats(float f[DEC_DPL], int j) const
    {
        kv8<__half> r;
        r.v = *(const int4 *)(lane_row + cur * P::SLOT_BYTES + j * P::ROW_BYTES);
        kv8_floats(f, r);
    }
    __device__ __forceinline__ void v_floats(float f[DEC_DPL], int j) const
    {
        kv8<__half> r;
        r.v = *(const int4 *)(lane_row + cur * P::SLOT_BYTES + (C + j) * P::ROW_BYTES);
        kv8_floats(f, r);
    }
    __device__ __forceinline__ void finish(void)
    {
        cp_async_wait<0>();   /* only empty groups are left; nothing may land on the acc */
        __syncwarp();
    }
};

/* The work of block (split, kv head, decode token), GM >= a.group rows per
 * warp, K/V rows from src (either kernel: the arithmetic is this one code).
 * s_acc: warp w's acc [GM][DEC_D] at s_acc + w * ACC_STRIDE.
 * Partials: acc [dec][n_heads][max_splits][D], ml [dec][n_heads][max_splits]. */
template <typename T, int GM, int CH, int ACC_STRIDE, typename Src>
static __device__ __forceinline__ void dec_block(const struct dec_args &a, Src &src, float *s_acc,
                                                 float2 (*s_ml)[GM])
{
    typedef dec_shape<T, GM, CH> S;
    const int C = S::CHUNK;
    int s = blockIdx.x, h = blockIdx.y, di = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = a.dec[di], g = a.group;
    int qpos = a.pos[t];
    int len = cs_attn_split_len(qpos);
    int p_begin = s * len, p_end = min(p_begin + len, qpos + 1);
    if (p_begin >= p_end)
        return;
    struct dec_span span = {a.seq_of[t], h, p_end, lane};
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
    int p0 = p_begin + warp * C;
    src.start(a, span, p0);
    for (; p0 < p_end; p0 += DEC_WARPS * C) {
        src.before_scores(a, span, p0);
        float sv[S::N];
#pragma unroll
        for (int j = 0; j < C; j++) {
            float kf[DEC_DPL];
            src.k_floats(kf, j);
#pragma unroll
            for (int r = 0; r < S::GP; r++) {
                float sum = 0.0f;
                if (r < GM) {
#pragma unroll
                    for (int d = 0; d < DEC_DPL; d++)   /* pinned: kernels/cpu/attention.c */
                        sum = __fmaf_rn(q[r][d], kf[d], sum);
                }
                sv[r * C + j] = sum;
            }
        }
        float sc = warp_sum_scatter<S::N>(sv, lane);
        src.after_scores(a, span, p0);
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
        /* xm_exp_nonpos (exact_math.h; arguments <= 0), not expf: the CPU
         * backend reproduces its bits (kernels/cpu/attention.c). It costs
         * ~17 instructions per score against ~2 for fast math's expf
         * (ex2.approx): measured -2% of the 9B decode at 32K (docs/PERF.md). */
        float p = mn == -INFINITY ? 0.0f : xm_exp_nonpos(sc - mn);
        float alpha = mo == -INFINITY ? 0.0f : xm_exp_nonpos(mo - mn);
        float ps = p;
#pragma unroll
        for (int o = C / 2; o > 0; o >>= 1)
            ps += __shfl_xor_sync(CS_FULL_MASK, ps, o);
#pragma unroll
        for (int r = 0; r < GM; r++) {   /* every lane takes each row's update */
            float ar = __shfl_sync(CS_FULL_MASK, alpha, r * C);
            m[r] = __shfl_sync(CS_FULL_MASK, mn, r * C);
            l[r] = __fmaf_rn(l[r], ar, __shfl_sync(CS_FULL_MASK, ps, r * C));
            /* __fmul_rn: else acc * ar + pr * v (below) may contract either way */
#pragma unroll
            for (int d = 0; d < DEC_DPL; d++)
                acc[r][d] = __fmul_rn(acc[r][d], ar);
        }
#pragma unroll
        for (int j = 0; j < C; j++) {
            float vf[DEC_DPL];
            src.v_floats(vf, j);
#pragma unroll
            for (int r = 0; r < GM; r++) {
                float pr = __shfl_sync(CS_FULL_MASK, p, r * C + j);
#pragma unroll
                for (int d = 0; d < DEC_DPL; d++)
                    acc[r][d] = __fmaf_rn(pr, vf[d], acc[r][d]);
            }
        }
    }
    src.finish();
    /* merge the warps' states in warp order */
#pragma unroll
    for (int r = 0; r < GM; r++) {
        float4 *o = (float4 *)&s_acc[warp * ACC_STRIDE + r * DEC_D + lane * DEC_DPL];
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
            float wt = xm_exp_nonpos(ml.x - M);
            /* pinned: 0 + a b + c d may contract either way */
            o = __fmaf_rn(s_acc[w * ACC_STRIDE + r * DEC_D + d], wt, o);
            L = __fmaf_rn(ml.y, wt, L);
        }
        size_t idx = ((size_t)di * a.n_heads + h * g + r) * a.max_splits + s;
        a.part_acc[idx * DEC_D + d] = o;
        if (d == 0)
            a.part_ml[idx] = make_float2(M, L);
    }
}

/* The register kernel: any KV type, any architecture. */
template <typename T, int GM, int CH, int MINB>
static __global__ void __launch_bounds__(DEC_WARPS * 32, MINB) k_attn_decode(struct dec_args a)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    __shared__ __align__(16) float s_acc[DEC_WARPS][GM][DEC_D];
    __shared__ float2 s_ml[DEC_WARPS][GM];
    dec_src_regs<T, dec_shape<T, GM, CH>::CHUNK> src;
    dec_block<T, GM, CH, GM * DEC_D>(a, src, &s_acc[0][0][0], s_ml);
}

/* The cp.async kernel: fp16 KV, sm_80+, dec_pipe_shape<GM>::BLOCK_BYTES of
 * dynamic shared memory. */
template <int GM>
static __global__ void __launch_bounds__(DEC_WARPS * 32, dec_pipe_shape<GM>::MINB)
    k_attn_decode_pipe(struct dec_args a)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    extern __shared__ __align__(16) unsigned char dec_ring[];
    __shared__ float2 s_ml[DEC_WARPS][GM];
    typedef dec_pipe_shape<GM> P;
    dec_src_pipe<GM> src(dec_ring + (threadIdx.x >> 5) * P::WARP_BYTES, threadIdx.x & 31);
    dec_block<__half, GM, DEC_CH, P::WARP_BYTES / 4>(a, src, (float *)dec_ring, s_ml);
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
            s_w[s - c0] = ml.x == -INFINITY ? 0.0f : xm_exp_nonpos(ml.x - M);
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
                L = __fmaf_rn(s_l[i], w, L);   /* pinned, as in dec_block's merge */
                o = __fmaf_rn(av[u], w, o);
            }
        }
    }
    out[(size_t)t * n_heads * D + (size_t)qh * D + d] = L > 0.0f ? __fdiv_rn(o, L) : 0.0f;
}

/* Whether the cp.async kernel for GM rows per warp runs on c's device:
 * its loaded code was built for sm_80+ (cuda_code_arch: a cc 7.x device, or
 * a newer one running PTX of an older target, has the synchronous stand-in),
 * a block may have its shared memory,
 * and an SM holds the blocks its launch bounds were sized for (MINB, from an
 * H200's 228 KB: where fewer fit, e.g. two 96 KB blocks on an A100's 164
 * KB, it would run at half the register kernel's occupancy, untimed). Else
 * the register kernel. Asked, and the attribute set, once per context and
 * instance. */
template <int GM>
static bool dec_pipe_ready(struct cuda_ctx *c)
{
    typedef dec_pipe_shape<GM> P;
    signed char *st = &c->dec_pipe[GM / 2 - 1];   /* GM is 2, 4, 6 or 8 */
    if (c->dec_pipe_off)
        return false;
    if (*st == 0) {
        struct cudaFuncAttributes fa;
        int per_sm = 0, reserved = 0;
        *st = -1;
        if (!c->smem_optin &&
            cudaDeviceGetAttribute(&c->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                   c->device) != cudaSuccess)
            c->smem_optin = 0;
        if (cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                   c->device) == cudaSuccess &&
            cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock,
                                   c->device) == cudaSuccess &&
            cudaFuncGetAttributes(&fa, k_attn_decode_pipe<GM>) == cudaSuccess) {
            size_t block = P::BLOCK_BYTES + fa.sharedSizeBytes;
            if (cuda_code_arch() >= 800 && (size_t)c->smem_optin >= block &&
                (size_t)per_sm >= P::MINB * (block + reserved) &&
                cudaFuncSetAttribute(k_attn_decode_pipe<GM>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     P::BLOCK_BYTES) == cudaSuccess)
                *st = 1;
        }
        (void)cudaGetLastError();   /* a refusal here only means the register kernel */
        LOG_DEBUG("cuda", "attention decode: rows per warp %d, cp.async kernel %s (%d bytes of "
                  "shared memory per block, %d blocks per SM; device allows %d per block, %d "
                  "per SM)", GM, *st > 0 ? "on" : "off", P::BLOCK_BYTES, P::MINB, c->smem_optin,
                  per_sm);
    }
    return *st > 0;
}

template <typename T, int GM>
static int dec_launch_gm(struct cuda_ctx *c, float *out, const struct dec_args &a, int n_dec)
{
    dim3 grid(a.max_splits, a.n_kv, n_dec);
    if (sizeof(T) == 2 && dec_pipe_ready<GM>(c))
        CS_CUDA_CHECK(cuda_launch(k_attn_decode_pipe<GM>, grid, DEC_WARPS * 32,
                                  (size_t)dec_pipe_shape<GM>::BLOCK_BYTES, c->stream, a));
    else
        CS_CUDA_CHECK(cuda_launch(k_attn_decode<T, GM, DEC_CH, DEC_MINB>, grid, DEC_WARPS * 32, 0,
                                  c->stream, a));
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

extern "C" void cuda_attn_decode_pipe_enable(struct cs_backend *be, bool on)
{
    cuda_ctx_of(be)->dec_pipe_off = !on;
}

extern "C" bool cuda_attn_decode_pipe_used(struct cs_backend *be)
{
    const struct cuda_ctx *c = cuda_ctx_of(be);
    for (int i = 0; i < 4; i++)
        if (c->dec_pipe[i] > 0)
            return true;
    return false;
}

extern "C" int cuda_attn_decode(struct cuda_ctx *c, float *out, const float *q, int q_token_stride,
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
