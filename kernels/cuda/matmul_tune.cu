/* matmul_tune.cu - the per-shape GEMV/GEMM table of matmul_tune.h and the
 * timing that fills it. Host code only. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "../../common/log.h"
#include "../../common/status.h"
#include "matmul_tune.h"

#define MM_TUNE_SLOTS 2048   /* a 27B stage has ~7 call shapes x 48 token counts */
#define MM_TUNE_REPS 3

struct mm_tune_entry {
    int64_t n_in, rows;
    int device, n_tokens;   /* n_tokens 0: a free slot */
    int choice;
};

static struct mm_tune_entry g_table[MM_TUNE_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot_of(int device, int64_t n_in, int64_t rows, int n_tokens)
{
    uint64_t h = (uint64_t)n_in * 0x9E3779B97F4A7C15ull ^ (uint64_t)rows * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)(n_tokens * 131 + device) * 0x165667B19E3779F9ull;
    return (unsigned)(h >> 40) % MM_TUNE_SLOTS;
}

static bool entry_is(const struct mm_tune_entry *e, int device, int64_t n_in, int64_t rows,
                     int n_tokens)
{
    return e->n_tokens == n_tokens && e->device == device && e->n_in == n_in && e->rows == rows;
}

static int current_device(void)
{
    int dev = 0;
    cudaGetDevice(&dev);
    return dev;
}

enum mm_tune_choice mm_tune_lookup(int64_t n_in, int64_t rows, int n_tokens)
{
    int dev = current_device();
    enum mm_tune_choice c = MM_TUNE_UNKNOWN;
    pthread_mutex_lock(&g_lock);
    for (unsigned i = 0, s = slot_of(dev, n_in, rows, n_tokens); i < MM_TUNE_SLOTS; i++) {
        const struct mm_tune_entry *e = &g_table[(s + i) % MM_TUNE_SLOTS];
        if (e->n_tokens == 0)
            break;
        if (entry_is(e, dev, n_in, rows, n_tokens)) {
            c = (enum mm_tune_choice)e->choice;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return c;
}

void mm_tune_record(int64_t n_in, int64_t rows, int n_tokens, enum mm_tune_choice choice)
{
    if (n_tokens <= 0 || choice == MM_TUNE_UNKNOWN)
        return;
    int dev = current_device();
    pthread_mutex_lock(&g_lock);
    for (unsigned i = 0, s = slot_of(dev, n_in, rows, n_tokens); i < MM_TUNE_SLOTS; i++) {
        struct mm_tune_entry *e = &g_table[(s + i) % MM_TUNE_SLOTS];
        if (e->n_tokens != 0 && !entry_is(e, dev, n_in, rows, n_tokens))
            continue;
        if (e->n_tokens == 0) {   /* a new key; an existing one keeps its first choice */
            e->n_in = n_in;
            e->rows = rows;
            e->device = dev;
            e->n_tokens = n_tokens;
            e->choice = choice;
        }
        break;
    }
    pthread_mutex_unlock(&g_lock);
}

void mm_tune_reset(void)
{
    pthread_mutex_lock(&g_lock);
    memset(g_table, 0, sizeof g_table);
    pthread_mutex_unlock(&g_lock);
}

/* Milliseconds of MM_TUNE_REPS runs after one warm-up (the first launch of a
 * kernel may load its module). */
static int time_runs(float *ms, mm_tune_run_fn run, void *arg, int gemm, cudaStream_t s,
                     cudaEvent_t e0, cudaEvent_t e1)
{
    int rc = run(arg, gemm);
    if (rc != CS_OK)
        return rc;
    if (cudaEventRecord(e0, s) != cudaSuccess)
        return CS_ECUDA;
    for (int r = 0; r < MM_TUNE_REPS; r++)
        if ((rc = run(arg, gemm)) != CS_OK)
            return rc;
    if (cudaEventRecord(e1, s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
        cudaEventElapsedTime(ms, e0, e1) != cudaSuccess)
        return CS_ECUDA;
    return CS_OK;
}

int mm_tune_measure(int64_t n_in, int64_t rows, int n_tokens, mm_tune_run_fn run, void *arg,
                    struct CUstream_st *stream, enum mm_tune_choice *choice)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaStreamSynchronize(s) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess) {
        if (e0)
            cudaEventDestroy(e0);
        LOG_ERROR("matmul", "tune: stream or event failed: %s", cudaGetErrorString(cudaGetLastError()));
        return CS_ECUDA;
    }
    /* the GEMM first, so that the GEMV (the kernel of fewer tokens) is the
     * last to write the outputs; either one's are the same bits */
    float gemm_ms = 0, gemv_ms = 0;
    int rc = time_runs(&gemm_ms, run, arg, 1, s, e0, e1);
    if (rc == CS_OK)
        rc = time_runs(&gemv_ms, run, arg, 0, s, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc != CS_OK)
        return rc;
    *choice = gemm_ms < gemv_ms ? MM_TUNE_GEMM : MM_TUNE_GEMV;
    mm_tune_record(n_in, rows, n_tokens, *choice);
    LOG_DEBUG("matmul", "tune n_in=%lld rows=%lld tokens=%d: gemv %.1f us, gemm %.1f us: %s",
              (long long)n_in, (long long)rows, n_tokens, 1e3 * gemv_ms / MM_TUNE_REPS,
              1e3 * gemm_ms / MM_TUNE_REPS, *choice == MM_TUNE_GEMM ? "gemm" : "gemv");
    return CS_OK;
}
