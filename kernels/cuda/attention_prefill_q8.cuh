/* attention_prefill_q8.cuh - the int8 path of attention_prefill.cu
 * (kernels/attn_numerics.h): the per-step int8 copy of the K and V pages
 * (k_attn_prefill_kv8), the staging of their chunks, the DP4A micro-
 * kernels of the scores and of P.V, and the kernel k_attn_prefill_q8.
 * Included by attention_prefill.cu after its staging helpers, constants and
 * block helpers (struct apf_args, apf_stage, apf_row, apf_block_of,
 * apf_write_row, tile_sum, APF_*); not a header of its own. */
#ifndef CS_CUDA_ATTENTION_PREFILL_Q8_CUH
#define CS_CUDA_ATTENTION_PREFILL_Q8_CUH

/* The int8 path (kernels/attn_numerics.h): the int8 copies of the K and of
 * the V pages have one row of 64 words (256 int8, word w = dims 4w..4w + 3)
 * per (page, slot, kv head), at the row index below, and one scale per row;
 * -1 when the position's page is out of range (it reads as zeros, as
 * apf_row's). */
static __device__ __forceinline__ long long apf_k8_row(const struct apf_args &a, int seq, int h,
                                                       int pos)
{
    int pi = pos / a.page_size;
    int pg = pi < a.max_pages ? a.page_table[(size_t)seq * a.max_pages + pi] : -1;
    if (pg < 0 || pg >= a.n_pages)
        return -1;
    return ((long long)pg * a.page_size + (pos - pi * a.page_size)) * a.n_kv + h;
}

/* The int8 row of position p0 + j (0 <= j < 64) of a KV tile at p0 (a
 * multiple of 64): one page lookup per tile when pages hold whole tiles
 * (base = apf_k8_row of p0, the same for every thread), else per position. */
static __device__ __forceinline__ long long apf_k8_tile_base(const struct apf_args &a, int seq,
                                                             int h, int p0)
{
    return a.page_size % APF_KT == 0 ? apf_k8_row(a, seq, h, p0) : -2;
}
static __device__ __forceinline__ long long apf_k8_row_in(const struct apf_args &a, long long base,
                                                          int seq, int h, int p0, int j)
{
    if (base == -2)
        return apf_k8_row(a, seq, h, p0 + j);
    return base < 0 ? -1 : base + (long long)j * a.n_kv;
}

/* Pages that hold whole 64-position KV tiles (page_size % 64 == 0, the
 * default 256) get the int8 copies in the layouts the kernel's stage holds,
 * written so by k_attn_prefill_kv8: per (page tile, kv head) 64 x 64 words
 * at the rows the tile's 64 positions of that head would use in row layout
 * (rows tile0 + 64 h .. + 63, tile0 the row of the tile's first position and
 * head 0), K as [word][position] and V as [group of 4 positions][dim] (a
 * word holding the group's 4 bytes of one dim). A chunk (half a tile) is
 * then 8 KB of contiguous words, copied as they are: no per-position page
 * lookups, byte permutes or 4-byte loads. Other page sizes keep the row
 * layout [position][64 words] and transpose on the way in. */
static __device__ __forceinline__ bool apf_tiled(const struct apf_args &a)
{
    return a.page_size % APF_KT == 0;
}

/* The first word of head h's tile, from the row of the tile's first
 * position (base = apf_k8_row(p0) = tile0 + h). */
static __device__ __forceinline__ long long apf_tile_words(long long base, int h)
{
    return (base + 63LL * h) * 64;
}

/* One 256-value row held by a warp, 8 values a lane (f), as int8
 * (attn_numerics.h, the CPU's apf_q8_row): the lane's 8 values packed in
 * w[0] (f[0..3]) and w[1] (f[4..7]), the row's scale returned to every
 * lane. */
static __device__ __forceinline__ float apf_q8_warp_row(const float (&f)[8], int (&w)[2])
{
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++)
        amax = fmaxf(amax, fabsf(f[k]));
    amax = warp_max(amax);
    float inv = xm_q8_inv_scale(amax);
    w[0] = w[1] = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        w[k / 4] |= (xm_q8_round(f[k], inv) & 0xff) << (8 * (k % 4));
    return xm_q8_scale(amax);
}

/* Before the attention of a step: K and V of positions 0..max of every
 * prefill sequence (one with several tokens in the step), every kv head,
 * quantized into the int8 copies. Block (position block, kv head,
 * sequence); a warp per position, lane l holds dims 8l..8l + 7. Positions
 * are quantized once per layer and step, not once per query tile that reads
 * them. */
static __global__ void __launch_bounds__(256)
    k_attn_prefill_kv8(int32_t *k8, float *kd, int32_t *v8, float *vd, struct apf_args a,
                       const int32_t *seq_start)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write (kv_store wrote K) */
    int seq = blockIdx.z, h = blockIdx.y;
    int t0 = seq_start[seq], t1 = seq_start[seq + 1];
    if (t1 - t0 < 2)
        return;   /* a decode token: attention_decode.cu, fp32 scores */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int max_pos = -1;
    for (int t = t0 + lane; t < t1; t += 32)
        max_pos = max(max_pos, a.pos[t]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        max_pos = max(max_pos, __shfl_xor_sync(CS_FULL_MASK, max_pos, o));
    for (int p = blockIdx.x * 8 + warp; p <= max_pos; p += gridDim.x * 8) {
        long long row = apf_k8_row(a, seq, h, p);
        if (row < 0)
            continue;
#pragma unroll
        for (int which = 0; which < 2; which++) {
            const __half *src = apf_row<__half>(a, seq, h, p, which);
            int4 raw = __ldg((const int4 *)src + lane);
            const __half2 *h2 = (const __half2 *)&raw;
            float f[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 x = __half22float2(h2[k]);
                f[2 * k] = x.x, f[2 * k + 1] = x.y;
            }
            int w[2];
            float d = apf_q8_warp_row(f, w);
            int32_t *q8 = which ? v8 : k8;
            float *qd = which ? vd : kd;
            if (!apf_tiled(a)) {
                ((int2 *)(q8 + row * 64))[lane] = make_int2(w[0], w[1]);
            } else {
                int j = p % APF_KT;   /* = the page slot's, pages hold whole tiles */
                long long tw = apf_tile_words(row - (long long)j * a.n_kv, h);
                if (!which) {   /* K: [word][position]; lane l holds words 2l, 2l + 1 */
                    q8[tw + (2 * lane) * APF_KT + j] = w[0];
                    q8[tw + (2 * lane + 1) * APF_KT + j] = w[1];
                } else {        /* V: byte j % 4 of word dim of group j / 4 */
                    int8_t *g = (int8_t *)(q8 + tw + (j / 4) * APF_D + 8 * lane) + j % 4;
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        g[4 * k] = (int8_t)(w[k / 4] >> (8 * (k % 4)));
                }
            }
            if (lane == 0)
                qd[row] = d;
        }
    }
}

/* Fetch chunk hc of a tiled copy (q8: the K or the V copy; K words 32 hc..
 * 32 hc + 31, or V positions 32 hc..32 hc + 31): 512 int4 of contiguous
 * words, int4 u by thread u % NT; zeros where the tile's page is out of
 * range (base < 0). */
template <typename T, int NT>
static __device__ __forceinline__ void apf_fetch_tiled(apf_stage<T, NT> &r, const int32_t *q8,
                                                       long long base, int h, int hc)
{
    const int IT = (512 + NT - 1) / NT;
    static_assert(IT <= apf_stage<T, NT>::N, "the staging registers hold a chunk");
    const int4 *src = (const int4 *)(q8 + apf_tile_words(base, h) + 2048 * hc);
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int u = threadIdx.x + it * NT;
        r.v[it] = u < 512 && base >= 0 ? __ldg(src + u) : make_int4(0, 0, 0, 0);
    }
}

template <typename T, int NT>
static __device__ __forceinline__ void apf_put_tiled(int *buf, const apf_stage<T, NT> &r)
{
    const int IT = (512 + NT - 1) / NT;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int u = threadIdx.x + it * NT;
        if (u < 512)
            ((int4 *)buf)[u] = r.v[it];
    }
}

/* Fetch K8 chunk hc (words 32 hc..32 hc + 31 of the tile's 64 positions
 * at p0; 32 B of one position per thread and round, lanes on consecutive
 * positions) into r.v[2 it], r.v[2 it + 1]; with hc 0, thread j < 64 also
 * takes position j's K scale into *kdv, and thread 64 + j its V scale.
 * Positions >= p_end read as zeros. */
template <typename T, int NT>
static __device__ __forceinline__ void apf_fetch_k8(apf_stage<T, NT> &r, float *kdv,
                                                    const struct apf_args &a, int seq, int h,
                                                    int p0, int hc, int p_end)
{
    const int IT = (APF_KT * 4 + NT - 1) / NT;   /* 256 pairs of 32 B a chunk */
    long long base = apf_k8_tile_base(a, seq, h, p0);
    if (apf_tiled(a))
        apf_fetch_tiled<T, NT>(r, a.k8, base, h, hc);
#pragma unroll
    for (int it = 0; it < IT && !apf_tiled(a); it++) {
        int c = threadIdx.x + it * NT;
        int j = c % APF_KT, e = c / APF_KT;       /* position, 8-word group */
        r.v[2 * it] = r.v[2 * it + 1] = make_int4(0, 0, 0, 0);
        if (c < APF_KT * 4 && p0 + j < p_end) {
            long long row = apf_k8_row_in(a, base, seq, h, p0, j);
            if (row >= 0) {
                const int4 *src = (const int4 *)(a.k8 + row * 64 + 32 * hc + 8 * e);
                r.v[2 * it] = __ldg(src);
                r.v[2 * it + 1] = __ldg(src + 1);
            }
        }
    }
    if (hc == 0 && threadIdx.x < 2 * APF_KT) {
        int j = threadIdx.x % APF_KT;
        long long row = p0 + j < p_end ? apf_k8_row_in(a, base, seq, h, p0, j) : -1;
        *kdv = row >= 0 ? __ldg((threadIdx.x < APF_KT ? a.kd : a.vd) + row) : 0.0f;
    }
}

/* Store a fetched K8 chunk transposed, [32 words][64 positions] (int32). */
template <typename T, int NT>
static __device__ __forceinline__ void apf_put_k8(int *buf, const apf_stage<T, NT> &r)
{
    const int IT = (APF_KT * 4 + NT - 1) / NT;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int c = threadIdx.x + it * NT;
        if (c >= APF_KT * 4)
            break;
        int j = c % APF_KT, e = c / APF_KT;
        const int *w = (const int *)&r.v[2 * it];
#pragma unroll
        for (int k = 0; k < 8; k++)
            buf[(8 * e + k) * APF_KT + j] = w[k];
    }
}

/* The int8 scores: s[i][jj] += the DP4A dots of Q8 row r_i and K8^T column
 * 2 lane + jj over the 32 words of K8 chunk (qr: row r_0's words of the
 * chunk, row i at qr + i NW 64; kt: the chunk at column 2 lane). */
template <int NW>
static __device__ __forceinline__ void apf_scores_q8(int (&s)[APF_RPT][2], const int *qr,
                                                     const int *kt)
{
#pragma unroll
    for (int g = 0; g < 8; g++) {
        int4 qv[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            qv[i] = *(const int4 *)(qr + i * NW * 64 + 4 * g);
#pragma unroll
        for (int ww = 0; ww < 4; ww++) {
            int2 kv = *(const int2 *)(kt + (4 * g + ww) * APF_KT);
#pragma unroll
            for (int i = 0; i < APF_RPT; i++) {
                int qw = ww == 0 ? qv[i].x : ww == 1 ? qv[i].y : ww == 2 ? qv[i].z : qv[i].w;
                s[i][0] = __dp4a(qw, kv.x, s[i][0]);
                s[i][1] = __dp4a(qw, kv.y, s[i][1]);
            }
        }
    }
}

/* Fetch V8 chunk hc (positions p0 + 32 hc + [0, 32)): unit u < 512 is
 * word w = u % 64 of the 4 positions of group gp = u / 64, one word of each
 * position (a warp reads 128 B of each of 4 rows), into word 4 it + k of
 * r.v. Positions >= p_end read as zeros (their weight is 0 anyway). */
template <typename T, int NT>
static __device__ __forceinline__ void apf_fetch_v8(apf_stage<T, NT> &r, const struct apf_args &a,
                                                    int seq, int h, int p0, int hc, int p_end)
{
    const int IT = (512 + NT - 1) / NT;
    static_assert(IT <= apf_stage<T, NT>::N, "the staging registers hold a V8 chunk");
    int *rw = (int *)r.v;
    long long base = apf_k8_tile_base(a, seq, h, p0);
    if (apf_tiled(a)) {
        apf_fetch_tiled<T, NT>(r, a.v8, base, h, hc);
        return;
    }
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int u = threadIdx.x + it * NT;
        int gp = u / 64, w = u % 64;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int j = 32 * hc + 4 * gp + k, p = p0 + j;
            long long row = u < 512 && p < p_end ? apf_k8_row_in(a, base, seq, h, p0, j) : -1;
            rw[4 * it + k] = row >= 0 ? __ldg(a.v8 + row * 64 + w) : 0;
        }
    }
}

/* Store a fetched V8 chunk as [8 groups][256 dims] words, a word holding the
 * group's 4 positions of one dim (byte k = position 4 gp + k): each unit's
 * 4 words (4 positions x 4 dims) transposed by byte permutes. */
template <typename T, int NT>
static __device__ __forceinline__ void apf_put_v8(int *buf, const apf_stage<T, NT> &r)
{
    const int IT = (512 + NT - 1) / NT;
    const int *rw = (const int *)r.v;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int u = threadIdx.x + it * NT;
        if (u >= 512)
            break;
        int gp = u / 64, w = u % 64;
        unsigned a0 = rw[4 * it], a1 = rw[4 * it + 1], a2 = rw[4 * it + 2], a3 = rw[4 * it + 3];
        unsigned t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a2, a3, 0x5140);
        unsigned t2 = __byte_perm(a0, a1, 0x7362), t3 = __byte_perm(a2, a3, 0x7362);
        *(int4 *)(buf + gp * APF_D + 4 * w) =
            make_int4((int)__byte_perm(t0, t1, 0x5410), (int)__byte_perm(t0, t1, 0x7632),
                      (int)__byte_perm(t2, t3, 0x5410), (int)__byte_perm(t2, t3, 0x7632));
    }
}

/* dp4a of unsigned bytes (P weights) by signed bytes (V) */
static __device__ __forceinline__ int apf_dp4a_us(unsigned a, int b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* The int8 P.V: ia[i][4k + e] += sum over the 32 positions of V8 chunk vc
 * of P8[r_i][position] V8[position][128 k + 4 lane + e] (pr: row r_0's P8
 * words of the chunk, row i at pr + i NW 16; vt: the chunk at dim 4 lane).
 * P8 is read two words (8 positions) a row at a time: 16 registers of P in
 * flight beside the 64 accumulators, so the kernel fits 128 registers. The
 * integer sums are exact, so their order does not change the bits. */
template <int NW>
static __device__ __forceinline__ void apf_pv_q8(int (&ia)[APF_RPT][8], const unsigned *pr,
                                                 const int *vt)
{
#pragma unroll
    for (int g2 = 0; g2 < 4; g2++) {
        uint2 pw[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            pw[i] = *(const uint2 *)(pr + i * NW * 16 + 2 * g2);
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
            const int *vr = vt + (2 * g2 + jj) * APF_D;
            int4 v0 = *(const int4 *)vr, v1 = *(const int4 *)(vr + 128);
#pragma unroll
            for (int i = 0; i < APF_RPT; i++) {
                unsigned p = jj == 0 ? pw[i].x : pw[i].y;
                ia[i][0] = apf_dp4a_us(p, v0.x, ia[i][0]);
                ia[i][1] = apf_dp4a_us(p, v0.y, ia[i][1]);
                ia[i][2] = apf_dp4a_us(p, v0.z, ia[i][2]);
                ia[i][3] = apf_dp4a_us(p, v0.w, ia[i][3]);
                ia[i][4] = apf_dp4a_us(p, v1.x, ia[i][4]);
                ia[i][5] = apf_dp4a_us(p, v1.y, ia[i][5]);
                ia[i][6] = apf_dp4a_us(p, v1.z, ia[i][6]);
                ia[i][7] = apf_dp4a_us(p, v1.w, ia[i][7]);
            }
        }
    }
}

/* ---- the int8 kernel ---- */

/* c ? a : b by a predicated select the compiler cannot turn back into a
 * branch around the computation of a or b (it did, for plain ?:). */
static __device__ __forceinline__ float apf_select(bool c, float a, float b)
{
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.ne.s32 p, %1, 0;\n\tselp.f32 %0, %2, %3, p;\n\t}"
        : "=f"(r)
        : "r"((int)c), "f"(a), "f"(b));
    return r;
}

/* exact_math.h's xm_exp_nonpos without its branch: the polynomial is formed
 * for every x and 0 selected after for x < -87 (and -inf), so a warp's rows
 * can overlap their latencies. The same bits wherever xm_exp_nonpos returns
 * its polynomial. */
static __device__ __forceinline__ float apf_exp_nonpos(float x)
{
    return apf_select(x < -87.0f, 0.0f, xm_exp_nonpos_poly(x));
}

/* The maximum of v over the warp: on sm_80+ one REDUX of the floats'
 * order-preserving integer keys (negative floats get their magnitude bits
 * flipped) instead of five shuffles and five FMNMX. The value is warp_max's;
 * only the sign of a zero maximum may differ, which no later operation sees
 * (x - (-0) == x - 0, and -0 == +0 keeps alpha at 1). */
static __device__ __forceinline__ float apf_warp_max(float v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    int b = __float_as_int(v);
    int m = __reduce_max_sync(CS_FULL_MASK, b ^ ((b >> 31) & 0x7fffffff));
    return __int_as_float(m ^ ((m >> 31) & 0x7fffffff));
#else
    return warp_max(v);
#endif
}

/* Blocks per SM the int8 kernel's registers aim at: 16 warps, 4 per
 * scheduler (128 registers at 64 rows, 2 blocks of 94 KB of shared memory
 * on sm_90; 4 blocks of 32 rows). Where shared memory holds fewer blocks
 * (sm_70: one of 64 rows) the cap only costs registers that would idle. */
#ifndef APF_Q8_WARPS_PER_SM
#define APF_Q8_WARPS_PER_SM 16
#endif
#define APF_Q8_MIN_BLOCKS(NTY) (APF_Q8_WARPS_PER_SM / (APF_THREADS(NTY) / 32))

/* Shared memory of the int8 kernel (floats), in this order: the rows' fp32
 * output accumulators [ROWS][256], Q8 [ROWS][64 words], the staging buffers
 * (2,048 words each: a K8 or V8 chunk; one for the register staging, two for
 * the async one), P8 [ROWS][16 words], then per row the Q scale, the P
 * scale, m, l, alpha and the position, and the tile's 64 K and 64 V scales.
 * 94 KB at 64 rows with one buffer (sm_70's opt-in limit is 96 KB), 102 KB
 * with two (two blocks still fit an sm_90 SM's 228 KB). */
#define APF_Q8_STAGE 2048
static size_t apf_q8_smem_floats(int rows, int stages)
{
    return (size_t)rows * APF_D + (size_t)rows * 64 + (size_t)stages * APF_Q8_STAGE +
           (size_t)rows * 16 + (size_t)rows * 6 + 2 * APF_KT;
}

/* Async staging (sm_80+, pages holding whole KV tiles): chunk ph (0, 1: K
 * words 0-31, 32-63; 2, 3: V positions 0-31, 32-63) of the tile at p0 goes
 * from the tiled int8 copies into buf by cp.async, 512 int4 (zeros where the
 * tile's page is out of range); with ph 0 also the tile's 64 K and 64 V
 * scales into skv (zeros for positions >= p_end or out of range, as
 * apf_fetch_k8's). One commit group. */
template <int NT>
static __device__ __forceinline__ void apf_issue_async(int *buf, float *skv,
                                                       const struct apf_args &a, int seq, int h,
                                                       int p0, int ph, int p_end)
{
    long long base = apf_k8_row(a, seq, h, p0);
    const int32_t *q8 = ph < 2 ? a.k8 : a.v8;
    const int4 *src = (const int4 *)(q8 + (base >= 0 ? apf_tile_words(base, h) + 2048 * (ph & 1) : 0));
    uint32_t dst = (uint32_t)__cvta_generic_to_shared(buf);
    int n = base >= 0 ? 16 : 0;
#pragma unroll
    for (int it = 0; it < (512 + NT - 1) / NT; it++) {
        int u = threadIdx.x + it * NT;
        if (512 % NT == 0 || u < 512)
            cp_async16(dst + 16 * u, src + u, n);
    }
    if (ph == 0 && threadIdx.x < 2 * APF_KT) {
        int j = threadIdx.x % APF_KT;
        bool ok = base >= 0 && p0 + j < p_end;
        const float *sc = (threadIdx.x < APF_KT ? a.kd : a.vd) + (ok ? base + (long long)j * a.n_kv : 0);
        cp_async4((uint32_t)__cvta_generic_to_shared(skv + threadIdx.x), sc, ok ? 4 : 0);
    }
    cp_async_commit();
}

/* Chunk ph of the tile at p0 into shared memory, and the next chunk (ph + 1,
 * or the next tile's first when ph is 3 and more) on its way; returns the
 * chunk's buffer. Register staging (ASYNC false): st holds the chunk,
 * fetched one chunk ahead; it is stored between two barriers and the next
 * one fetched. Async: the chunk was issued one chunk ahead into buffer
 * ph % 2; one barrier (after this thread's wait) makes it visible to all and
 * frees the other buffer for the next. */
template <typename T, int NT, bool ASYNC>
static __device__ __forceinline__ int *apf_q8_chunk(int *sbuf, float *skv, apf_stage<T, NT> &st,
                                                    float &kdv, const struct apf_args &a, int seq,
                                                    int h, int p0, int ph, int p_end, bool more)
{
    if (ASYNC) {
        cp_async_wait<0>();
        __syncthreads();
        if (ph < 3 || more)
            apf_issue_async<NT>(sbuf + ((ph + 1) & 1) * APF_Q8_STAGE, skv, a, seq, h,
                                ph < 3 ? p0 : p0 + APF_KT, (ph + 1) & 3, p_end);
        return sbuf + (ph & 1) * APF_Q8_STAGE;
    }
    __syncthreads();   /* the previous chunk (and the Q, P, state writes) done with */
    if (apf_tiled(a))
        apf_put_tiled<T, NT>(sbuf, st);
    else if (ph < 2)
        apf_put_k8<T, NT>(sbuf, st);
    else
        apf_put_v8<T, NT>(sbuf, st);
    if (ph == 0 && threadIdx.x < 2 * APF_KT)
        skv[threadIdx.x] = kdv;   /* K scales, then V scales */
    __syncthreads();
    if (ph == 0)
        apf_fetch_k8<T, NT>(st, &kdv, a, seq, h, p0, 1, p_end);
    else if (ph == 1 || ph == 2)
        apf_fetch_v8<T, NT>(st, a, seq, h, p0, ph - 1, p_end);
    else if (more)
        apf_fetch_k8<T, NT>(st, &kdv, a, seq, h, p0 + APF_KT, 0, p_end);
    return sbuf;
}

/* The int8 path (attn_numerics.h) over an F16 cache: the same blocks, rows
 * and arithmetic as k_attn_prefill_tiled's fp32 path with int8 DP4A
 * products (as kernels/cpu/attention.c), arranged to run two blocks per SM:
 * a row's fp32 accumulators, m, l and alpha live in shared memory (each
 * thread reads and writes only its own accumulators, once per KV tile), and
 * a KV tile's four chunks are separate phases (K, K, softmax, V, V, fold),
 * so the score and the P.V accumulators are never live together. The
 * int32 P.V sums of a tile fold into the accumulators as fma((float)isum,
 * d_p, acc * alpha), the fp32 path's alpha scaling and fold in one. */
template <int NTY, bool ASYNC>
static __global__ void __launch_bounds__(APF_THREADS(NTY), APF_Q8_MIN_BLOCKS(NTY))
    k_attn_prefill_q8(float *out, float *part_acc, float2 *part_ml, struct apf_args a)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    typedef __half T;
    const int NT = APF_THREADS(NTY), ROWS = 4 * NTY, NW = NT / 32;
    static_assert(ROWS == APF_RPT * NW, "a warp owns APF_RPT rows");
    extern __shared__ __align__(16) float apf_smem[];
    float *sacc = apf_smem;
    int *sq8 = (int *)(sacc + ROWS * APF_D);
    int *sbuf = sq8 + ROWS * 64;
    unsigned *sp8 = (unsigned *)(sbuf + (ASYNC ? 2 : 1) * APF_Q8_STAGE);
    float *sqd = (float *)(sp8 + ROWS * 16), *spd = sqd + ROWS;
    float *sm = spd + ROWS, *sl = sm + ROWS, *salpha = sl + ROWS;
    int *spos = (int *)(salpha + ROWS);
    float *skd = (float *)(spos + ROWS), *svd = skd + APF_KT;
    struct apf_block b = apf_block_of(a);
    if (!b.valid)
        return;
    int h = b.h, seq = b.seq, p_lo = b.p_lo, p_end = b.p_end, G = a.group;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* Q rows, scaled and quantized by the warp that owns them: lane l holds
     * dims 4l.. and 128 + 4l.., words l and 32 + l (as the CPU's
     * apf_q8_row); the row's state starts empty */
#pragma unroll 1
    for (int i = 0; i < APF_RPT; i++) {
        int r = warp + NW * i;
        float f[8] = {};
        if (r < b.n_rows) {
            const float *qr = a.q + (size_t)(b.t0 + r / G) * a.q_ts + (size_t)(h * G + r % G) * a.q_hs;
#pragma unroll
            for (int k = 0; k < 8; k++)
                f[k] = qr[128 * (k / 4) + 4 * lane + k % 4] * a.scale;
        }
        int w[2];
        float d = apf_q8_warp_row(f, w);
        sq8[r * 64 + lane] = w[0];
        sq8[r * 64 + 32 + lane] = w[1];
        float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *(float4 *)(sacc + r * APF_D + 4 * lane) = zero;
        *(float4 *)(sacc + r * APF_D + 128 + 4 * lane) = zero;
        if (lane == 0) {
            sqd[r] = d;
            sm[r] = -INFINITY;
            sl[r] = 0.0f;
            spos[r] = r < b.n_rows ? a.pos[b.t0 + r / G] : -1;
        }
    }

    int n_kt = (p_end - p_lo + APF_KT - 1) / APF_KT;
    apf_stage<T, NT> st;
    float kdv = 0.0f;
    if (ASYNC)
        apf_issue_async<NT>(sbuf, skd, a, seq, h, p_lo, 0, p_end);
    else
        apf_fetch_k8<T, NT>(st, &kdv, a, seq, h, p_lo, 0, p_end);
    for (int kt = 0; kt < n_kt; kt++) {
        int p0 = p_lo + kt * APF_KT;
        bool more = kt + 1 < n_kt;
        /* S: two K8 chunks (words 0-31, 32-63 of the tile's 64 keys) */
        int si[APF_RPT][2] = {};
#pragma unroll
        for (int hc = 0; hc < 2; hc++) {
            int *buf = apf_q8_chunk<T, NT, ASYNC>(sbuf, skd, st, kdv, a, seq, h, p0, hc, p_end, more);
            apf_scores_q8<NW>(si, sq8 + warp * 64 + 32 * hc, buf + 2 * lane);
        }
        /* online softmax over the tile (positions p0 + 2 lane + jj), P8 and
         * its scale, as the fp32 path and the CPU's apf_softmax_q8: each
         * step for all of the warp's rows before the next, branch-free, so
         * that the rows' latencies (maxima, exps, shuffles) overlap */
        float s[APF_RPT][2], m_old[APF_RPT], m_new[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++) {
            int r = warp + NW * i;
            float dq = sqd[r];
            int qpos = spos[r];
            m_old[i] = sm[r];
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                s[i][jj] = __fmul_rn(__int2float_rn(si[i][jj]), __fmul_rn(dq, skd[2 * lane + jj]));
                if (p0 + 2 * lane + jj > qpos)
                    s[i][jj] = -INFINITY;
            }
        }
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            m_new[i] = fmaxf(m_old[i], apf_warp_max(fmaxf(s[i][0], s[i][1])));
        float ls[APF_RPT], wmax[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++) {
#pragma unroll
            for (int jj = 0; jj < 2; jj++)   /* xm_exp_nonpos's values (see k_attn_prefill_tiled) */
                s[i][jj] = apf_select(m_new[i] == -INFINITY, 0.0f, apf_exp_nonpos(s[i][jj] - m_new[i]));
        }
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            ls[i] = tile_sum(s[i][0], s[i][1], lane);
        /* the weights p d_v on 0..255, one scale per row and tile */
        float dv0 = svd[2 * lane], dv1 = svd[2 * lane + 1];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++) {
            s[i][0] = __fmul_rn(s[i][0], dv0);
            s[i][1] = __fmul_rn(s[i][1], dv1);
            wmax[i] = apf_warp_max(fmaxf(s[i][0], s[i][1]));
        }
#pragma unroll
        for (int i = 0; i < APF_RPT; i++) {
            int r = warp + NW * i;
            float inv = xm_u8_inv_scale(wmax[i]);
            unsigned q2 = (unsigned)xm_q8_round(s[i][0], inv) | (unsigned)xm_q8_round(s[i][1], inv) << 8;
            ((unsigned short *)(sp8 + r * 16))[lane] = (unsigned short)q2;
        }
        /* the rows' state: lane i updates row r_i (every lane holds every
         * row's values; one exp and one division a lane instead of eight) */
        float mo = m_old[0], mn = m_new[0], lsum = ls[0], wm = wmax[0];
#pragma unroll
        for (int i = 1; i < APF_RPT; i++) {
            mo = lane == i ? m_old[i] : mo;
            mn = lane == i ? m_new[i] : mn;
            lsum = lane == i ? ls[i] : lsum;
            wm = lane == i ? wmax[i] : wm;
        }
        if (lane < APF_RPT) {   /* every lane read m and l above (the maxima synchronised them) */
            int r = warp + NW * lane;
            /* an unchanged max keeps acc and l bit-identical (alpha = 1) */
            float alpha = mn == mo ? 1.0f : xm_exp_nonpos(mo - mn);
            sm[r] = mn;
            sl[r] = __fmaf_rn(sl[r], alpha, lsum);
            salpha[r] = alpha;
            spd[r] = xm_u8_scale(wm);
        }
        /* P.V: two V8 chunks (positions 0-31, 32-63) */
        int ia[APF_RPT][8] = {};
#pragma unroll
        for (int hc = 0; hc < 2; hc++) {
            int *buf = apf_q8_chunk<T, NT, ASYNC>(sbuf, skd, st, kdv, a, seq, h, p0, 2 + hc, p_end,
                                                 more);
            apf_pv_q8<NW>(ia, sp8 + warp * 16 + 8 * hc, buf + 4 * lane);
        }
        /* fold: acc = fma((float)isum, d_p, acc * alpha), the thread's own
         * 8 dims of each of its rows; an unchanged max (alpha 1, the common
         * case once a row's max settles) skips the multiply, whose product
         * would be acc itself (alpha is the same for the whole warp) */
#pragma unroll
        for (int i = 0; i < APF_RPT; i++) {
            int r = warp + NW * i;
            float dp = spd[r], alpha = salpha[r];
#pragma unroll
            for (int k = 0; k < 2; k++) {
                float4 *o = (float4 *)(sacc + r * APF_D + 128 * k + 4 * lane);
                float4 v = *o;
                if (alpha != 1.0f) {
                    v.x = __fmul_rn(v.x, alpha);
                    v.y = __fmul_rn(v.y, alpha);
                    v.z = __fmul_rn(v.z, alpha);
                    v.w = __fmul_rn(v.w, alpha);
                }
                v.x = __fmaf_rn(__int2float_rn(ia[i][4 * k]), dp, v.x);
                v.y = __fmaf_rn(__int2float_rn(ia[i][4 * k + 1]), dp, v.y);
                v.z = __fmaf_rn(__int2float_rn(ia[i][4 * k + 2]), dp, v.z);
                v.w = __fmaf_rn(__int2float_rn(ia[i][4 * k + 3]), dp, v.w);
                *o = v;
            }
        }
    }

    /* rows with a position in this split: the output (one split) or a partial */
    __syncwarp();   /* lane 0's m and l */
#pragma unroll 1
    for (int i = 0; i < APF_RPT; i++) {
        int r = warp + NW * i;
        int qpos = spos[r];
        if (r >= b.n_rows || qpos < p_lo)
            continue;
        const float *o = sacc + r * APF_D + 4 * lane;
        apf_write_row(out, part_acc, part_ml, a, b, r, qpos, *(const float4 *)o,
                      *(const float4 *)(o + 128), sm[r], sl[r], lane);
    }
}

#endif
