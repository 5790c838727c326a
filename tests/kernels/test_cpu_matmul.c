/* test_cpu_matmul.c - proves the CPU matmul and embed: fp32 mode equals a
 * double-precision naive W x for F32/F16/BF16/Q8_0 weights (several weights at
 * once, odd sizes); the int8 mode stays within the proven Q8_1 rounding bound of
 * the fp32 result; matmul_scaled's int8 mode scales each segment's sum before
 * adding it (kernels/numerics.h, bit for bit against a transcription here),
 * its fp32 mode the total; results are bit-identical for 1, 2 and 3 threads and for a
 * token alone vs inside a batch; Q8_0/Q8_1 quantization rounds half away from
 * zero; embed dequantizes rows and refuses out-of-range ids with CS_ERANGE;
 * weight_upload copies a large weight in pieces, calling the upload_progress
 * hook with growing byte counts that end at the weight's size. */
#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/status.h"
#include "../../kernels/cpu/quant.h"
#include "kernel_test.h"

/* Build a weight of type from fp32 values; *ref receives what it dequantizes to. */
static struct cs_weight make_weight(struct cs_backend *be, uint32_t type, int n_in, int n_out,
                                    float **ref)
{
    float *v = kt_randv((size_t)n_in * n_out, 1.0f);
    size_t n = (size_t)n_in * n_out;
    void *raw = malloc(n * 4 + 64);
    *ref = malloc(n * 4);
    if (type == CS_DTYPE_F32) {
        memcpy(raw, v, n * 4);
        memcpy(*ref, v, n * 4);
    } else if (type == CS_DTYPE_F16 || type == CS_DTYPE_BF16) {
        uint16_t *h = raw;
        for (size_t i = 0; i < n; i++) {
            h[i] = type == CS_DTYPE_F16 ? cs_float_to_half(v[i]) : cs_float_to_bf16(v[i]);
            (*ref)[i] = type == CS_DTYPE_F16 ? cs_half_to_float(h[i]) : cs_bf16_to_float(h[i]);
        }
    } else {
        for (int r = 0; r < n_out; r++) {
            struct block_q8_0 *blk = (struct block_q8_0 *)raw + (size_t)r * (n_in / 32);
            quant_q8_0_quantize_row(blk, v + (size_t)r * n_in, n_in);
            for (int i = 0; i < n_in; i++)
                (*ref)[(size_t)r * n_in + i] =
                    cs_half_to_float(blk[i / 32].d) * (float)blk[i / 32].qs[i % 32];
        }
    }
    struct cs_weight w;
    CHECK_EQ_INT(be->weight_upload(be, &w, type, n_in, n_out, raw), CS_OK);
    free(raw);
    free(v);
    return w;
}

static void naive(double *y, const float *w, const float *x, int n_in, int n_out, int n_tok)
{
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_out; r++) {
            double s = 0;
            for (int i = 0; i < n_in; i++)
                s += (double)w[(size_t)r * n_in + i] * x[(size_t)t * n_in + i];
            y[(size_t)t * n_out + r] = s;
        }
}

static void test_matmul_fp32_matches_naive(void)
{
    struct cs_backend *be = kt_backend(2, 0);
    const uint32_t types[4] = {CS_DTYPE_F32, CS_DTYPE_F16, CS_DTYPE_BF16, CS_DTYPE_Q8_0};
    const int n_out[4] = {37, 8, 5, 66};
    int n_in = 256, n_tok = 7;
    float *x = kt_randv((size_t)n_in * n_tok, 2.0f);
    struct cs_weight w[4];
    float *ref[4], *y[4];
    const struct cs_weight *wp[4];
    for (int i = 0; i < 4; i++) {
        w[i] = make_weight(be, types[i], n_in, n_out[i], &ref[i]);
        wp[i] = &w[i];
        y[i] = calloc((size_t)n_out[i] * n_tok, 4);
    }
    CHECK_EQ_INT(be->matmul(be, 4, y, wp, x, n_tok), CS_OK);
    for (int i = 0; i < 4; i++) {
        double *e = malloc(sizeof(double) * n_out[i] * n_tok);
        naive(e, ref[i], x, n_in, n_out[i], n_tok);
        double worst = 0;
        for (int k = 0; k < n_out[i] * n_tok; k++)
            worst = fmax(worst, fabs(e[k] - y[i][k]));
        CHECK(worst < 2e-4);
        free(e);
        free(ref[i]);
        free(y[i]);
        be->weight_free(be, &w[i]);
    }
    free(x);
    be->destroy(be);
}

static void test_matmul_odd_f32_width(void)
{
    struct cs_backend *be = kt_backend(3, 0);
    int n_in = 45, n_out = 9, n_tok = 3;
    float *ref, *x = kt_randv((size_t)n_in * n_tok, 1.0f);
    struct cs_weight w = make_weight(be, CS_DTYPE_F32, n_in, n_out, &ref);
    float y[27];
    double e[27];
    const struct cs_weight *wp = &w;
    float *yp = y;
    CHECK_EQ_INT(be->matmul(be, 1, &yp, &wp, x, n_tok), CS_OK);
    naive(e, ref, x, n_in, n_out, n_tok);
    for (int k = 0; k < 27; k++)
        CHECK_NEAR(y[k], e[k], 1e-5);
    be->weight_free(be, &w);
    free(ref);
    free(x);
    be->destroy(be);
}

/* |int8 - fp32| <= sum over blocks of (amax_b / 254) * sum |w_i| (plus fp32 noise). */
static void test_matmul_int8_within_bound(void)
{
    struct cs_backend *be8 = kt_backend(2, 1), *be = kt_backend(2, 0);
    int n_in = 512, n_out = 21, n_tok = 5;
    float *ref, *ref2, *x = kt_randv((size_t)n_in * n_tok, 3.0f);
    kt_seed(7);
    struct cs_weight w8 = make_weight(be8, CS_DTYPE_Q8_0, n_in, n_out, &ref);
    kt_seed(7);
    struct cs_weight w = make_weight(be, CS_DTYPE_Q8_0, n_in, n_out, &ref2);
    float *y8 = calloc((size_t)n_out * n_tok, 4), *y = calloc((size_t)n_out * n_tok, 4);
    const struct cs_weight *wp8 = &w8, *wp = &w;
    CHECK_EQ_INT(be8->matmul(be8, 1, &y8, &wp8, x, n_tok), CS_OK);
    CHECK_EQ_INT(be->matmul(be, 1, &y, &wp, x, n_tok), CS_OK);
    int differs = 0;
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_out; r++) {
            double bound = 1e-4;
            for (int b = 0; b < n_in / 32; b++) {
                double amax = 0, wsum = 0;
                for (int i = b * 32; i < b * 32 + 32; i++) {
                    amax = fmax(amax, fabs(x[(size_t)t * n_in + i]));
                    wsum += fabs(ref[(size_t)r * n_in + i]);
                }
                bound += amax / 254.0 * wsum * 1.001;
            }
            float a = y8[t * n_out + r], b = y[t * n_out + r];
            CHECK(fabs((double)a - b) <= bound);
            differs += a != b;
        }
    CHECK(differs > 0);   /* the int8 path really ran */
    free(y8);
    free(y);
    free(ref);
    free(ref2);
    free(x);
    be8->weight_free(be8, &w8);
    be->weight_free(be, &w);
    be8->destroy(be8);
    be->destroy(be);
}

static void run_invariance(int int8, uint32_t type)
{
    int n_in = 320, n_out = 43, n_tok = 9;
    float *x = kt_randv((size_t)n_in * n_tok, 1.5f);
    float *y[3];
    for (int th = 1; th <= 3; th++) {
        struct cs_backend *be = kt_backend(th, int8);
        float *ref;
        kt_seed(99);
        struct cs_weight w = make_weight(be, type, n_in, n_out, &ref);
        const struct cs_weight *wp = &w;
        y[th - 1] = calloc((size_t)n_out * n_tok, 4);
        CHECK_EQ_INT(be->matmul(be, 1, &y[th - 1], &wp, x, n_tok), CS_OK);
        if (th == 3) {
            /* token 4 alone, then tokens 2..8 as a batch */
            float *one = calloc(n_out, 4), *part = calloc((size_t)n_out * 7, 4);
            CHECK_EQ_INT(be->matmul(be, 1, &one, &wp, x + 4 * n_in, 1), CS_OK);
            CHECK_EQ_INT(be->matmul(be, 1, &part, &wp, x + 2 * n_in, 7), CS_OK);
            CHECK(kt_same(one, y[0] + 4 * n_out, n_out));
            CHECK(kt_same(part, y[0] + 2 * n_out, (size_t)7 * n_out));
            free(one);
            free(part);
        }
        free(ref);
        be->weight_free(be, &w);
        be->destroy(be);
    }
    CHECK(kt_same(y[0], y[1], (size_t)n_out * n_tok));
    CHECK(kt_same(y[0], y[2], (size_t)n_out * n_tok));
    for (int i = 0; i < 3; i++)
        free(y[i]);
    free(x);
}

static void test_matmul_thread_and_batch_invariant(void)
{
    run_invariance(0, CS_DTYPE_Q8_0);
    run_invariance(1, CS_DTYPE_Q8_0);
    run_invariance(0, CS_DTYPE_F16);
}

static void test_quant_q8_1_round_half_away(void)
{
    float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.4999f, -1.5f, 126.5f, -127.0f};
    struct block_q8_1 b;
    quant_q8_1_quantize_row(&b, x, 32);
    CHECK(b.d == 1.0f);
    const int expect[9] = {127, 3, -3, 1, -1, 1, -2, 127, -127};
    int sum = 0;
    for (int i = 0; i < 9; i++) {
        CHECK_EQ_INT(b.qs[i], expect[i]);
        sum += expect[i];
    }
    CHECK_EQ_INT(b.qs[20], 0);
    CHECK(b.s == (float)sum);
    float z[32] = {0};
    quant_q8_1_quantize_row(&b, z, 32);
    CHECK(b.d == 0.0f && b.qs[0] == 0 && b.qs[31] == 0);
}

static void test_quant_q8_0_round_half_away(void)
{
    float x[32] = {63.5f, 0.25f, -0.25f, 0.75f, -31.75f};
    struct block_q8_0 b;
    quant_q8_0_quantize_row(&b, x, 32);
    CHECK(cs_half_to_float(b.d) == 0.5f);
    CHECK_EQ_INT(b.qs[0], 127);
    CHECK_EQ_INT(b.qs[1], 1);
    CHECK_EQ_INT(b.qs[2], -1);
    CHECK_EQ_INT(b.qs[3], 2);
    CHECK_EQ_INT(b.qs[4], -64);
    float back[32];
    quant_q8_0_dequantize_row(back, &b, 32);
    CHECK(back[4] == -32.0f && back[1] == 0.5f);
}

static void test_embed_rows_and_range(void)
{
    struct cs_backend *be = kt_backend(2, 0);
    const uint32_t types[4] = {CS_DTYPE_F32, CS_DTYPE_F16, CS_DTYPE_BF16, CS_DTYPE_Q8_0};
    int n_embd = 64, n_vocab = 11;
    for (int k = 0; k < 4; k++) {
        float *ref;
        struct cs_weight tab = make_weight(be, types[k], n_embd, n_vocab, &ref);
        int32_t toks[3] = {10, 0, 4};
        struct cs_batch b = {.n_tokens = 3, .tokens = toks};
        float out[3 * 64];
        CHECK_EQ_INT(be->embed(be, out, &tab, &b), CS_OK);
        for (int t = 0; t < 3; t++)
            CHECK(kt_same(out + t * n_embd, ref + toks[t] * n_embd, n_embd));
        toks[1] = 11;
        CHECK_EQ_INT(be->embed(be, out, &tab, &b), CS_ERANGE);
        toks[1] = -1;
        CHECK_EQ_INT(be->embed(be, out, &tab, &b), CS_ERANGE);
        be->weight_free(be, &tab);
        free(ref);
    }
    be->destroy(be);
}

static void test_weight_upload_refuses_bad_shapes(void)
{
    struct cs_backend *be = kt_backend(1, 0);
    struct cs_weight w;
    char data[340] = {0};
    CHECK_EQ_INT(be->weight_upload(be, &w, CS_DTYPE_Q8_0, 33, 1, data), CS_EUNSUPPORTED);
    CHECK_EQ_INT(be->weight_upload(be, &w, 2 /* q4_0 */, 32, 1, data), CS_EUNSUPPORTED);
    CHECK_EQ_INT(be->weight_upload(be, &w, CS_DTYPE_F32, 0, 1, data), CS_EINVAL);
    size_t fr = 0, tot = 0;
    CHECK_EQ_INT(be->mem_info(be, &fr, &tot), CS_OK);
    CHECK(tot > 0 && fr <= tot);
    be->destroy(be);
}

struct progress_log {
    int calls, bad;
    uint64_t last;
};

static void log_progress(void *ctx, uint64_t bytes_read)
{
    struct progress_log *p = ctx;
    p->bad += bytes_read <= p->last;
    p->last = bytes_read;
    p->calls++;
}

static void test_weight_upload_reports_pieces(void)
{
    struct cs_backend *be = kt_backend(1, 0);
    const int n_in = 4096, n_out = 20000;   /* Q8_0: 4352 bytes a row, ~87 MB */
    size_t bytes = (size_t)n_out * (n_in / 32) * 34;
    uint8_t *raw = calloc(bytes, 1);
    struct progress_log log = {0};
    be->upload_progress = log_progress;
    be->upload_progress_ctx = &log;
    struct cs_weight w;
    CHECK_EQ_INT(be->weight_upload(be, &w, CS_DTYPE_Q8_0, n_in, n_out, raw), CS_OK);
    CHECK(log.calls >= 3 && log.bad == 0 && log.last == bytes);
    CHECK(w.bytes == bytes);
    be->weight_free(be, &w);
    free(raw);
    be->destroy(be);
}

/* matmul_scaled, int8 mode: each segment's sum times scale[t] before it is
 * added (kernels/numerics.h), against a transcription of that order here,
 * bit for bit, on a row of 2.5 segments; scale NULL is matmul bit for bit;
 * the fp32 mode stays near matmul * scale. */
static void test_matmul_scaled_segments(void)
{
    struct cs_backend *be8 = kt_backend(2, 1), *be = kt_backend(2, 0);
    int n_in = 2560, n_out = 7, n_tok = 3, nb = n_in / 32;
    float *wv = kt_randv((size_t)n_in * n_out, 1.0f), *x = kt_randv((size_t)n_in * n_tok, 3.0f);
    float scale[3] = {0.37f, 1.0f, 2.5e-3f};
    struct block_q8_0 *wq = malloc(sizeof *wq * (size_t)nb * n_out);
    struct block_q8_1 *xq = malloc(sizeof *xq * (size_t)nb * n_tok);
    for (int r = 0; r < n_out; r++)
        quant_q8_0_quantize_row(wq + (size_t)r * nb, wv + (size_t)r * n_in, n_in);
    for (int t = 0; t < n_tok; t++)
        quant_q8_1_quantize_row(xq + (size_t)t * nb, x + (size_t)t * n_in, n_in);
    struct cs_weight w8, w;
    CHECK_EQ_INT(be8->weight_upload(be8, &w8, CS_DTYPE_Q8_0, n_in, n_out, wq), CS_OK);
    CHECK_EQ_INT(be->weight_upload(be, &w, CS_DTYPE_Q8_0, n_in, n_out, wq), CS_OK);
    const struct cs_weight *wp8 = &w8, *wp = &w;
    float *ys = calloc((size_t)n_out * n_tok, 4), *y1 = calloc((size_t)n_out * n_tok, 4);
    float *yn = calloc((size_t)n_out * n_tok, 4);
    CHECK_EQ_INT(be8->matmul_scaled(be8, 1, &ys, &wp8, x, scale, n_tok), CS_OK);
    CHECK_EQ_INT(be8->matmul_scaled(be8, 1, &yn, &wp8, x, NULL, n_tok), CS_OK);
    CHECK_EQ_INT(be8->matmul(be8, 1, &y1, &wp8, x, n_tok), CS_OK);
    CHECK(kt_same(yn, y1, (size_t)n_out * n_tok));
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_out; r++) {
            float total = 0.0f;
            for (int b0 = 0; b0 < nb; b0 += 32) {
                float p = 0.0f;
                for (int b = b0; b < b0 + 32 && b < nb; b++) {
                    const struct block_q8_0 *wb = wq + (size_t)r * nb + b;
                    const struct block_q8_1 *xb = xq + (size_t)t * nb + b;
                    int32_t isum = 0;
                    for (int i = 0; i < 32; i++)
                        isum += (int32_t)wb->qs[i] * (int32_t)xb->qs[i];
                    float sc = cs_half_to_float(wb->d) * xb->d;
                    p = fmaf(sc, (float)isum, p);
                }
                float ps = p * scale[t];
                total = total + ps;
            }
            float got = ys[(size_t)t * n_out + r];
            CHECK(memcmp(&got, &total, 4) == 0);
        }
    /* fp32 mode: the scale on the total, near the unscaled result times it */
    CHECK_EQ_INT(be->matmul_scaled(be, 1, &ys, &wp, x, scale, n_tok), CS_OK);
    CHECK_EQ_INT(be->matmul(be, 1, &y1, &wp, x, n_tok), CS_OK);
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_out; r++) {
            float want = y1[(size_t)t * n_out + r] * scale[t];
            CHECK(memcmp(&ys[(size_t)t * n_out + r], &want, 4) == 0);
        }
    be8->weight_free(be8, &w8);
    be->weight_free(be, &w);
    free(wv), free(x), free(wq), free(xq), free(ys), free(y1), free(yn);
    be8->destroy(be8);
    be->destroy(be);
}

int main(void)
{
    RUN(test_matmul_fp32_matches_naive);
    RUN(test_matmul_odd_f32_width);
    RUN(test_matmul_int8_within_bound);
    RUN(test_matmul_scaled_segments);
    RUN(test_matmul_thread_and_batch_invariant);
    RUN(test_quant_q8_1_round_half_away);
    RUN(test_quant_q8_0_round_half_away);
    RUN(test_embed_rows_and_range);
    RUN(test_weight_upload_refuses_bad_shapes);
    RUN(test_weight_upload_reports_pieces);
    return test_report();
}
