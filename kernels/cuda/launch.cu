/* launch.cu - the state behind cuda_launch (launch.cuh): whether PDL is on,
 * which devices support it, and the stream whose latest op was a launch. */
#include "launch.cuh"

static bool g_pdl_on = true;
static int g_cc_major[64];                      /* 0: not asked yet */
/* The stream of the latest op if that op was a launch, else NULL. One for the
 * process, not per thread: a copy queued by any thread on any stream resets
 * it, which errs towards plain launches. */
static cudaStream_t g_last_launch;
static bool g_last_valid;

extern "C" void cuda_pdl_set_enabled(bool on)
{
    g_pdl_on = on;
}

extern "C" bool cuda_pdl_enabled(void)
{
    return g_pdl_on;
}

static int device_major(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return 0;
    if (!g_cc_major[dev]) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            major = 1;
        g_cc_major[dev] = major > 0 ? major : 1;
    }
    return g_cc_major[dev];
}

extern "C" bool cuda_pdl_allowed(cudaStream_t s)
{
    return g_pdl_on && __atomic_load_n(&g_last_valid, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&g_last_launch, __ATOMIC_RELAXED) == s && device_major() >= 9;
}

extern "C" void cuda_pdl_note_launch(cudaStream_t s)
{
    __atomic_store_n(&g_last_launch, s, __ATOMIC_RELAXED);
    __atomic_store_n(&g_last_valid, true, __ATOMIC_RELEASE);
}

extern "C" void cuda_pdl_barrier(void)
{
    __atomic_store_n(&g_last_valid, false, __ATOMIC_RELEASE);
    __atomic_store_n(&g_last_launch, (cudaStream_t)NULL, __ATOMIC_RELAXED);
}
