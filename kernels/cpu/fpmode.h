/* fpmode.h - subnormal floats flushed to zero on the CPU backend's threads,
 * as the CUDA build does them.
 *
 * Why: the CUDA kernels compile with --use_fast_math, which implies
 * -ftz=true: every fp32 operation reads a subnormal input as zero and writes
 * a subnormal result as zero. The CPU backend reproduces the CUDA kernels'
 * bits (kernels/exact_math.h), so it must flush the same values: x86's MXCSR
 * FTZ (results) and DAZ (inputs), aarch64's FPCR.FZ (both). They occur in
 * practice (a GDN beta of sigmoid(-88), a chunked-GDN decay product near
 * 1e-38, a softmax weight of a score 87 below the row's maximum), and
 * unflushed subnormals are also slow on x86.
 *
 * threadpool.c turns the mode on in its workers for their lifetime and on
 * the calling thread for the length of each threadpool_for, restoring the
 * caller's mode afterwards: every op of the CPU backend runs its items
 * through the pool. (x86 MXCSR also covers double operations, which
 * CUDA's -ftz does not; the backend's doubles, RoPE angles, are never
 * subnormal.) */
#ifndef CS_KERNELS_CPU_FPMODE_H
#define CS_KERNELS_CPU_FPMODE_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
typedef unsigned cpu_fpmode;
/* Turn flushing on; returns the previous mode for cpu_fpmode_restore. */
static inline cpu_fpmode cpu_fpmode_flush_enter(void)
{
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);   /* FTZ (bit 15) and DAZ (bit 6) */
    return old;
}
static inline void cpu_fpmode_restore(cpu_fpmode old)
{
    _mm_setcsr(old);
}
#elif defined(__aarch64__)
typedef uint64_t cpu_fpmode;
static inline cpu_fpmode cpu_fpmode_flush_enter(void)
{
    uint64_t old;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(old));
    __asm__ __volatile__("msr fpcr, %0" : : "r"(old | (1ull << 24)));   /* FZ */
    return old;
}
static inline void cpu_fpmode_restore(cpu_fpmode old)
{
    __asm__ __volatile__("msr fpcr, %0" : : "r"(old));
}
#else
/* No known way to flush: results agree with the GPU's except where a value
 * falls below FLT_MIN. */
typedef int cpu_fpmode;
static inline cpu_fpmode cpu_fpmode_flush_enter(void)
{
    return 0;
}
static inline void cpu_fpmode_restore(cpu_fpmode old)
{
    (void)old;
}
#endif

#endif
