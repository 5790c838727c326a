/* attention_prefill_q8.cuh - the int8 path of attention_prefill.cu
 * (kernels/attn_numerics.h): the per-step int8 copy of the K and V pages
 * (k_attn_prefill_kv8), the staging of their chunks, and the DP4A micro-
 * kernels of the scores and of P.V. Included by attention_prefill.cu after its staging helpers
 * and constants (struct apf_args, apf_stage, apf_row, APF_*); not a header
 * of its own. */
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
            ((int2 *)(q8 + row * 64))[lane] = make_int2(w[0], w[1]);
            if (lane == 0)
                qd[row] = d;
        }
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
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int c = threadIdx.x + it * NT;
        int j = c % APF_KT, e = c / APF_KT;       /* position, 8-word group */
        r.v[2 * it] = r.v[2 * it + 1] = make_int4(0, 0, 0, 0);
        if (c < APF_KT * 4 && p0 + j < p_end) {
            long long row = apf_k8_row(a, seq, h, p0 + j);
            if (row >= 0) {
                const int4 *src = (const int4 *)(a.k8 + row * 64 + 32 * hc + 8 * e);
                r.v[2 * it] = __ldg(src);
                r.v[2 * it + 1] = __ldg(src + 1);
            }
        }
    }
    if (hc == 0 && threadIdx.x < 2 * APF_KT) {
        int j = threadIdx.x % APF_KT;
        long long row = p0 + j < p_end ? apf_k8_row(a, seq, h, p0 + j) : -1;
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
#pragma unroll
    for (int it = 0; it < IT; it++) {
        int u = threadIdx.x + it * NT;
        int gp = u / 64, w = u % 64;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int p = p0 + 32 * hc + 4 * gp + k;
            long long row = u < 512 && p < p_end ? apf_k8_row(a, seq, h, p) : -1;
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
 * words of the chunk, row i at pr + i NW 16; vt: the chunk at dim 4 lane). */
template <int NW>
static __device__ __forceinline__ void apf_pv_q8(int (&ia)[APF_RPT][8], const unsigned *pr,
                                                 const int *vt)
{
#pragma unroll
    for (int g4 = 0; g4 < 2; g4++) {
        uint4 pw[APF_RPT];
#pragma unroll
        for (int i = 0; i < APF_RPT; i++)
            pw[i] = *(const uint4 *)(pr + i * NW * 16 + 4 * g4);
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            const int *vr = vt + (4 * g4 + jj) * APF_D;
            int4 v0 = *(const int4 *)vr, v1 = *(const int4 *)(vr + 128);
#pragma unroll
            for (int i = 0; i < APF_RPT; i++) {
                unsigned p = jj == 0 ? pw[i].x : jj == 1 ? pw[i].y : jj == 2 ? pw[i].z : pw[i].w;
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

#endif
