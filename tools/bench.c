/* bench.c - `cmpserve bench`: speed against the device's physical limits,
 * measured in the same run.
 *
 *   cmpserve bench --kernels [--json] [--device N]
 *   cmpserve bench --model FILE [--prompt-lens 512,2048,8192,32768] [--gen 128]
 *                  [--depths 0,4096,32768] [--chunk 2048] [--json] [--device N]
 *                  [--batch 1,4,16] [--no-cuda-graphs] [--no-cuda-pdl] [--kv-type f16|f32]
 *
 * Both modes first run the probes (kernels/cuda/probe.h: read bandwidth, DP4A,
 * FP32 FMA, HFMA2). --kernels then times the matrix kernels (kernels/cuda/
 * matmul.h) at the 9B and 27B projection shapes without a model file, with
 * random weights rotated through more memory than the L2 holds, and sums them
 * into matmul-only decode/prefill ceilings of the whole model. --model loads a
 * GGUF on one GPU and times prefill per prompt length and decode per context
 * depth and batch size (tools/bench_decode.c). Every figure is printed
 * beside its ratio to the ceiling, counted as hardware.md "Physics of a
 * token" says:
 * - decode: bytes per token (projection weights and LM head + KV read at the
 *   mean depth + GDN state read and written) / measured read bandwidth;
 * - prefill: 2 x trunk parameters int8 ops per token / measured DP4A peak.
 * Built with -DCS_BENCH_KERNELS_ONLY (and -DCS_BENCH_STANDALONE for a main)
 * it needs only the CUDA kernels: that is how it runs on a bare GPU machine. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "../common/status.h"
#include "commands.h"

#ifdef CS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "../kernels/cuda/launch.h"
#include "../kernels/cuda/matmul.h"
#include "../kernels/cuda/probe.h"
#endif
#ifndef CS_BENCH_KERNELS_ONLY
#include "bench_model.h"
#endif

#define BENCH_MAX_LIST 16

struct bench_opts {
    bool kernels;
    const char *model;
    int prompt_lens[BENCH_MAX_LIST], n_prompt_lens;
    int depths[BENCH_MAX_LIST], n_depths;
    int batches[BENCH_MAX_LIST], n_batches;
    int gen;
    int chunk;
    int device;
    bool json;
    bool no_cuda_graphs;   /* decode steps eager (compare with the default: graphs on) */
    bool no_cuda_pdl;      /* plain launches (compare with the default: PDL on sm_90+) */
    const char *kv_type;   /* "f16" (default: what serve runs on a GPU) or "f32" */
    int ktokens[BENCH_MAX_LIST], n_ktokens;   /* --kernels: tokens a call */
    int mm_kernels[4], n_mm_kernels;          /* --kernels: enum cuda_mm_kernel values timed
                                                * (at most one each of mm_kernel_names) */
};

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: cmpserve bench --kernels [--kernel-tokens 1,4,8,16,512,2048]\n"
            "                      [--mm-kernels auto,gemv,seg,gemm] [--json] [--device N]\n"
            "       cmpserve bench --model FILE [--prompt-lens 512,2048,8192,32768] [--gen 128]\n"
            "                      [--depths 0,4096,32768] [--batch 1] [--chunk 2048] [--json]\n"
            "                      [--device N]\n"
            "                      [--cuda-graphs | --no-cuda-graphs] [--cuda-pdl | --no-cuda-pdl]\n"
            "                      [--kv-type f16|f32]\n");
}

static int parse_list(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 24 || *n >= BENCH_MAX_LIST)
            return CS_EINVAL;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return CS_EINVAL;
    }
    return *n > 0 ? CS_OK : CS_EINVAL;
}

/* --mm-kernels: the names of enum cuda_mm_kernel (kernels/cuda/matmul.h), by value. */
static const char *const mm_kernel_names[] = {"auto", "gemv", "gemm", "seg"};
#define N_MM_KERNELS ((int)(sizeof mm_kernel_names / sizeof mm_kernel_names[0]))

static int parse_mm_kernels(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        int k = -1;
        for (int i = 0; i < N_MM_KERNELS; i++)
            if (strlen(mm_kernel_names[i]) == len && !strncmp(s, mm_kernel_names[i], len))
                k = i;
        if (k < 0 || *n >= N_MM_KERNELS)
            return CS_EINVAL;
        out[(*n)++] = k;
        s += len;
        if (*s == ',')
            s++;
    }
    return *n > 0 ? CS_OK : CS_EINVAL;
}

/* Decode batch sizes: 1 to BENCH_MAX_BATCH sequences. */
#define BENCH_MAX_BATCH 64
static bool batches_ok(const struct bench_opts *o)
{
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] < 1 || o->batches[i] > BENCH_MAX_BATCH)
            return false;
    return true;
}

/* --kernel-tokens: 1 to 2048 tokens a call (the kernel bench's buffers). */
static bool ktokens_ok(const struct bench_opts *o)
{
    for (int i = 0; i < o->n_ktokens; i++)
        if (o->ktokens[i] < 1 || o->ktokens[i] > 2048)
            return false;
    return true;
}

/* Returns 0, -1 after --help (usage printed), or 2 on a usage error. */
static int bench_parse(struct bench_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    parse_list("512,2048,8192,32768", o->prompt_lens, &o->n_prompt_lens);
    parse_list("0,4096,32768", o->depths, &o->n_depths);
    parse_list("1", o->batches, &o->n_batches);
    parse_list("1,4,8,16,512,2048", o->ktokens, &o->n_ktokens);
    parse_mm_kernels("auto", o->mm_kernels, &o->n_mm_kernels);
    o->gen = 128;
    o->chunk = 2048;
    o->kv_type = "f16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "--kernels"))
            o->kernels = true;
        else if (!strcmp(a, "--json"))
            o->json = true;
        else if (!strcmp(a, "--cuda-graphs") || !strcmp(a, "--cuda-graphs=true"))
            o->no_cuda_graphs = false;
        else if (!strcmp(a, "--no-cuda-graphs") || !strcmp(a, "--cuda-graphs=false"))
            o->no_cuda_graphs = true;
        else if (!strcmp(a, "--cuda-pdl") || !strcmp(a, "--cuda-pdl=true"))
            o->no_cuda_pdl = false;
        else if (!strcmp(a, "--no-cuda-pdl") || !strcmp(a, "--cuda-pdl=false"))
            o->no_cuda_pdl = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            return -1;
        } else if (v && !strcmp(a, "--model"))
            o->model = argv[++i];
        else if (v && !strcmp(a, "--prompt-lens"))
            ok = parse_list(argv[++i], o->prompt_lens, &o->n_prompt_lens) == CS_OK;
        else if (v && !strcmp(a, "--depths"))
            ok = parse_list(argv[++i], o->depths, &o->n_depths) == CS_OK;
        else if (v && !strcmp(a, "--batch"))
            ok = parse_list(argv[++i], o->batches, &o->n_batches) == CS_OK && batches_ok(o);
        else if (v && !strcmp(a, "--kernel-tokens"))
            ok = parse_list(argv[++i], o->ktokens, &o->n_ktokens) == CS_OK && ktokens_ok(o);
        else if (v && !strcmp(a, "--mm-kernels"))
            ok = parse_mm_kernels(argv[++i], o->mm_kernels, &o->n_mm_kernels) == CS_OK;
        else if (v && !strcmp(a, "--gen"))
            ok = (o->gen = atoi(argv[++i])) > 0;
        else if (v && !strcmp(a, "--chunk"))
            ok = (o->chunk = atoi(argv[++i])) > 0;
        else if (v && !strcmp(a, "--device"))
            ok = (o->device = atoi(argv[++i])) >= 0;
        else if (v && !strcmp(a, "--kv-type"))
            ok = !strcmp(o->kv_type = argv[++i], "f16") || !strcmp(o->kv_type, "f32");
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "cmpserve bench: bad or unknown option '%s'\n", a);
            bench_usage(stderr);
            return 2;
        }
    }
    if (!o->kernels && !o->model) {
        fprintf(stderr, "cmpserve bench: give --model FILE or --kernels\n");
        bench_usage(stderr);
        return 2;
    }
    return 0;
}

#ifdef CS_HAVE_CUDA

static void probe_print(const struct cuda_probe *p, bool json)
{
    if (json) {
        printf("\"device\":{\"name\":\"%s\",\"cc\":%d,\"sms\":%d,\"clock_mhz\":%.0f,"
               "\"read_gbps\":%.1f,\"dp4a_tops\":%.2f,\"fma_tflops\":%.2f,\"hfma2_tflops\":%.2f}",
               p->name, p->cc, p->sm_count, p->clock_mhz, p->read_gbps, p->dp4a_tops, p->fma_tflops,
               p->hfma2_tflops);
        return;
    }
    printf("device: %s (sm_%d, %d SMs, %.0f MHz)\n", p->name, p->cc, p->sm_count, p->clock_mhz);
    printf("probes: read %.1f GB/s (%.2f GB buffer)  dp4a %.2f TOPS  fp32 fma %.2f TFLOPS  hfma2 %.2f TFLOPS\n",
           p->read_gbps, p->read_bytes / 1e9, p->dp4a_tops, p->fma_tflops, p->hfma2_tflops);
}

/* ---- --kernels: the matrix kernels at real shapes ---- */

struct kcase {
    const char *model;     /* "9B" / "27B" */
    const char *name;
    int64_t n_in;
    int n;                 /* weights fused in the call */
    int64_t outs[4];
    int per_token;         /* calls per decoded token in the whole model */
    bool prefill;          /* part of the trunk (not the LM head) */
};

static const struct kcase kcases[] = {
    {"9B", "gdn_in", 4096, 4, {8192, 4096, 32, 32}, 24, true},
    {"9B", "ssm_out", 4096, 1, {4096}, 24, true},
    {"9B", "attn_qkv", 4096, 3, {8192, 1024, 1024}, 8, true},
    {"9B", "attn_out", 4096, 1, {4096}, 8, true},
    {"9B", "ffn_gate_up", 4096, 2, {12288, 12288}, 32, true},
    {"9B", "ffn_down", 12288, 1, {4096}, 32, true},
    {"9B", "lm_head", 4096, 1, {248320}, 1, false},
    {"27B", "gdn_in", 5120, 4, {10240, 6144, 48, 48}, 48, true},
    {"27B", "ssm_out", 6144, 1, {5120}, 48, true},
    {"27B", "attn_qkv", 5120, 3, {12288, 1024, 1024}, 16, true},
    {"27B", "attn_out", 6144, 1, {5120}, 16, true},
    {"27B", "ffn_gate_up", 5120, 2, {17408, 17408}, 64, true},
    {"27B", "ffn_down", 17408, 1, {5120}, 64, true},
    {"27B", "lm_head", 5120, 1, {248320}, 1, false},
};
#define N_KCASES ((int)(sizeof kcases / sizeof kcases[0]))

#define KCOPY_TARGET_BYTES ((size_t)512 << 20)   /* rotate weights through > 8x a 60 MB L2 */
#define KCOPIES_MAX 8

static uint64_t krng = 0x243f6a8885a308d3ull;

static uint64_t krand(void)
{
    krng ^= krng << 13;
    krng ^= krng >> 7;
    krng ^= krng << 17;
    return krng;
}

/* Random ggml Q8_0 rows: fp16 scales in [2^-10, 2^-6), random quants. */
static uint8_t *kgen_q8_0(int64_t n_in, int64_t n_out)
{
    size_t nblk = (size_t)(n_in / 32) * (size_t)n_out;
    uint8_t *w = malloc(nblk * 34);
    if (!w)
        return NULL;
    for (size_t i = 0; i < nblk; i++) {
        uint8_t *b = w + i * 34;
        for (int j = 0; j < 32; j += 8) {
            uint64_t r = krand();
            memcpy(b + 2 + j, &r, 8);
        }
        uint16_t d = (uint16_t)(0x1400 + (krand() & 0x0fff));   /* exponent 5..8 */
        memcpy(b, &d, 2);
    }
    return w;
}

struct kset {
    int copies;
    struct cs_weight w[KCOPIES_MAX][4];
    size_t bytes;          /* one copy's weight bytes */
    double params;         /* n_in * sum(outs) */
};

static int kset_create(struct kset *s, const struct kcase *c)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < c->n; i++) {
        uint8_t *host = kgen_q8_0(c->n_in, c->outs[i]);
        if (!host)
            return CS_ENOMEM;
        int rc = cuda_weight_upload(&s->w[0][i], 8 /* Q8_0 */, c->n_in, c->outs[i], host, NULL);
        free(host);
        if (rc)
            return rc;
        s->bytes += s->w[0][i].bytes;
        s->params += (double)c->n_in * (double)c->outs[i];
    }
    s->copies = (int)(KCOPY_TARGET_BYTES / s->bytes) + 1;
    if (s->copies > KCOPIES_MAX)
        s->copies = KCOPIES_MAX;
    for (int k = 1; k < s->copies; k++)
        for (int i = 0; i < c->n; i++) {
            s->w[k][i] = s->w[0][i];
            if (cudaMalloc(&s->w[k][i].data, s->w[0][i].bytes) != cudaSuccess)
                return CS_ENOMEM;
            cudaMemcpy(s->w[k][i].data, s->w[0][i].data, s->w[0][i].bytes, cudaMemcpyDeviceToDevice);
            s->w[k][i].aux = (uint8_t *)s->w[k][i].data +
                             ((uint8_t *)s->w[0][i].aux - (uint8_t *)s->w[0][i].data);
        }
    return CS_OK;
}

static void kset_destroy(struct kset *s, const struct kcase *c)
{
    for (int k = 0; k < KCOPIES_MAX; k++)
        for (int i = 0; i < c->n; i++)
            if (s->w[k][i].data)
                cudaFree(s->w[k][i].data);
    memset(s, 0, sizeof *s);
}

/* Median seconds per call of cuda_matmul_with(kernel) over the rotated copies. */
static int ktime(double *sec, struct kset *s, const struct kcase *c, int nt, float *x, float *y,
                 void *scratch, size_t scratch_bytes, enum cuda_mm_kernel kernel)
{
    float *ys[4];
    size_t off = 0;
    for (int i = 0; i < c->n; i++) {
        ys[i] = y + off;
        off += (size_t)c->outs[i] * nt;
    }
    const struct cs_weight *ws[KCOPIES_MAX][4];
    for (int k = 0; k < s->copies; k++)
        for (int i = 0; i < c->n; i++)
            ws[k][i] = &s->w[k][i];
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int rc = cuda_matmul_with(c->n, ys, ws[0], x, nt, scratch, scratch_bytes, NULL, kernel);
    float ms = 0;
    cudaEventRecord(e0, NULL);
    rc = rc ? rc : cuda_matmul_with(c->n, ys, ws[1 % s->copies], x, nt, scratch, scratch_bytes, NULL,
                                    kernel);
    cudaEventRecord(e1, NULL);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    int reps = ms > 0 ? (int)(20.0 / ms) : 100;
    reps = reps < 4 ? 4 : (reps > 400 ? 400 : reps);
    double t[3];
    for (int trial = 0; trial < 3 && rc == CS_OK; trial++) {
        cudaEventRecord(e0, NULL);
        for (int r = 0; r < reps && rc == CS_OK; r++)
            rc = cuda_matmul_with(c->n, ys, ws[r % s->copies], x, nt, scratch, scratch_bytes, NULL,
                                  kernel);
        cudaEventRecord(e1, NULL);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        t[trial] = ms * 1e-3 / reps;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc == CS_OK && cudaDeviceSynchronize() != cudaSuccess)
        rc = CS_ECUDA;
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    *sec = t[2] < lo ? lo : (t[2] > hi ? hi : t[2]);
    return rc;
}

struct ksum {
    double dec_time, dec_bytes, pre_time, pre_ops;
};

static int bench_kernels(const struct bench_opts *o, const struct cuda_probe *p)
{
    cuda_pdl_set_enabled(!o->no_cuda_pdl);
    int64_t max_in = 0, max_out_tok = 0;
    for (int c = 0; c < N_KCASES; c++) {
        int64_t outs = 0;
        for (int i = 0; i < kcases[c].n; i++)
            outs += kcases[c].outs[i];
        if (kcases[c].n_in > max_in)
            max_in = kcases[c].n_in;
        int64_t nt = kcases[c].prefill ? 2048 : 16;
        if (outs * nt > max_out_tok)
            max_out_tok = outs * nt;
    }
    size_t scratch_bytes = cuda_matmul_scratch_bytes(max_in, 2048);
    float *x = NULL, *y = NULL;
    void *scratch = NULL;
    if (cudaMalloc((void **)&x, (size_t)max_in * 2048 * 4) != cudaSuccess ||
        cudaMalloc((void **)&y, (size_t)max_out_tok * 4) != cudaSuccess ||
        cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) {
        fprintf(stderr, "cmpserve bench: no device memory for the kernel bench\n");
        return 1;
    }
    {   /* x: random in [-1, 1) written from the host once */
        size_t n = (size_t)max_in * 2048;
        float *h = malloc(n * 4);
        for (size_t i = 0; h && i < n; i++)
            h[i] = (float)((krand() >> 40) / 8388608.0 - 1.0);
        if (h)
            cudaMemcpy(x, h, n * 4, cudaMemcpyHostToDevice);
        free(h);
    }
    struct ksum sum[2] = {{0}};
    /* a decode step's matrix calls per model, tokens and kernel, and with the
     * fastest kernel of each call (what a per-shape choice would reach) */
    double step[2][BENCH_MAX_LIST][5] = {{{0}}};
    if (o->json)
        printf(",\"kernels\":[");
    else
        printf("\n%-4s %-12s %6s %-6s %10s %10s %9s %8s\n", "", "case", "tokens", "kernel", "us/call",
               "GB/s|TOPS", "ratio", "copies");
    int first = 1, rc = CS_OK;
    for (int c = 0; c < N_KCASES && rc == CS_OK; c++) {
        const struct kcase *kc = &kcases[c];
        struct kset s;
        if ((rc = kset_create(&s, kc)) != CS_OK) {
            kset_destroy(&s, kc);
            break;
        }
        int mi = strcmp(kc->model, "9B") == 0 ? 0 : 1;
        for (int k = 0; k < o->n_ktokens && rc == CS_OK; k++) {
            int nt = o->ktokens[k];
            if (!kc->prefill && nt > 16)
                continue;
            double best = 0;
            for (int m = 0; m < o->n_mm_kernels && rc == CS_OK; m++) {
                enum cuda_mm_kernel kern = (enum cuda_mm_kernel)o->mm_kernels[m];
                double sec = 0;
                if ((rc = ktime(&sec, &s, kc, nt, x, y, scratch, scratch_bytes, kern)) != CS_OK)
                    break;
                step[mi][k][m] += kc->per_token * sec;
                best = m == 0 || sec < best ? sec : best;
                if (m == o->n_mm_kernels - 1)
                    step[mi][k][4] += kc->per_token * best;
                bool mem = nt <= 16;
                double rate = mem ? s.bytes / sec / 1e9 : 2.0 * s.params * nt / sec / 1e12;
                double ratio = mem ? rate / p->read_gbps : rate / p->dp4a_tops;
                if (nt == 1 && kern == CUDA_MM_AUTO) {
                    sum[mi].dec_time += kc->per_token * sec;
                    sum[mi].dec_bytes += kc->per_token * (double)s.bytes;
                }
                if (nt == 2048 && kern == CUDA_MM_AUTO) {
                    sum[mi].pre_time += kc->per_token * sec;
                    sum[mi].pre_ops += kc->per_token * 2.0 * s.params * nt;
                }
                if (o->json)
                    printf("%s{\"model\":\"%s\",\"case\":\"%s\",\"tokens\":%d,\"kernel\":\"%s\","
                           "\"us\":%.2f,\"%s\":%.2f,\"ratio\":%.4f}",
                           first ? "" : ",", kc->model, kc->name, nt, mm_kernel_names[kern], sec * 1e6,
                           mem ? "gbps" : "tops", rate, ratio);
                else
                    printf("%-4s %-12s %6d %-6s %10.2f %10.1f %8.1f%% %8d\n", kc->model, kc->name, nt,
                           mm_kernel_names[kern], sec * 1e6, rate, 100 * ratio, s.copies);
                first = 0;
            }
        }
        kset_destroy(&s, kc);
    }
    for (int mi = 0; mi < 2 && rc == CS_OK && !o->json; mi++)
        for (int k = 0; k < o->n_ktokens; k++) {
            if (o->ktokens[k] > 64 || step[mi][k][0] <= 0)
                continue;
            printf("%s matrix calls of a decode step, %2d tokens:", mi ? "27B" : "9B", o->ktokens[k]);
            for (int m = 0; m < o->n_mm_kernels; m++)
                printf(" %s %.3f ms", mm_kernel_names[o->mm_kernels[m]], step[mi][k][m] * 1e3);
            if (o->n_mm_kernels > 1)
                printf(", fastest each call %.3f ms", step[mi][k][4] * 1e3);
            printf("\n");
        }
    if (o->json)
        printf("],\"summary\":[");
    for (int mi = 0, sfirst = 1; mi < 2 && rc == CS_OK; mi++) {
        if (sum[mi].dec_time <= 0 || sum[mi].pre_time <= 0)
            continue;   /* --kernel-tokens without 1 or 2048 */
        const char *sep = sfirst ? "" : ",";
        sfirst = 0;
        const char *name = mi ? "27B" : "9B";
        double dec_tps = 1.0 / sum[mi].dec_time, dec_ratio = sum[mi].dec_bytes / sum[mi].dec_time / 1e9 / p->read_gbps;
        double pre_tps = 2048.0 / sum[mi].pre_time, pre_ratio = sum[mi].pre_ops / sum[mi].pre_time / 1e12 / p->dp4a_tops;
        if (o->json)
            printf("%s{\"model\":\"%s\",\"matmul_decode_tok_s\":%.1f,\"decode_ratio\":%.4f,"
                   "\"matmul_prefill_tok_s\":%.1f,\"prefill_ratio\":%.4f}",
                   sep, name, dec_tps, dec_ratio, pre_tps, pre_ratio);
        else
            printf("%s matmul only: decode %.1f tok/s (%.2f GB/token, %.1f%% of read bandwidth); "
                   "prefill@2048 %.0f tok/s (%.1f%% of DP4A peak)\n",
                   name, dec_tps, sum[mi].dec_bytes / 1e9, 100 * dec_ratio, pre_tps, 100 * pre_ratio);
    }
    if (o->json)
        printf("]");
    cudaFree(x);
    cudaFree(y);
    cudaFree(scratch);
    if (rc != CS_OK)
        fprintf(stderr, "cmpserve bench: kernel bench failed: %s\n", cs_strerror(rc));
    return rc == CS_OK ? 0 : 1;
}
#endif /* CS_HAVE_CUDA */

#if defined(CS_HAVE_CUDA) && !defined(CS_BENCH_KERNELS_ONLY)
/* ---- --model: whole-model prefill and decode ---- */

static int bench_model(const struct bench_opts *o, const struct cuda_probe *p)
{
    int max_ctx = 1;
    for (int i = 0; i < o->n_prompt_lens; i++)
        max_ctx = o->prompt_lens[i] > max_ctx ? o->prompt_lens[i] : max_ctx;
    for (int i = 0; i < o->n_depths; i++)
        max_ctx = o->depths[i] + 1 + o->gen > max_ctx ? o->depths[i] + 1 + o->gen : max_ctx;
    int max_b = 1;
    for (int i = 0; i < o->n_batches; i++)
        max_b = o->batches[i] > max_b ? o->batches[i] : max_b;
    char dev[16];
    snprintf(dev, sizeof dev, "%d", o->device);
    struct cli_session_options so = {.model_path = o->model, .device = dev,
                                     .max_tokens = o->chunk > max_b ? o->chunk : max_b,
                                     .max_ctx = max_ctx + 1, .n_seqs = max_b,
                                     .n_spare_slots = 1, .no_cuda_graphs = o->no_cuda_graphs,
                                     .no_cuda_pdl = o->no_cuda_pdl,
                                     .kv_type = o->kv_type};
    struct cli_session s;
    struct cs_error err = {0};
    int rc = cli_session_open(&s, &so, &err);
    if (rc) {
        fprintf(stderr, "cmpserve bench: %s\n", err.msg[0] ? err.msg : cs_strerror(rc));
        return 1;
    }
    struct mcount mc;
    bench_model_count(&mc, s.m, s.kv_type == CS_DTYPE_F16 ? 2.0 : 4.0);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)max_ctx);
    for (int i = 0; tokens && i < max_ctx; i++)
        tokens[i] = (int32_t)(krand() % (uint64_t)(s.m->hp.n_vocab < 150000 ? s.m->hp.n_vocab : 150000));
    int32_t next = 0;
    rc = tokens ? state_slot_reset(s.st, 0) : CS_ENOMEM;
    if (rc == CS_OK)   /* warm-up */
        rc = bench_model_run(&s, tokens, 64 < max_ctx ? 64 : max_ctx, 0, o->chunk, &next);
    if (o->json)
        printf(",\"model\":{\"file\":\"%s\",\"trunk_params\":%.0f,\"prefill\":[", o->model, mc.trunk_params);
    else
        printf("\nmodel %s: trunk %.2f B params, %.2f GB read per decoded token (+KV, GDN state), "
               "%s KV\n", o->model, mc.trunk_params / 1e9, mc.read_bytes / 1e9,
               s.kv_type == CS_DTYPE_F16 ? "fp16" : "fp32");
    for (int i = 0; i < o->n_prompt_lens && rc == CS_OK; i++) {
        int n = o->prompt_lens[i];
        if ((rc = state_slot_reset(s.st, 0)) != CS_OK)
            break;
        double t0 = cli_now_s();
        if ((rc = bench_model_run(&s, tokens, n, 0, o->chunk, &next)) != CS_OK)
            break;
        double tps = n / (cli_now_s() - t0);
        double ratio = tps * 2.0 * mc.trunk_params / (p->dp4a_tops * 1e12);
        if (o->json)
            printf("%s{\"prompt\":%d,\"tok_s\":%.1f,\"ratio\":%.4f}", i ? "," : "", n, tps, ratio);
        else
            printf("prefill %6d tokens: %9.1f tok/s  %5.1f%% of DP4A peak\n", n, tps, 100 * ratio);
    }
    if (o->json)
        printf("],\"decode\":[");
    bool same = true;
    if (rc == CS_OK) {
        struct bench_decode_opts dop = {.depths = o->depths, .n_depths = o->n_depths,
                                        .batches = o->batches, .n_batches = o->n_batches,
                                        .gen = o->gen, .chunk = o->chunk, .json = o->json};
        rc = bench_decode(&s, &dop, &mc, p->read_gbps, tokens, &same);
    }
    if (o->json)
        printf("]}");
    free(tokens);
    cli_session_close(&s);
    if (rc) {
        fprintf(stderr, "cmpserve bench: model run failed: %s\n", cs_strerror(rc));
        return 1;
    }
    if (!same) {   /* after the figures: they are still worth reading */
        fprintf(stderr, "cmpserve bench: batched decode changed tokens (kernels/numerics.h "
                        "promises the same bits at any batch size)\n");
        return 1;
    }
    return 0;
}
#endif

int bench_main(int argc, char **argv)
{
    struct bench_opts o;
    int rc = bench_parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
#ifndef CS_HAVE_CUDA
    fprintf(stderr, "cmpserve bench: this build has no CUDA backend\n");
    return 1;
#else
    if (cudaSetDevice(o.device) != cudaSuccess) {
        fprintf(stderr, "cmpserve bench: no CUDA device %d\n", o.device);
        return 1;
    }
    struct cuda_probe p;
    if (cuda_probe_run(&p, 0) != CS_OK) {
        fprintf(stderr, "cmpserve bench: the device probes failed\n");
        return 1;
    }
    if (o.json)
        printf("{");
    probe_print(&p, o.json);
    int status = 0;
    if (o.kernels)
        status = bench_kernels(&o, &p);
#ifndef CS_BENCH_KERNELS_ONLY
    if (status == 0 && o.model)
        status = bench_model(&o, &p);
#else
    if (o.model)
        fprintf(stderr, "cmpserve bench: this build times kernels only\n");
#endif
    if (o.json)
        printf("}\n");
    fflush(stdout);
    return status;
#endif
}

#ifdef CS_BENCH_STANDALONE
int main(int argc, char **argv)
{
    return bench_main(argc, argv);
}
#endif
