/* gpu_pair.h - what the GPU op tests share: one buffer on each backend
 * (struct pair, filled alike, compared with pair_err / pair_same /
 * pair_bytes_differ), batches of several sequences over permuted pages
 * (struct tb), random Q8_0 rows, and report(), the "RESULT <name> PASS|FAIL
 * err=... (bound ...)" line tests/gpu/run.sh gathers. Header-only: each test
 * program includes it once, after test_util.h (CHECK counts per program). */
#ifndef CS_TESTS_GPU_PAIR_H
#define CS_TESTS_GPU_PAIR_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/log.h"
#include "../../kernels/ops.h"
#include "../test_util.h"

static struct cs_backend *cpu, *gpu;   /* set by gpu_pair_open */

/* ---- random numbers, buffers on both backends ---- */

static uint64_t rs = 0x243F6A8885A308D3ull;

static inline uint64_t rnext(void)   /* xorshift64* */
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}

static inline float frand(void)   /* uniform in [-1, 1) */
{
    return (float)((double)(rnext() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static inline float *randv(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float) + 16);
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

struct pair {
    void *c, *g;
    size_t bytes;
};

static inline struct pair pair_new(const void *host, size_t bytes)
{
    struct pair p = {NULL, NULL, bytes};
    if (cpu->alloc(cpu, &p.c, bytes) || gpu->alloc(gpu, &p.g, bytes)) {
        fprintf(stderr, "alloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    if (host && (cpu->upload(cpu, p.c, host, bytes) || gpu->upload(gpu, p.g, host, bytes))) {
        fprintf(stderr, "upload failed\n");
        exit(1);
    }
    return p;
}

static inline struct pair pair_randv(size_t n, float scale)
{
    float *h = randv(n, scale);
    struct pair p = pair_new(h, n * sizeof(float));
    free(h);
    return p;
}

static inline void pair_free(struct pair *p)
{
    cpu->free(cpu, p->c);
    gpu->free(gpu, p->g);
}

/* Relative error max|gpu - cpu| / max|cpu| of n floats; NaN or an unwritten
 * value (the GPU copy is poisoned by the caller where it matters) is inf. */
static inline double pair_err(const struct pair *p, size_t n)
{
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    CHECK(cpu->download(cpu, a, p->c, n * sizeof(float)) == 0);
    CHECK(gpu->download(gpu, b, p->g, n * sizeof(float)) == 0);
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(a[i]) && fabs(a[i]) > mr)
            mr = fabs(a[i]);
        if (a[i] == b[i])   /* also equal infinities (masked logits) */
            continue;
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d || isinf(d))
            md = INFINITY;
        else if (d > md)
            md = d;
    }
    free(a);
    free(b);
    return mr > 0 ? md / mr : md;
}

static inline int pair_same(const struct pair *a, const struct pair *b, size_t bytes)
{
    char *x = malloc(bytes), *y = malloc(bytes);
    gpu->download(gpu, x, a->g, bytes);
    gpu->download(gpu, y, b->g, bytes);
    int same = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

/* Number of floats among the first n whose bits differ between the CPU and
 * GPU copies (the bitwise contract of kernels/exact_math.h). */
static inline double pair_floats_differ(const struct pair *p, size_t n)
{
    uint32_t *a = malloc(n * 4), *b = malloc(n * 4);
    CHECK(cpu->download(cpu, a, p->c, n * 4) == 0);
    CHECK(gpu->download(gpu, b, p->g, n * 4) == 0);
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += a[i] != b[i];
    free(a);
    free(b);
    return (double)d;
}

/* Number of bytes that differ between the CPU and GPU copies. */
static inline double pair_bytes_differ(const struct pair *p, size_t bytes)
{
    unsigned char *a = malloc(bytes), *b = malloc(bytes);
    CHECK(cpu->download(cpu, a, p->c, bytes) == 0);
    CHECK(gpu->download(gpu, b, p->g, bytes) == 0);
    size_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        n += a[i] != b[i];
    free(a);
    free(b);
    return (double)n;
}

static inline void report(const char *name, double err, double bound)
{
    int ok = err <= bound;
    printf("RESULT %-34s %s err=%.3g (bound %.1g)\n", name, ok ? "PASS" : "FAIL", err, bound);
    fflush(stdout);
    CHECK(ok);
}

/* ---- batches ---- */

struct tb {
    struct cs_batch b;
    int32_t tokens[1024], pos[1024], seq_of[1024], seq_start[9], slot[8], pages[8 * 128];
};

/* n_seqs sequences: sequence s has len[s] tokens from position start[s],
 * slot slot[s], pages page_of(s, i) = the permuted page table. */
static inline void tb_init(struct tb *t, int n_seqs, const int *len, const int *start, const int *slot,
                    int max_pages)
{
    memset(t, 0, sizeof(*t));
    int n = 0;
    for (int s = 0; s < n_seqs; s++) {
        t->seq_start[s] = n;
        t->slot[s] = slot[s];
        for (int i = 0; i < len[s]; i++, n++) {
            t->pos[n] = start[s] + i;
            t->seq_of[n] = s;
            t->tokens[n] = (n * 7919 + 13) % 1000;
        }
        for (int p = 0; p < max_pages; p++)   /* disjoint, scattered pages */
            t->pages[s * max_pages + p] = (p * 8 + (7 - slot[s]) + 3) % (8 * max_pages);
    }
    t->seq_start[n_seqs] = n;
    t->b = (struct cs_batch){.n_tokens = n, .n_seqs = n_seqs, .tokens = t->tokens,
                             .pos = t->pos, .seq_of = t->seq_of, .seq_start = t->seq_start,
                             .slot = t->slot, .page_table = t->pages, .max_pages = max_pages};
}

static inline void both_step(const struct cs_batch *b)
{
    CHECK(cpu->step_begin(cpu, b) == 0);
    CHECK(gpu->step_begin(gpu, b) == 0);
}

/* A KV cache layer of n_pages pages on both backends (*kvc on the CPU,
 * *kvg on the GPU, the same layout), zero-filled; the pair holds the pages. */
static inline struct pair kv_pair_new(struct cs_kv_layer *kvc, struct cs_kv_layer *kvg,
                                      uint32_t kv_type, int n_pages, int page_size, int n_kv,
                                      int head_dim)
{
    size_t esz = kv_type == CS_DTYPE_F16 ? 2 : 4;
    size_t bytes = (size_t)n_pages * 2 * page_size * n_kv * head_dim * esz;
    unsigned char *zero = calloc(1, bytes);
    struct pair p = pair_new(zero, bytes);
    free(zero);
    *kvc = (struct cs_kv_layer){.kv_type = kv_type, .n_pages = n_pages, .page_size = page_size,
                                .n_kv_heads = n_kv, .head_dim = head_dim, .pages = p.c};
    *kvg = *kvc;
    kvg->pages = p.g;
    return p;
}

/* Positions [0, len) of the sequence in slot `slot` (tb_init's pages for
 * it) filled with random K (scale 2) and V (scale 1) rows of kd floats on
 * both backends, by kv_store in chunks of 512 tokens. */
static inline void kv_fill_history(struct cs_kv_layer *kvc, struct cs_kv_layer *kvg, int slot,
                                   int len, int max_pages, int kd)
{
    for (int c0 = 0; c0 < len; c0 += 512) {
        int n = len - c0 < 512 ? len - c0 : 512, st = c0;
        struct tb t;
        tb_init(&t, 1, &n, &st, &slot, max_pages);
        both_step(&t.b);
        struct pair k = pair_randv((size_t)n * kd, 2.0f), v = pair_randv((size_t)n * kd, 1.0f);
        CHECK(cpu->kv_store(cpu, kvc, k.c, kd, v.c, kd, &t.b) == 0);
        CHECK(gpu->kv_store(gpu, kvg, k.g, kd, v.g, kd, &t.b) == 0);
        pair_free(&k), pair_free(&v);
    }
}

/* Random Q8_0 rows as a GGUF holds them (34 bytes per 32 weights); quants
 * 8 at a time (an LM head has a billion), never -128. */
static inline uint8_t *q8_0_rows(int64_t n_in, int64_t n_out)
{
    size_t row_bytes = (size_t)n_in / 32 * 34, blocks = (size_t)n_out * (size_t)n_in / 32;
    uint8_t *h = malloc(row_bytes * (size_t)n_out);
    for (size_t b = 0; b < blocks; b++) {
        uint8_t *blk = h + b * 34;
        uint16_t d = cs_float_to_half(0.01f + 0.01f * (float)(rnext() >> 40) / 16777216.0f);
        memcpy(blk, &d, 2);
        for (int i = 0; i < 32; i += 8) {
            uint64_t r = rnext();
            for (int j = 0; j < 8; j++) {
                int8_t q = (int8_t)(r >> (8 * j));
                blk[2 + i + j] = (uint8_t)(q == -128 ? -127 : q);
            }
        }
    }
    return h;
}

/* Create both backends (GPU 0 and the CPU reference). Returns 0, 77 when no
 * CUDA device is present (the test is skipped), 1 on other failures. */
static inline int gpu_pair_open(void)
{
    cs_log_set_level(CS_LOG_WARN);
    if (cs_backend_cuda_create(&gpu, 0) != 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    struct cs_backend_cpu_options opt = {.n_threads = 0, .int8_matmul = false};
    if (cs_backend_cpu_create(&cpu, &opt) != 0) {
        fprintf(stderr, "cannot create the cpu backend\n");
        return 1;
    }
    return 0;
}

static inline void gpu_pair_close(void)
{
    cpu->destroy(cpu);
    gpu->destroy(gpu);
}

#endif
