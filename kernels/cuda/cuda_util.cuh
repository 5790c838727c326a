/* cuda_util.cuh - helpers shared by the CUDA kernels of kernels/cuda/: the
 * check macro that turns a failed CUDA call into a logged CS_ECUDA, and
 * deterministic warp/block reductions (fixed shuffle order, no atomics, so
 * every reduction is batch invariant, see kernels/ops.h).
 *
 * Everything here compiles for sm_70: plain shuffles, no tensor-core or
 * sm_80+ instructions. */
#ifndef CS_CUDA_UTIL_CUH
#define CS_CUDA_UTIL_CUH

#include <cuda_runtime.h>

#include "../../common/log.h"
#include "../../common/status.h"
#include "../exact_math.h"

/* Evaluate a CUDA runtime call; on failure log the call, file and line and
 * return CS_ECUDA from the enclosing function (which must return int). */
#define CS_CUDA_CHECK(call)                                                        \
    do {                                                                           \
        cudaError_t _e = (call);                                                   \
        if (_e != cudaSuccess) {                                                   \
            LOG_ERROR("cuda", "%s failed: %s (%s:%d)", #call, cudaGetErrorString(_e), \
                      __FILE__, __LINE__);                                         \
            return CS_ECUDA;                                                       \
        }                                                                          \
    } while (0)

/* After a kernel launch: report a launch error (bad configuration) the same way. */
#define CS_CUDA_LAUNCHED(name) CS_CUDA_CHECK(cudaGetLastError())

#define CS_FULL_MASK 0xffffffffu

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(CS_FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(CS_FULL_MASK, v, o));
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets the result. scratch: 32 floats of shared memory. The order of
 * additions depends only on blockDim, so the result is deterministic. */
static __device__ __forceinline__ float block_sum(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();   /* scratch may still be read by a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

static __device__ __forceinline__ float block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

/* SiLU and sigmoid as kernels/exact_math.h defines them, the same bits as
 * the CPU backend's (fast math would make x / (1 + expf(-x)) MUFU
 * approximations the CPU cannot reproduce). */
static __device__ __forceinline__ float silu_f(float x)
{
    return xm_silu(x);
}

static __device__ __forceinline__ float sigmoid_f(float x)
{
    return xm_sigmoid(x);
}

/* Streaming multiprocessors of the current device, cached per device (80, a
 * CMP 100-210's count, where the query fails). */
static inline int cuda_sm_count(void)
{
    static int cached[64];
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    if (dev >= 0 && dev < 64 && cached[dev])
        return cached[dev];
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        n = 80;
    }
    if (dev >= 0 && dev < 64)
        cached[dev] = n;
    return n;
}

static inline unsigned cs_div_up(size_t a, size_t b)
{
    return (unsigned)((a + b - 1) / b);
}

#endif
