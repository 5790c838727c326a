/* bench_ffn.c - times the decode FFN of one token at a model's shape: the
 * fused kernel (ffn_add_rmsnorm, kernels/cuda/ffn_ring.cu) against the two
 * launches it replaces (matmul_add_rmsnorm on gate/up, matmul_swiglu), over
 * 32 layers of distinct weights (so the L2 holds none of them) launched back
 * to back on one stream as a decode step launches them. Prints us per FFN and
 * its weight bytes over the time as a share of the read probe measured in
 * the same run. A benchmark, not a test: it asserts nothing about speed.
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
    struct cs_weight g, u, d;
};

/* fused != 0: ffn_add_rmsnorm; else the two ops. Returns seconds for ITERS
 * passes over the layers, or -1 when the fused op declined. */
static double run(struct layer *ls, int fused, int E, float *x, float *xo, float *y, float *w,
                  float *normed, float *g, float *u)
{
    double t0 = 0;
    for (int it = -2; it < ITERS; it++) {
        if (it == 0) {
            CHECK(gpu->sync(gpu) == 0);
            t0 = now_s();
        }
        for (int l = 0; l < LAYERS; l++) {
            if (fused) {
                int rc = gpu->ffn_add_rmsnorm(gpu, y, &ls[l].g, &ls[l].u, &ls[l].d, xo, x, y, w,
                                              1, E, 1e-6f);
                if (rc != 0)
                    return -1;
            } else {
                float *ys[2] = {g, u};
                const struct cs_weight *ws[2] = {&ls[l].g, &ls[l].u};
                CHECK(gpu->matmul_add_rmsnorm(gpu, 2, ys, ws, xo, x, y, w, normed, 1, E, 1e-6f) ==
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
    int E = 4096;
    int64_t F = 12288;
    if (argc > 1 && strcmp(argv[1], "27b") == 0) {
        E = 5120;
        F = 17408;
    }
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    struct cuda_probe pr;
    if (cuda_probe_run(&pr, 0) != 0)
        return 1;
    uint8_t *hg = q8_0_rows(E, F), *hd = q8_0_rows(F, E);
    struct layer *ls = calloc(LAYERS, sizeof *ls);
    for (int l = 0; l < LAYERS; l++) {
        CHECK(gpu->weight_upload(gpu, &ls[l].g, CS_DTYPE_Q8_0, E, F, hg) == 0);
        CHECK(gpu->weight_upload(gpu, &ls[l].u, CS_DTYPE_Q8_0, E, F, hg) == 0);
        CHECK(gpu->weight_upload(gpu, &ls[l].d, CS_DTYPE_Q8_0, F, E, hd) == 0);
    }
    free(hg);
    free(hd);
    float *hx = randv((size_t)E, 1.0f);
    float *x = dev_new((size_t)E * 4), *xo = dev_new((size_t)E * 4), *y = dev_new((size_t)E * 4);
    float *w = dev_new((size_t)E * 4), *normed = dev_new((size_t)E * 4);
    float *g = dev_new((size_t)F * 4), *u = dev_new((size_t)F * 4);
    CHECK(gpu->upload(gpu, x, hx, (size_t)E * 4) == 0);
    CHECK(gpu->upload(gpu, y, hx, (size_t)E * 4) == 0);
    CHECK(gpu->upload(gpu, w, hx, (size_t)E * 4) == 0);
    cuda_ffn_ring_enable(gpu, true);
    double bytes = (double)(2 * F * (E / 32) + E * (F / 32)) * 34.0;   /* Q8_0 weights of one FFN */
    printf("probe read %.1f GB/s; FFN %d x %lld: %.1f MB of weights\n", pr.read_gbps, E,
           (long long)F, bytes / 1e6);
    for (int round = 0; round < 2; round++) {
        for (int fused = 1; fused >= 0; fused--) {
            double s = run(ls, fused, E, x, xo, y, w, normed, g, u);
            if (s < 0) {
                printf("%s: declined\n", fused ? "fused" : "two launches");
                continue;
            }
            double us = s * 1e6 / (ITERS * LAYERS), gbps = bytes / (us * 1e3);
            printf("BENCH %-13s round %d: %7.2f us per FFN, %6.0f GB/s = %5.1f%% of read\n",
                   fused ? "fused" : "two launches", round, us, gbps, 100.0 * gbps / pr.read_gbps);
        }
    }
    for (int l = 0; l < LAYERS; l++) {
        gpu->weight_free(gpu, &ls[l].g);
        gpu->weight_free(gpu, &ls[l].u);
        gpu->weight_free(gpu, &ls[l].d);
    }
    float *bufs[] = {x, xo, y, w, normed, g, u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    free(ls);
    free(hx);
    gpu_pair_close();
    return 0;
}
