/* test_cpu_threadpool.c - proves the CPU backend's thread pool
 * (kernels/cpu/threadpool.c): threadpool_for runs every item of [0, n)
 * exactly once for pools of 1 to 4 threads and any grain, with each chunk's
 * tid below the pool size; every item runs with subnormal floats flushed to
 * zero (the CUDA build's -ftz, kernels/cpu/fpmode.h), on the workers and on
 * the caller's thread alike, and the caller's own mode is restored when
 * threadpool_for returns. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../common/status.h"
#include "../../kernels/cpu/threadpool.h"
#include "../test_util.h"

struct count_job {
    int *hits;
    int bad_tid, size;
};

static void count_range(void *arg, int64_t begin, int64_t end, int tid)
{
    struct count_job *j = arg;
    if (tid < 0 || tid >= j->size)
        j->bad_tid = 1;
    for (int64_t i = begin; i < end; i++)
        j->hits[i]++;   /* each item belongs to one chunk: no race */
}

static void test_threadpool_covers_each_item_once(void)
{
    const int64_t sizes[] = {1, 2, 3, 7, 64, 1000};
    const int64_t grains[] = {1, 4, 1000};
    for (int threads = 1; threads <= 4; threads++) {
        struct threadpool *p = NULL;
        CHECK_EQ_INT(threadpool_create(&p, threads), CS_OK);
        CHECK_EQ_INT(threadpool_size(p), threads);
        for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
                int *hits = calloc((size_t)sizes[a], sizeof(int));
                struct count_job j = {.hits = hits, .size = threads};
                threadpool_for(p, sizes[a], grains[g], count_range, &j);
                int wrong = 0;
                for (int64_t i = 0; i < sizes[a]; i++)
                    wrong += hits[i] != 1;
                CHECK_EQ_INT(wrong, 0);
                CHECK_EQ_INT(j.bad_tid, 0);
                free(hits);
            }
        threadpool_destroy(p);
    }
}

/* volatile: computed at run time, under the thread's mode */
static volatile float tiny_a = 1e-30f, tiny_b = 1e-10f, subnormal = 1e-40f;

struct flush_job {
    int n_items, n_unflushed;
    int per_item[64];
};

static void flush_range(void *arg, int64_t begin, int64_t end, int tid)
{
    struct flush_job *j = arg;
    (void)tid;
    for (int64_t i = begin; i < end; i++) {
        float product = tiny_a * tiny_b;     /* 1e-40: a subnormal result (FTZ) */
        float passed = subnormal * 1.0f;     /* a subnormal input (DAZ) */
        j->per_item[i] = product != 0.0f || passed != 0.0f;
    }
}

static void test_threadpool_flushes_subnormals(void)
{
    /* the test's own thread keeps IEEE subnormals */
    CHECK(tiny_a * tiny_b != 0.0f);
    for (int threads = 1; threads <= 3; threads++) {
        struct threadpool *p = NULL;
        CHECK_EQ_INT(threadpool_create(&p, threads), CS_OK);
        for (int n = 1; n <= 64; n += 63) {   /* the caller alone, then every thread */
            struct flush_job j = {.n_items = n};
            threadpool_for(p, n, 1, flush_range, &j);
            int unflushed = 0;
            for (int i = 0; i < n; i++)
                unflushed += j.per_item[i];
            CHECK_EQ_INT(unflushed, 0);
            /* and the caller's mode is back */
            CHECK(tiny_a * tiny_b != 0.0f);
            CHECK(subnormal * 1.0f != 0.0f);
        }
        threadpool_destroy(p);
    }
}

int main(void)
{
    RUN(test_threadpool_covers_each_item_once);
    RUN(test_threadpool_flushes_subnormals);
    return test_report();
}
