/* test_fused_norm.c - proves the CUDA backend's matmul_add_rmsnorm (the
 * residual add and RMSNorm in the prologue of the segmented GEMV that reads
 * the norm, kernels/ops.h) bitwise equal to add_rmsnorm then matmul_scaled on
 * the same backend, and where the CPU takes seconds at most to the CPU int8
 * path (kernels/numerics.h's norm after the dot: the segments' sums of
 * squares meeting with their partial dots): the projections ys and the sum
 * x_out, at the real shapes of
 * the projections that follow a norm in a decode step (GDN's 4 input
 * projections, attention's q/k/v, FFN gate/up, the LM head) for the 9B
 * (E 4096), 27B (E 5120) and 0.8B (E 1024, where the GEMV has one segment
 * and the op falls back) models; also a few tokens (the fallback), 40 and
 * 300 tokens (the add and norm fused into the quantization before the GEMM,
 * quantize_pro.cu; its x_out too), rows of 2,048, 2,560 and 8,192 (on
 * sm_90 the segment sums meet in clusters of 2, 3 and 8 blocks where such
 * clusters fit, gemv_seg.cu), a row longer than 8192 (the looping norm
 * kernel), a second call (the GEMV's
 * tickets reset), and that x and y are only read. Also matmul_add_rmsnorm_conv1d
 * (GDN's conv1d_silu in the GEMV's epilogue) against the two ops.
 * Each check prints "RESULT <name> PASS|FAIL <error figure> (bound)" like
 * test_ops.c (error: the number of differing outputs). Not a ctest test
 * (needs a GPU); exits 77 when no CUDA device is present. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/log.h"
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

static void *dev_randv(size_t n, float scale)
{
    float *h = randv(n, scale);
    void *p = dev_new(h, n * sizeof(float));
    free(h);
    return p;
}

/* Floats that differ (bitwise) between two device arrays. */
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

static struct cs_backend *cpu8;   /* the CPU backend's int8 path: the GPU's bits */

/* The CPU int8 backend's add_rmsnorm then matmul_scaled on the same inputs
 * (host rows hq[i] of the weights, x, y, w downloaded from the GPU): the
 * floats of ys that differ from the GPU's y1. */
static double cpu8_differ(int E, int n, const int64_t *outs, int T, uint8_t *const *hq,
                          const float *hx, const float *y, const float *w, float *const *y1)
{
    size_t nx = (size_t)T * (size_t)E;
    float *xc = malloc(nx * 4), *yc = malloc(nx * 4), *wc = malloc((size_t)E * 4);
    float *normed = malloc(nx * 4), *sc = malloc((size_t)T * 4);
    memcpy(xc, hx, nx * 4);
    CHECK(gpu->download(gpu, yc, y, nx * 4) == 0);
    CHECK(gpu->download(gpu, wc, w, (size_t)E * 4) == 0);
    struct cs_weight cw[8];
    const struct cs_weight *cws[8];
    float *ys[8];
    double d = 0;
    CHECK(cpu8->add_rmsnorm(cpu8, xc, yc, normed, sc, wc, T, E, 1e-6f) == 0);
    for (int i = 0; i < n; i++) {
        memset(&cw[i], 0, sizeof cw[i]);
        CHECK(cpu8->weight_upload(cpu8, &cw[i], CS_DTYPE_Q8_0, E, outs[i], hq[i]) == 0);
        cws[i] = &cw[i];
        ys[i] = malloc((size_t)T * (size_t)outs[i] * 4);
    }
    CHECK(cpu8->matmul_scaled(cpu8, n, ys, cws, normed, sc, T) == 0);
    for (int i = 0; i < n; i++) {
        size_t m = (size_t)T * (size_t)outs[i];
        uint32_t *g = malloc(m * 4);
        CHECK(gpu->download(gpu, g, y1[i], m * 4) == 0);
        for (size_t k = 0; k < m; k++)
            d += memcmp(&g[k], &ys[i][k], 4) != 0;
        free(g);
        free(ys[i]);
        cpu8->weight_free(cpu8, &cw[i]);
    }
    free(xc), free(yc), free(wc), free(normed), free(sc);
    return d;
}

/* n weights of E inputs and outs[i] outputs; T tokens. Fused: x_out = x + y,
 * ys = ws rmsnorm(x_out) w. Separate: xr = x, add_rmsnorm(xr, y, normed,
 * scale), matmul_scaled(normed, scale). Both on the GPU; equal bit for bit,
 * and (where the CPU takes seconds at most) equal to the CPU int8 path. */
static void check_shape(const char *tag, int E, int n, const int64_t *outs, int T)
{
    char name[96];
    struct cs_weight ws_[8];
    const struct cs_weight *ws[8];
    uint8_t *hq[8];
    float *y1[8], *y2[8];
    size_t ny[8], nx = (size_t)T * (size_t)E;
    double macs = 0;
    for (int i = 0; i < n; i++) {
        uint8_t *h = q8_0_rows(E, outs[i]);
        memset(&ws_[i], 0, sizeof ws_[i]);
        CHECK(gpu->weight_upload(gpu, &ws_[i], CS_DTYPE_Q8_0, E, outs[i], h) == 0);
        hq[i] = h;
        macs += (double)T * (double)E * (double)outs[i];
        ws[i] = &ws_[i];
        ny[i] = (size_t)T * (size_t)outs[i];
        y1[i] = dev_new(NULL, ny[i] * 4);
        y2[i] = dev_new(NULL, ny[i] * 4);
    }
    float *hx = randv(nx, 4.0f);
    float *x = dev_new(hx, nx * 4), *xr = dev_new(hx, nx * 4), *x0 = dev_new(hx, nx * 4);
    float *y = dev_randv(nx, 2.0f), *y0 = dev_new(NULL, nx * 4), *w = dev_randv(E, 1.5f);
    float *x_out = dev_new(NULL, nx * 4), *normed = dev_new(NULL, nx * 4);
    float *normed2 = dev_new(NULL, nx * 4);
    float *sc = dev_new(NULL, (size_t)T * 4), *sc2 = dev_new(NULL, (size_t)T * 4);
    CHECK(gpu->copy(gpu, y0, y, nx * 4) == 0);
    float eps = 1e-6f;
    CHECK(gpu->matmul_add_rmsnorm(gpu, n, y1, ws, x_out, x, y, w, normed, sc, T, E, eps) == 0);
    CHECK(gpu->add_rmsnorm(gpu, xr, y, normed2, sc2, w, T, E, eps) == 0);
    CHECK(gpu->matmul_scaled(gpu, n, y2, ws, normed2, sc2, T) == 0);
    CHECK(gpu->sync(gpu) == 0);
    double d = 0;
    for (int i = 0; i < n; i++)
        d += dev_differ(y1[i], y2[i], ny[i]);
    snprintf(name, sizeof name, "fused_norm ys %s T=%d", tag, T);
    report(name, d, 0);
    if (cpu8 && macs <= 2.5e9) {
        snprintf(name, sizeof name, "fused_norm ys == cpu int8 %s T=%d", tag, T);
        report(name, cpu8_differ(E, n, outs, T, hq, hx, y, w, y1), 0);
    }
    snprintf(name, sizeof name, "fused_norm x_out %s T=%d", tag, T);
    report(name, dev_differ(x_out, xr, nx), 0);
    snprintf(name, sizeof name, "fused_norm x, y unchanged %s T=%d", tag, T);
    report(name, dev_differ(x, x0, nx) + dev_differ(y, y0, nx), 0);
    /* again, outputs poisoned: every value rewritten, the same */
    for (int i = 0; i < n; i++)
        CHECK(gpu->zero(gpu, y1[i], ny[i] * 4) == 0);
    CHECK(gpu->zero(gpu, x_out, nx * 4) == 0);
    CHECK(gpu->matmul_add_rmsnorm(gpu, n, y1, ws, x_out, x, y, w, normed, sc, T, E, eps) == 0);
    CHECK(gpu->sync(gpu) == 0);
    d = dev_differ(x_out, xr, nx);
    for (int i = 0; i < n; i++)
        d += dev_differ(y1[i], y2[i], ny[i]);
    snprintf(name, sizeof name, "fused_norm second call %s T=%d", tag, T);
    report(name, d, 0);
    for (int i = 0; i < n; i++) {
        gpu->free(gpu, y1[i]);
        gpu->free(gpu, y2[i]);
        gpu->weight_free(gpu, &ws_[i]);
        free(hq[i]);
    }
    float *bufs[] = {x, xr, x0, y, y0, w, x_out, normed, normed2, sc, sc2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    free(hx);
}

/* The conv epilogue (matmul_add_rmsnorm_conv1d, one decode token): against
 * matmul_add_rmsnorm then conv1d_silu on the same GPU, bit for bit: the
 * conv output (ys[0]), the other projections, x_out and the conv state of
 * every slot (the token's slot shifted, the others untouched), over three
 * steps so the state each step starts from is the previous one's. slot -1:
 * an invalid slot, where both leave ys[0] and the state as they were. */
static void check_conv(const char *tag, int E, int Gk, int Hv, int slot)
{
    char name[96];
    int conv_dim = 2 * Gk * 128 + Hv * 128, n_slots = 4;
    int64_t outs[4] = {conv_dim, 128 * Hv, Hv, Hv};
    struct cs_weight ws_[4];
    const struct cs_weight *ws[4];
    float *y1[4], *y2[4];
    for (int i = 0; i < 4; i++) {
        uint8_t *h = q8_0_rows(E, outs[i]);
        memset(&ws_[i], 0, sizeof ws_[i]);
        CHECK(gpu->weight_upload(gpu, &ws_[i], CS_DTYPE_Q8_0, E, outs[i], h) == 0);
        free(h);
        ws[i] = &ws_[i];
        y1[i] = dev_new(NULL, (size_t)outs[i] * 4);
        y2[i] = dev_new(NULL, (size_t)outs[i] * 4);
    }
    float *raw = dev_new(NULL, (size_t)conv_dim * 4);
    size_t conv_n = (size_t)n_slots * 3 * conv_dim;
    float *hs = randv(conv_n, 1.0f);
    float *st1 = dev_new(hs, conv_n * 4), *st2 = dev_new(hs, conv_n * 4);
    free(hs);
    float *cw = dev_randv((size_t)conv_dim * 4, 0.5f), *w = dev_randv(E, 1.5f);
    struct cs_gdn_layer g1 = {.conv = st1, .n_slots = n_slots, .conv_dim = conv_dim,
                              .conv_kernel = 4, .n_k_heads = Gk, .n_v_heads = Hv,
                              .key_dim = 128, .value_dim = 128};
    struct cs_gdn_layer g2 = g1;
    g2.conv = st2;
    double d = 0, d_state = 0, d_x = 0;
    int fused = 0;
    for (int step = 0; step < 3; step++) {
        int len[1] = {1}, start[1] = {17 + step}, sl[1] = {slot};
        struct tb t;
        tb_init(&t, 1, len, start, sl, 1);
        CHECK(gpu->step_begin(gpu, &t.b) == 0);
        float *x = dev_randv(E, 4.0f), *y = dev_randv(E, 2.0f);
        float *xo1 = dev_new(NULL, (size_t)E * 4), *xo2 = dev_new(NULL, (size_t)E * 4);
        float *normed = dev_new(NULL, (size_t)E * 4), *sc = dev_new(NULL, 4);
        for (int i = 0; i < 4; i++) {   /* the same stale contents in both */
            CHECK(gpu->zero(gpu, y1[i], (size_t)outs[i] * 4) == 0);
            CHECK(gpu->zero(gpu, y2[i], (size_t)outs[i] * 4) == 0);
        }
        int rc = gpu->matmul_add_rmsnorm_conv1d(gpu, 4, y1, ws, xo1, x, y, w, normed, E, 1e-6f,
                                                cw, &g1, &t.b);
        CHECK(rc == 0 || rc == CS_EUNSUPPORTED);
        fused += rc == 0;
        float *yr[4] = {raw, y2[1], y2[2], y2[3]};
        CHECK(gpu->matmul_add_rmsnorm(gpu, 4, yr, ws, xo2, x, y, w, normed, sc, 1, E, 1e-6f) == 0);
        CHECK(gpu->conv1d_silu(gpu, y2[0], raw, cw, &g2, &t.b) == 0);
        CHECK(gpu->sync(gpu) == 0);
        for (int i = 0; i < 4; i++)
            d += dev_differ(y1[i], y2[i], (size_t)outs[i]);
        d_x += dev_differ(xo1, xo2, (size_t)E);
        d_state += dev_differ(st1, st2, conv_n);
        float *bufs[] = {x, y, xo1, xo2, normed, sc};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            gpu->free(gpu, bufs[i]);
    }
    snprintf(name, sizeof name, "fused_conv taken %s slot %d (steps of 3)", tag, slot);
    report(name, 3 - fused, 0);
    snprintf(name, sizeof name, "fused_conv ys %s slot %d", tag, slot);
    report(name, d, 0);
    snprintf(name, sizeof name, "fused_conv x_out %s slot %d", tag, slot);
    report(name, d_x, 0);
    snprintf(name, sizeof name, "fused_conv state %s slot %d", tag, slot);
    report(name, d_state, 0);
    for (int i = 0; i < 4; i++) {
        gpu->free(gpu, y1[i]);
        gpu->free(gpu, y2[i]);
        gpu->weight_free(gpu, &ws_[i]);
    }
    float *bufs[] = {raw, st1, st2, cw, w};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
}

/* The model's shapes (tools/mkmodel.c presets): GDN qkv = 2 * 128 * Gk +
 * 128 * Hv, z = 128 * Hv, beta = alpha = Hv; attention q = 2 * 256 * Hq,
 * k = v = 256 * Hkv; FFN gate = up = n_ff. */
static void check_model(const char *tag, int E, int Gk, int Hv, int Hq, int Hkv, int64_t ff,
                        int64_t vocab)
{
    char t[64];
    int64_t gdn[4] = {2 * 128 * Gk + 128 * Hv, 128 * Hv, Hv, Hv};
    int64_t att[3] = {2 * 256 * Hq, 256 * Hkv, 256 * Hkv};
    int64_t ffn[2] = {ff, ff};
    snprintf(t, sizeof t, "%s gdn_in", tag);
    check_shape(t, E, 4, gdn, 1);
    snprintf(t, sizeof t, "%s attn_qkv", tag);
    check_shape(t, E, 3, att, 1);
    snprintf(t, sizeof t, "%s ffn_gate_up", tag);
    check_shape(t, E, 2, ffn, 1);
    snprintf(t, sizeof t, "%s ffn_gate_up", tag);
    check_shape(t, E, 2, ffn, 3);
    snprintf(t, sizeof t, "%s gdn_in", tag);   /* a prompt: fused into the quantization */
    check_shape(t, E, 4, gdn, 40);
    snprintf(t, sizeof t, "%s ffn_gate_up", tag);
    check_shape(t, E, 2, ffn, 300);
    if (vocab > 0) {
        int64_t head[1] = {vocab};
        snprintf(t, sizeof t, "%s lm_head", tag);
        check_shape(t, E, 1, head, 1);
    }
}

int main(void)
{
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    if (!gpu->matmul_add_rmsnorm) {
        report("fused_norm: op present", 1, 0);
        gpu_pair_close();
        return test_report();
    }
    struct cs_backend_cpu_options opt8 = {.n_threads = 0, .int8_matmul = true};
    if (cs_backend_cpu_create(&cpu8, &opt8) != 0)
        report("fused_norm: cpu int8 backend", 1, 0);
    check_model("9B", 4096, 16, 32, 16, 4, 12288, 248320);
    check_model("27B", 5120, 16, 48, 24, 4, 17408, 0);
    check_model("0.8B", 1024, 16, 16, 8, 2, 3584, 0);
    if (gpu->matmul_add_rmsnorm_conv1d) {
        check_conv("9B", 4096, 16, 32, 2);
        check_conv("27B", 5120, 16, 48, 1);
        check_conv("9B", 4096, 16, 32, -1);
    } else {
        report("fused_conv: op present", 1, 0);
    }
    int64_t small[2] = {256, 64};
    check_shape("long row 9216", 9216, 2, small, 1);
    check_shape("2B-like 2048", 2048, 2, small, 1);
    /* the row sums split over clusters of 3 (a short last segment: the 4B's
     * 2,560) and of 8 (the most a cluster launch takes) blocks */
    check_shape("4B-like 2560", 2560, 2, small, 1);
    check_shape("8 segments 8192", 8192, 2, small, 1);
    if (cpu8)
        cpu8->destroy(cpu8);
    gpu_pair_close();
    return test_report();
}
