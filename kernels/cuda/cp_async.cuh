/* cp_async.cuh - cp.async primitives (sm_80+), shared by the kernels that
 * fill shared memory asynchronously (attention_decode.cu's pipe kernel,
 * attention_prefill_q8.cuh's async staging). Compiled for an older target
 * they are a plain synchronous copy, so a kernel using them stays correct
 * everywhere; the hosts pick those kernels only where the loaded code is
 * sm_80+ (cuda_code_arch, launch.h). */
#ifndef CS_CUDA_CP_ASYNC_CUH
#define CS_CUDA_CP_ASYNC_CUH

#include <stdint.h>

/* 16 bytes from global src to the shared-window address dst, asynchronously;
 * n = 0 writes 16 zeros and reads nothing. */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
#else
    int4 v = n ? __ldg((const int4 *)src) : make_int4(0, 0, 0, 0);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
#endif
}

/* 4 bytes, the same way (n = 0: a zero). */
static __device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
#else
    int v = n ? __ldg((const int *)src) : 0;
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(dst), "r"(v) : "memory");
#endif
}

/* Close this thread's copies issued since the last commit into one group. */
static __device__ __forceinline__ void cp_async_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* Wait until at most N of this thread's groups are pending: the older ones
 * have landed and are visible to this thread (other threads see them after
 * a barrier that follows the wait). */
template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

#endif
