/* attention.c - the paged KV cache writes and causal GQA attention (ops.h
 * kv_store, attention). Page p holds K [page_size][n_kv_heads][head_dim] then
 * V likewise, as F32 or F16 (rounded to nearest even on store); token t of
 * sequence s at position pos attends to positions 0..pos of s through the
 * page table.
 *
 * Contract: the attention gives the CUDA backend's bits. Per token it runs,
 * operation for operation and in the same order, the arithmetic of the CUDA
 * kernel that takes that token (kernels/cuda/attention.cu dispatches by
 * sequence, as here):
 *  - decode (the token's sequence has one token in the step):
 *    kernels/cuda/attention_decode.cu, dec_block + k_attn_combine (dec_item);
 *  - prefill (a sequence with several tokens): attention_prefill.cu,
 *    k_attn_prefill_tiled + k_attn_prefill_combine (apf_item).
 * Over an F16 KV cache the prefill scores are int8 DP4A dots on both sides
 * (kernels/attn_numerics.h), over F32 fp32 chains.
 * An FFMA there is fmaf here (this file compiles with -ffp-contract=off), an
 * exp is xm_exp_nonpos (kernels/exact_math.h), __fdiv_rn is /, each warp shuffle
 * reduction is emulated in its own tree order, fp16 converts exactly (as
 * common/half.h and __half2float). A change to either side must change the
 * other; tests/gpu/test_attention_decode.c and test_attention_prefill.c
 * compare the two bit for bit. The constants below are the kernels' build
 * defaults (DEC_WARPS, APF_KT, APF_SPLIT, cs_attn_split_len). Outside the
 * GPU's shapes (head_dim != 256, GQA group > 8) the same arithmetic runs
 * with lanes of (head_dim + 31) / 32 dims. Subnormals are flushed as on the
 * GPU (fast math's -ftz; here the thread pool's fpmode.h: xm_exp_nonpos never
 * makes one, but a product can when the scores of one row span more than
 * ~85). Not reproduced: the sign of a zero where the GPU adds 0 * v for a
 * masked position (skipped here).
 *
 * Both paths are batch invariant: every value depends on the token's own
 * position and its sequence's KV only (splits and tiles at absolute
 * multiples of their length), and each (token, kv head) is computed by one
 * thread; so results do not depend on the batch or the thread count. */
#include <stdlib.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../../common/status.h"
#include "../attn_numerics.h"
#include "../exact_math.h"
#include "cpu.h"

#define ATT_LANES 32     /* a warp */
#define ATT_WARPS 4      /* attention_decode.cu DEC_WARPS: warps per split */
#define ATT_KT 64        /* attention_prefill.cu APF_KT: KV positions per tile */
#define ATT_SPLIT 2048   /* APF_SPLIT: KV positions per prefill split */
#define ATT_PTILE 16     /* prefill tokens per work item (any count: the same bits) */

/* The hot functions, compiled twice: with FMA instructions where the CPU has
 * them (fmaf inlined and vectorised) and without (fmaf from libm: the same
 * bits, slower); the loader picks one (as gdn.c). */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define ATT_HOT __attribute__((target_clones("fma", "default")))
#else
#define ATT_HOT
#endif
/* the helpers of the hot functions: inlined into each of their clones */
#if defined(__GNUC__)
#define ATT_INLINE static inline __attribute__((always_inline))
#else
#define ATT_INLINE static inline
#endif

static size_t kv_elem_bytes(uint32_t type)
{
    return type == CS_DTYPE_F32 ? 4 : type == CS_DTYPE_F16 ? 2 : 0;
}

/* Element offset of row (K or V) `pos` of kv head h within the pages. */
static size_t kv_offset(const struct cs_kv_layer *kv, int32_t page, int32_t pos, int is_v, int h)
{
    size_t row = (size_t)kv->n_kv_heads * (size_t)kv->head_dim;
    size_t page_elems = 2 * (size_t)kv->page_size * row;
    return (size_t)page * page_elems + (size_t)is_v * kv->page_size * row +
           (size_t)(pos % kv->page_size) * row + (size_t)h * kv->head_dim;
}

static int kv_check(const struct cs_kv_layer *kv, const struct cs_batch *b)
{
    if (!kv || !kv->pages || kv_elem_bytes(kv->kv_type) == 0 || kv->page_size <= 0 ||
        kv->n_kv_heads <= 0 || kv->head_dim <= 0 || kv->n_pages <= 0)
        return CS_EINVAL;
    int rc = cpu_batch_check(b);
    if (rc != CS_OK)
        return rc;
    if (b->n_tokens > 0 && (!b->page_table || b->max_pages <= 0))
        return CS_EINVAL;
    for (int s = 0; s < b->n_seqs; s++) {
        int32_t max_pos = -1;
        for (int t = b->seq_start[s]; t < b->seq_start[s + 1]; t++)
            max_pos = b->pos[t] > max_pos ? b->pos[t] : max_pos;
        if (max_pos < 0)
            continue;
        if (max_pos / kv->page_size >= b->max_pages) {
            LOG_ERROR("cpu", "position %d of sequence %d needs more than %d pages", max_pos, s,
                      b->max_pages);
            return CS_ERANGE;
        }
        for (int p = 0; p <= max_pos / kv->page_size; p++) {
            int32_t page = b->page_table[(size_t)s * b->max_pages + p];
            if (page < 0 || page >= kv->n_pages) {
                LOG_ERROR("cpu", "sequence %d page %d is %d, outside 0..%d", s, p, page,
                          kv->n_pages - 1);
                return CS_ERANGE;
            }
        }
    }
    return CS_OK;
}

static int32_t kv_page(const struct cs_kv_layer *kv, const struct cs_batch *b, int s, int32_t pos)
{
    return b->page_table[(size_t)s * b->max_pages + pos / kv->page_size];
}

static void kv_row_write(const struct cs_kv_layer *kv, size_t off, const float *src, int n)
{
    if (kv->kv_type == CS_DTYPE_F32) {
        memcpy((float *)kv->pages + off, src, (size_t)n * 4);
    } else {
        uint16_t *dst = (uint16_t *)kv->pages + off;
        for (int i = 0; i < n; i++)
            dst[i] = cs_float_to_half(src[i]);
    }
}

int cpu_kv_store(struct cs_backend *be, struct cs_kv_layer *kv, const float *k, int k_stride,
                 const float *v, int v_stride, const struct cs_batch *b)
{
    int rc = kv_check(kv, b);
    if (rc != CS_OK)
        return rc;
    if (b->n_tokens > 0 && (!k || !v))
        return CS_EINVAL;
    int n = kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < b->n_tokens; t++) {
        int32_t pos = b->pos[t], page = kv_page(kv, b, b->seq_of[t], pos);
        kv_row_write(kv, kv_offset(kv, page, pos, 0, 0), k + (size_t)t * k_stride, n);
        kv_row_write(kv, kv_offset(kv, page, pos, 1, 0), v + (size_t)t * v_stride, n);
    }
    return CS_OK;
}

struct attn_job {
    float *out;
    const float *q;
    int q_token_stride, q_head_stride, n_heads, g;
    const struct cs_kv_layer *kv;
    float scale;
    const struct cs_batch *b;
    const int32_t *units;   /* [n_units][3]: first token, tokens, 1 for a decode token */
    int64_t n_units;
    struct cpu_ctx *ctx;
};

ATT_INLINE int att_min(int a, int b)
{
    return a < b ? a : b;
}

/* fmaxf (a NaN loses, as on the GPU), inlined: the zeros' sign may differ,
 * which no result here depends on (m only enters differences) */
ATT_INLINE float att_max(float a, float b)
{
    return a > b || b != b ? a : b;
}

/* cs_half_to_float (exact, as __half2float) over a row, branch free so that
 * it vectorises. */
ATT_INLINE void att_half_row(float *dst, const uint16_t *src, int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t h = src[i], e = h & 0x7c00u, mant = h & 0x3ffu, sb, r;
        float sub = (float)(int32_t)mant * (1.0f / 16777216.0f);   /* subnormal: exact */
        memcpy(&sb, &sub, 4);
        r = e == 0 ? sb : e == 0x7c00u ? 0x7f800000u | (mant << 13)
                                        : ((h & 0x7fffu) << 13) + (112u << 23);
        r |= (h & 0x8000u) << 16;
        memcpy(dst + i, &r, 4);
    }
}

/* Row pos (K: which 0, V: 1) of kv head h of sequence s as fp32: the page
 * itself (F32) or tmp (F16, converted). */
ATT_INLINE const float *att_row(const struct attn_job *j, int s, int32_t pos, int which, int h,
                                   float *tmp)
{
    const struct cs_kv_layer *kv = j->kv;
    size_t off = kv_offset(kv, kv_page(kv, j->b, s, pos), pos, which, h);
    if (kv->kv_type == CS_DTYPE_F32)
        return (const float *)kv->pages + off;
    att_half_row(tmp, (const uint16_t *)kv->pages + off, kv->head_dim);
    return tmp;
}

/* The value of cuda_util.cuh's warp_sum (every lane ends with it) over the n
 * lane values v (a power of two, overwritten): the xor butterfly, offsets
 * n / 2 down to 1, lane l adding lane l + o (lanes l and l ^ o hold the same
 * sum: fp addition is commutative). */
ATT_INLINE float att_bfly_sum(float *v, int n)
{
    for (int o = n / 2; o > 0; o >>= 1)
        for (int l = 0; l < o; l++)
            v[l] = v[l] + v[l + o];
    return v[0];
}

/* ---- decode: attention_decode.cu ---- */

/* ops_cuda.cuh cs_attn_split_len: the positions per split of a decode token. */
static int att_split_len(int32_t pos)
{
    int len = 128;
    while (len < 4096 && (int64_t)len * 64 < pos)
        len <<= 1;
    return len;
}

/* dec_shape's CHUNK for the rows per warp GM that dec_launch picks for group
 * g (2, 4, 6, 8; padded to GP = 2, 4, 8 for the reduction): GP x CHUNK <= 32
 * scores, CHUNK <= 8 positions for F16 KV and 4 for F32. */
static int att_dec_chunk(uint32_t kv_type, int g)
{
    int gp = g <= 2 ? 2 : g <= 4 ? 4 : 8, cmax = kv_type == CS_DTYPE_F16 ? 8 : 4;
    return 32 / gp < cmax ? 32 / gp : cmax;
}

/* Scratch floats of dec_item. */
static size_t dec_scratch(int D, int g, int C, int32_t pos)
{
    size_t lw = (size_t)ATT_LANES * ((D + 31) / 32), n_s = (size_t)(pos / att_split_len(pos) + 1);
    return (g + 1) * lw + D + 2 * (size_t)g * C + (ATT_WARPS + n_s) * (size_t)g * (D + 2);
}

/* One score of dec_block: each lane's FFMA chain over its dpl dims (q[r][d]
 * kf[d], d ascending, from 0), then warp_sum_scatter across the lanes. Its
 * sum-scatter leaves lane l with score l % N, and the value of each score is
 * the plain xor butterfly (warp_sum) of the lanes' partials: at every step a
 * lane adds its partner's partial of the same score. qt, kt: [dpl][lane]. */
ATT_INLINE float dec_score(const float *qt, const float *kt, int dpl)
{
    float part[ATT_LANES];
    for (int l = 0; l < ATT_LANES; l++)
        part[l] = 0.0f;
    for (int d = 0; d < dpl; d++)
        for (int l = 0; l < ATT_LANES; l++)
            part[l] = fmaf(qt[d * ATT_LANES + l], kt[d * ATT_LANES + l], part[l]);
    return att_bfly_sum(part, ATT_LANES);
}

/* A warp's chunk [p0, p0 + C) of a split ending at p_end: dec_block's loop
 * body for the g rows of kv head h (sequence seq): the scores, the row's
 * online-softmax update as every lane takes it, then P V. The warp's state:
 * m, l [g], acc [g][D]; scratch: sv, pv [g][C], row [D], kt [dpl][lane]. */
ATT_INLINE void dec_chunk(const struct attn_job *j, int seq, int h, int p0, int p_end, int C,
                             const float *qt, float *kt, float *row, float *sv, float *pv,
                             float *m, float *l, float *acc)
{
    const int D = j->kv->head_dim, g = j->g, dpl = (D + 31) / 32, lw = ATT_LANES * dpl;
    int nv = att_min(C, p_end - p0);   /* positions before p_end; the rest read as -inf */
    for (int c = 0; c < nv; c++) {
        const float *k = att_row(j, seq, p0 + c, 0, h, row);
        for (int d = 0; d < dpl; d++)   /* lane l holds dims l dpl .. l dpl + dpl - 1 */
            for (int ln = 0; ln < ATT_LANES; ln++) {
                int i = ln * dpl + d;
                kt[d * ATT_LANES + ln] = i < D ? k[i] : 0.0f;
            }
        for (int r = 0; r < g; r++)
            sv[r * C + c] = dec_score(qt + (size_t)r * lw, kt, dpl);
    }
    for (int r = 0; r < g; r++) {
        /* the row's max over the chunk (a max: any order), then the running max */
        float mo = m[r], mx = -INFINITY;
        for (int c = 0; c < nv; c++)
            mx = att_max(mx, sv[r * C + c]);
        float mn = att_max(mo, mx), *p = pv + r * C, tmp[8];
        for (int c = 0; c < C; c++)
            p[c] = c < nv && mn != -INFINITY ? xm_exp_nonpos(sv[r * C + c] - mn) : 0.0f;
        float alpha = mo == -INFINITY ? 0.0f : xm_exp_nonpos(mo - mn);
        memcpy(tmp, p, sizeof(float) * C);
        float ps = att_bfly_sum(tmp, C);   /* the xor butterfly over the row's C lanes */
        l[r] = fmaf(l[r], alpha, ps);
        m[r] = mn;
        float *a = acc + (size_t)r * D;
        for (int d = 0; d < D; d++)
            a[d] = a[d] * alpha;
    }
    for (int c = 0; c < nv; c++) {   /* a masked position adds 0 * 0: skipped */
        const float *v = att_row(j, seq, p0 + c, 1, h, row);
        for (int r = 0; r < g; r++) {
            float pr = pv[r * C + c], *a = acc + (size_t)r * D;
            for (int d = 0; d < D; d++)
                a[d] = fmaf(pr, v[d], a[d]);
        }
    }
}

/* Decode token t, kv head h: the g query heads h g .. h g + g - 1 as
 * dec_block (per split s, warps w = 0..3 each over chunks w, w + 4, ..; the
 * warps merged in order into the split's partial) and k_attn_combine (the
 * splits merged in order). */
ATT_HOT static void dec_item(const struct attn_job *j, int t, int h, float *sc)
{
    const int D = j->kv->head_dim, g = j->g, dpl = (D + 31) / 32, lw = ATT_LANES * dpl;
    const int C = att_dec_chunk(j->kv->kv_type, g), seq = j->b->seq_of[t];
    const int32_t pos = j->b->pos[t];
    const int len = att_split_len(pos), n_s = pos / len + 1;
    float *qt = sc, *kt = qt + (size_t)g * lw, *row = kt + lw, *sv = row + D, *pv = sv + g * C;
    float *wacc = pv + g * C, *wm = wacc + (size_t)ATT_WARPS * g * D, *wl = wm + ATT_WARPS * g;
    float *sacc = wl + ATT_WARPS * g, *sm = sacc + (size_t)n_s * g * D, *sl = sm + (size_t)n_s * g;
    /* q[r][d] = x * scale per lane: qt [g][dpl][lane] */
    for (int r = 0; r < g; r++) {
        const float *q =
            j->q + (size_t)t * j->q_token_stride + (size_t)(h * g + r) * j->q_head_stride;
        for (int d = 0; d < dpl; d++)
            for (int ln = 0; ln < ATT_LANES; ln++) {
                int i = ln * dpl + d;
                qt[((size_t)r * dpl + d) * ATT_LANES + ln] = i < D ? q[i] * j->scale : 0.0f;
            }
    }
    for (int s = 0; s < n_s; s++) {
        int p_begin = s * len, p_end = att_min(p_begin + len, pos + 1);
        for (int w = 0; w < ATT_WARPS; w++) {
            float *m = wm + w * g, *l = wl + w * g, *acc = wacc + (size_t)w * g * D;
            for (int r = 0; r < g; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
            }
            memset(acc, 0, sizeof(float) * g * D);
            for (int p0 = p_begin + w * C; p0 < p_end; p0 += ATT_WARPS * C)
                dec_chunk(j, seq, h, p0, p_end, C, qt, kt, row, sv, pv, m, l, acc);
        }
        /* dec_block's merge: warps in order, those without a position skipped */
        for (int r = 0; r < g; r++) {
            float M = -INFINITY, L = 0.0f, wt[ATT_WARPS];
            for (int w = 0; w < ATT_WARPS; w++)
                M = att_max(M, wm[w * g + r]);
            float *o = sacc + ((size_t)s * g + r) * D;
            memset(o, 0, sizeof(float) * D);
            for (int w = 0; w < ATT_WARPS; w++) {
                if (wm[w * g + r] == -INFINITY)
                    continue;
                wt[w] = xm_exp_nonpos(wm[w * g + r] - M);
                L = fmaf(wl[w * g + r], wt[w], L);
                const float *a = wacc + ((size_t)w * g + r) * D;
                for (int d = 0; d < D; d++)
                    o[d] = fmaf(a[d], wt[w], o[d]);
            }
            sm[s * g + r] = M;
            sl[s * g + r] = L;
        }
    }
    /* k_attn_combine: splits in order */
    for (int r = 0; r < g; r++) {
        float M = -INFINITY, L = 0.0f;
        for (int s = 0; s < n_s; s++)
            M = att_max(M, sm[s * g + r]);
        float *o = j->out + ((size_t)t * j->n_heads + h * g + r) * D;
        memset(o, 0, sizeof(float) * D);
        for (int s = 0; s < n_s; s++) {
            if (sm[s * g + r] == -INFINITY)
                continue;
            float w = xm_exp_nonpos(sm[s * g + r] - M);
            L = fmaf(sl[s * g + r], w, L);
            const float *a = sacc + ((size_t)s * g + r) * D;
            for (int d = 0; d < D; d++)
                o[d] = fmaf(a[d], w, o[d]);
        }
        for (int d = 0; d < D; d++)
            o[d] = L > 0.0f ? o[d] / L : 0.0f;
    }
}

/* ---- prefill: attention_prefill.cu ---- */

/* Scratch floats of apf_item for R rows over positions 0..max_pos (the
 * last line: the int8 path's Q, K and V rows, as int32 words, their scales,
 * and a row's P.V integer sums). */
static size_t apf_scratch(int D, int R, int32_t max_pos)
{
    size_t n_s = (size_t)(max_pos / ATT_SPLIT + 1);
    return (size_t)R * D + 2 * (size_t)D * ATT_KT + 2 * ATT_KT + (size_t)R * (D + 2) +
           (size_t)R * n_s * (D + 2) +
           (size_t)(R + 2 * ATT_KT) * ((D + 3) / 4) + (size_t)R + 2 * ATT_KT + D;
}

/* attn_numerics.h: row x (n values) as int8 with one scale; returns d. */
ATT_INLINE float apf_q8_row(int8_t *q, const float *x, int n)
{
    float amax = 0.0f;
    for (int d = 0; d < n; d++)
        amax = att_max(amax, fabsf(x[d]));
    float inv = xm_q8_inv_scale(amax);
    for (int d = 0; d < n; d++)
        q[d] = (int8_t)xm_q8_round(x[d], inv);
    return xm_q8_scale(amax);
}

/* The int8 scores of a tile (attn_numerics.h): s[c] = (float)(q8 . k8[c])
 * * (dq * dk[c]), as k_attn_prefill_tiled's DP4A path (the integer dot is
 * exact, so its order does not matter). */
ATT_INLINE void apf_scores_q8(float *s, const int8_t *q8, float dq, const int8_t *k8,
                              const float *dk, int np, int D)
{
    for (int c = 0; c < ATT_KT; c++) {
        if (c >= np) {
            s[c] = 0.0f;
            continue;
        }
        const int8_t *k = k8 + (size_t)c * D;
        int32_t isum = 0;
        for (int d = 0; d < D; d++)
            isum += (int32_t)q8[d] * (int32_t)k[d];
        s[c] = XM_MUL((float)isum, XM_MUL(dq, dk[c]));
    }
}

/* The int8 P.V of a tile (attn_numerics.h), as k_attn_prefill_tiled's DP4A
 * path: the weights p[c] d_v[c] (c < nj; later positions weigh 0) on
 * 0..255 with one scale d_p, isum[d] = sum of q[c] v8[c][d] (exact), then
 * a[d] = fma((float)isum[d], d_p, a[d]). w: ATT_KT floats of scratch. */
ATT_INLINE void apf_pv_q8(float *a, const float *p, int nj, const int8_t *v8, const float *dv,
                          int D, float *w, int32_t *isum)
{
    float amax = 0.0f;
    for (int c = 0; c < nj; c++) {
        w[c] = XM_MUL(p[c], dv[c]);
        amax = att_max(amax, w[c]);
    }
    float inv = xm_u8_inv_scale(amax);
    memset(isum, 0, sizeof(int32_t) * D);
    for (int c = 0; c < nj; c++) {
        int32_t qc = xm_q8_round(w[c], inv);
        const int8_t *v = v8 + (size_t)c * D;
        for (int d = 0; d < D; d++)
            isum[d] += qc * (int32_t)v[d];
    }
    float dp = xm_u8_scale(amax);
    for (int d = 0; d < D; d++)
        a[d] = XM_FMA((float)isum[d], dp, a[d]);
}

/* tile_sum: a row's sum of p over the 64 positions of a tile, per group of 4
 * positions ((p0 + p1) + p2) + p3, then the xor butterfly over the 16 groups
 * (lane offsets 16..2 are group offsets 8..1). p is overwritten. */
ATT_INLINE float apf_tile_sum(float *p)
{
    for (int k = 0; k < ATT_KT / 4; k++)
        p[k] = ((p[4 * k] + p[4 * k + 1]) + p[4 * k + 2]) + p[4 * k + 3];
    return att_bfly_sum(p, ATT_KT / 4);
}

/* apf_scores over a whole tile: s[c] = the FFMA chain over d ascending of
 * q[d] K^T[d][c], from 0 (kt: [D][64]). */
ATT_INLINE void apf_scores(float *s, const float *q, const float *kt, int D)
{
    for (int c = 0; c < ATT_KT; c++)
        s[c] = 0.0f;
    for (int d = 0; d < D; d++) {
        float qd = q[d];
        const float *k = kt + (size_t)d * ATT_KT;
        for (int c = 0; c < ATT_KT; c++)
            s[c] = fmaf(qd, k[c], s[c]);
    }
}

/* Prefill tokens t0 .. t0 + nt - 1 (one sequence), kv head h: rows r = token
 * r / g, query head h g + r % g, as k_attn_prefill_tiled (per split of 2048
 * positions, KV tiles of 64 from the split's start: scores, the online
 * softmax of the tile, then P V) and k_attn_prefill_combine. A tile past a
 * row's position leaves the row's state as it is on the GPU (alpha 1, p 0),
 * so a row skips it; so rows do not depend on which others share the item. */
ATT_HOT static void apf_item(const struct attn_job *j, int t0, int nt, int h, float *sc)
{
    const int D = j->kv->head_dim, g = j->g, R = nt * g, seq = j->b->seq_of[t0];
    const int32_t *qpos = j->b->pos + t0;
    int32_t max_pos = 0;
    for (int i = 0; i < nt; i++)
        max_pos = qpos[i] > max_pos ? qpos[i] : max_pos;
    const int n_s = max_pos / ATT_SPLIT + 1;
    float *qs = sc, *kt = qs + (size_t)R * D, *vt = kt + (size_t)D * ATT_KT;
    float *sv = vt + (size_t)ATT_KT * D, *pv = sv + ATT_KT, *acc = pv + ATT_KT;
    float *m = acc + (size_t)R * D, *l = m + R, *part = l + R;   /* part [R][n_s][D + 2] */
    const int q8s = cs_attn_q8(j->kv->kv_type);
    float *q8_end = part + (size_t)R * n_s * (D + 2);
    int8_t *q8 = (int8_t *)q8_end, *k8 = q8 + (size_t)R * ((D + 3) / 4) * 4;
    int8_t *v8 = k8 + (size_t)ATT_KT * ((D + 3) / 4) * 4;
    float *dq = (float *)(v8 + (size_t)ATT_KT * ((D + 3) / 4) * 4), *dk = dq + R, *dv = dk + ATT_KT;
    int32_t *isum = (int32_t *)(dv + ATT_KT);
    const float *vr[ATT_KT];
    /* Q rows, scaled (and as int8 for the int8 scores) */
    for (int r = 0; r < R; r++) {
        const float *q = j->q + (size_t)(t0 + r / g) * j->q_token_stride +
                         (size_t)(h * g + r % g) * j->q_head_stride;
        for (int d = 0; d < D; d++)
            qs[(size_t)r * D + d] = q[d] * j->scale;
        if (q8s)
            dq[r] = apf_q8_row(q8 + (size_t)r * D, qs + (size_t)r * D, D);
    }
    for (int s = 0; s < n_s; s++) {
        int p_lo = s * ATT_SPLIT, hi = att_min(p_lo + ATT_SPLIT, max_pos + 1);
        for (int r = 0; r < R; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        memset(acc, 0, sizeof(float) * R * D);
        for (int p0 = p_lo; p0 < hi; p0 += ATT_KT) {
            int np = att_min(ATT_KT, hi - p0);
            /* K transposed (zeros past the end, as the kernel), V rows */
            for (int c = 0; c < np; c++) {
                const float *k = att_row(j, seq, p0 + c, 0, h, vt + (size_t)c * D);
                for (int d = 0; d < D; d++)
                    kt[(size_t)d * ATT_KT + c] = k[d];
                if (q8s)
                    dk[c] = apf_q8_row(k8 + (size_t)c * D, k, D);
            }
            for (int d = 0; d < D; d++)
                for (int c = np; c < ATT_KT; c++)
                    kt[(size_t)d * ATT_KT + c] = 0.0f;
            for (int c = 0; c < np; c++) {
                vr[c] = att_row(j, seq, p0 + c, 1, h, vt + (size_t)c * D);
                if (q8s)
                    dv[c] = apf_q8_row(v8 + (size_t)c * D, vr[c], D);
            }
            for (int r = 0; r < R; r++) {
                int32_t qp = qpos[r / g];
                if (qp < p0)
                    continue;
                int nj = att_min(np, qp - p0 + 1);   /* positions past qp are -inf */
                if (q8s)
                    apf_scores_q8(sv, q8 + (size_t)r * D, dq[r], k8, dk, np, D);
                else
                    apf_scores(sv, qs + (size_t)r * D, kt, D);
                float mx = -INFINITY;
                for (int c = 0; c < nj; c++)
                    mx = att_max(mx, sv[c]);
                float mo = m[r], mn = att_max(mo, mx);
                float alpha = mn == mo ? 1.0f : xm_exp_nonpos(mo - mn);
                for (int c = 0; c < ATT_KT; c++)
                    pv[c] = c < nj && mn != -INFINITY ? xm_exp_nonpos(sv[c] - mn) : 0.0f;
                float *a = acc + (size_t)r * D;
                for (int c = 0; c < nj; c++)   /* p kept for P V: tile_sum overwrites pv */
                    sv[c] = pv[c];
                l[r] = fmaf(l[r], alpha, apf_tile_sum(pv));
                m[r] = mn;
                for (int d = 0; d < D; d++)
                    a[d] = a[d] * alpha;
                if (q8s) {
                    apf_pv_q8(a, sv, nj, v8, dv, D, pv, isum);
                    continue;
                }
                for (int c = 0; c < nj; c++) {   /* masked positions add 0 * v: skipped */
                    float pc = sv[c];
                    const float *v = vr[c];
                    for (int d = 0; d < D; d++)
                        a[d] = fmaf(pc, v[d], a[d]);
                }
            }
        }
        /* rows with a position in this split: the output (one split) or a partial */
        for (int r = 0; r < R; r++) {
            int32_t qp = qpos[r / g];
            if (qp < p_lo)
                continue;
            const float *a = acc + (size_t)r * D;
            if (qp < ATT_SPLIT) {
                float inv = 1.0f / l[r];
                float *o = j->out + ((size_t)(t0 + r / g) * j->n_heads + h * g + r % g) * D;
                for (int d = 0; d < D; d++)
                    o[d] = a[d] * inv;
                continue;
            }
            float *pr = part + ((size_t)r * n_s + s) * (D + 2);
            memcpy(pr, a, sizeof(float) * D);
            pr[D] = m[r];
            pr[D + 1] = l[r];
        }
    }
    /* k_attn_prefill_combine: rows of several splits, splits in order */
    for (int r = 0; r < R; r++) {
        int32_t qp = qpos[r / g];
        if (qp < ATT_SPLIT)
            continue;
        int ns = qp / ATT_SPLIT + 1;
        const float *pr = part + (size_t)r * n_s * (D + 2);
        float M = -INFINITY, L = 0.0f;
        for (int s = 0; s < ns; s++)
            M = att_max(M, pr[(size_t)s * (D + 2) + D]);
        float *o = j->out + ((size_t)(t0 + r / g) * j->n_heads + h * g + r % g) * D;
        memset(o, 0, sizeof(float) * D);
        for (int s = 0; s < ns; s++) {
            const float *a = pr + (size_t)s * (D + 2);
            float w = a[D] == -INFINITY ? 0.0f : xm_exp_nonpos(a[D] - M);
            L = fmaf(a[D + 1], w, L);
            for (int d = 0; d < D; d++)
                o[d] = fmaf(a[d], w, o[d]);
        }
        for (int d = 0; d < D; d++)
            o[d] = L > 0.0f ? o[d] / L : 0.0f;
    }
}

/* ---- the op ---- */

static void attn_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct attn_job *j = arg;
    float *scratch = j->ctx->scratch[tid].buf;
    int n_kv = j->kv->n_kv_heads;
    int64_t n = j->n_units * n_kv;
    for (int64_t item = begin; item < end; item++) {
        /* pair cheap and costly items (a prompt's first and last tiles) in
         * every contiguous range: the order only balances the threads */
        int64_t k = item % 2 == 0 ? item / 2 : n - 1 - item / 2;
        const int32_t *u = j->units + 3 * (k / n_kv);
        int h = (int)(k % n_kv);
        if (u[2])   /* not nt == 1: a prompt's last tile may hold one token */
            dec_item(j, u[0], h, scratch);
        else
            apf_item(j, u[0], u[1], h, scratch);
    }
}

int cpu_attention(struct cs_backend *be, float *out, const float *q, int q_token_stride,
                  int q_head_stride, int n_heads, const struct cs_kv_layer *kv, float scale,
                  const struct cs_batch *b)
{
    int rc = kv_check(kv, b);
    if (rc != CS_OK)
        return rc;
    if ((b->n_tokens > 0 && (!out || !q)) || n_heads <= 0 || n_heads % kv->n_kv_heads)
        return CS_EINVAL;
    if (b->n_tokens == 0)
        return CS_OK;
    int g = n_heads / kv->n_kv_heads, D = kv->head_dim;
    /* work units: a decode token, or up to ATT_PTILE tokens of a prefill sequence */
    int64_t n_units = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int n = b->seq_start[s + 1] - b->seq_start[s];
        n_units += n == 1 ? 1 : (n + ATT_PTILE - 1) / ATT_PTILE;
    }
    int32_t *units = malloc(sizeof(int32_t) * 3 * (size_t)(n_units > 0 ? n_units : 1));
    if (!units)
        return CS_ENOMEM;
    size_t need = 0;
    int64_t u = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_start[s], t1 = b->seq_start[s + 1];
        for (int t = t0; t < t1; t += ATT_PTILE, u++) {
            int nt = att_min(ATT_PTILE, t1 - t);
            int32_t max_pos = 0;
            for (int i = t; i < t + nt; i++)
                max_pos = b->pos[i] > max_pos ? b->pos[i] : max_pos;
            size_t n = t1 - t0 == 1 ? dec_scratch(D, g, att_dec_chunk(kv->kv_type, g), max_pos)
                                    : apf_scratch(D, nt * g, max_pos);
            need = n > need ? n : need;
            units[3 * u] = t;
            units[3 * u + 1] = nt;
            units[3 * u + 2] = t1 - t0 == 1;
        }
    }
    struct cpu_ctx *ctx = cpu_ctx_of(be);
    rc = cpu_scratch_reserve(ctx, need);
    if (rc == CS_OK) {
        struct attn_job job = {.out = out, .q = q, .q_token_stride = q_token_stride,
                               .q_head_stride = q_head_stride, .n_heads = n_heads, .g = g,
                               .kv = kv, .scale = scale, .b = b, .units = units,
                               .n_units = n_units, .ctx = ctx};
        threadpool_for(ctx->pool, n_units * kv->n_kv_heads, 1, attn_range, &job);
    }
    free(units);
    return rc;
}
