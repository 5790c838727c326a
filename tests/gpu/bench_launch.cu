/* bench_launch.cu - measures what docs/PERF.md reports for the non-matrix CUDA
 * ops: the cost of one kernel launch (host submission and back-to-back GPU
 * time, plain stream vs CUDA graph replay) for a decode step's worth of
 * launches, and the time of the GDN and attention kernels at the 9B shape
 * (decode and a 2048-token prefill). Prints one "BENCH name value unit" line
 * per figure. Not a ctest test (needs a GPU); exits 77 without a device. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../../kernels/ops.h"

#define DECODE_LAUNCHES 545   /* 9B decode step, counted from worker/model.c (docs/PERF.md) */

static __global__ void k_tiny(float *x)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        x[0] += 1.0f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

static void bench_launches(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *x;
    cudaMalloc(&x, 4);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 1000; i++)
        k_tiny<<<1, 32, 0, s>>>(x);
    cudaStreamSynchronize(s);
    const int reps = 20;
    double host = 0;
    cudaEventRecord(e0, s);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < DECODE_LAUNCHES; i++)
            k_tiny<<<1, 32, 0, s>>>(x);
        host += now_s() - t0;
    }
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    double n = (double)reps * DECODE_LAUNCHES;
    printf("BENCH launch_host_submit %.2f us/launch\n", host / n * 1e6);
    printf("BENCH launch_stream_gpu %.2f us/launch\n", elapsed_ms(e0, e1) * 1e3 / n);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < DECODE_LAUNCHES; i++)
        k_tiny<<<1, 32, 0, s>>>(x);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    cudaGraphLaunch(ge, s);
    cudaStreamSynchronize(s);
    cudaEventRecord(e0, s);
    for (int r = 0; r < reps; r++)
        cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    printf("BENCH launch_graph_gpu %.2f us/launch\n", elapsed_ms(e0, e1) * 1e3 / n);
    printf("BENCH decode_step_launches %d launches\n", DECODE_LAUNCHES);
    printf("BENCH decode_step_host_submit %.3f ms/step\n", 1e3 * host / reps);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaFree(x);
    cudaStreamDestroy(s);
}

static float *dev_rand(struct cs_backend *be, size_t n, float scale)
{
    float *h = (float *)malloc(n * 4), *d = NULL;
    unsigned u = 12345;
    for (size_t i = 0; i < n; i++) {
        u = u * 1664525u + 1013904223u;
        h[i] = ((float)(u >> 8) / 16777216.0f * 2 - 1) * scale;
    }
    be->alloc(be, (void **)&d, n * 4);
    be->upload(be, d, h, n * 4);
    free(h);
    return d;
}

/* Time fn over reps runs with the backend's sync around (ms per run). */
#define TIME_MS(be, reps, stmt)                                                   \
    ({                                                                            \
        stmt;                                                                     \
        be->sync(be);                                                             \
        double _t0 = now_s();                                                     \
        for (int _r = 0; _r < (reps); _r++) {                                     \
            stmt;                                                                 \
        }                                                                         \
        be->sync(be);                                                             \
        (now_s() - _t0) * 1e3 / (reps);                                           \
    })

static void bench_gdn(struct cs_backend *be)
{
    int Gk = 16, Hv = 32, conv_dim = 2 * Gk * 128 + Hv * 128;
    struct cs_gdn_layer st = {.n_slots = 1, .conv_dim = conv_dim, .conv_kernel = 4,
                              .n_k_heads = Gk, .n_v_heads = Hv, .key_dim = 128, .value_dim = 128};
    st.conv = dev_rand(be, 3 * conv_dim, 1.0f);
    st.rec = dev_rand(be, (size_t)Hv * 128 * 128, 0.01f);
    float *a = dev_rand(be, Hv, 1.0f), *dt = dev_rand(be, Hv, 1.0f);
    float *cw = dev_rand(be, (size_t)conv_dim * 4, 0.5f);
    for (int T = 1; T <= 2048; T *= 2048) {
        int32_t *pos = (int32_t *)calloc(T, 4), *seq_of = (int32_t *)calloc(T, 4);
        int32_t ss[2] = {0, T}, slot[1] = {0};
        for (int i = 0; i < T; i++)
            pos[i] = i;
        struct cs_batch b = {.n_tokens = T, .n_seqs = 1, .tokens = pos, .pos = pos,
                             .seq_of = seq_of, .seq_start = ss, .slot = slot,
                             .page_table = NULL, .max_pages = 0};
        be->step_begin(be, &b);
        float *y = dev_rand(be, (size_t)T * conv_dim, 1.0f), *o = dev_rand(be, (size_t)T * Hv * 128, 1.0f);
        float *br = dev_rand(be, (size_t)T * Hv, 1.0f), *ar = dev_rand(be, (size_t)T * Hv, 1.0f);
        double ms = TIME_MS(be, 20, be->gdn(be, o, y, br, ar, a, dt, 1e-6f, &st, &b));
        double cms = TIME_MS(be, 20, be->conv1d_silu(be, y, y, cw, &st, &b));
        printf("BENCH gdn_9B_T%d %.4f ms/layer (state %.1f MB read+write: %.0f GB/s)\n", T, ms,
               2.0 * Hv * 128 * 128 * 4 / 1e6, 2.0 * Hv * 128 * 128 * 4 / (ms * 1e-3) / 1e9);
        printf("BENCH conv1d_9B_T%d %.4f ms/layer\n", T, cms);
        be->free(be, y), be->free(be, o), be->free(be, br), be->free(be, ar);
        free(pos), free(seq_of);
    }
}

/* Attention of one 9B layer: decode at 4K and 32K of context, prefill of a
 * 2,048-token prompt, and prefill of the last 2,048-token chunk of a 32K
 * prompt (the step that dominates a long prompt's attention: 16 KV splits
 * and the combine). Ops count 2 per multiply-add of both products over the
 * causal positions, whatever the arithmetic (fp32 or int8 DP4A). */
static void bench_attention(struct cs_backend *be)
{
    int Hq = 16, Hkv = 4, D = 256, PS = 256;
    struct { int ctx, T; } cases[4] = {{4096, 1}, {32768, 1}, {2048, 2048}, {32768, 2048}};
    for (int c = 0; c < 4; c++) {
        int L = cases[c].ctx, T = cases[c].T, prefill = T > 1;
        int np = (L + PS - 1) / PS;
        struct cs_kv_layer kv = {.kv_type = CS_DTYPE_F16, .n_pages = np, .page_size = PS,
                                 .n_kv_heads = Hkv, .head_dim = D};
        size_t kv_bytes = (size_t)np * 2 * PS * Hkv * D * 2;
        be->alloc(be, &kv.pages, kv_bytes);
        int32_t *pos = (int32_t *)calloc(T, 4), *seq_of = (int32_t *)calloc(T, 4);
        int32_t *pt = (int32_t *)calloc(np, 4), ss[2] = {0, T}, slot[1] = {0};
        double causal = 0;   /* sum over the queries of the positions they see */
        for (int i = 0; i < T; i++) {
            pos[i] = L - T + i;
            causal += pos[i] + 1;
        }
        for (int i = 0; i < np; i++)
            pt[i] = i;
        struct cs_batch b = {.n_tokens = T, .n_seqs = 1, .tokens = pos, .pos = pos,
                             .seq_of = seq_of, .seq_start = ss, .slot = slot,
                             .page_table = pt, .max_pages = np};
        be->step_begin(be, &b);
        float *q = dev_rand(be, (size_t)T * Hq * 2 * D, 1.0f), *o = dev_rand(be, (size_t)T * Hq * D, 1.0f);
        double ms = TIME_MS(be, 10, be->attention(be, o, q, Hq * 2 * D, 2 * D, Hq, &kv, 1.0f / 16, &b));
        if (prefill)
            printf("BENCH attn_prefill_9B_T%d_ctx%d %.3f ms/layer (%.1f Tops)\n", T, L, ms,
                   2.0 * 2 * Hq * D * causal / (ms * 1e-3) / 1e12);
        else
            printf("BENCH attn_decode_9B_ctx%d %.4f ms/layer (%.0f GB/s of KV)\n", L, ms,
                   (double)L * Hkv * D * 2 * 2 / (ms * 1e-3) / 1e9);
        be->free(be, q), be->free(be, o), be->free(be, kv.pages);
        free(pos), free(seq_of), free(pt);
    }
}

int main(void)
{
    cs_log_set_level(CS_LOG_WARN);
    struct cs_backend *be = NULL;
    if (cs_backend_cuda_create(&be, 0) != 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    bench_launches();
    bench_gdn(be);
    bench_attention(be);
    be->destroy(be);
    return 0;
}
