/* test_ffn_ring.c - proves the CUDA backend's ffn_add_rmsnorm (the whole
 * FFN of one decode token in one kernel, kernels/cuda/ffn_ring.cu) bitwise
 * equal to what the model runs without it (matmul_add_rmsnorm on gate and
 * up, then matmul_swiglu), on the same GPU: the FFN output and the residual
 * sum x_out, at the 9B, 27B, 0.8B and 2B-like shapes, with the output
 * written over y as the model does (out == y), over 4 calls with new inputs
 * each (the kernel's exchange buffer carries an epoch from call to call: a
 * stale entry would show as a difference), and that x is only read. Also
 * that the op declines (CS_EUNSUPPORTED, nothing written) for 2 tokens, for
 * weights whose shapes do not chain and when switched off
 * (cuda_ffn_ring_enable; the test switches it on whatever the default).
 * The same for proj_ffn_add_rmsnorm (the mixer's output projection in front,
 * in the same kernel) against matmul_gated_rmsnorm / matmul_sigmoid_gate
 * and then the two FFN ops: the GDN layer's gated norm (heads of 128) and
 * the attention layer's sigmoid gate (heads of 256, the gate interleaved
 * with the query as the model lays it out), calls of both ops interleaved
 * (one exchange buffer and epoch).
 * Each check prints "RESULT <name> PASS|FAIL <error figure> (bound)" (error:
 * differing values). Where the loaded kernels are older than sm_90 code (a
 * compute_75 build on a newer card: cuda_code_arch) the kernel is empty, so
 * the ops must decline every call and write nothing; that is what is checked
 * there. Not a ctest test (needs a GPU); exits 77 without one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/log.h"
#include "../../kernels/cuda/ffn_ring.h"
#include "../../kernels/cuda/launch.h"
#include "../../kernels/ops.h"
#include "../test_util.h"
#include "gpu_pair.h"

static void *dev_new(const void *host, size_t bytes)
{
    void *p = NULL;
    if (gpu->alloc(gpu, &p, bytes) || (host && gpu->upload(gpu, p, host, bytes))) {
        fprintf(stderr, "alloc/upload of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

static void dev_put_rand(void *p, size_t n, float scale)
{
    float *h = randv(n, scale);
    CHECK(gpu->upload(gpu, p, h, n * sizeof(float)) == 0);
    free(h);
}

/* Floats that differ (bitwise) between two device arrays. */
static bool g_ring_code;   /* the loaded kernels are sm_90 code: the ring is there */

static double dev_differ(const void *a, const void *b, size_t n)
{
    uint32_t *x = malloc(n * 4), *y = malloc(n * 4);
    CHECK(gpu->download(gpu, x, a, n * 4) == 0);
    CHECK(gpu->download(gpu, y, b, n * 4) == 0);
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += x[i] != y[i];
    free(x);
    free(y);
    return (double)d;
}

static void upload_q8(struct cs_weight *w, int64_t n_in, int64_t n_out)
{
    uint8_t *h = q8_0_rows(n_in, n_out);
    memset(w, 0, sizeof *w);
    CHECK(gpu->weight_upload(gpu, w, CS_DTYPE_Q8_0, n_in, n_out, h) == 0);
    free(h);
}

/* E inputs, F FFN rows; calls with fresh x, y each. */
static void check_ffn(const char *tag, int E, int64_t F, int calls)
{
    char name[96];
    struct cs_weight wg, wu, wd;
    upload_q8(&wg, E, F);
    upload_q8(&wu, E, F);
    upload_q8(&wd, F, E);
    const struct cs_weight *gu[2] = {&wg, &wu};
    size_t e4 = (size_t)E * 4, f4 = (size_t)F * 4;
    float *x = dev_new(NULL, e4), *x0 = dev_new(NULL, e4), *w = dev_new(NULL, e4);
    float *y1 = dev_new(NULL, e4), *y2 = dev_new(NULL, e4);   /* y in, the FFN's output out */
    float *xo1 = dev_new(NULL, e4), *xo2 = dev_new(NULL, e4), *normed = dev_new(NULL, e4);
    float *nsc = dev_new(NULL, 4);   /* the norm's scale (scratch of the fallback) */
    float *g = dev_new(NULL, f4), *u = dev_new(NULL, f4);
    dev_put_rand(w, (size_t)E, 1.5f);
    double d_out = 0, d_x = 0, d_in = 0, d_undeclined = 0;
    int taken = 0;
    for (int c = 0; c < calls; c++) {
        dev_put_rand(x, (size_t)E, 4.0f);
        dev_put_rand(y1, (size_t)E, 2.0f);
        CHECK(gpu->copy(gpu, y2, y1, e4) == 0);
        CHECK(gpu->copy(gpu, x0, x, e4) == 0);
        CHECK(gpu->zero(gpu, xo1, e4) == 0);
        int rc = gpu->ffn_add_rmsnorm(gpu, y1, &wg, &wu, &wd, xo1, x, y1, w, 1, E, 1e-6f);
        CHECK(rc == 0 || rc == CS_EUNSUPPORTED);
        taken += rc == 0;
        if (!g_ring_code) {   /* y1 still the copy in y2, xo1 still zero */
            CHECK(gpu->zero(gpu, xo2, e4) == 0);
            CHECK(gpu->sync(gpu) == 0);
            d_undeclined += dev_differ(y1, y2, (size_t)E) + dev_differ(xo1, xo2, (size_t)E);
        }
        float *ys[2] = {g, u};
        CHECK(gpu->matmul_add_rmsnorm(gpu, 2, ys, gu, xo2, x, y2, w, normed, nsc, 1, E, 1e-6f) == 0);
        CHECK(gpu->matmul_swiglu(gpu, y2, &wd, g, u, 1) == 0);
        CHECK(gpu->sync(gpu) == 0);
        d_out += dev_differ(y1, y2, (size_t)E);
        d_x += dev_differ(xo1, xo2, (size_t)E);
        d_in += dev_differ(x, x0, (size_t)E);
    }
    snprintf(name, sizeof name, "ffn_ring %s %s (calls of %d)",
             g_ring_code ? "taken" : "declined", tag, calls);
    report(name, g_ring_code ? calls - taken : taken, 0);
    if (!g_ring_code) {   /* declined: y1 and xo1 must be as they were */
        d_out = d_undeclined;
        d_x = 0;
    }
    snprintf(name, sizeof name, "ffn_ring out %s", tag);
    report(name, d_out, 0);
    snprintf(name, sizeof name, "ffn_ring x_out %s", tag);
    report(name, d_x, 0);
    snprintf(name, sizeof name, "ffn_ring x unchanged %s", tag);
    report(name, d_in, 0);
    float *bufs[] = {x, x0, w, y1, y2, xo1, xo2, normed, nsc, g, u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    gpu->weight_free(gpu, &wg);
    gpu->weight_free(gpu, &wu);
    gpu->weight_free(gpu, &wd);
}

/* E inputs, F FFN rows, an output projection of H heads of D values (gated
 * norm: D = 128; sigmoid gate: the gate after each head's query, as the
 * model's q buffer holds them). */
static void check_proj_ffn(const char *tag, int E, int64_t F, int H, int D, int kind, int calls)
{
    char name[96];
    struct cs_weight wo, wg, wu, wd;
    int N = H * D;
    upload_q8(&wo, N, E);
    upload_q8(&wg, E, F);
    upload_q8(&wu, E, F);
    upload_q8(&wd, F, E);
    const struct cs_weight *gu[2] = {&wg, &wu};
    size_t e4 = (size_t)E * 4, f4 = (size_t)F * 4, n4 = (size_t)N * 4;
    float *x = dev_new(NULL, e4), *x0 = dev_new(NULL, e4), *w = dev_new(NULL, e4);
    float *out1 = dev_new(NULL, e4), *out2 = dev_new(NULL, e4);
    float *xo1 = dev_new(NULL, e4), *xo2 = dev_new(NULL, e4), *normed = dev_new(NULL, e4);
    float *nsc = dev_new(NULL, 4);   /* the norm's scale (scratch of the fallback) */
    float *a1 = dev_new(NULL, n4), *a2 = dev_new(NULL, n4);
    float *aux = dev_new(NULL, 2 * n4), *nw = dev_new(NULL, (size_t)D * 4);
    float *g = dev_new(NULL, f4), *u = dev_new(NULL, f4);
    dev_put_rand(w, (size_t)E, 1.5f);
    dev_put_rand(nw, (size_t)D, 1.5f);
    struct cs_out_proj p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.w = &wo;
    p.a = a1;
    p.n_heads = H;
    p.head_dim = D;
    if (kind == CS_OUT_PROJ_GATED_RMSNORM) {
        p.aux = aux;
        p.norm_w = nw;
        p.eps = 1e-6f;
    } else {
        p.aux = aux + D;   /* head h's gate at h * 2D + D */
        p.aux_token_stride = 2 * N;
        p.aux_head_stride = 2 * D;
    }
    double d_out = 0, d_x = 0, d_in = 0, d_undeclined = 0;
    int taken = 0;
    for (int c = 0; c < calls; c++) {
        dev_put_rand(x, (size_t)E, 4.0f);
        dev_put_rand(a1, (size_t)N, 2.0f);
        dev_put_rand(aux, (size_t)N * 2, 3.0f);
        CHECK(gpu->copy(gpu, a2, a1, n4) == 0);
        CHECK(gpu->copy(gpu, x0, x, e4) == 0);
        CHECK(gpu->zero(gpu, xo1, e4) == 0);
        CHECK(gpu->zero(gpu, out1, e4) == 0);
        int rc = gpu->proj_ffn_add_rmsnorm(gpu, out1, &p, &wg, &wu, &wd, xo1, x, w, 1, E, 1e-6f);
        CHECK(rc == 0 || rc == CS_EUNSUPPORTED);
        taken += rc == 0;
        if (!g_ring_code) {   /* out1 and xo1 still zero */
            CHECK(gpu->zero(gpu, out2, e4) == 0);
            CHECK(gpu->zero(gpu, xo2, e4) == 0);
            CHECK(gpu->sync(gpu) == 0);
            d_undeclined += dev_differ(out1, out2, (size_t)E) + dev_differ(xo1, xo2, (size_t)E);
        }
        /* the ops the model runs without it; out2 first holds the projection */
        if (kind == CS_OUT_PROJ_GATED_RMSNORM)
            CHECK(gpu->matmul_gated_rmsnorm(gpu, out2, &wo, a2, p.aux, nw, H, D, p.eps, 1) == 0);
        else
            CHECK(gpu->matmul_sigmoid_gate(gpu, out2, &wo, a2, p.aux, p.aux_token_stride,
                                           p.aux_head_stride, H, D, 1) == 0);
        float *ys[2] = {g, u};
        CHECK(gpu->matmul_add_rmsnorm(gpu, 2, ys, gu, xo2, x, out2, w, normed, nsc, 1, E, 1e-6f) == 0);
        CHECK(gpu->matmul_swiglu(gpu, out2, &wd, g, u, 1) == 0);
        CHECK(gpu->sync(gpu) == 0);
        d_out += dev_differ(out1, out2, (size_t)E);
        d_x += dev_differ(xo1, xo2, (size_t)E);
        d_in += dev_differ(x, x0, (size_t)E);
    }
    const char *k = kind == CS_OUT_PROJ_GATED_RMSNORM ? "gated" : "sigmoid";
    snprintf(name, sizeof name, "proj_ffn %s %s %s (calls of %d)",
             g_ring_code ? "taken" : "declined", k, tag, calls);
    report(name, g_ring_code ? calls - taken : taken, 0);
    if (!g_ring_code) {   /* declined: nothing written */
        d_out = d_undeclined;
        d_x = 0;
    }
    snprintf(name, sizeof name, "proj_ffn out %s %s", k, tag);
    report(name, d_out, 0);
    snprintf(name, sizeof name, "proj_ffn x_out %s %s", k, tag);
    report(name, d_x, 0);
    snprintf(name, sizeof name, "proj_ffn x unchanged %s %s", k, tag);
    report(name, d_in, 0);
    float *bufs[] = {x, x0, w, out1, out2, xo1, xo2, normed, nsc, a1, a2, aux, nw, g, u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    struct cs_weight *ws[] = {&wo, &wg, &wu, &wd};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        gpu->weight_free(gpu, ws[i]);
}

/* Cases the kernel does not take: nothing may be written. */
static void check_declines(void)
{
    int E = 1024;
    struct cs_weight wg, wu, wd;
    upload_q8(&wg, E, 2048);   /* gate/up rows that down does not take */
    upload_q8(&wu, E, 2048);
    upload_q8(&wd, 2080, E);
    float *x = dev_new(NULL, (size_t)E * 8), *y = dev_new(NULL, (size_t)E * 8);
    float *w = dev_new(NULL, (size_t)E * 4), *xo = dev_new(NULL, (size_t)E * 8);
    float *y0 = dev_new(NULL, (size_t)E * 8), *xo0 = dev_new(NULL, (size_t)E * 8);
    dev_put_rand(x, (size_t)E * 2, 1.0f);
    dev_put_rand(y, (size_t)E * 2, 1.0f);
    dev_put_rand(w, (size_t)E, 1.0f);
    dev_put_rand(xo, (size_t)E * 2, 1.0f);
    CHECK(gpu->copy(gpu, y0, y, (size_t)E * 8) == 0);
    CHECK(gpu->copy(gpu, xo0, xo, (size_t)E * 8) == 0);
    int rc1 = gpu->ffn_add_rmsnorm(gpu, y, &wg, &wu, &wd, xo, x, y, w, 1, E, 1e-6f);
    struct cs_weight g2, u2, d2;
    upload_q8(&g2, E, 2048);
    upload_q8(&u2, E, 2048);
    upload_q8(&d2, 2048, E);
    int rc2 = gpu->ffn_add_rmsnorm(gpu, y, &g2, &u2, &d2, xo, x, y, w, 2, E, 1e-6f);
    /* the projection in front: 2048 inputs as 16 gated heads, a from x's second row */
    struct cs_weight wo;
    upload_q8(&wo, 2048, E);
    struct cs_out_proj p = {CS_OUT_PROJ_GATED_RMSNORM, &wo, x, x, w, 0, 0, 16, 128, 1e-6f};
    int rp2 = gpu->proj_ffn_add_rmsnorm ? gpu->proj_ffn_add_rmsnorm(gpu, y, &p, &g2, &u2, &d2, xo,
                                                                    y + E, w, 2, E, 1e-6f)
                                        : CS_EUNSUPPORTED;
    cuda_ffn_ring_enable(gpu, false);
    int rc3 = gpu->ffn_add_rmsnorm(gpu, y, &g2, &u2, &d2, xo, x, y, w, 1, E, 1e-6f);
    int rp3 = gpu->proj_ffn_add_rmsnorm ? gpu->proj_ffn_add_rmsnorm(gpu, y, &p, &g2, &u2, &d2, xo,
                                                                    y + E, w, 1, E, 1e-6f)
                                        : CS_EUNSUPPORTED;
    cuda_ffn_ring_enable(gpu, true);
    CHECK(gpu->sync(gpu) == 0);
    report("ffn_ring declines shapes that do not chain", rc1 != CS_EUNSUPPORTED, 0);
    report("ffn_ring declines 2 tokens", rc2 != CS_EUNSUPPORTED, 0);
    report("ffn_ring declines when switched off", rc3 != CS_EUNSUPPORTED, 0);
    report("proj_ffn declines 2 tokens", rp2 != CS_EUNSUPPORTED, 0);
    report("proj_ffn declines when switched off", rp3 != CS_EUNSUPPORTED, 0);
    report("ffn_ring declined: nothing written",
           dev_differ(y, y0, (size_t)E * 2) + dev_differ(xo, xo0, (size_t)E * 2), 0);
    float *bufs[] = {x, y, w, xo, y0, xo0};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    struct cs_weight *ws[] = {&wg, &wu, &wd, &g2, &u2, &d2, &wo};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        gpu->weight_free(gpu, ws[i]);
}

int main(void)
{
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    g_ring_code = cuda_code_arch() >= 900;
    printf("kernels compiled for sm_%d: the ring is %s\n", cuda_code_arch() / 10,
           g_ring_code ? "there" : "absent (every call must decline)");
    if (!gpu->ffn_add_rmsnorm) {
        report("ffn_ring: op present", 1, 0);
        gpu_pair_close();
        return test_report();
    }
    cuda_ffn_ring_enable(gpu, true);
    check_ffn("9B", 4096, 12288, 4);
    check_ffn("27B", 5120, 17408, 4);
    check_ffn("0.8B", 1024, 3584, 4);
    check_ffn("2B-like", 2048, 6144, 3);
    if (!gpu->proj_ffn_add_rmsnorm) {
        report("proj_ffn: op present", 1, 0);
    } else {
        check_proj_ffn("9B", 4096, 12288, 32, 128, CS_OUT_PROJ_GATED_RMSNORM, 4);
        check_proj_ffn("9B", 4096, 12288, 16, 256, CS_OUT_PROJ_SIGMOID_GATE, 3);
        check_ffn("9B again", 4096, 12288, 2);   /* the epoch carries across the two ops */
        check_proj_ffn("27B", 5120, 17408, 48, 128, CS_OUT_PROJ_GATED_RMSNORM, 3);
        check_proj_ffn("27B", 5120, 17408, 24, 256, CS_OUT_PROJ_SIGMOID_GATE, 3);
        check_proj_ffn("0.8B", 1024, 3584, 16, 128, CS_OUT_PROJ_GATED_RMSNORM, 3);
        check_proj_ffn("0.8B", 1024, 3584, 8, 256, CS_OUT_PROJ_SIGMOID_GATE, 3);
    }
    check_declines();
    gpu_pair_close();
    return test_report();
}
