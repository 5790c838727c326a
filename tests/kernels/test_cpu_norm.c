/* test_cpu_norm.c - proves rmsnorm (its out * scale, the norm applied after
 * the projection: kernels/numerics.h), gated_rmsnorm, head_norm_rope (partial
 * NeoX RoPE, at small and real head sizes), sigmoid_gate, add and silu_mul
 * equal double-precision naive formulas, that rmsnorm's out is x * w bit for
 * bit and its scale follows numerics.h's span order (against a transcription
 * here), that rmsnorm and head_norm_rope give bit-identical results for 1, 2
 * and 3 threads, and that add_rmsnorm is bitwise add then rmsnorm (all three
 * outputs, any thread count). */
#include "../../common/status.h"
#include "../../kernels/exact_math.h"
#include "kernel_test.h"

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static void naive_rmsnorm(double *out, const float *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * sc * w[i];
}

/* numerics.h's sum of squares of a row, transcribed independently of
 * kernels/cpu/cpu.h: spans of 128 (lane l: FFMA chain over l + 32 u), the
 * xor tree over the 32 lanes, 8 spans a segment left to right, then the
 * segments left to right. */
static float spec_row_sumsq(const float *x, int n)
{
    float total = 0.0f;
    for (int s0 = 0; s0 < n; s0 += 1024) {
        float seg = 0.0f;
        for (int j = 0; j < 8; j++) {
            float lane[32];
            for (int l = 0; l < 32; l++) {
                lane[l] = 0.0f;
                for (int u = 0; u < 4; u++) {
                    int i = s0 + 128 * j + 32 * u + l;
                    float v = i < n ? x[i] : 0.0f;
                    lane[l] = fmaf(v, v, lane[l]);
                }
            }
            for (int o = 16; o > 0; o >>= 1)
                for (int l = 0; l < o; l++)
                    lane[l] = lane[l] + lane[l + o];
            seg = seg + lane[0];
        }
        total = total + seg;
    }
    return total;
}

/* rmsnorm at one row length: out * scale near the naive norm, out == x * w
 * and scale == xm_rms_scale(spec_row_sumsq) bit for bit, in place equal. */
static void check_rmsnorm(int n_tok, int dim)
{
    struct cs_backend *be = kt_backend(2, 0);
    float *x = kt_randv((size_t)n_tok * dim, 3.0f), *w = kt_randv(dim, 1.0f);
    float *out = calloc((size_t)n_tok * dim, 4), *scale = calloc(n_tok, 4);
    float *scale2 = calloc(n_tok, 4);
    double *ref = malloc(sizeof(double) * dim);
    CHECK_EQ_INT(be->rmsnorm(be, out, scale, x, w, n_tok, dim, 1e-6f), CS_OK);
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * dim;
        naive_rmsnorm(ref, xt, w, dim, 1e-6);
        float want = xm_rms_scale(spec_row_sumsq(xt, dim), dim, 1e-6f);
        CHECK(memcmp(&want, &scale[t], 4) == 0);
        for (int i = 0; i < dim; i++) {
            float u = xt[i] * w[i];
            CHECK(memcmp(&u, &out[(size_t)t * dim + i], 4) == 0);
            CHECK_NEAR((double)out[(size_t)t * dim + i] * scale[t], ref[i], 1e-5);
        }
    }
    /* in place */
    CHECK_EQ_INT(be->rmsnorm(be, x, scale2, x, w, n_tok, dim, 1e-6f), CS_OK);
    CHECK(kt_same(x, out, (size_t)n_tok * dim));
    CHECK(kt_same(scale2, scale, n_tok));
    free(x), free(w), free(out), free(scale), free(scale2), free(ref);
    be->destroy(be);
}

static void test_rmsnorm_matches_naive(void)
{
    check_rmsnorm(5, 100);    /* one short span-padded segment */
    check_rmsnorm(3, 4096);   /* 9B: 4 whole segments */
    check_rmsnorm(2, 2560);   /* 4B: a half segment at the end */
    check_rmsnorm(2, 9000);   /* long row, ragged */
}

static void test_gated_rmsnorm_matches_naive(void)
{
    struct cs_backend *be = kt_backend(3, 0);
    int n_tok = 3, n_heads = 4, hd = 128;
    size_t n = (size_t)n_tok * n_heads * hd;
    float *x = kt_randv(n, 2.0f), *z = kt_randv(n, 4.0f), *w = kt_randv(hd, 1.0f);
    float *x0 = malloc(n * 4);
    memcpy(x0, x, n * 4);
    CHECK_EQ_INT(be->gated_rmsnorm(be, x, z, w, n_heads, hd, 1e-6f, n_tok), CS_OK);
    double ref[128];
    double worst = 0;
    for (int r = 0; r < n_tok * n_heads; r++) {
        naive_rmsnorm(ref, x0 + r * hd, w, hd, 1e-6);
        for (int i = 0; i < hd; i++) {
            double zi = z[r * hd + i];
            worst = fmax(worst, fabs(x[r * hd + i] - ref[i] * zi * sigm(zi)));
        }
    }
    CHECK(worst < 1e-5);
    free(x);
    free(x0);
    free(z);
    free(w);
    be->destroy(be);
}

/* Naive per-head norm + NeoX RoPE in double. */
static void naive_head(double *out, const float *x, const float *w, int hd, int rd, double base,
                       int pos)
{
    naive_rmsnorm(out, x, w, hd, 1e-6);
    int half = rd / 2;
    for (int i = 0; i < half; i++) {
        double th = pos * pow(base, -2.0 * i / rd);
        double a = out[i], b = out[i + half];
        out[i] = a * cos(th) - b * sin(th);
        out[i + half] = b * cos(th) + a * sin(th);
    }
}

static void check_head_norm_rope(int n_heads, int hd, int rd, float base)
{
    /* q-like layout: per token n_heads heads of 2*hd (query then gate) */
    int lens[2] = {3, 2}, starts[2] = {0, 150};
    struct kt_batch kb;
    kt_batch_init(&kb, 2, lens, starts, NULL, 1);
    int tok_stride = n_heads * 2 * hd, head_stride = 2 * hd;
    size_t n = (size_t)kb.b.n_tokens * tok_stride;
    float *x = kt_randv(n, 2.0f), *w = kt_randv(hd, 1.0f);
    float *res[3];
    for (int th = 1; th <= 3; th++) {
        struct cs_backend *be = kt_backend(th, 0);
        res[th - 1] = malloc(n * 4);
        memcpy(res[th - 1], x, n * 4);
        CHECK_EQ_INT(be->head_norm_rope(be, res[th - 1], tok_stride, head_stride, n_heads, hd, w,
                                        rd, base, 1e-6f, &kb.b),
                     CS_OK);
        be->destroy(be);
    }
    CHECK(kt_same(res[0], res[1], n) && kt_same(res[0], res[2], n));
    double *ref = malloc(sizeof(double) * hd), worst = 0;
    for (int t = 0; t < kb.b.n_tokens; t++)
        for (int h = 0; h < n_heads; h++) {
            size_t off = (size_t)t * tok_stride + (size_t)h * head_stride;
            naive_head(ref, x + off, w, hd, rd, base, kb.pos[t]);
            for (int i = 0; i < hd; i++)
                worst = fmax(worst, fabs(res[0][off + i] - ref[i]));
            /* the gate half is untouched */
            CHECK(kt_same(res[0] + off + hd, x + off + hd, hd));
        }
    CHECK(worst < 2e-4);
    free(ref);
    free(x);
    free(w);
    for (int i = 0; i < 3; i++)
        free(res[i]);
}

static void test_head_norm_rope_small(void)
{
    check_head_norm_rope(3, 32, 16, 10000.0f);
}

static void test_head_norm_rope_real_size(void)
{
    check_head_norm_rope(2, 256, 64, 1e7f);
}

static void test_elementwise_ops(void)
{
    struct cs_backend *be = kt_backend(2, 0);
    size_t n = 40000;
    float *a = kt_randv(n, 8.0f), *b = kt_randv(n, 2.0f), *o = calloc(n, 4), *a0 = malloc(n * 4);
    memcpy(a0, a, n * 4);
    CHECK_EQ_INT(be->silu_mul(be, o, a, b, n), CS_OK);
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(o[i] - a[i] * sigm(a[i]) * b[i]));
    CHECK(worst < 1e-5);
    CHECK_EQ_INT(be->add(be, a, b, n), CS_OK);
    for (size_t i = 0; i < n; i += 97)
        CHECK(a[i] == a0[i] + b[i]);
    /* sigmoid_gate: 3 tokens x 2 heads x 8, gate strided inside a wider row */
    float out[48], out0[48], gate[3 * 40];
    for (int i = 0; i < 48; i++)
        out[i] = out0[i] = kt_rand();
    for (int i = 0; i < 120; i++)
        gate[i] = kt_rand() * 5;
    CHECK_EQ_INT(be->sigmoid_gate(be, out, gate + 4, 40, 16, 2, 8, 3), CS_OK);
    worst = 0;
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 8; d++) {
                int i = (t * 2 + h) * 8 + d;
                worst = fmax(worst, fabs(out[i] - out0[i] * sigm(gate[4 + t * 40 + h * 16 + d])));
            }
    CHECK(worst < 1e-6);
    free(a);
    free(a0);
    free(b);
    free(o);
    be->destroy(be);
}

/* add_rmsnorm(x, y, out) == add(x, y) then rmsnorm(out, x), bit for bit, for
 * x and out, at a few row lengths and thread counts; also near the naive form. */
static void check_add_rmsnorm(int n_threads, int n_tok, int dim)
{
    struct cs_backend *be = kt_backend(n_threads, 0);
    size_t n = (size_t)n_tok * dim;
    float *x = kt_randv(n, 3.0f), *y = kt_randv(n, 2.0f), *w = kt_randv(dim, 1.0f);
    float *x_ref = malloc(n * 4), *x_fused = malloc(n * 4), *x0 = malloc(n * 4);
    float *o_ref = calloc(n, 4), *o_fused = calloc(n, 4);
    float *s_ref = calloc(n_tok, 4), *s_fused = calloc(n_tok, 4);
    memcpy(x0, x, n * 4);
    memcpy(x_ref, x, n * 4);
    memcpy(x_fused, x, n * 4);
    CHECK_EQ_INT(be->add(be, x_ref, y, n), CS_OK);
    CHECK_EQ_INT(be->rmsnorm(be, o_ref, s_ref, x_ref, w, n_tok, dim, 1e-6f), CS_OK);
    CHECK_EQ_INT(be->add_rmsnorm(be, x_fused, y, o_fused, s_fused, w, n_tok, dim, 1e-6f), CS_OK);
    CHECK(kt_same(x_fused, x_ref, n));
    CHECK(kt_same(o_fused, o_ref, n));
    CHECK(kt_same(s_fused, s_ref, n_tok));
    /* and it is an add then an RMSNorm, not merely equal to the pair */
    double *ref = malloc(sizeof(double) * dim), worst = 0;
    float *sum = malloc(sizeof(float) * dim);
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < dim; i++)
            sum[i] = x0[(size_t)t * dim + i] + y[(size_t)t * dim + i];
        CHECK(kt_same(sum, x_fused + (size_t)t * dim, dim));
        naive_rmsnorm(ref, sum, w, dim, 1e-6);
        for (int i = 0; i < dim; i++)
            worst = fmax(worst, fabs((double)o_fused[(size_t)t * dim + i] * s_fused[t] - ref[i]));
    }
    CHECK(worst < 1e-5 * 8);
    free(ref);
    free(sum);
    free(x), free(y), free(w), free(x_ref), free(x_fused), free(x0), free(o_ref), free(o_fused);
    free(s_ref), free(s_fused);
    be->destroy(be);
}

static void test_add_rmsnorm_equals_add_then_rmsnorm(void)
{
    for (int th = 1; th <= 3; th++) {
        check_add_rmsnorm(th, 5, 100);
        check_add_rmsnorm(th, 3, 4096);
        check_add_rmsnorm(th, 9, 1027);
        check_add_rmsnorm(th, 2, 9000);
    }
    struct cs_backend *be = kt_backend(1, 0);
    float v[4] = {1, 2, 3, 4}, o[4], sc[1];
    CHECK_EQ_INT(be->add_rmsnorm(be, v, v + 2, o, sc, v, 0, 2, 1e-6f), CS_OK);
    CHECK(v[0] == 1 && v[1] == 2);   /* no tokens: nothing touched */
    CHECK_EQ_INT(be->add_rmsnorm(be, NULL, v, o, sc, v, 1, 2, 1e-6f), CS_EINVAL);
    CHECK_EQ_INT(be->add_rmsnorm(be, v, v + 2, o, sc, v, 1, 0, 1e-6f), CS_EINVAL);
    CHECK_EQ_INT(be->add_rmsnorm(be, v, v + 2, o, NULL, v, 1, 2, 1e-6f), CS_EINVAL);
    be->destroy(be);
}

int main(void)
{
    RUN(test_rmsnorm_matches_naive);
    RUN(test_gated_rmsnorm_matches_naive);
    RUN(test_head_norm_rope_small);
    RUN(test_head_norm_rope_real_size);
    RUN(test_elementwise_ops);
    RUN(test_add_rmsnorm_equals_add_then_rmsnorm);
    return test_report();
}
