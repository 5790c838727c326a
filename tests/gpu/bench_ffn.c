/* bench_ffn.c - times the decode FFN of one token at a model's shape: the
 * fused kernel (ffn_add_rmsnorm, kernels/cuda/ffn_ring.cu) against the two
 * launches it replaces (matmul_add_rmsnorm on gate/up, matmul_swiglu), over
 * 32 layers of distinct weights (so the L2 holds none of them) launched back
 * to back on one stream as a decode step launches them. Prints us per FFN and
 * its weight bytes over the time as a share of the read probe measured in
 * the same run. The same for the GDN layer's output projection (its gated
 * norm in the prologue) and the FFN: proj_ffn_add_rmsnorm against the three
 * launches. A benchmark, not a test: it asserts nothing about speed.
 * usage: bench_gpu_ffn [9b|27b] (default 9b) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/log.h"
#include "../../kernels/cuda/ffn_ring.h"
#include "../../kernels/cuda/probe.h"
#include "../../kernels/ops.h"
#include "../test_util.h"
#include "gpu_pair.h"

#define LAYERS 32
#define ITERS 10

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *dev_new(size_t bytes)
{
    void *p = NULL;
    if (gpu->alloc(gpu, &p, bytes)) {
        fprintf(stderr, "alloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

struct layer {
    struct cs_weight o, g, u, d;
};

enum { TWO_LAUNCHES, FUSED, PROJ_FUSED, PROJ_THREE_LAUNCHES, MODES };
static const char *mode_name[MODES] = {"two launches", "fused", "proj fused", "proj 3 launches"};

/* The GDN output projection's input: 32 (9B) or 48 (27B) heads of 128. */
struct proj_in {
    float *a, *z, *nw;
    int heads;
};

/* One pass of mode over the layers. Returns seconds for ITERS passes, or -1
 * when a fused op declined. */
static double run(struct layer *ls, int mode, int E, float *x, float *xo, float *y, float *w,
                  float *normed, float *g, float *u, const struct proj_in *pi)
{
    double t0 = 0;
    for (int it = -2; it < ITERS; it++) {
        if (it == 0) {
            CHECK(gpu->sync(gpu) == 0);
            t0 = now_s();
        }
        for (int l = 0; l < LAYERS; l++) {
            struct cs_out_proj p = {CS_OUT_PROJ_GATED_RMSNORM, &ls[l].o, pi->a, pi->z, pi->nw,
                                    0, 0, pi->heads, 128, 1e-6f};
            if (mode == PROJ_FUSED) {
                if (gpu->proj_ffn_add_rmsnorm(gpu, y, &p, &ls[l].g, &ls[l].u, &ls[l].d, xo, x, w,
                                              1, E, 1e-6f) != 0)
                    return -1;
                continue;
            }
            if (mode == PROJ_THREE_LAUNCHES)
                CHECK(gpu->matmul_gated_rmsnorm(gpu, y, &ls[l].o, pi->a, pi->z, pi->nw, pi->heads,
                                                128, 1e-6f, 1) == 0);
            if (mode == FUSED) {
                int rc = gpu->ffn_add_rmsnorm(gpu, y, &ls[l].g, &ls[l].u, &ls[l].d, xo, x, y, w,
                                              1, E, 1e-6f);
                if (rc != 0)
                    return -1;
            } else {
                float *ys[2] = {g, u};
                const struct cs_weight *ws[2] = {&ls[l].g, &ls[l].u};
                CHECK(gpu->matmul_add_rmsnorm(gpu, 2, ys, ws, xo, x, y, w, normed, normed + E, 1, E, 1e-6f) ==
                      0);
                CHECK(gpu->matmul_swiglu(gpu, y, &ls[l].d, g, u, 1) == 0);
            }
        }
    }
    CHECK(gpu->sync(gpu) == 0);
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    int E = 4096, heads = 32;
    int64_t F = 12288;
    if (argc > 1 && strcmp(argv[1], "27b") == 0) {
        E = 5120;
        F = 17408;
        heads = 48;
    }
    int N = heads * 128;
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    struct cuda_probe pr;
    if (cuda_probe_run(&pr, 0) != 0)
        return 1;
    uint8_t *hg = q8_0_rows(E, F), *hd = q8_0_rows(F, E), *ho = q8_0_rows(N, E);
    struct layer *ls = calloc(LAYERS, sizeof *ls);
    for (int l = 0; l < LAYERS; l++) {
        CHECK(gpu->weight_upload(gpu, &ls[l].g, CS_DTYPE_Q8_0, E, F, hg) == 0);
        CHECK(gpu->weight_upload(gpu, &ls[l].u, CS_DTYPE_Q8_0, E, F, hg) == 0);
        CHECK(gpu->weight_upload(gpu, &ls[l].d, CS_DTYPE_Q8_0, F, E, hd) == 0);
        CHECK(gpu->weight_upload(gpu, &ls[l].o, CS_DTYPE_Q8_0, N, E, ho) == 0);
    }
    free(ho);
    free(hg);
    free(hd);
    float *hx = randv((size_t)E, 1.0f);
    float *x = dev_new((size_t)E * 4), *xo = dev_new((size_t)E * 4), *y = dev_new((size_t)E * 4);
    float *w = dev_new((size_t)E * 4), *normed = dev_new((size_t)(E + 1) * 4);   /* + the norm scale */
    float *g = dev_new((size_t)F * 4), *u = dev_new((size_t)F * 4);
    CHECK(gpu->upload(gpu, x, hx, (size_t)E * 4) == 0);
    CHECK(gpu->upload(gpu, y, hx, (size_t)E * 4) == 0);
    CHECK(gpu->upload(gpu, w, hx, (size_t)E * 4) == 0);
    struct proj_in pi = {dev_new((size_t)N * 4), dev_new((size_t)N * 4), dev_new(128 * 4), heads};
    float *hn = randv((size_t)N, 1.0f);
    CHECK(gpu->upload(gpu, pi.a, hn, (size_t)N * 4) == 0);
    CHECK(gpu->upload(gpu, pi.z, hn, (size_t)N * 4) == 0);
    CHECK(gpu->upload(gpu, pi.nw, hn, 128 * 4) == 0);
    free(hn);
    cuda_ffn_ring_enable(gpu, true);
    double bytes = (double)(2 * F * (E / 32) + E * (F / 32)) * 34.0;   /* Q8_0 weights of one FFN */
    double pbytes = (double)E * (N / 32) * 34.0;                        /* and of the projection */
    printf("probe read %.1f GB/s; FFN %d x %lld: %.1f MB of weights; projection %d x %d: %.1f MB\n",
           pr.read_gbps, E, (long long)F, bytes / 1e6, N, E, pbytes / 1e6);
    for (int round = 0; round < 2; round++) {
        for (int mode = 0; mode < MODES; mode++) {
            /* the projection's input is scratch to matmul_gated_rmsnorm: the same values each
             * pass are not needed for timing */
            double s = run(ls, mode, E, x, xo, y, w, normed, g, u, &pi);
            if (s < 0) {
                printf("%s: declined\n", mode_name[mode]);
                continue;
            }
            double b = mode >= PROJ_FUSED ? bytes + pbytes : bytes;
            double us = s * 1e6 / (ITERS * LAYERS), gbps = b / (us * 1e3);
            printf("BENCH %-15s round %d: %7.2f us per layer, %6.0f GB/s = %5.1f%% of read\n",
                   mode_name[mode], round, us, gbps, 100.0 * gbps / pr.read_gbps);
        }
    }
    for (int l = 0; l < LAYERS; l++) {
        gpu->weight_free(gpu, &ls[l].g);
        gpu->weight_free(gpu, &ls[l].u);
        gpu->weight_free(gpu, &ls[l].d);
        gpu->weight_free(gpu, &ls[l].o);
    }
    float *bufs[] = {x, xo, y, w, normed, g, u, pi.a, pi.z, pi.nw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    free(ls);
    free(hx);
    gpu_pair_close();
    return 0;
}
