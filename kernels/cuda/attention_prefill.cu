/* attention_prefill.cu - causal GQA attention for the prefill tokens of a
 * step (attention_prefill.h): a register-tiled FP32 flash-attention kernel,
 * FFMA only (the target GPUs' tensor cores are unusable), over paged KV of
 * F16 or F32 elements, head_dim 256. Over an F16 cache the default is the
 * int8 DP4A kernel of attention_prefill_q8.cuh (attn_numerics.h): the same
 * blocks, rows and tiles as described here, its accumulators in shared
 * memory so that two blocks share an SM, and on sm_80+ (pages holding whole
 * KV tiles) its chunks staged by cp.async into two buffers (apf_async_ready)
 * instead of through registers.
 *
 * Why: attention.cu's prefill kernel gives each warp a few query rows and
 * reduces every score across the warp with shuffles; it reads K/V from L2
 * once per 2 tokens and ran at ~10 TFLOP/s on an H200. Here a block works
 * like an SGEMM block: all ROWS = 4 * NTY query rows of a tile (row = token
 * x head of the kv head's GQA group) share every K/V tile staged in shared
 * memory, and each warp owns 8 rows of S = Q K^T and of the output O
 * (APF_RPT), so each shared-memory load feeds 8 to 32 FFMAs.
 *
 * Block = (query sub-tile, kv head, KV split); NTY * 16 threads (NW = NTY / 2
 * warps), warp w owns rows r_i = w + NW * i (i < 8), its lanes split the
 * tile's positions (S) and the head's dims (O).
 * - Host tiles are CS_ATTN_PTILE = 16 tokens of one sequence (ops_cuda.cu).
 *   A block takes TS tokens of one: TS * G <= ROWS rows (NTY 8 for G 1-2,
 *   12 for G 3, 5, 6, 16 for G 4, 7, 8: 16 tokens x 4 heads = 64 rows at
 *   the 9B shape, 2 blocks of 8 tokens x 6 heads = 48 rows at 27B).
 * - Shared memory (floats): Q [ROWS][256], scaled; a 16 KB staging buffer;
 *   P [ROWS][64]. 96 KB at NTY 16: within sm_70's opt-in limit. A warp reads
 *   Q and P rows as broadcasts (one address for all lanes).
 * - A KV tile is 64 positions, staged in 8 chunks of 4096 floats (F16 is
 *   converted once, on the store): 4 chunks of K transposed, [64 dims][64
 *   positions] (lane l reads float2 K^T[d][2l..2l+1], conflict-free, no
 *   padding), then 4 chunks of V, [16 positions][256 dims]. Chunk c + 1
 *   is fetched into registers while chunk c is used (one global round trip
 *   hidden behind ~1,000 FFMAs per thread).
 * - S: s[i][jj] = sum over d ascending of q[r_i][d] k[2 lane + jj][d]
 *   (fmaf), whole dot product in one thread, no cross-thread reduction.
 *   Online softmax per row over each KV tile: the tile's max and sum of a
 *   row are reduced over the warp by a fixed butterfly (tile_sum); m, l and
 *   alpha = exp(m_old - m_new) as in flash attention; P to shared memory.
 * - O += P V: lane owns 8 rows x 8 dims (dims 128k + 4 lane + 0..3), 64
 *   accumulators; per 4 positions 8 loads of P, 8 of V, 256 FFMAs.
 *   (Until 2026-12-03 a thread owned 4 rows x 4 positions and 4 rows x 16
 *   dims and both half-warps read every K and V vector: 0.33 shared
 *   wavefronts per FFMA against 0.28 now, by ncu. The bits are the same: every
 *   element's expression and order are unchanged.)
 * - Long contexts: KV splits of APF_SPLIT positions at fixed multiples
 *   (positions only), so a 512-token chunk late in a 32K prompt still fills
 *   the GPU. A row whose position is below APF_SPLIT has one split and its
 *   block writes the normalised output; other rows write an unnormalised
 *   partial (acc, m, l) per split, merged in split order by
 *   k_attn_prefill_combine. Blocks whose split starts past their last token
 *   exit (after the PDL wait). Partials live in c->apf_part, at most
 *   APF_PART_MAX_BYTES: the host tiles run in passes when more is needed.
 *
 * Batch invariance (kernels/ops.h): every operation on a row depends only on
 * its position and its sequence's KV: KV tiles and splits start at absolute
 * multiples of 64 and APF_SPLIT, a row's dot products, max and sum are the
 * same expression whatever slot the row has in its tile, masked positions
 * give p = 0 exactly (exp(-inf)), and a KV tile past a row's position leaves
 * its m, l, acc bit-identical (alpha = exp(0) = 1, acc + 0 * v). So a token
 * gives the same bits alone, in any batch and in any chunking of its prompt.
 * Positions at or past the tile's end, or whose page is out of range, read
 * as zeros. */
#include <cuda_fp16.h>

#include "../../common/gguf.h"
#include "../attn_numerics.h"
#include "../exact_math.h"
#include "attention_prefill.h"
#include "cp_async.cuh"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define APF_D 256                        /* head_dim */
#define APF_KT 64                        /* KV positions per tile */
#define APF_KC 64                        /* dims of a K chunk */
#define APF_VC 16                        /* positions of a V chunk */
#define APF_CHUNK (APF_KT * APF_KC)      /* floats staged at once (= APF_VC * APF_D) */
#define APF_SPLIT 2048                   /* KV positions per split */
#define APF_PART_MAX_BYTES ((size_t)256 << 20)
/* Blocks per SM the register allocation aims at. 1: ~220-250 registers, no
 * spills (8 warps per SM at 64 rows); 2 caps them at 128 and spills ~340 B
 * at NTY 16 (ptxas, CUDA 13): measure before changing. */
#ifndef APF_MIN_BLOCKS
#define APF_MIN_BLOCKS 1
#endif

struct apf_args {
    const void *pages;
    int n_pages, page_size, n_kv, max_pages;
    const float *q;
    int q_ts, q_hs, n_heads, group;
    int tok_per_block, subs;             /* tokens of a host tile per block, blocks per host tile */
    int n_splits;                        /* grid.z: splits of the longest context */
    float scale;
    const int32_t *pos, *seq_of, *page_table;
    const int2 *tiles;                   /* this pass's host tiles */
    const int32_t *k8, *v8;              /* int8 path: K and V rows as int8, 64 words each */
    const float *kd, *vd;                /* and their scales (attn_numerics.h) */
};

/* ---- staging of K and V chunks ---- */

/* One chunk in registers (int4 of raw elements), fetched a chunk ahead. */
template <typename T, int NT>
struct apf_stage {
    static const int VEC = 16 / (int)sizeof(T);              /* elements per int4 */
    static const int V_N = APF_VC * APF_D / VEC;             /* int4 of a V chunk */
    static const int K_PAIRS = APF_KT * APF_KC / (2 * VEC);  /* int4 pairs (32 B) of a K chunk */
    static const int V_IT = (V_N + NT - 1) / NT;
    static const int K_IT = (K_PAIRS + NT - 1) / NT;
    static const int N = V_IT > 2 * K_IT ? V_IT : 2 * K_IT;
    int4 v[N];
};

/* Row pos (K: which 0, V: 1) of kv head h of sequence seq, or NULL when its
 * page is out of range. */
template <typename T>
static __device__ __forceinline__ const T *apf_row(const struct apf_args &a, int seq, int h,
                                                   int pos, int which)
{
    int pi = pos / a.page_size;
    int pg = pi < a.max_pages ? a.page_table[(size_t)seq * a.max_pages + pi] : -1;
    if (pg < 0 || pg >= a.n_pages)
        return NULL;
    size_t row = (size_t)a.n_kv * APF_D;
    return (const T *)a.pages + (size_t)pg * 2 * a.page_size * row +
           (size_t)which * a.page_size * row + (size_t)(pos - pi * a.page_size) * row +
           (size_t)h * APF_D;
}

/* Fetch chunk ci (0-3: K dims [64 ci, 64 ci + 64); 4-7: V positions
 * p0 + 16 (ci - 4) + [0, 16)) of the KV tile at p0; positions >= p_end read
 * as zeros. A K pair is 32 B of one position (a full sector); the 32 lanes of
 * a warp take 32 consecutive positions, so the transposed stores of
 * apf_put are conflict-free. */
template <typename T, int NT>
static __device__ __forceinline__ void apf_fetch(apf_stage<T, NT> &r, const struct apf_args &a,
                                                 int seq, int h, int p0, int ci, int p_end)
{
    typedef apf_stage<T, NT> S;
    const int vec = S::VEC;
    size_t row = (size_t)a.n_kv * APF_D;
    /* page sizes that are multiples of 64 hold a whole KV tile: one lookup */
    bool one_page = a.page_size % APF_KT == 0;
    int which = ci < 4 ? 0 : 1;
    const T *base = one_page ? apf_row<T>(a, seq, h, p0, which) : NULL;
    if (ci < 4) {
#pragma unroll
        for (int it = 0; it < S::K_IT; it++) {
            int c = threadIdx.x + it * NT;
            int j = c % APF_KT, e = ci * APF_KC + (c / APF_KT) * 2 * vec;
            r.v[2 * it] = r.v[2 * it + 1] = make_int4(0, 0, 0, 0);
            if (c < S::K_PAIRS && p0 + j < p_end) {
                const T *src = one_page ? (base ? base + j * row : NULL)
                                        : apf_row<T>(a, seq, h, p0 + j, 0);
                if (src) {
                    r.v[2 * it] = __ldg((const int4 *)(src + e));
                    r.v[2 * it + 1] = __ldg((const int4 *)(src + e + vec));
                }
            }
        }
        return;
    }
    const int per_row = APF_D / vec;
#pragma unroll
    for (int it = 0; it < S::V_IT; it++) {
        int c = threadIdx.x + it * NT;
        int j = (ci - 4) * APF_VC + c / per_row, e = (c % per_row) * vec;
        r.v[it] = make_int4(0, 0, 0, 0);
        if (c < S::V_N && p0 + j < p_end) {
            const T *src = one_page ? (base ? base + j * row : NULL)
                                    : apf_row<T>(a, seq, h, p0 + j, 1);
            if (src)
                r.v[it] = __ldg((const int4 *)(src + e));
        }
    }
}

/* The VEC elements of an int4 as floats. */
static __device__ __forceinline__ void apf_unpack(const int4 &v, float *f, const float *)
{
    f[0] = __int_as_float(v.x), f[1] = __int_as_float(v.y);
    f[2] = __int_as_float(v.z), f[3] = __int_as_float(v.w);
}
static __device__ __forceinline__ void apf_unpack(const int4 &v, float *f, const __half *)
{
    const __half2 *h = (const __half2 *)&v;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 x = __half22float2(h[k]);
        f[2 * k] = x.x, f[2 * k + 1] = x.y;
    }
}

/* Store the fetched chunk ci into buf as floats: K transposed [dim][position],
 * V as [position][dim]. */
template <typename T, int NT>
static __device__ __forceinline__ void apf_put(float *buf, const apf_stage<T, NT> &r, int ci)
{
    typedef apf_stage<T, NT> S;
    const int vec = S::VEC;
    if (ci < 4) {
#pragma unroll
        for (int it = 0; it < S::K_IT; it++) {
            int c = threadIdx.x + it * NT;
            if (c >= S::K_PAIRS)
                break;
            int j = c % APF_KT, e = (c / APF_KT) * 2 * vec;
            float f[2 * vec];
            apf_unpack(r.v[2 * it], f, (const T *)0);
            apf_unpack(r.v[2 * it + 1], f + vec, (const T *)0);
#pragma unroll
            for (int k = 0; k < 2 * vec; k++)
                buf[(e + k) * APF_KT + j] = f[k];
        }
        return;
    }
    const int per_row = APF_D / vec;
#pragma unroll
    for (int it = 0; it < S::V_IT; it++) {
        int c = threadIdx.x + it * NT;
        if (c >= S::V_N)
            break;
        int j = c / per_row, e = (c % per_row) * vec;
        float f[vec];
        apf_unpack(r.v[it], f, (const T *)0);
#pragma unroll
        for (int k = 0; k < vec; k += 4)
            *(float4 *)(buf + j * APF_D + e + k) = make_float4(f[k], f[k + 1], f[k + 2], f[k + 3]);
    }
}

/* ---- the micro-kernels ---- */

/* A warp owns APF_RPT rows, r_i = warp + NW i (NW warps in the block), and
 * the whole 64-position tile across its lanes: for S lane l holds positions
 * 2l, 2l + 1, for O dims 4l..4l + 3 and 128 + 4l..128 + 4l + 3. So each
 * Q or P value a warp reads is one address for all 32 lanes (a broadcast)
 * and each K or V row it reads is 32 distinct consecutive vectors (no lane
 * reads what another lane of its warp reads): 0.28 shared wavefronts per
 * FFMA, against 0.33 with 16-lane half-warps that both read every K and V
 * vector (ncu, docs/PERF.md; a 128-bit broadcast still costs 2). */
#ifndef APF_RPT   /* 8; 4 (twice the warps, 128 registers) measured slower: docs/PERF.md */
#define APF_RPT 8
#endif
/* threads of a block of 4 NTY rows */
#define APF_THREADS(NTY) (4 * (NTY) / APF_RPT * 32)

/* s[i][jj] += q[r_i][d] * K^T[d][2 lane + jj] over the 64 dims of K chunk
 * ci. qr: row r_0 of Q at the chunk (row i at qr + i NW APF_D); kt: the
 * chunk at column 2 lane. */
template <int NW>
static __device__ __forceinline__ void apf_scores(float (&s)[APF_RPT][2], const float *qr,
                                                  const float *kt)
{
#pragma unroll
    for (int g = 0; g < APF_KC / 4; g++) {
        float4 qv[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            qv[i] = *(const float4 *)(qr + i * NW * APF_D + 4 * g);
#pragma unroll
        for (int dd = 0; dd < 4; dd++) {
            float2 kv = *(const float2 *)(kt + (4 * g + dd) * APF_KT);
#pragma unroll
            for (int i = 0; i < APF_RPT; i++) {
                float qd = dd == 0 ? qv[i].x : dd == 1 ? qv[i].y : dd == 2 ? qv[i].z : qv[i].w;
                s[i][0] = fmaf(qd, kv.x, s[i][0]);
                s[i][1] = fmaf(qd, kv.y, s[i][1]);
            }
        }
    }
}

/* acc[i][k] += P[r_i][j] V[j][128k + 4 lane + 0..3] over the 16 positions of
 * V chunk vc (pr: row r_0 of P at the chunk; vt: the chunk at dim 4 lane). */
template <int NW>
static __device__ __forceinline__ void apf_pv(float4 (&acc)[APF_RPT][2], const float *pr,
                                              const float *vt)
{
#pragma unroll
    for (int gg = 0; gg < APF_VC / 4; gg++) {
        float4 pv[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            pv[i] = *(const float4 *)(pr + i * NW * APF_KT + 4 * gg);
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            const float *vr = vt + (4 * gg + jj) * APF_D;
            float4 v0 = *(const float4 *)vr, v1 = *(const float4 *)(vr + 128);
#pragma unroll
            for (int i = 0; i < APF_RPT; i++) {
                float p = jj == 0 ? pv[i].x : jj == 1 ? pv[i].y : jj == 2 ? pv[i].z : pv[i].w;
                acc[i][0].x = fmaf(p, v0.x, acc[i][0].x);
                acc[i][0].y = fmaf(p, v0.y, acc[i][0].y);
                acc[i][0].z = fmaf(p, v0.z, acc[i][0].z);
                acc[i][0].w = fmaf(p, v0.w, acc[i][0].w);
                acc[i][1].x = fmaf(p, v1.x, acc[i][1].x);
                acc[i][1].y = fmaf(p, v1.y, acc[i][1].y);
                acc[i][1].z = fmaf(p, v1.z, acc[i][1].z);
                acc[i][1].w = fmaf(p, v1.w, acc[i][1].w);
            }
        }
    }
}

/* A row's sum of p over the tile, in the order of the kernel before the
 * warp-per-row layout (kept so the bits did not change): per group of 4
 * positions ((p0 + p1) + p2) + p3, then a fixed butterfly over the 16
 * groups. Lane l holds positions 2l, 2l + 1 (group l / 2); both lanes of a
 * group form its sum, so every lane ends with the same bits. */
static __device__ __forceinline__ float tile_sum(float p0, float p1, int lane)
{
    float o0 = __shfl_xor_sync(CS_FULL_MASK, p0, 1), o1 = __shfl_xor_sync(CS_FULL_MASK, p1, 1);
    float v = (lane & 1) ? ((o0 + o1) + p0) + p1 : ((p0 + p1) + o0) + o1;
#pragma unroll
    for (int o = 16; o > 1; o >>= 1)
        v += __shfl_xor_sync(CS_FULL_MASK, v, o);
    return v;
}

/* ---- the kernels ---- */

/* The block's query tile, its KV split and its positions; a block with
 * nothing to do (no tokens, or a split past its last token) gets valid 0. */
struct apf_block {
    int valid, tile, tok0, nt, t0, h, split, p_lo, p_end, seq, n_rows;
};

static __device__ __forceinline__ struct apf_block apf_block_of(const struct apf_args &a)
{
    struct apf_block b;
    b.valid = 0;
    int bx = gridDim.x - 1 - blockIdx.x;   /* the last tiles (longest contexts) first */
    b.tile = bx / a.subs;
    int sub = bx - b.tile * a.subs;
    b.h = blockIdx.y, b.split = blockIdx.z;
    int2 ht = a.tiles[b.tile];
    b.tok0 = sub * a.tok_per_block;
    b.nt = min(a.tok_per_block, ht.y - b.tok0);
    if (b.nt <= 0)
        return b;
    b.t0 = ht.x + b.tok0;
    int max_pos = 0;
    for (int i = 0; i < b.nt; i++)
        max_pos = max(max_pos, a.pos[b.t0 + i]);
    b.p_lo = b.split * APF_SPLIT;
    if (b.p_lo > max_pos)
        return b;
    b.p_end = min(b.p_lo + APF_SPLIT, max_pos + 1);
    b.seq = a.seq_of[b.t0];
    b.n_rows = b.nt * a.group;
    b.valid = 1;
    return b;
}

/* Where row r (< n_rows) of a block with position qpos writes: the output
 * when the row has one split (normalised), else its split's partial. */
static __device__ __forceinline__ void apf_write_row(float *out, float *part_acc, float2 *part_ml,
                                                     const struct apf_args &a,
                                                     const struct apf_block &b, int r, int qpos,
                                                     float4 acc0, float4 acc1, float m, float l,
                                                     int lane)
{
    int tk = r / a.group, qh = b.h * a.group + r % a.group;
    if (qpos < APF_SPLIT) {
        float inv = __fdiv_rn(1.0f, l);   /* fast math's 1 / x is approximate */
        float *o = out + (size_t)(b.t0 + tk) * a.n_heads * APF_D + (size_t)qh * APF_D + 4 * lane;
        *(float4 *)o = make_float4(acc0.x * inv, acc0.y * inv, acc0.z * inv, acc0.w * inv);
        *(float4 *)(o + 128) = make_float4(acc1.x * inv, acc1.y * inv, acc1.z * inv, acc1.w * inv);
        return;
    }
    size_t prow = ((size_t)(b.tile * CS_ATTN_PTILE + b.tok0 + tk) * a.n_heads + qh) * a.n_splits +
                  b.split;
    float *o = part_acc + prow * APF_D + 4 * lane;
    *(float4 *)o = acc0;
    *(float4 *)(o + 128) = acc1;
    if (lane == 0)
        part_ml[prow] = make_float2(m, l);
}

/* The fp32 path (an F32 KV cache, or the int8 path built out): block (query
 * sub-tile, kv head, split); see the header comment. Output: out[t][n_heads
 * * D] for rows with one split; otherwise partials part_acc[prow][D],
 * part_ml[prow] = (m, l), prow = ((tile * CS_ATTN_PTILE + token in tile) *
 * n_heads + head) * n_splits + split. */
template <typename T, int NTY>
static __global__ void __launch_bounds__(APF_THREADS(NTY), APF_MIN_BLOCKS)
    k_attn_prefill_tiled(float *out, float *part_acc, float2 *part_ml, struct apf_args a)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    const int NT = APF_THREADS(NTY), ROWS = 4 * NTY, NW = NT / 32;
    static_assert(ROWS == APF_RPT * NW, "a warp owns APF_RPT rows");
    /* chunks of a KV tile: 4 of K, then 4 of V */
    const int NKC = 4, NCH = 2 * NKC;
    extern __shared__ __align__(16) float apf_smem[];
    /* Q [ROWS][256] scaled, the staging buffer, P [ROWS][64] */
    float *sq = apf_smem;
    float *sbuf = sq + ROWS * APF_D, *sp = sbuf + APF_CHUNK;
    struct apf_block b = apf_block_of(a);
    if (!b.valid)
        return;
    int h = b.h, seq = b.seq, p_lo = b.p_lo, p_end = b.p_end, n_rows = b.n_rows, G = a.group;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* Q rows, scaled; row r: token t0 + r / G, head h * G + r % G */
    for (int c = tid; c < ROWS * (APF_D / 4); c += NT) {
        int r = c / (APF_D / 4), g = c % (APF_D / 4);
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n_rows) {
            const float *qr = a.q + (size_t)(b.t0 + r / G) * a.q_ts +
                              (size_t)(h * G + r % G) * a.q_hs + 4 * g;
            v = make_float4(qr[0] * a.scale, qr[1] * a.scale, qr[2] * a.scale, qr[3] * a.scale);
        }
        *(float4 *)(sq + r * APF_D + 4 * g) = v;
    }
    int qpos[APF_RPT];
    float m[APF_RPT], l[APF_RPT], s[APF_RPT][2] = {};
    float4 acc[APF_RPT][2];
#pragma unroll
    for (int i = 0; i < APF_RPT; i++) {
        int r = warp + NW * i;
        qpos[i] = r < n_rows ? a.pos[b.t0 + r / G] : -1;
        m[i] = -INFINITY;
        l[i] = 0.0f;
        acc[i][0] = acc[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float *q_row = sq + warp * APF_D, *p_row = sp + warp * APF_KT;

    int n_chunks = (p_end - p_lo + APF_KT - 1) / APF_KT * NCH;
    apf_stage<T, NT> st;
    apf_fetch<T, NT>(st, a, seq, h, p_lo, 0, p_end);
    for (int gc = 0; gc < n_chunks; gc++) {
        int kt = gc / NCH, ci = gc - kt * NCH, p0 = p_lo + kt * APF_KT;
        __syncthreads();   /* the previous chunk (and Q, P writes) done with */
        apf_put<T, NT>(sbuf, st, ci);
        __syncthreads();
        if (gc + 1 < n_chunks) {
            int kn = (gc + 1) / NCH, cn = gc + 1 - kn * NCH, pn = p_lo + kn * APF_KT;
            apf_fetch<T, NT>(st, a, seq, h, pn, cn, p_end);
        }
        if (ci >= NKC) {
            apf_pv<NW>(acc, p_row + (ci - NKC) * APF_VC, sbuf + 4 * lane);
            continue;
        }
        if (ci == 0) {
#pragma unroll
            for (int i = 0; i < APF_RPT; i++)
                s[i][0] = s[i][1] = 0.0f;
        }
        apf_scores<NW>(s, q_row + ci * APF_KC, sbuf + 2 * lane);
        if (ci != NKC - 1)
            continue;
        /* online softmax over this KV tile: positions p0 + 2 lane + jj */
#pragma unroll
        for (int i = 0; i < APF_RPT; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                if (p0 + 2 * lane + jj > qpos[i])
                    s[i][jj] = -INFINITY;
                mx = fmaxf(mx, s[i][jj]);
            }
            float m_new = fmaxf(m[i], warp_max(mx));
            /* xm_exp_nonpos (exact_math.h; arguments <= 0), not expf: the
             * CPU backend reproduces its bits (kernels/cpu/attention.c). It
             * costs ~17 instructions per score against ~2 for fast math's
             * expf (ex2.approx), on the path between S and P.V of a
             * latency-bound loop: measured -3.6% of the 9B 32K prefill with
             * xm_exp (docs/PERF.md).
             * An unchanged max keeps acc and l bit-identical (alpha = 1). */
            float alpha = m_new == m[i] ? 1.0f : xm_exp_nonpos(m[i] - m_new);
            float p[2];
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
                p[jj] = m_new == -INFINITY ? 0.0f : xm_exp_nonpos(s[i][jj] - m_new);
            float ls = tile_sum(p[0], p[1], lane);
            l[i] = __fmaf_rn(l[i], alpha, ls);
            m[i] = m_new;
#pragma unroll
            for (int k = 0; k < 2; k++) {
                acc[i][k].x *= alpha, acc[i][k].y *= alpha;
                acc[i][k].z *= alpha, acc[i][k].w *= alpha;
            }
            *(float2 *)(p_row + i * NW * APF_KT + 2 * lane) = make_float2(p[0], p[1]);
        }
    }

    /* rows with a position in this split: the output (one split) or a partial */
#pragma unroll
    for (int i = 0; i < APF_RPT; i++) {
        int r = warp + NW * i;
        if (r >= n_rows || qpos[i] < p_lo)
            continue;
        apf_write_row(out, part_acc, part_ml, a, b, r, qpos[i], acc[i][0], acc[i][1], m[i], l[i],
                      lane);
    }
}

#include "attention_prefill_q8.cuh"   /* the int8 path: K/V copies, staging, dots, kernel */

/* Combine: block (tile of the pass, query head, token in tile), one thread
 * per dim; the row's splits 0..pos / APF_SPLIT merged in split order. Rows
 * with one split were written by k_attn_prefill_tiled. */
static __global__ void __launch_bounds__(APF_D)
    k_attn_prefill_combine(float *out, const float *part_acc, const float2 *part_ml,
                           const int2 *tiles, const int32_t *pos, int n_heads, int n_splits)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int tile = blockIdx.x, qh = blockIdx.y, k = blockIdx.z;
    int2 ht = tiles[tile];
    if (k >= ht.y)
        return;
    int t = ht.x + k;
    int n_s = pos[t] / APF_SPLIT + 1;
    if (n_s == 1)
        return;
    size_t base = ((size_t)(tile * CS_ATTN_PTILE + k) * n_heads + qh) * n_splits;
    float M = -INFINITY;
    for (int s = 0; s < n_s; s++)
        M = fmaxf(M, part_ml[base + s].x);
    int d = threadIdx.x;
    float L = 0.0f, o = 0.0f;
    for (int s0 = 0; s0 < n_s; s0 += 8) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = s0 + u < n_s ? part_acc[(base + s0 + u) * APF_D + d] : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            if (s0 + u >= n_s)
                break;
            float2 ml = part_ml[base + s0 + u];
            float w = ml.x == -INFINITY ? 0.0f : xm_exp_nonpos(ml.x - M);
            L = __fmaf_rn(ml.y, w, L);   /* pinned: 0 + a b + c d may contract either way */
            o = __fmaf_rn(v[u], w, o);
        }
    }
    out[(size_t)t * n_heads * APF_D + (size_t)qh * APF_D + d] = L > 0.0f ? __fdiv_rn(o, L) : 0.0f;
}

/* ---- host ---- */

static size_t apf_smem_bytes(int nty, bool q8, bool async)
{
    size_t rows = (size_t)4 * nty;
    if (q8)
        return apf_q8_smem_floats((int)rows, async ? 2 : 1) * sizeof(float);
    return (rows * APF_D + APF_CHUNK + rows * APF_KT) * sizeof(float);
}

/* Whether the int8 kernel with async staging runs on c's device for NTY:
 * its loaded code was built for sm_80+ (cuda_code_arch; in code for older
 * targets cp_async.cuh's synchronous stand-in is there),
 * a block may have its shared memory, and an SM holds the blocks its launch
 * bounds were sized for (else the register-staged kernel, whose one buffer
 * fits them). Asked, and the attribute set, once per context and NTY. */
template <int NTY>
static bool apf_async_ready(struct cuda_ctx *c)
{
    signed char *st = &c->apf_async[NTY / 4 - 2];   /* NTY 8, 12, 16 */
    if (c->apf_async_off)
        return false;
    if (*st == 0) {
        struct cudaFuncAttributes fa;
        int per_sm = 0, reserved = 0;
        size_t smem = apf_smem_bytes(NTY, true, true);
        *st = -1;
        if (cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                   c->device) == cudaSuccess &&
            cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock,
                                   c->device) == cudaSuccess &&
            cudaFuncGetAttributes(&fa, k_attn_prefill_q8<NTY, true>) == cudaSuccess &&
            cuda_code_arch() >= 800 && (size_t)c->smem_optin >= smem &&
            (size_t)per_sm >= APF_Q8_MIN_BLOCKS(NTY) * (smem + reserved) &&
            cudaFuncSetAttribute(k_attn_prefill_q8<NTY, true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) == cudaSuccess)
            *st = 1;
        (void)cudaGetLastError();   /* a refusal here only means the register staging */
        LOG_DEBUG("cuda", "attention prefill: %d rows a block, async staging %s", 4 * NTY,
                  *st > 0 ? "on" : "off");
    }
    return *st > 0;
}

template <typename T, int NTY, bool Q8>
static int apf_launch(struct cuda_ctx *c, float *out, struct apf_args a, int n_tiles)
{
    const struct cuda_batch *cb = &c->batch;
    /* async staging reads the tiled int8 copies: pages holding whole KV tiles */
    bool async = Q8 && a.page_size % APF_KT == 0 && apf_async_ready<NTY>(c);
    size_t smem = apf_smem_bytes(NTY, Q8, async);
    if ((size_t)c->smem_optin < smem) {
        LOG_ERROR("cuda", "attention prefill: needs %zu bytes of shared memory per block, device "
                  "allows %d", smem, c->smem_optin);
        return CS_EUNSUPPORTED;
    }
    void (*kernel)(float *, float *, float2 *, struct apf_args) =
        !Q8 ? k_attn_prefill_tiled<T, NTY>
            : async ? k_attn_prefill_q8<NTY, true> : k_attn_prefill_q8<NTY, false>;
    /* NTY 8, 12, 16 x F32, F16, F16 with int8 products (the async instances
     * set theirs in apf_async_ready) */
    unsigned bit = 1u << (3 * (NTY / 4 - 2) + (Q8 ? 2 : sizeof(T) == 2 ? 1 : 0));
    if (!async && !(c->apf_smem_set & bit)) {
        CS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)smem));
        c->apf_smem_set |= bit;
    }
    size_t per_tile = (size_t)CS_ATTN_PTILE * a.n_heads * a.n_splits * (APF_D + 2) * sizeof(float);
    int pass = n_tiles;
    float *acc = NULL;
    float2 *ml = NULL;
    if (a.n_splits > 1) {
        size_t fit = APF_PART_MAX_BYTES / per_tile;
        pass = fit < 1 ? 1 : fit < (size_t)n_tiles ? (int)fit : n_tiles;
        int rc = cuda_buffer_reserve((void **)&c->apf_part, &c->apf_part_cap, per_tile * pass);
        if (rc != CS_OK)
            return rc;
        acc = c->apf_part;
        ml = (float2 *)(acc + (size_t)pass * CS_ATTN_PTILE * a.n_heads * a.n_splits * APF_D);
    }
    for (int t0 = 0; t0 < n_tiles; t0 += pass) {
        int n = n_tiles - t0 < pass ? n_tiles - t0 : pass;
        a.tiles = cb->ptiles + t0;
        dim3 grid((unsigned)n * a.subs, a.n_kv, a.n_splits);
        CS_CUDA_CHECK(cuda_launch(kernel, grid, APF_THREADS(NTY), smem, c->stream, out, acc, ml, a));
        if (a.n_splits > 1)
            CS_CUDA_CHECK(cuda_launch(k_attn_prefill_combine, dim3(n, a.n_heads, CS_ATTN_PTILE),
                                      APF_D, 0, c->stream, out, (const float *)acc,
                                      (const float2 *)ml, a.tiles, a.pos, a.n_heads, a.n_splits));
    }
    return CS_OK;
}

/* Rows per block by GQA group: NTY 8 (32 rows) for G 1-2, 12 (48) for G 3,
 * 5, 6, 16 (64) for G 4, 7, 8. */
static int apf_nty(int G)
{
    return G <= 2 ? 8 : (G == 3 || G == 5 || G == 6) ? 12 : 16;
}

template <typename T, bool Q8>
static int apf_dispatch(struct cuda_ctx *c, float *out, struct apf_args a, int n_tiles)
{
    switch (apf_nty(a.group)) {
    case 8: return apf_launch<T, 8, Q8>(c, out, a, n_tiles);
    case 12: return apf_launch<T, 12, Q8>(c, out, a, n_tiles);
    default: return apf_launch<T, 16, Q8>(c, out, a, n_tiles);
    }
}

/* The int8 path's K and V (attn_numerics.h): quantize positions 0..max of
 * the step's prefill sequences into c->apf_k8, int8 copies of the K and
 * the V pages (64 words and one scale per page slot and kv head each), and
 * point a at them. */
static int apf_kv8_prepare(struct cuda_ctx *c, struct apf_args *a)
{
    const struct cuda_batch *cb = &c->batch;
    size_t rows = (size_t)a->n_pages * a->page_size * a->n_kv;
    int rc = cuda_buffer_reserve(&c->apf_k8, &c->apf_k8_cap, 2 * rows * (APF_D + sizeof(float)));
    if (rc != CS_OK)
        return rc;
    int32_t *k8 = (int32_t *)c->apf_k8, *v8 = k8 + rows * (APF_D / 4);
    float *kd = (float *)(v8 + rows * (APF_D / 4)), *vd = kd + rows;
    int blocks = (cb->max_ptile_pos + 1 + 63) / 64;
    blocks = blocks < 1 ? 1 : blocks > 512 ? 512 : blocks;
    CS_CUDA_CHECK(cuda_launch(k_attn_prefill_kv8, dim3(blocks, a->n_kv, cb->n_seqs), 256, 0,
                              c->stream, k8, kd, v8, vd, *a, (const int32_t *)cb->seq_start));
    a->k8 = k8;
    a->v8 = v8;
    a->kd = kd;
    a->vd = vd;
    return CS_OK;
}

extern "C" void cuda_attn_prefill_async_enable(struct cs_backend *be, bool on)
{
    cuda_ctx_of(be)->apf_async_off = !on;
}

extern "C" bool cuda_attn_prefill_async_used(struct cs_backend *be)
{
    const struct cuda_ctx *c = cuda_ctx_of(be);
    for (int i = 0; i < 3; i++)
        if (c->apf_async[i] > 0)
            return true;
    return false;
}

extern "C" int cuda_attn_prefill(struct cuda_ctx *c, float *out, const float *q,
                                 int q_token_stride, int q_head_stride, int n_heads,
                                 const struct cs_kv_layer *kv, float scale)
{
    const struct cuda_batch *cb = &c->batch;
    if (cb->n_ptiles <= 0)
        return CS_OK;
    if (kv->head_dim != APF_D) {
        LOG_ERROR("cuda", "attention prefill: head_dim %d unsupported (256)", kv->head_dim);
        return CS_EUNSUPPORTED;
    }
    if (kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads != 0 || n_heads / kv->n_kv_heads > 8) {
        LOG_ERROR("cuda", "attention prefill: %d query heads over %d kv heads unsupported (GQA "
                  "group 1..8)", n_heads, kv->n_kv_heads);
        return CS_EUNSUPPORTED;
    }
    if (kv->page_size <= 0) {
        LOG_ERROR("cuda", "attention prefill: page size %d", kv->page_size);
        return CS_EINVAL;
    }
    struct apf_args a;
    a.pages = kv->pages;
    a.n_pages = kv->n_pages;
    a.page_size = kv->page_size;
    a.n_kv = kv->n_kv_heads;
    a.max_pages = cb->max_pages;
    a.q = q;
    a.q_ts = q_token_stride;
    a.q_hs = q_head_stride;
    a.n_heads = n_heads;
    a.group = n_heads / kv->n_kv_heads;
    int rows = 4 * apf_nty(a.group);
    a.tok_per_block = rows / a.group < CS_ATTN_PTILE ? rows / a.group : CS_ATTN_PTILE;
    a.subs = (CS_ATTN_PTILE + a.tok_per_block - 1) / a.tok_per_block;
    a.n_splits = cb->max_ptile_pos / APF_SPLIT + 1;
    a.scale = scale;
    a.pos = cb->pos;
    a.seq_of = cb->seq_of;
    a.page_table = cb->page_table;
    a.tiles = cb->ptiles;
    a.k8 = a.v8 = NULL;
    a.kd = a.vd = NULL;
    if (!c->smem_optin)   /* asked once per context (one device) */
        CS_CUDA_CHECK(cudaDeviceGetAttribute(&c->smem_optin,
                                             cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
    if (cs_attn_q8(kv->kv_type)) {
        int rc = apf_kv8_prepare(c, &a);
        if (rc != CS_OK)
            return rc;
        return apf_dispatch<__half, true>(c, out, a, cb->n_ptiles);
    }
    if (kv->kv_type == CS_DTYPE_F16)
        return apf_dispatch<__half, false>(c, out, a, cb->n_ptiles);
    if (kv->kv_type == CS_DTYPE_F32)
        return apf_dispatch<float, false>(c, out, a, cb->n_ptiles);
    LOG_ERROR("cuda", "attention prefill: KV type %u unsupported", kv->kv_type);
    return CS_EUNSUPPORTED;
}

extern "C" int cuda_op_attn_prefill(struct cs_backend *be, float *out, const float *q,
                                    int q_token_stride, int q_head_stride, int n_heads,
                                    const struct cs_kv_layer *kv, float scale,
                                    const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "attention prefill");
    if (rc != CS_OK)
        return rc;
    return cuda_attn_prefill(c, out, q, q_token_stride, q_head_stride, n_heads, kv, scale);
}
