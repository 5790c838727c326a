/* gdn_chunked.c - the chunked (WY / UT-transform) form of the gated delta
 * rule, as kernels/cuda/gdn_chunked.cu computes it, bit for bit: the CPU
 * backend's gdn op (gdn.c) runs it for the sequences that the CUDA gdn op
 * hands to that form (GDN_CHUNKED_MIN_TOKENS or more tokens of one sequence
 * in the step, ../gdn_chunked_shape.h), so both backends give the same bits.
 * The math is described at the top of gdn_chunked.cu; this file only
 * reproduces its arithmetic.
 *
 * One call runs one (sequence, value head) item: the sequence's chunks of
 * GDNC_C tokens (aligned to its first token of the step, the last one
 * partial) in order, each first as k_gdnc_prep (T, P, G, beta), then as
 * k_gdnc_scan for all 128 value columns (the four 32-column blocks of the
 * GPU compute the columns independently, with the same per-column
 * arithmetic). The GPU's windows (GDNC_WIN batch tokens) only decide which
 * launch computes a chunk; the state passes between them through memory, so
 * they do not appear here.
 *
 * Every value the kernels compute is one FFMA chain (fmaf here) or one
 * rounded operation, in the kernels' order:
 * - q, k rows: xm_l2_scale of the warp's sum of squares (lane FFMA chains
 *   over e, then the xor butterfly: cpu_sumsq_lanes), q's scale times
 *   1/sqrt(128) rounded once; rows past the chunk's n tokens are zero.
 * - g_t = a * softplus(alpha + dt_bias) (0 past n), G by the kernel's
 *   Hillis-Steele shfl_up scan over lanes 0-31 (tokens t and t + 32 in two
 *   halves), the upper half then plus G_31; beta = sigmoid (0 past n).
 * - K K^T and Q K^T: one chain over d = 0..127 ascending per element;
 *   A[t][i] = (beta_t e) kk, P[t][i] = e qk, e = xm_exp_nonpos(G_t - G_i),
 *   for i <= t < n (A strictly lower), else 0.
 * - T: forward substitution per 16x16 diagonal block (chain over ss < tt of
 *   fma(-A, col, acc), acc starting at the identity), then block rows 1..3:
 *   Y[u][ci] = chain over s2 = (ci & ~15)..m-1 of A[m+u][s2] T[s2][ci], and
 *   T[m+u][ci] = -(chain over v <= u of T[m+u][m+v] Y[v][ci]).
 * - scan: T and P rows past n zero; X = [Q; K] S0 one chain over i
 *   ascending; O = Gam_t XQ, R = beta_t fma(-Gam_t, XK, v); W = T R and then
 *   O += P W as chains over s2 < s_end, s_end = 4 (t % 32 / 4) + 36 (the
 *   kernel's per-warp bound: the terms past t are zero products, kept for
 *   the signs of zeros); K rows times d_t = xm_exp_nonpos(G_{n-1} - G_t);
 *   S = S Gam_{n-1}, then S += sum over t < n of (d K)[t][i] W[t][j], one
 *   chain in t order.
 * Denormals: the CUDA build flushes them (--use_fast_math implies
 * -ftz=true), and products with exp(G_t - G_i) near 1e-38 make them common
 * here; the item runs in the CPU backend's thread pool, which flushes them
 * too (fpmode.h). */
#include "../gdn_chunked_shape.h"
#include "cpu.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define GDNC_HOT __attribute__((target_clones("fma", "default")))
#else
#define GDNC_HOT
#endif

#define C GDNC_C
#define D GDNC_D

/* Per-thread scratch (floats), carved by gdnc_work_of. */
struct gdnc_work {
    float *q, *k;          /* [C][D] normalised rows */
    float *kt;             /* [D][C] k transposed */
    float *kk, *qk;        /* [C][C] */
    float *A, *P, *T;      /* [C][C] */
    float *Y;              /* [16][48] */
    float *xq, *xk;        /* [C][D] */
    float *R, *W, *O;      /* [C][D] */
    float *v;              /* [C][D] values of the chunk (0 past n) */
    float *G, *B, *gam, *d;   /* [C] */
};

size_t cpu_gdn_chunked_scratch(void)
{
    return (size_t)9 * C * D + (size_t)6 * C * C + 16 * 48 + 4 * C;
}

static struct gdnc_work gdnc_work_of(float *p)
{
    struct gdnc_work w;
    w.q = p, p += C * D;
    w.k = p, p += C * D;
    w.kt = p, p += D * C;
    w.kk = p, p += C * C;
    w.qk = p, p += C * C;
    w.A = p, p += C * C;
    w.P = p, p += C * C;
    w.T = p, p += C * C;
    w.Y = p, p += 16 * 48;
    w.xq = p, p += C * D;
    w.xk = p, p += C * D;
    w.R = p, p += C * D;
    w.W = p, p += C * D;
    w.O = p, p += C * D;
    w.v = p, p += C * D;
    w.G = p, p += C;
    w.B = p, p += C;
    w.gam = p, p += C;
    w.d = p;
    return w;
}

struct gdnc_seq {
    const float *y, *beta_raw, *alpha_raw;
    float ah, dh, eps;
    int conv_dim, Gk, Hv, h;
};

/* gdnc_qk_store: rows of tokens ts.. (n of them) of the head at column
 * offset head * D of y, normalised; rows past n zero. */
static void gdnc_norm_rows(float *dst, const struct gdnc_seq *q, int ts, int n, int head,
                           float extra)
{
    for (int t = 0; t < C; t++) {
        float *o = dst + (size_t)t * D;
        if (t >= n) {
            for (int e = 0; e < D; e++)
                o[e] = 0.0f;
            continue;
        }
        const float *x = q->y + (size_t)(ts + t) * q->conv_dim + (size_t)head * D;
        float inv = XM_MUL(xm_l2_scale(cpu_sumsq_lanes(x, D, 32), q->eps), extra);
        for (int e = 0; e < D; e++)
            o[e] = XM_MUL(x[e], inv);
    }
}

/* The inclusive Hillis-Steele scan of 32 lanes: at offset o, lane l >= o
 * adds lane l - o's value from before the step (g0 += shfl_up(g0, o)). */
static void gdnc_warp_scan(float *v)
{
    for (int o = 1; o < 32; o <<= 1)
        for (int l = 31; l >= o; l--)   /* descending: l - o still holds the old value */
            v[l] = XM_ADD(v[l], v[l - o]);
}

/* k_gdnc_prep's G, beta, A, P, T of one chunk (P and T rows past n zero, as
 * k_gdnc_scan reads them). */
GDNC_HOT static void gdnc_prep(struct gdnc_work *w, const struct gdnc_seq *q, int ts, int n)
{
    for (int t = 0; t < C; t++) {
        size_t i = (size_t)(ts + t) * q->Hv + q->h;
        w->G[t] = t < n ? XM_MUL(q->ah, xm_softplus(XM_ADD(q->alpha_raw[i], q->dh))) : 0.0f;
        w->B[t] = t < n ? xm_sigmoid(q->beta_raw[i]) : 0.0f;
    }
    gdnc_warp_scan(w->G);
    gdnc_warp_scan(w->G + 32);
    for (int l = 0; l < 32; l++)
        w->G[32 + l] = XM_ADD(w->G[32 + l], w->G[31]);

    /* K K^T and Q K^T: one chain over d per element */
    for (int i = 0; i < C; i++)
        for (int dd = 0; dd < D; dd++)
            w->kt[(size_t)dd * C + i] = w->k[(size_t)i * D + dd];
    for (int t = 0; t < C; t++) {
        float *kk = w->kk + (size_t)t * C, *qk = w->qk + (size_t)t * C;
        const float *kr = w->k + (size_t)t * D, *qr = w->q + (size_t)t * D;
        for (int i = 0; i < C; i++)
            kk[i] = qk[i] = 0.0f;
        for (int dd = 0; dd < D; dd++) {
            const float *kc = w->kt + (size_t)dd * C;
            float a = kr[dd], b = qr[dd];
            for (int i = 0; i < C; i++) {
                kk[i] = fmaf(a, kc[i], kk[i]);
                qk[i] = fmaf(b, kc[i], qk[i]);
            }
        }
    }

    /* A strictly lower, P lower with the diagonal, both 0 from row n on */
    for (int t = 0; t < C; t++)
        for (int i = 0; i < C; i++) {
            float av = 0.0f, pv = 0.0f;
            if (i <= t && t < n) {
                float e = xm_exp_nonpos(XM_SUB(w->G[t], w->G[i]));
                pv = XM_MUL(e, w->qk[t * C + i]);
                if (i < t)
                    av = XM_MUL(XM_MUL(w->B[t], e), w->kk[t * C + i]);
            }
            w->A[t * C + i] = av;
            w->P[t * C + i] = pv;
        }

    /* T = (I + A)^-1: blocks above the diagonal zero */
    for (int t = 0; t < C; t++)
        for (int i = 16 * (t / 16 + 1); i < C; i++)
            w->T[t * C + i] = 0.0f;
    /* diagonal blocks: column jj of block b by forward substitution */
    for (int b = 0; b < 4; b++) {
        int base = 16 * b;
        for (int jj = 0; jj < 16; jj++) {
            float col[16];
            for (int tt = 0; tt < 16; tt++) {
                float acc = tt == jj ? 1.0f : 0.0f;
                const float *arow = w->A + (base + tt) * C + base;
                for (int ss = 0; ss < tt; ss++)
                    acc = fmaf(-arow[ss], col[ss], acc);
                col[tt] = acc;
            }
            for (int tt = 0; tt < 16; tt++)
                w->T[(base + tt) * C + base + jj] = col[tt];
        }
    }
    /* block rows 1..3: Y = A[k][<k] T[<k][<k], T[k][<k] = -T[k][k] Y */
    for (int blk = 1; blk < 4; blk++) {
        int m = 16 * blk;
        for (int u = 0; u < 16; u++) {
            const float *arow = w->A + (m + u) * C;
            for (int ci = 0; ci < m; ci++) {
                float acc = 0.0f;
                for (int s2 = ci & ~15; s2 < m; s2++)
                    acc = fmaf(arow[s2], w->T[s2 * C + ci], acc);
                w->Y[u * 48 + ci] = acc;
            }
        }
        for (int u = 0; u < 16; u++) {
            const float *trow = w->T + (m + u) * C + m;
            for (int ci = 0; ci < m; ci++) {
                float acc = 0.0f;
                for (int v = 0; v <= u; v++)
                    acc = fmaf(trow[v], w->Y[v * 48 + ci], acc);
                w->T[(m + u) * C + ci] = -acc;
            }
        }
    }
    /* the scan reads T and P as zero from row n on (prep does not write them) */
    for (int t = n; t < C; t++)
        for (int i = 0; i < C; i++)
            w->T[t * C + i] = w->P[t * C + i] = 0.0f;
}

/* k_gdnc_scan's work on one chunk, all 128 value columns: S [D][D] (key
 * row i, value column j) is the head's state, updated in place. */
GDNC_HOT static void gdnc_scan(struct gdnc_work *w, const struct gdnc_seq *q, float *S,
                               float *out, int ts, int n)
{
    float glast = w->G[n - 1];
    float gam_end = xm_exp_nonpos(glast);
    for (int t = 0; t < C; t++) {
        float gt = t < n ? w->G[t] : glast;
        w->gam[t] = xm_exp_nonpos(gt);
        w->d[t] = t < n ? xm_exp_nonpos(XM_SUB(glast, gt)) : 0.0f;
    }
    for (int t = 0; t < C; t++) {
        const float *vp = q->y + (size_t)(ts + t) * q->conv_dim + (size_t)2 * q->Gk * D +
                          (size_t)q->h * D;
        for (int j = 0; j < D; j++)
            w->v[t * D + j] = t < n ? vp[j] : 0.0f;
    }

    /* X = Q S0, K S0: one chain over key rows i ascending */
    for (int t = 0; t < C; t++) {
        float *xq = w->xq + (size_t)t * D, *xk = w->xk + (size_t)t * D;
        const float *qr = w->q + (size_t)t * D, *kr = w->k + (size_t)t * D;
        for (int j = 0; j < D; j++)
            xq[j] = xk[j] = 0.0f;
        for (int i = 0; i < D; i++) {
            const float *Si = S + (size_t)i * D;
            float a = qr[i], b = kr[i];
            for (int j = 0; j < D; j++) {
                xq[j] = fmaf(a, Si[j], xq[j]);
                xk[j] = fmaf(b, Si[j], xk[j]);
            }
        }
    }

    /* k rows times d_t; O = Gam X_q; R = beta (v - Gam X_k) */
    for (int t = 0; t < C; t++) {
        float dt = w->d[t], gam = w->gam[t], bt = w->B[t];
        float *kr = w->k + (size_t)t * D;
        for (int i = 0; i < D; i++)
            kr[i] = XM_MUL(kr[i], dt);
        for (int j = 0; j < D; j++) {
            w->O[t * D + j] = XM_MUL(gam, w->xq[t * D + j]);
            w->R[t * D + j] = XM_MUL(bt, fmaf(-gam, w->xk[t * D + j], w->v[t * D + j]));
        }
    }

    /* W = T R, then O += P W: chains over s2 < s_end(t) */
    for (int t = 0; t < C; t++) {
        int s_end = 4 * ((t & 31) >> 2) + 36;
        float *wr = w->W + (size_t)t * D;
        for (int j = 0; j < D; j++)
            wr[j] = 0.0f;
        for (int s2 = 0; s2 < s_end; s2++) {
            float a = w->T[t * C + s2];
            const float *rr = w->R + (size_t)s2 * D;
            for (int j = 0; j < D; j++)
                wr[j] = fmaf(a, rr[j], wr[j]);
        }
    }
    for (int t = 0; t < C; t++) {
        int s_end = 4 * ((t & 31) >> 2) + 36;
        float *orow = w->O + (size_t)t * D;
        for (int s2 = 0; s2 < s_end; s2++) {
            float a = w->P[t * C + s2];
            const float *wr = w->W + (size_t)s2 * D;
            for (int j = 0; j < D; j++)
                orow[j] = fmaf(a, wr[j], orow[j]);
        }
        if (t < n) {
            float *op = out + (size_t)(ts + t) * q->Hv * D + (size_t)q->h * D;
            for (int j = 0; j < D; j++)
                op[j] = orow[j];
        }
    }

    /* S = Gam_{n-1} S0 + (d K)^T W: per element a chain over t < n */
    for (size_t e = 0; e < (size_t)D * D; e++)
        S[e] = XM_MUL(S[e], gam_end);
    for (int t = 0; t < n; t++) {
        const float *kr = w->k + (size_t)t * D, *wr = w->W + (size_t)t * D;
        for (int i = 0; i < D; i++) {
            float *Si = S + (size_t)i * D;
            float a = kr[i];
            for (int j = 0; j < D; j++)
                Si[j] = fmaf(a, wr[j], Si[j]);
        }
    }
}

static __attribute__((noinline)) void gdnc_seq_run(const struct gdnc_seq *q, float *out, float *S,
                                                   int t0, int t1, float *scratch)
{
    struct gdnc_work w = gdnc_work_of(scratch);
    int kh = q->h % q->Gk;
    float qscale = XM_DIV(1.0f, XM_SQRT((float)D));
    for (int ts = t0; ts < t1; ts += C) {
        int n = t1 - ts < C ? t1 - ts : C;
        gdnc_norm_rows(w.q, q, ts, n, kh, qscale);
        gdnc_norm_rows(w.k, q, ts, n, q->Gk + kh, 1.0f);
        gdnc_prep(&w, q, ts, n);
        gdnc_scan(&w, q, S, out, ts, n);
    }
}

void cpu_gdn_chunked_seq(float *out, const float *y, const float *beta_raw, const float *alpha_raw,
                         const float *a, const float *dt_bias, float eps,
                         const struct cs_gdn_layer *st, int t0, int t1, int h, float *S,
                         float *scratch)
{
    struct gdnc_seq q = {.y = y, .beta_raw = beta_raw, .alpha_raw = alpha_raw, .ah = a[h],
                         .dh = dt_bias[h], .eps = eps, .conv_dim = st->conv_dim,
                         .Gk = st->n_k_heads, .Hv = st->n_v_heads, .h = h};
    gdnc_seq_run(&q, out, S, t0, t1, scratch);
}
