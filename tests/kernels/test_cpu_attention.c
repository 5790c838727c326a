/* test_cpu_attention.c - proves kv_store + attention: causal GQA softmax
 * attention over paged F32 and F16 caches equals a naive double-precision
 * softmax over explicit K/V arrays, for sequences whose earlier positions were
 * stored in a previous step and whose new tokens are stored in this step, at
 * small and real (D=256) head sizes (over F16 caches the prefill tokens'
 * scores and P.V are int8, kernels/attn_numerics.h: checked against the
 * same int8 arithmetic done naively, within 2e-5 past the bound of P's
 * rounding, and their cost against exact arithmetic bounded); a sequence
 * computed alone equals the same
 * sequence inside a batch, bit for bit, for 1, 2 and 3 threads; a prompt's
 * tokens give the same bits in any chunking of the prompt (the prefill
 * arithmetic, kernels/cpu/attention.c, as the CUDA kernel); page table
 * entries out of range are refused with CS_ERANGE. (That the CPU gives the
 * CUDA kernels' bits is tests/gpu's test_attention_decode/_prefill.) */
#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/status.h"
#include "../../kernels/attn_numerics.h"
#include "../../kernels/exact_math.h"
#include "kernel_test.h"

#define NS 3

struct cfg {
    uint32_t kv_type;
    int D, n_heads, n_kv, page_size, n_pages, max_pages;
    int prev[NS], len[NS];        /* positions stored earlier, tokens this step */
    int pages[NS][8];
};

struct data {
    float *k[NS], *v[NS];         /* [pos][n_kv * D] for every position */
    float *q;                     /* [t][n_heads * D] of this step */
};

static void data_make(struct data *d, const struct cfg *c)
{
    int n_tok = 0;
    for (int s = 0; s < NS; s++) {
        int n = (c->prev[s] + c->len[s]) * c->n_kv * c->D;
        d->k[s] = kt_randv(n, 1.0f);
        d->v[s] = kt_randv(n, 1.0f);
        if (c->kv_type == CS_DTYPE_F16)
            for (int i = 0; i < n; i++) {
                d->k[s][i] = cs_half_to_float(cs_float_to_half(d->k[s][i]));
                d->v[s][i] = cs_half_to_float(cs_float_to_half(d->v[s][i]));
            }
        n_tok += c->len[s];
    }
    d->q = kt_randv((size_t)n_tok * c->n_heads * c->D, 2.0f);
}

/* Run the sequences listed in which[0..n) as one step (after storing their
 * earlier positions in a previous step) and return out for their tokens. */
static float *attn_run(int n_threads, const struct cfg *c, const struct data *d, const int *which,
                       int n)
{
    struct cs_backend *be = kt_backend(n_threads, 0);
    size_t esz = c->kv_type == CS_DTYPE_F32 ? 4 : 2;
    struct cs_kv_layer kv = {.kv_type = c->kv_type, .n_pages = c->n_pages,
                             .page_size = c->page_size, .n_kv_heads = c->n_kv, .head_dim = c->D};
    CHECK_EQ_INT(be->alloc(be, &kv.pages, (size_t)c->n_pages * 2 * c->page_size * c->n_kv * c->D * esz),
                 CS_OK);
    int row = c->n_kv * c->D, qrow = c->n_heads * c->D;
    int lens[NS], starts[NS], zero[NS] = {0};
    struct kt_batch kb;
    /* previous step: positions 0..prev-1 */
    for (int i = 0; i < n; i++) {
        lens[i] = c->prev[which[i]];
        starts[i] = 0;
    }
    kt_batch_init(&kb, n, lens, zero, NULL, c->max_pages);
    for (int i = 0; i < n; i++)
        memcpy(kb.pages + i * c->max_pages, c->pages[which[i]], sizeof(int32_t) * c->max_pages);
    float *k = calloc((size_t)(kb.b.n_tokens + 1) * row, 4), *v = calloc((size_t)(kb.b.n_tokens + 1) * row, 4);
    for (int t = 0; t < kb.b.n_tokens; t++) {
        int s = which[kb.seq_of[t]];
        memcpy(k + t * row, d->k[s] + kb.pos[t] * row, row * 4);
        memcpy(v + t * row, d->v[s] + kb.pos[t] * row, row * 4);
    }
    CHECK_EQ_INT(be->kv_store(be, &kv, k, row, v, row, &kb.b), CS_OK);
    free(k);
    free(v);
    /* this step */
    for (int i = 0; i < n; i++) {
        lens[i] = c->len[which[i]];
        starts[i] = c->prev[which[i]];
    }
    kt_batch_init(&kb, n, lens, starts, NULL, c->max_pages);
    for (int i = 0; i < n; i++)
        memcpy(kb.pages + i * c->max_pages, c->pages[which[i]], sizeof(int32_t) * c->max_pages);
    int nt = kb.b.n_tokens;
    /* k and v interleaved in one buffer to exercise the strides */
    float *kvbuf = calloc((size_t)nt * 2 * row, 4), *q = calloc((size_t)nt * qrow, 4);
    for (int t = 0; t < nt; t++) {
        int s = which[kb.seq_of[t]], qt = 0;
        for (int u = 0; u < s; u++)
            qt += c->len[u];
        qt += kb.pos[t] - c->prev[s];
        memcpy(kvbuf + t * 2 * row, d->k[s] + kb.pos[t] * row, row * 4);
        memcpy(kvbuf + t * 2 * row + row, d->v[s] + kb.pos[t] * row, row * 4);
        memcpy(q + t * qrow, d->q + (size_t)qt * qrow, qrow * 4);
    }
    CHECK_EQ_INT(be->kv_store(be, &kv, kvbuf, 2 * row, kvbuf + row, 2 * row, &kb.b), CS_OK);
    float *out = calloc((size_t)nt * qrow, 4);
    CHECK_EQ_INT(be->attention(be, out, q, qrow, c->D, c->n_heads, &kv, 1.0f / sqrtf(c->D), &kb.b),
                 CS_OK);
    free(kvbuf);
    free(q);
    be->free(be, kv.pages);
    be->destroy(be);
    return out;
}

/* x (n values) quantized as kernels/attn_numerics.h's int8 scores do: the
 * int8 values back in q, the scale returned. */
static float naive_q8(const float *x, int n, float *q)
{
    float amax = 0.0f;
    for (int e = 0; e < n; e++)
        amax = fmaxf(amax, fabsf(x[e]));
    float inv = xm_q8_inv_scale(amax);
    for (int e = 0; e < n; e++)
        q[e] = (float)xm_q8_round(x[e], inv);
    return xm_q8_scale(amax);
}

/* The worst |out - naive| over all tokens. quant: where attention uses its
 * int8 path (a prefill token, a sequence of several tokens in the step, over
 * an F16 cache), the naive scores are formed from the same int8 Q and K
 * values and scales, and V from the same int8 values and scales (in
 * double), but P stays exact: P's rounding to 0..255 (one scale d_p =
 * wmax / 255 per row and 64-position tile, wmax the tile's largest p d_v)
 * moves each weight by at most d_p / 2, so an output moves by at most
 * sum_j d_p(tile of j) / 2 |v8_j[e]| (p normalized): that bound is taken off
 * each difference before the worst is formed (*pq_max: the largest bound).
 * quant 1 checks the implementation of that arithmetic; quant 0 uses exact
 * arithmetic everywhere, so the difference is what the int8 path costs. */
static double naive_check(const struct cfg *c, const struct data *d, const float *out, int quant,
                          double *pq_max)
{
    int qrow = c->n_heads * c->D, row = c->n_kv * c->D, t = 0;
    double worst = 0, *sc = malloc(sizeof(double) * 1024 * 2), *wt = sc + 1024;
    float *qs = malloc(sizeof(float) * c->D * 3), *q8 = qs + c->D, *k8 = q8 + c->D;
    float scale = 1.0f / sqrtf(c->D);
    *pq_max = 0;
    for (int s = 0; s < NS; s++) {
        /* the sequence's V rows as int8 (vi) and their scales (dv) */
        int n_pos = c->prev[s] + c->len[s];
        float *vi = malloc(sizeof(float) * n_pos * (row + c->n_kv)), *dv = vi + n_pos * row;
        for (int j = 0; j < n_pos * c->n_kv; j++)
            dv[j] = naive_q8(d->v[s] + (size_t)j * c->D, c->D, vi + (size_t)j * c->D);
        for (int i = 0; i < c->len[s]; i++, t++) {
            int pos = c->prev[s] + i;
            int q8s = quant && c->len[s] > 1 && cs_attn_q8(c->kv_type);
            for (int h = 0; h < c->n_heads; h++) {
                int g = h / (c->n_heads / c->n_kv);
                const float *q = d->q + (size_t)t * qrow + h * c->D;
                double m = -1e300, sum = 0;
                float dq = 0.0f;
                if (q8s) {
                    for (int e = 0; e < c->D; e++)
                        qs[e] = q[e] * scale;
                    dq = naive_q8(qs, c->D, q8);
                }
                for (int j = 0; j <= pos; j++) {
                    double dot = 0;
                    const float *k = d->k[s] + j * row + g * c->D;
                    if (q8s) {
                        float dk = naive_q8(k, c->D, k8);
                        for (int e = 0; e < c->D; e++)
                            dot += (double)q8[e] * k8[e];
                        sc[j] = dot * dq * dk;
                    } else {
                        for (int e = 0; e < c->D; e++)
                            dot += (double)q[e] * k[e];
                        sc[j] = dot / sqrt(c->D);
                    }
                    m = fmax(m, sc[j]);
                }
                for (int j = 0; j <= pos; j++)
                    sum += (sc[j] = exp(sc[j] - m));
                for (int j = 0; j <= pos; j++)   /* normalized p, each tile's wmax */
                    sc[j] /= sum, wt[j / 64] = 0;
                for (int j = 0; j <= pos; j++)
                    wt[j / 64] = fmax(wt[j / 64], sc[j] * dv[j * c->n_kv + g]);
                for (int e = 0; e < c->D; e++) {
                    double o = 0, pq = 0;
                    for (int j = 0; j <= pos; j++) {
                        size_t at = (size_t)j * row + g * c->D + e;
                        if (!q8s) {
                            o += sc[j] * d->v[s][at];
                            continue;
                        }
                        o += sc[j] * vi[at] * dv[j * c->n_kv + g];
                        pq += wt[j / 64] / 255 / 2 * fabs(vi[at]);
                    }
                    *pq_max = fmax(*pq_max, pq);
                    double diff = fabs(o - out[(size_t)t * qrow + h * c->D + e]) - pq;
                    worst = fmax(worst, diff);
                }
            }
        }
        free(vi);
    }
    free(sc);
    free(qs);
    return worst;
}

static void check_cfg(const struct cfg *c)
{
    struct data d;
    data_make(&d, c);
    int all[NS] = {0, 1, 2};
    float *o1 = attn_run(1, c, &d, all, NS), *o2 = attn_run(2, c, &d, all, NS),
          *o3 = attn_run(3, c, &d, all, NS);
    int nt = c->len[0] + c->len[1] + c->len[2], qrow = c->n_heads * c->D;
    CHECK(kt_same(o1, o2, (size_t)nt * qrow) && kt_same(o1, o3, (size_t)nt * qrow));
    /* within 2e-5 of the int8 arithmetic, past what P's rounding can move */
    double pq_max, pq0;
    double worst = naive_check(c, &d, o1, 1, &pq_max);
    CHECK(worst < 2e-5);
    if (!(worst < 2e-5))
        fprintf(stderr, "max diff %g past the P rounding bound\n", worst);
    /* What the int8 path costs against exact arithmetic: here (|q| <= 2, |k|,
     * |v| <= 1) below 1e-2 of an output whose values reach ~1 (the scores'
     * share was ~4e-3, P.V's added ~3e-3); 2e-2 bounds it (for F32 caches
     * the same 2e-5 holds). */
    double cost = naive_check(c, &d, o1, 0, &pq0);
    double bound = cs_attn_q8(c->kv_type) ? 2e-2 : 2e-5;
    CHECK(cost < bound);
    printf("%s D=%d: worst %.3g past the P rounding bound (at most %.3g) of the int8 arithmetic, "
           "%.3g against exact arithmetic\n",
           c->kv_type == CS_DTYPE_F16 ? "f16" : "f32", c->D, worst, pq_max, cost);
    /* sequence 1 alone equals its rows inside the batch */
    int one[1] = {1};
    float *alone = attn_run(2, c, &d, one, 1);
    CHECK(kt_same(alone, o1 + (size_t)c->len[0] * qrow, (size_t)c->len[1] * qrow));
    free(alone);
    free(o1);
    free(o2);
    free(o3);
    for (int s = 0; s < NS; s++) {
        free(d.k[s]);
        free(d.v[s]);
    }
    free(d.q);
}

static const struct cfg small = {
    .D = 16, .n_heads = 4, .n_kv = 2, .page_size = 4, .n_pages = 12, .max_pages = 3,
    .prev = {0, 5, 2}, .len = {7, 1, 3},
    .pages = {{3, 0, 11}, {5, 7, 2}, {1, 9, 4}},
};

static void test_attention_f32_small(void)
{
    struct cfg c = small;
    c.kv_type = CS_DTYPE_F32;
    check_cfg(&c);
}

static void test_attention_f16_small(void)
{
    struct cfg c = small;
    c.kv_type = CS_DTYPE_F16;
    check_cfg(&c);
}

static void test_attention_real_head_size(void)
{
    struct cfg c = {.kv_type = CS_DTYPE_F16, .D = 256, .n_heads = 4, .n_kv = 1, .page_size = 16,
                    .n_pages = 10, .max_pages = 3, .prev = {0, 20, 0}, .len = {33, 1, 2},
                    .pages = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}};
    check_cfg(&c);
}

/* The rows of one prompt's tokens at positions start .. start + len - 1 in
 * one step (q_all, K and V by position; every position already stored). */
static float *prompt_rows(struct cs_backend *be, struct cs_kv_layer *kv, const float *q_all,
                          int n_heads, int start, int len, int max_pages)
{
    int D = kv->head_dim, qrow = n_heads * D;
    struct kt_batch kb;
    int l1[1] = {len}, s1[1] = {start};
    kt_batch_init(&kb, 1, l1, s1, NULL, max_pages);
    for (int p = 0; p < max_pages; p++)
        kb.pages[p] = max_pages - 1 - p;
    float *out = calloc((size_t)len * qrow, 4);
    CHECK_EQ_INT(be->attention(be, out, q_all + (size_t)start * qrow, qrow, D, n_heads, kv,
                               1.0f / 16, &kb.b),
                 CS_OK);
    return out;
}

/* A prompt's token gives the same bits in any chunking of the prompt into
 * steps of two or more tokens (the CUDA prefill kernel's invariance, which
 * the CPU mirrors), including a chunk whose last 16-token tile holds one
 * token (still the prefill arithmetic, not the decode one) and rows past
 * 2048 positions (several KV splits, combined). */
static void test_attention_prefill_chunking(void)
{
    const int D = 256, n_heads = 4, n_kv = 2, PS = 32, N = 2080, MP = (N + PS - 1) / PS;
    const int qrow = n_heads * D, row = n_kv * D;
    struct cs_backend *be = kt_backend(2, 0);
    struct cs_kv_layer kv = {.kv_type = CS_DTYPE_F16, .n_pages = MP, .page_size = PS,
                             .n_kv_heads = n_kv, .head_dim = D};
    CHECK_EQ_INT(be->alloc(be, &kv.pages, (size_t)MP * 2 * PS * row * 2), CS_OK);
    float *k = kt_randv((size_t)N * row, 1.0f), *v = kt_randv((size_t)N * row, 1.0f);
    float *q = kt_randv((size_t)N * qrow, 4.0f);
    for (int t0 = 0; t0 < N; t0 += 512) {   /* store K and V of every position */
        struct kt_batch part;
        int n = N - t0 < 512 ? N - t0 : 512, ln[1] = {n}, st[1] = {t0};
        kt_batch_init(&part, 1, ln, st, NULL, MP);
        for (int p = 0; p < MP; p++)   /* pages in reverse, as prompt_rows */
            part.pages[p] = MP - 1 - p;
        CHECK_EQ_INT(be->kv_store(be, &kv, k + (size_t)t0 * row, row, v + (size_t)t0 * row, row,
                                  &part.b),
                     CS_OK);
    }
    /* {start, whole length, first chunk's length} */
    static const int cases[][3] = {{0, 37, 20}, {0, 37, 33}, {5, 40, 18}, {2030, 40, 17},
                                   {2040, 40, 9}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int st = cases[c][0], len = cases[c][1], a = cases[c][2];
        float *whole = prompt_rows(be, &kv, q, n_heads, st, len, MP);
        float *c1 = prompt_rows(be, &kv, q, n_heads, st, a, MP);
        float *c2 = prompt_rows(be, &kv, q, n_heads, st + a, len - a, MP);
        CHECK(kt_same(whole, c1, (size_t)a * qrow));
        CHECK(kt_same(whole + (size_t)a * qrow, c2, (size_t)(len - a) * qrow));
        free(whole);
        free(c1);
        free(c2);
    }
    free(k);
    free(v);
    free(q);
    be->free(be, kv.pages);
    be->destroy(be);
}

static void test_attention_refuses_bad_pages(void)
{
    struct cs_backend *be = kt_backend(1, 0);
    struct cs_kv_layer kv = {.kv_type = CS_DTYPE_F32, .n_pages = 2, .page_size = 4,
                             .n_kv_heads = 1, .head_dim = 8};
    be->alloc(be, &kv.pages, 2 * 2 * 4 * 8 * 4);
    int len[1] = {2}, start[1] = {3};
    struct kt_batch kb;
    kt_batch_init(&kb, 1, len, start, NULL, 2);
    kb.pages[0] = 0;
    kb.pages[1] = 2;  /* out of range */
    float k[16] = {0}, out[32];
    CHECK_EQ_INT(be->kv_store(be, &kv, k, 8, k, 8, &kb.b), CS_ERANGE);
    CHECK_EQ_INT(be->attention(be, out, k, 8, 8, 1, &kv, 1.0f, &kb.b), CS_ERANGE);
    start[0] = 7;  /* needs a third page */
    kt_batch_init(&kb, 1, len, start, NULL, 2);
    CHECK_EQ_INT(be->kv_store(be, &kv, k, 8, k, 8, &kb.b), CS_ERANGE);
    be->free(be, kv.pages);
    be->destroy(be);
}

int main(void)
{
    RUN(test_attention_f32_small);
    RUN(test_attention_f16_small);
    RUN(test_attention_real_head_size);
    RUN(test_attention_prefill_chunking);
    RUN(test_attention_refuses_bad_pages);
    return test_report();
}
