/* launch.cu - the state behind cuda_launch (launch.cuh): whether PDL is on,
 * which devices support it, and the stream whose latest op was a launch. */
#include "launch.cuh"

static bool g_pdl_on = true;
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

/* __CUDA_ARCH__ of the code the runtime loaded for the device: its own SASS,
 * or an older target's PTX compiled by the driver (a build for sm_70-75 run
 * on a newer card). Code compiled for sm_75 has no griddepcontrol or
 * clusters, so what the host may ask of a launch follows this, not the
 * device's compute capability: a PDL launch of a kernel without its wait
 * would let it read its input before that was written. */
static __device__ int g_code_arch_out;

static __global__ void k_code_arch(void)
{
#ifdef __CUDA_ARCH__
    g_code_arch_out = __CUDA_ARCH__;
#endif
}

static int g_code_arch[64];   /* 0: not probed yet */

extern "C" int cuda_code_arch_probe(int dev)
{
    if (dev < 0 || dev >= 64)
        return 0;
    if (!g_code_arch[dev]) {
        int arch = 0, prev = -1;
        cudaStream_t s = NULL;
        if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(dev) == cudaSuccess &&
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
            k_code_arch<<<1, 1, 0, s>>>();
            if (cudaMemcpyFromSymbolAsync(&arch, g_code_arch_out, sizeof(arch), 0,
                                          cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                cudaStreamSynchronize(s) != cudaSuccess)
                arch = 0;
            cudaStreamDestroy(s);
        }
        (void)cudaGetLastError();
        if (prev >= 0)
            cudaSetDevice(prev);
        cuda_pdl_barrier();   /* a launch and a copy on another stream */
        g_code_arch[dev] = arch > 0 ? arch : 1;   /* 1: failed; as an sm_70-75 build */
    }
    return g_code_arch[dev];
}

/* The current device's code arch, probed on first use: the backend's
 * context probes at creation, before any stream capture (a probe is a launch
 * and a synchronous copy, which a capture would refuse). */
extern "C" int cuda_code_arch(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return 1;
    return g_code_arch[dev] ? g_code_arch[dev] : cuda_code_arch_probe(dev);
}

static bool code_has_pdl(cudaStream_t s)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return false;
    if (g_code_arch[dev])   /* every launch asks: one lookup once probed */
        return g_code_arch[dev] >= 900;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;   /* probe outside a capture only */
    if (cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return false;   /* a plain launch: always correct */
    }
    return cuda_code_arch_probe(dev) >= 900;
}

extern "C" bool cuda_pdl_allowed(cudaStream_t s)
{
    return g_pdl_on && __atomic_load_n(&g_last_valid, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&g_last_launch, __ATOMIC_RELAXED) == s && code_has_pdl(s);
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
