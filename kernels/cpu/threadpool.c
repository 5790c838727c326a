/* threadpool.c - the CPU backend's pthread pool (see threadpool.h).
 *
 * Workers sleep on a condition variable until the job generation changes, run
 * their chunk, and count themselves done; the caller runs chunk 0 and waits for
 * the count. Chunk i of c covers [n*i/c, n*(i+1)/c). Every chunk runs with
 * subnormals flushed (fpmode.h): the workers keep the mode for their
 * lifetime, the caller for the length of each threadpool_for. */
#include "threadpool.h"

#include <pthread.h>
#include <stdlib.h>

#include "../../common/status.h"
#include "fpmode.h"

struct threadpool_worker {
    struct threadpool *pool;
    int tid;
    pthread_t thread;
};

struct threadpool {
    int n_threads;
    struct threadpool_worker *workers;   /* [n_threads - 1], tids 1.. */
    pthread_mutex_t lock;
    pthread_cond_t wake;                 /* new job or stop */
    pthread_cond_t done;                 /* a worker finished its chunk */
    uint64_t generation;
    int stop;
    /* the current job */
    threadpool_fn fn;
    void *arg;
    int64_t n;
    int n_chunks;
    int n_pending;                       /* worker chunks not yet finished */
};

static void chunk_run(struct threadpool *p, int chunk, int tid)
{
    int64_t begin = p->n * chunk / p->n_chunks;
    int64_t end = p->n * (chunk + 1) / p->n_chunks;
    if (begin < end)
        p->fn(p->arg, begin, end, tid);
}

static void *worker_main(void *arg)
{
    struct threadpool_worker *w = arg;
    struct threadpool *p = w->pool;
    uint64_t seen = 0;
    (void)cpu_fpmode_flush_enter();   /* this thread only ever runs chunks */
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        if (w->tid >= p->n_chunks)
            continue;
        pthread_mutex_unlock(&p->lock);
        chunk_run(p, w->tid, w->tid);
        pthread_mutex_lock(&p->lock);
        if (--p->n_pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int threadpool_create(struct threadpool **out, int n_threads)
{
    if (!out || n_threads < 1)
        return CS_EINVAL;
    struct threadpool *p = calloc(1, sizeof(*p));
    if (!p)
        return CS_ENOMEM;
    p->n_threads = 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->workers = calloc((size_t)n_threads, sizeof(*p->workers));
    if (!p->workers) {
        threadpool_destroy(p);
        return CS_ENOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        struct threadpool_worker *w = &p->workers[i - 1];
        w->pool = p;
        w->tid = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            threadpool_destroy(p);
            return CS_ENOMEM;
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return CS_OK;
}

void threadpool_destroy(struct threadpool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n_threads; i++)
        pthread_join(pool->workers[i - 1].thread, NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->workers);
    free(pool);
}

int threadpool_size(const struct threadpool *pool)
{
    return pool ? pool->n_threads : 1;
}

void threadpool_for(struct threadpool *pool, int64_t n, int64_t grain, threadpool_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t want = (n + grain - 1) / grain;
    int n_chunks = pool->n_threads < want ? pool->n_threads : (int)want;
    cpu_fpmode caller_mode = cpu_fpmode_flush_enter();
    if (n_chunks <= 1) {
        fn(arg, 0, n, 0);
        cpu_fpmode_restore(caller_mode);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->n = n;
    pool->n_chunks = n_chunks;
    pool->n_pending = n_chunks - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    chunk_run(pool, 0, 0);

    pthread_mutex_lock(&pool->lock);
    while (pool->n_pending > 0)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    cpu_fpmode_restore(caller_mode);
}
