/* test_matmul.cu - proves the CUDA matrix kernels (kernels/cuda/matmul.h)
 * compute what matmul.h "Numerics" promises, on random inputs at real 9B and
 * 27B shapes and at awkward small ones:
 * - quantize: the GPU's Q8_1 equals the host rule bit for bit;
 * - Q8_0 GEMV and GEMM equal a host emulation of the canonical block order
 *   bit for bit, and a float64 reference (dequantized W x dequantized Q8_1 x)
 *   within the fp32 summation bound 2 * nb * 2^-24 * sum_b |term_b|;
 * - batch invariance: GEMV == GEMM bitwise for n_tokens 1..100, a token's
 *   row is the same whatever n_tokens is, a fused call equals separate calls;
 * - F16 / F32 / BF16 weights against float64 within 1e-5 relative to sum|w x|;
 * - every output element is written (outputs are poisoned with NaN first);
 * - the per-shape kernel choice (matmul_tune.h): an untimed call times both
 *   kernels and leaves the right bits, a call being recorded into a graph
 *   times nothing, the fused prologue path follows the recorded choice, and a
 *   recorded choice never changes.
 * Exits 77 (ctest skip) when no CUDA device is present. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../kernels/cuda/matmul.h"
#include "../../kernels/cuda/matmul_tune.h"
#include "../../kernels/numerics.h"
#include "../test_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_f(void) { return (float)((rng_u32() & 0xffffff) / 8388608.0 - 1.0); }

/* A random Q8_0 matrix in ggml layout: scales ~ 1e-3..2e-2, quants -127..127
 * (and the odd -128 the format allows). */
static uint8_t *make_q8_0(int64_t n_in, int64_t n_out)
{
    int64_t nb = n_in / 32;
    uint8_t *w = (uint8_t *)malloc((size_t)(n_out * nb * 34));
    for (int64_t i = 0; i < n_out * nb; i++) {
        uint8_t *blk = w + i * 34;
        uint16_t d = cs_float_to_half(0.001f + 0.02f * (rng_u32() % 1000) / 1000.0f);
        memcpy(blk, &d, 2);
        for (int j = 0; j < 32; j++)
            blk[2 + j] = (uint8_t)(int8_t)((int)(rng_u32() % 255) - 127 - (rng_u32() % 997 == 0));
    }
    return w;
}

static float *make_x(int64_t n, int zero_block)
{
    float *x = (float *)malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_f() * (1.0f + 10.0f * ((i / 32) % 7 == 3));
    if (zero_block && n >= 64)
        memset(x + 32, 0, 32 * sizeof(float));   /* amax == 0 block */
    return x;
}

/* The host Q8_1 rule of matmul.h. */
static void host_quantize(int8_t *q, float *d, const float *x, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        float db = amax / 127.0f;
        d[b] = db;
        for (int j = 0; j < 32; j++) {
            int v = amax > 0.0f ? (int)roundf(x[b * 32 + j] / db) : 0;
            q[b * 32 + j] = (int8_t)(v > 127 ? 127 : (v < -127 ? -127 : v));
        }
    }
}

struct ref_out {
    float canon;     /* host emulation of the canonical order */
    double exact;    /* float64 */
    double bound;    /* tolerance of canon vs exact */
};

static struct ref_out ref_dot(const uint8_t *w, int64_t row, int64_t nb, const int8_t *xq, const float *xd)
{
    struct ref_out r = {0.0f, 0.0, 0.0};
    volatile float seg = 0.0f;
    double mag = 0.0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (row * nb + b) * 34;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        float dw = cs_half_to_float(dh);
        int isum = 0;
        for (int j = 0; j < 32; j++)
            isum += (int)(int8_t)blk[2 + j] * (int)xq[b * 32 + j];
        volatile float s = dw * xd[b];
        if (b % CS_DOT_SEG_BLOCKS == 0)   /* kernels/numerics.h: a new segment */
            seg = 0.0f;
        seg = fmaf(s, (float)isum, seg);   /* the contract's one fused step */
        if ((b + 1) % CS_DOT_SEG_BLOCKS == 0 || b + 1 == nb)
            r.canon = r.canon + seg;
        r.exact += (double)dw * (double)xd[b] * (double)isum;
        mag += fabs((double)dw * (double)xd[b] * (double)isum);
    }
    r.bound = 2.0 * (double)nb * ldexp(1.0, -24) * mag + 1e-30;
    return r;
}

#define CK(call)                                                                           \
    do {                                                                                   \
        cudaError_t _e = (call);                                                           \
        if (_e != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(_e)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes));
    return p;
}

static float *dev_poisoned(size_t n)
{
    float *p = (float *)dev_alloc(n * sizeof(float));
    CK(cudaMemset(p, 0xff, n * sizeof(float)));   /* NaN */
    return p;
}

static float *download(const float *d, size_t n)
{
    float *h = (float *)malloc(n * sizeof(float));
    CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void test_matmul_quantize_exact(void)
{
    int64_t n_in = 4096;
    int nt = 5;
    float *x = make_x(n_in * nt, 1);
    float *dx = (float *)dev_alloc(n_in * nt * sizeof(float));
    CK(cudaMemcpy(dx, x, n_in * nt * sizeof(float), cudaMemcpyHostToDevice));
    size_t sb = cuda_matmul_scratch_bytes(n_in, nt);
    uint8_t *scr = (uint8_t *)dev_alloc(sb);
    CHECK_EQ_INT(cuda_quantize_q8_1(scr, dx, n_in, nt, NULL), CS_OK);
    uint8_t *h = (uint8_t *)malloc(sb);
    CK(cudaMemcpy(h, scr, sb, cudaMemcpyDeviceToHost));
    int8_t *q = (int8_t *)malloc(n_in * nt);
    float *d = (float *)malloc(n_in / 32 * nt * sizeof(float));
    host_quantize(q, d, x, n_in * nt);
    CHECK(memcmp(h, q, n_in * nt) == 0);
    CHECK(memcmp(h + cuda_q8_1_scales_offset(n_in, nt), d, n_in / 32 * nt * sizeof(float)) == 0);
    CHECK(d[1] == 0.0f);
    free(x), free(h), free(q), free(d);
    cudaFree(dx), cudaFree(scr);
}

/* One Q8_0 weight, n_tokens tokens, checked rows every row_step. Returns the
 * number of outputs that failed (also counted by CHECK). */
static void check_q8(int64_t n_in, int64_t n_out, int nt, int row_step, enum cuda_mm_kernel k)
{
    int64_t nb = n_in / 32;
    uint8_t *w = make_q8_0(n_in, n_out);
    float *x = make_x(n_in * nt, 1);
    struct cs_weight wt;
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_Q8_0, n_in, n_out, w, NULL), CS_OK);
    float *dx = (float *)dev_alloc(n_in * nt * sizeof(float));
    CK(cudaMemcpy(dx, x, n_in * nt * sizeof(float), cudaMemcpyHostToDevice));
    size_t sb = cuda_matmul_scratch_bytes(n_in, nt);
    void *scr = dev_alloc(sb);
    float *dy = dev_poisoned((size_t)n_out * nt);
    const struct cs_weight *ws[1] = {&wt};
    float *ys[1] = {dy};
    CHECK_EQ_INT(cuda_matmul_with(1, ys, ws, dx, nt, scr, sb, NULL, k), CS_OK);
    CK(cudaDeviceSynchronize());
    float *y = download(dy, (size_t)n_out * nt);
    int8_t *q = (int8_t *)malloc(n_in * nt);
    float *d = (float *)malloc(nb * nt * sizeof(float));
    host_quantize(q, d, x, n_in * nt);
    int bad_canon = 0, bad_exact = 0, unwritten = 0;
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < n_out; r++) {
            float v = y[t * n_out + r];
            if (isnan(v))
                unwritten++;
            if (r % row_step != 0 && r != n_out - 1)
                continue;
            struct ref_out ref = ref_dot(w, r, nb, q + t * n_in, d + t * nb);
            if (memcmp(&v, &ref.canon, 4) != 0 && bad_canon++ < 3)
                fprintf(stderr, "  canon mismatch t=%d r=%lld gpu=%.9g host=%.9g\n", t, (long long)r, v,
                        ref.canon);
            if (!(fabs(v - ref.exact) <= ref.bound))
                bad_exact++;
        }
    fprintf(stderr, "  q8 %s n_in=%lld n_out=%lld nt=%d: canon-mismatch=%d out-of-bound=%d unwritten=%d\n",
            k == CUDA_MM_GEMM ? "gemm" : "gemv", (long long)n_in, (long long)n_out, nt, bad_canon,
            bad_exact, unwritten);
    CHECK_EQ_INT(bad_canon, 0);
    CHECK_EQ_INT(bad_exact, 0);
    CHECK_EQ_INT(unwritten, 0);
    cuda_weight_free(&wt);
    CHECK(wt.data == NULL);
    free(w), free(x), free(y), free(q), free(d);
    cudaFree(dx), cudaFree(scr), cudaFree(dy);
}

static void test_matmul_q8_small_shapes(void)
{
    check_q8(96, 48, 1, 1, CUDA_MM_GEMV);     /* odd nb, rows not a multiple of 32 */
    check_q8(96, 48, 3, 1, CUDA_MM_GEMM);
    check_q8(1024, 300, 11, 1, CUDA_MM_GEMV);
    check_q8(1024, 300, 70, 1, CUDA_MM_GEMM);
    check_q8(1120, 300, 70, 1, CUDA_MM_GEMM);     /* 35 blocks: a 3-block last segment and stage */
    check_q8(1056, 300, 1, 1, CUDA_MM_GEMV_SEG);  /* 33 blocks: a 1-block last segment */
    check_q8(1056, 300, 5, 1, CUDA_MM_GEMV);
    check_q8(96, 48, 3, 1, CUDA_MM_GEMV_SEG);     /* one segment: written directly */
    /* more row groups than one resident wave of blocks: each block walks
     * several groups (gemv_seg.cu), also with one segment and with 8 tokens */
    check_q8(4096, 24576, 1, 3, CUDA_MM_GEMV_SEG);  /* 9B gate+up, 6 groups per block */
    check_q8(1024, 40000, 1, 5, CUDA_MM_GEMV_SEG);  /* n_seg = 1, 1,250 groups */
    check_q8(4096, 24576, 8, 9, CUDA_MM_GEMV_SEG);
    check_q8(4096, 40000, 1, 11, CUDA_MM_AUTO);     /* an LM head: auto picks the segmented one */
}

static void test_matmul_q8_9b_shapes(void)
{
    check_q8(4096, 8192, 1, 37, CUDA_MM_GEMV);     /* GDN qkv */
    check_q8(12288, 4096, 4, 53, CUDA_MM_GEMV);    /* ffn_down */
    check_q8(4096, 12288, 130, 301, CUDA_MM_GEMM); /* ffn_gate, a prefill chunk */
    check_q8(4096, 4096, 1, 7, CUDA_MM_GEMV_SEG);  /* ssm_out, x quantized in shared memory */
    check_q8(12288, 4096, 7, 53, CUDA_MM_GEMV_SEG);/* ffn_down, 7 tokens from scratch */
    /* from 5 tokens matmul.cu picks the GEMV instance per call: on a 132-SM
     * GPU the two-block one for gate+up's 768 row groups, the free one for
     * ssm_out's 128 (one wave either way) */
    check_q8(4096, 24576, 6, 13, CUDA_MM_GEMV);
    check_q8(4096, 24576, 8, 17, CUDA_MM_GEMV);
    check_q8(4096, 4096, 8, 7, CUDA_MM_GEMV);
    /* 16 tokens in one wide launch (16 warps, the weights read once), 24 as
     * 16 + 8, 20 as 16 + 4 */
    check_q8(4096, 24576, 16, 19, CUDA_MM_GEMV);
    check_q8(12288, 4096, 16, 53, CUDA_MM_GEMV);
    check_q8(4096, 4096, 24, 7, CUDA_MM_GEMV);
    check_q8(1056, 300, 20, 1, CUDA_MM_GEMV);
    /* 9-15 tokens in one wide launch too; 25 as 16 + 9 */
    check_q8(4096, 24576, 12, 19, CUDA_MM_GEMV);
    check_q8(4096, 4096, 9, 7, CUDA_MM_GEMV);
    check_q8(12288, 4096, 15, 53, CUDA_MM_GEMV);
    check_q8(1056, 300, 25, 1, CUDA_MM_GEMV);
}

static void test_matmul_q8_27b_shapes(void)
{
    check_q8(5120, 17408, 2, 211, CUDA_MM_GEMV);   /* ffn_gate */
    check_q8(17408, 5120, 65, 97, CUDA_MM_GEMM);   /* ffn_down */
    check_q8(17408, 5120, 8, 97, CUDA_MM_GEMV);    /* x too large for shared memory: scratch path */
    check_q8(17408, 5120, 16, 97, CUDA_MM_GEMV);   /* the wide launch, 17 segments */
    check_q8(17408, 5120, 13, 97, CUDA_MM_GEMV);   /* a 13-token wide launch */
    check_q8(5120, 48, 1, 1, CUDA_MM_GEMV);        /* ssm_beta: Hv = 48 rows */
    check_q8(17408, 5120, 1, 97, CUDA_MM_GEMV_SEG);/* ffn_down, 17 segments */
    check_q8(17408, 5120, 8, 97, CUDA_MM_GEMV_SEG);
}

/* GEMV and GEMM bitwise equal, and a token's output independent of n_tokens. */
static void test_matmul_batch_invariance(void)
{
    int64_t n_in = 5120, n_out = 1000;
    int nmax = 100;
    uint8_t *w = make_q8_0(n_in, n_out);
    float *x = make_x(n_in * nmax, 0);
    struct cs_weight wt;
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_Q8_0, n_in, n_out, w, NULL), CS_OK);
    float *dx = (float *)dev_alloc(n_in * nmax * sizeof(float));
    CK(cudaMemcpy(dx, x, n_in * nmax * sizeof(float), cudaMemcpyHostToDevice));
    size_t sb = cuda_matmul_scratch_bytes(n_in, nmax);
    void *scr = dev_alloc(sb);
    float *da = dev_poisoned(n_out * nmax), *db = dev_poisoned(n_out * nmax);
    const struct cs_weight *ws[1] = {&wt};
    float *ya[1] = {da}, *yb[1] = {db};
    CHECK_EQ_INT(cuda_matmul_with(1, ya, ws, dx, nmax, scr, sb, NULL, CUDA_MM_GEMV), CS_OK);
    float *ref = download(da, n_out * nmax);
    const int ns[] = {1, 2, 7, 8, 9, 16, 17, 33, 64, 65, 100};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (int k = 0; k < 4; k++) {   /* auto, GEMV, GEMM, segmented GEMV */
            CK(cudaMemset(db, 0xff, n_out * nmax * sizeof(float)));
            CHECK_EQ_INT(cuda_matmul_with(1, yb, ws, dx, ns[i], scr, sb, NULL, (enum cuda_mm_kernel)k), CS_OK);
            float *got = download(db, n_out * ns[i]);
            int same = memcmp(got, ref, n_out * ns[i] * sizeof(float)) == 0;
            if (!same)
                fprintf(stderr, "  batch invariance broken: n=%d kernel=%d\n", ns[i], k);
            CHECK(same);
            free(got);
        }
    }
    /* one token at offset 37 of 100 equals that token alone */
    CHECK_EQ_INT(cuda_matmul_with(1, yb, ws, dx + 37 * n_in, 1, scr, sb, NULL, CUDA_MM_AUTO), CS_OK);
    float *one = download(db, n_out);
    CHECK(memcmp(one, ref + 37 * n_out, n_out * sizeof(float)) == 0);
    cuda_weight_free(&wt);
    free(w), free(x), free(ref), free(one);
    cudaFree(dx), cudaFree(scr), cudaFree(da), cudaFree(db);
}

/* GDN's four input projections in one call equal four separate calls. */
static void test_matmul_fused_equals_separate(void)
{
    const int64_t n_in = 4096, outs[4] = {8192, 4096, 32, 32};
    const int nts[] = {1, 5, 40};
    struct cs_weight wt[4];
    const struct cs_weight *ws[4];
    float *dy[4], *ys[4];
    for (int i = 0; i < 4; i++) {
        uint8_t *w = make_q8_0(n_in, outs[i]);
        CHECK_EQ_INT(cuda_weight_upload(&wt[i], CS_DTYPE_Q8_0, n_in, outs[i], w, NULL), CS_OK);
        free(w);
        ws[i] = &wt[i];
    }
    for (size_t c = 0; c < sizeof nts / sizeof nts[0]; c++) {
        int nt = nts[c];
        float *x = make_x(n_in * nt, 0);
        float *dx = (float *)dev_alloc(n_in * nt * sizeof(float));
        CK(cudaMemcpy(dx, x, n_in * nt * sizeof(float), cudaMemcpyHostToDevice));
        size_t sb = cuda_matmul_scratch_bytes(n_in, nt);
        void *scr = dev_alloc(sb);
        for (int i = 0; i < 4; i++)
            ys[i] = dy[i] = dev_poisoned(outs[i] * nt);
        CHECK_EQ_INT(cuda_matmul(4, ys, ws, dx, nt, scr, sb, NULL), CS_OK);
        for (int i = 0; i < 4; i++) {
            float *fused = download(dy[i], outs[i] * nt);
            CK(cudaMemset(dy[i], 0xff, outs[i] * nt * sizeof(float)));
            CHECK_EQ_INT(cuda_matmul(1, &ys[i], &ws[i], dx, nt, scr, sb, NULL), CS_OK);
            float *alone = download(dy[i], outs[i] * nt);
            CHECK(memcmp(fused, alone, outs[i] * nt * sizeof(float)) == 0);
            free(fused), free(alone);
            cudaFree(dy[i]);
        }
        free(x);
        cudaFree(dx), cudaFree(scr);
    }
    for (int i = 0; i < 4; i++)
        cuda_weight_free(&wt[i]);
}

/* F16 / F32 / BF16 weights against float64. */
static void check_float_type(uint32_t type, int64_t n_in, int64_t n_out, int nt)
{
    size_t n = (size_t)n_in * n_out, esz = type == CS_DTYPE_F32 ? 4 : 2;
    uint8_t *w = (uint8_t *)malloc(n * esz);
    double *wd = (double *)malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        float v = rng_f() * 0.1f;
        if (type == CS_DTYPE_F32) {
            memcpy(w + i * 4, &v, 4);
            wd[i] = v;
        } else {
            uint16_t h = type == CS_DTYPE_F16 ? cs_float_to_half(v) : cs_float_to_bf16(v);
            memcpy(w + i * 2, &h, 2);
            wd[i] = type == CS_DTYPE_F16 ? cs_half_to_float(h) : cs_bf16_to_float(h);
        }
    }
    float *x = make_x(n_in * nt, 0);
    struct cs_weight wt;
    CHECK_EQ_INT(cuda_weight_upload(&wt, type, n_in, n_out, w, NULL), CS_OK);
    float *dx = (float *)dev_alloc(n_in * nt * sizeof(float));
    CK(cudaMemcpy(dx, x, n_in * nt * sizeof(float), cudaMemcpyHostToDevice));
    float *dy = dev_poisoned(n_out * nt);
    const struct cs_weight *ws[1] = {&wt};
    float *ys[1] = {dy};
    CHECK_EQ_INT(cuda_matmul(1, ys, ws, dx, nt, NULL, 0, NULL), CS_OK);
    float *y = download(dy, n_out * nt);
    int bad = 0;
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < n_in; k++) {
                s += wd[r * n_in + k] * x[t * n_in + k];
                mag += fabs(wd[r * n_in + k] * x[t * n_in + k]);
            }
            if (!(fabs(y[t * n_out + r] - s) <= 1e-5 * mag + 1e-30))
                bad++;
        }
    fprintf(stderr, "  type %u n_in=%lld n_out=%lld nt=%d: out-of-bound=%d\n", type, (long long)n_in,
            (long long)n_out, nt, bad);
    CHECK_EQ_INT(bad, 0);
    cuda_weight_free(&wt);
    free(w), free(wd), free(x), free(y);
    cudaFree(dx), cudaFree(dy);
}

static void test_matmul_float_weights(void)
{
    check_float_type(CS_DTYPE_F32, 100, 37, 3);
    check_float_type(CS_DTYPE_F16, 1000, 65, 2);
    check_float_type(CS_DTYPE_BF16, 4096, 64, 4);
}

static void test_matmul_rejects_bad_input(void)
{
    struct cs_weight wt;
    uint8_t dummy[64] = {0};
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_Q8_0, 33, 1, dummy, NULL), CS_EINVAL);
    CHECK_EQ_INT(cuda_weight_upload(&wt, 2 /* Q4_0 */, 32, 1, dummy, NULL), CS_EUNSUPPORTED);
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_F32, 0, 1, dummy, NULL), CS_EINVAL);
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_F32, 4, 4, dummy, NULL), CS_OK);
    const struct cs_weight *ws[1] = {&wt};
    float *ys[1] = {(float *)wt.data};
    CHECK_EQ_INT(cuda_matmul(0, ys, ws, (float *)wt.data, 1, NULL, 0, NULL), CS_EINVAL);
    CHECK_EQ_INT(cuda_matmul(9, ys, ws, (float *)wt.data, 1, NULL, 0, NULL), CS_EINVAL);
    cuda_weight_free(&wt);
    cuda_weight_free(&wt);   /* idempotent */
    CHECK(wt.data == NULL);
}

/* The FFN down projection with silu(g) * u fused into the GEMV's prologue
 * equals silu_mul then the matmul, bitwise; where the fused kernel does not
 * apply (K of one segment) it says so and writes nothing. */
static void check_swiglu(int64_t n_in, int64_t n_out, bool fused)
{
    uint8_t *w = make_q8_0(n_in, n_out);
    float *g = make_x(n_in, 0), *u = make_x(n_in, 1);
    struct cs_weight wt;
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_Q8_0, n_in, n_out, w, NULL), CS_OK);
    float *dg = (float *)dev_alloc(n_in * sizeof(float)), *du = (float *)dev_alloc(n_in * sizeof(float));
    CK(cudaMemcpy(dg, g, n_in * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(du, u, n_in * sizeof(float), cudaMemcpyHostToDevice));
    float *dy = dev_poisoned(n_out), *dref = dev_poisoned(n_out);
    int rc = cuda_matmul_swiglu_1(dy, &wt, dg, du, NULL);
    CHECK_EQ_INT(rc, fused ? CS_OK : CS_EUNSUPPORTED);
    /* the reference: silu_mul into g, then the matmul */
    size_t sb = cuda_matmul_scratch_bytes(n_in, 1);
    void *scr = dev_alloc(sb);
    CHECK_EQ_INT(cuda_silu_mul(dg, dg, du, (size_t)n_in, NULL), CS_OK);
    const struct cs_weight *ws[1] = {&wt};
    float *ys[1] = {dref};
    CHECK_EQ_INT(cuda_matmul(1, ys, ws, dg, 1, scr, sb, NULL), CS_OK);
    CK(cudaDeviceSynchronize());
    float *got = download(dy, n_out), *ref = download(dref, n_out);
    if (fused) {
        int same = memcmp(got, ref, n_out * sizeof(float)) == 0;
        if (!same)
            fprintf(stderr, "  swiglu fused != silu_mul + matmul: n_in=%lld n_out=%lld\n",
                    (long long)n_in, (long long)n_out);
        CHECK(same);
    } else {
        int untouched = 0;
        for (int64_t i = 0; i < n_out; i++)
            untouched += isnan(got[i]);
        CHECK_EQ_INT(untouched, (int)n_out);
    }
    cuda_weight_free(&wt);
    free(w), free(g), free(u), free(got), free(ref);
    cudaFree(dg), cudaFree(du), cudaFree(dy), cudaFree(dref), cudaFree(scr);
}

static void test_matmul_swiglu_fused(void)
{
    check_swiglu(12288, 4096, true);    /* 9B ffn_down */
    check_swiglu(17408, 5120, true);    /* 27B ffn_down */
    check_swiglu(3584, 1024, true);     /* 0.8B ffn_down: a short last segment */
    check_swiglu(1024, 256, false);     /* one segment: not fused */
}

/* matmul_tune.h: what the table decides, whatever the card's timings are. */
static void test_matmul_tune(void)
{
    const int64_t n_in = 4096, n_out = 4096;
    const int nt = 24, nt_graph = 40;
    mm_tune_reset();
    /* a recorded choice stays */
    mm_tune_record(777, 33, 20, MM_TUNE_GEMV);
    mm_tune_record(777, 33, 20, MM_TUNE_GEMM);
    CHECK_EQ_INT(mm_tune_lookup(777, 33, 20), MM_TUNE_GEMV);
    CHECK_EQ_INT(mm_tune_lookup(777, 34, 20), MM_TUNE_UNKNOWN);
    CHECK(!mm_tune_in_range(16) && mm_tune_in_range(17) && mm_tune_in_range(64) &&
          !mm_tune_in_range(65));

    uint8_t *w = make_q8_0(n_in, n_out);
    float *x = make_x(n_in * nt_graph, 0), *u = make_x(n_in * nt_graph, 1);
    struct cs_weight wt;
    CHECK_EQ_INT(cuda_weight_upload(&wt, CS_DTYPE_Q8_0, n_in, n_out, w, NULL), CS_OK);
    float *dx = (float *)dev_alloc(n_in * nt_graph * sizeof(float));
    float *du = (float *)dev_alloc(n_in * nt_graph * sizeof(float));
    CK(cudaMemcpy(dx, x, n_in * nt_graph * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(du, u, n_in * nt_graph * sizeof(float), cudaMemcpyHostToDevice));
    size_t sb = cuda_matmul_scratch_bytes(n_in, nt_graph);
    void *scr = dev_alloc(sb);
    float *dref = dev_poisoned(n_out * nt_graph), *dy = dev_poisoned(n_out * nt_graph);
    const struct cs_weight *ws[1] = {&wt};
    float *yr[1] = {dref}, *yy[1] = {dy};
    CHECK_EQ_INT(cuda_matmul_with(1, yr, ws, dx, nt_graph, scr, sb, NULL, CUDA_MM_GEMV), CS_OK);
    float *ref = download(dref, n_out * nt_graph);

    /* the fused prologue path declines a shape not yet timed (its caller's
     * op + cuda_matmul then times it) */
    struct cuda_mm_pro pro;
    memset(&pro, 0, sizeof pro);
    pro.kind = CUDA_MM_PRO_SWIGLU;
    pro.aux = du;
    CHECK_EQ_INT(cuda_matmul_pro_tokens(1, yy, ws, dx, nt, &pro, scr, sb, NULL), CS_EUNSUPPORTED);
    /* an untimed call times both kernels and leaves the right bits */
    CHECK_EQ_INT(mm_tune_lookup(n_in, n_out, nt), MM_TUNE_UNKNOWN);
    CHECK_EQ_INT(cuda_matmul(1, yy, ws, dx, nt, scr, sb, NULL), CS_OK);
    enum mm_tune_choice c = mm_tune_lookup(n_in, n_out, nt);
    CHECK(c == MM_TUNE_GEMV || c == MM_TUNE_GEMM);
    float *got = download(dy, n_out * nt);
    CHECK(memcmp(got, ref, n_out * nt * sizeof(float)) == 0);
    free(got);
    fprintf(stderr, "  tune 4096x4096 at %d tokens: %s\n", nt, c == MM_TUNE_GEMM ? "gemm" : "gemv");
    /* the fused path now follows the recorded choice */
    CHECK_EQ_INT(cuda_matmul_pro_tokens(1, yy, ws, dx, nt, &pro, scr, sb, NULL),
                 c == MM_TUNE_GEMM ? CS_OK : CS_EUNSUPPORTED);

    /* recorded into a graph: nothing timed (a sync would break the capture),
     * arch_tiles.h's rule runs, the same bits on replay */
    cudaStream_t st;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMemset(dy, 0xff, n_out * nt_graph * sizeof(float)));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    int rc = cuda_matmul(1, yy, ws, dx, nt_graph, scr, sb, (struct CUstream_st *)st);
    CK(cudaStreamEndCapture(st, &g));
    CHECK_EQ_INT(rc, CS_OK);
    CHECK_EQ_INT(mm_tune_lookup(n_in, n_out, nt_graph), MM_TUNE_UNKNOWN);
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    got = download(dy, n_out * nt_graph);
    CHECK(memcmp(got, ref, n_out * nt_graph * sizeof(float)) == 0);
    free(got);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(st);
    mm_tune_reset();
    cuda_weight_free(&wt);
    free(w), free(x), free(u), free(ref);
    cudaFree(dx), cudaFree(du), cudaFree(scr), cudaFree(dref), cudaFree(dy);
}

int main(void)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "test_matmul: no CUDA device, skipped\n");
        return 77;
    }
    RUN(test_matmul_quantize_exact);
    RUN(test_matmul_rejects_bad_input);
    RUN(test_matmul_q8_small_shapes);
    RUN(test_matmul_batch_invariance);
    RUN(test_matmul_fused_equals_separate);
    RUN(test_matmul_float_weights);
    RUN(test_matmul_q8_9b_shapes);
    RUN(test_matmul_q8_27b_shapes);
    RUN(test_matmul_swiglu_fused);
    RUN(test_matmul_tune);
    return test_report();
}
