/* threadpool.h - a fixed pool of pthreads running parallel-for loops for the
 * CPU backend.
 *
 * threadpool_for splits [0, n) into contiguous chunks, one per thread, and
 * runs fn on each; the caller's thread runs chunk 0 and returns when all are
 * done. Which thread runs an item never changes what the item computes: ops
 * give every output element to exactly one item with a fixed arithmetic order,
 * which is what makes results identical for any thread count. Every item
 * runs with subnormal floats flushed to zero, as on the GPU (fpmode.h).
 * One caller at a time (the backend's ops are called from one thread). */
#ifndef CS_KERNELS_CPU_THREADPOOL_H
#define CS_KERNELS_CPU_THREADPOOL_H

#include <stdint.h>

struct threadpool;

/* Runs items [begin, end) on the thread with index tid (0 <= tid < size). */
typedef void (*threadpool_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* Start n_threads - 1 worker threads (n_threads >= 1). CS_OK, CS_EINVAL or
 * CS_ENOMEM (a thread could not start). */
int threadpool_create(struct threadpool **out, int n_threads);

/* Stop and join the workers and free the pool; NULL is a no-op. */
void threadpool_destroy(struct threadpool *pool);

/* Number of threads including the caller's. */
int threadpool_size(const struct threadpool *pool);

/* Run fn over [0, n) in at most size chunks of at least grain items each
 * (grain >= 1; small loops run on the caller alone). Blocks until done. */
void threadpool_for(struct threadpool *pool, int64_t n, int64_t grain, threadpool_fn fn, void *arg);

#endif
