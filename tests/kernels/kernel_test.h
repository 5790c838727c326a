/* kernel_test.h - helpers shared by the CPU kernel tests: a seeded random
 * source, backend creation, batch construction and bitwise comparison. */
#ifndef CS_TESTS_KERNEL_TEST_H
#define CS_TESTS_KERNEL_TEST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../../kernels/ops.h"
#include "../test_util.h"

static uint64_t kt_state = 0x243F6A8885A308D3ull;

static inline void kt_seed(uint64_t s)
{
    kt_state = s * 2654435761ull + 1;
}

/* xorshift64*: uniform in [-1, 1). */
static inline float kt_rand(void)
{
    kt_state ^= kt_state >> 12;
    kt_state ^= kt_state << 25;
    kt_state ^= kt_state >> 27;
    uint64_t z = kt_state * 2685821657736338717ull;
    return (float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static inline float *kt_randv(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        v[i] = kt_rand() * scale;
    return v;
}

static inline struct cs_backend *kt_backend(int n_threads, int int8)
{
    struct cs_backend *be = NULL;
    cs_log_set_level(CS_LOG_WARN);
    struct cs_backend_cpu_options opt = {.n_threads = n_threads, .int8_matmul = int8 != 0};
    if (cs_backend_cpu_create(&be, &opt) != 0 || !be) {
        fprintf(stderr, "cannot create the cpu backend\n");
        exit(1);
    }
    return be;
}

/* A batch of n_seqs sequences: sequence s has len[s] tokens at positions
 * start[s].., GDN slot slot[s] and pages page_table[s][0..max_pages). */
#define KT_MAXT 2048   /* tokens a kt_batch holds */
struct kt_batch {
    struct cs_batch b;
    int32_t tokens[KT_MAXT], pos[KT_MAXT], seq_of[KT_MAXT], seq_start[17], slot[16];
    int32_t pages[16 * 64];
};

static inline void kt_batch_init(struct kt_batch *kb, int n_seqs, const int *len, const int *start,
                                 const int *slot, int max_pages)
{
    int total = 0;
    for (int s = 0; s < n_seqs; s++)
        total += len[s];
    if (n_seqs > 16 || total > KT_MAXT) {
        fprintf(stderr, "kt_batch_init: %d sequences, %d tokens: over 16 / %d\n", n_seqs, total, KT_MAXT);
        exit(1);
    }
    memset(kb, 0, sizeof(*kb));
    int t = 0;
    for (int s = 0; s < n_seqs; s++) {
        kb->seq_start[s] = t;
        kb->slot[s] = slot ? slot[s] : s;
        for (int i = 0; i < len[s]; i++, t++) {
            kb->pos[t] = start[s] + i;
            kb->seq_of[t] = s;
            kb->tokens[t] = t;
        }
    }
    kb->seq_start[n_seqs] = t;
    kb->b = (struct cs_batch){.n_tokens = t, .n_seqs = n_seqs, .tokens = kb->tokens,
                              .pos = kb->pos, .seq_of = kb->seq_of, .seq_start = kb->seq_start,
                              .slot = kb->slot, .page_table = kb->pages, .max_pages = max_pages};
}

static inline int kt_same(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static inline double kt_max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d)
            m = d != d ? INFINITY : d;
    }
    return m;
}

#endif
