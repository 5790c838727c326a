/* launch.cuh - how every kernel of kernels/cuda/ is launched: cuda_launch,
 * which on sm_90+ makes the kernel a programmatic dependent of the stream's
 * previous kernel (PDL). Its blocks then become resident while that kernel
 * finishes, and a GEMV's first weight loads are in flight before its input
 * exists: on an H200 a decode step is ~320 kernels of a few microseconds, so
 * the launch and first DRAM round trip of each were a large share of it.
 *
 * The contract of a kernel launched this way (checked by reading, and by the
 * equality runs of tests/gpu/device_verify.sh):
 *  - every thread calls cuda_pdl_wait() before it reads anything an earlier
 *    op of the stream wrote and before it writes anything. Only weights and
 *    kernel parameters may be read before (weights are written at load only),
 *    and data whose last writer ran before the previous kernel was launched
 *    (a GDN state of an earlier step, the step's uploaded batch): this kernel
 *    starts only once every block of the previous kernel has passed its own
 *    wait (or, launched plain, once the stream before it is done), so every
 *    op before that kernel is complete. Nothing the previous kernel may
 *    write is read early;
 *  - no block returns before its wait: a grid whose blocks all left early
 *    would count as complete while its own predecessor still runs, and its
 *    dependent would read too soon;
 *  - cuda_pdl_trigger() comes after the wait, so at most one kernel waits
 *    behind the running one (no cascade of parked grids).
 * On older GPUs both are no-ops and the launch is plain.
 *
 * Non-kernel ops (copies, memsets, events, graph launches) call
 * cuda_pdl_barrier(): the launch after one is plain, so the question of how
 * a programmatic edge behaves behind a copy never arises. */
#ifndef CS_CUDA_LAUNCH_CUH
#define CS_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stdbool.h>

/* Block until the stream's previous kernel has completed and its writes are
 * visible (returns at once when launched without the attribute). */
static __device__ __forceinline__ void cuda_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* This block lets the stream's next kernel start launching (it launches once
 * every block of this grid has said so or exited). */
static __device__ __forceinline__ void cuda_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The usual kernel prologue: wait, then let the next kernel launch. */
static __device__ __forceinline__ void cuda_pdl_enter(void)
{
    cuda_pdl_wait();
    cuda_pdl_trigger();
}

#include "launch.h"

/* cuda_launch with the grid's blocks grouped in clusters of cluster_x
 * consecutive blocks (sm_90+; 1: no clusters). */
template <typename... KArgs, typename... Args>
static cudaError_t cuda_launch_cluster(void (*k)(KArgs...), int cluster_x, dim3 grid, dim3 block,
                                       size_t smem, cudaStream_t s, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    int n = 0;
    if (cuda_pdl_allowed(s)) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_x > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = (unsigned)cluster_x;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
    if (e == cudaSuccess)
        cuda_pdl_note_launch(s);
    else
        cuda_pdl_barrier();
    return e;
}

/* Launch k<<<grid, block, smem, s>>>(args...) as described above. */
template <typename... KArgs, typename... Args>
static cudaError_t cuda_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t s, Args... args)
{
    return cuda_launch_cluster(k, 1, grid, block, smem, s, args...);
}

#endif
