/* bench_ring_sync.cuh - bench_ring.cu's synchronisation: the sm_90 bulk
 * copies and mbarriers that fill the weight ring, the named barriers among
 * its warps, the grid barrier, and the "LL" entries (data and epoch in one
 * 8-byte store) through which a matrix's quantized output reaches the next
 * matrix's blocks without a barrier. An experiment, not product code. */
#ifndef CS_TESTS_BENCH_RING_SYNC_CUH
#define CS_TESTS_BENCH_RING_SYNC_CUH

#include "bench_chain.cuh"

static __device__ __forceinline__ unsigned rg_smem(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ __forceinline__ void rg_mb_init(unsigned long long *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(rg_smem(b)), "r"(count) : "memory");
}

static __device__ __forceinline__ void rg_mb_expect(unsigned long long *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(rg_smem(b)), "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void rg_mb_arrive(unsigned long long *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(rg_smem(b)) : "memory");
}

static __device__ __forceinline__ void rg_mb_wait(unsigned long long *b, unsigned parity)
{
    unsigned ok;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(ok)
                     : "r"(rg_smem(b)), "r"(parity)
                     : "memory");
    } while (!ok);
}

static __device__ __forceinline__ void rg_bulk(void *dst, const void *src, unsigned bytes,
                                               unsigned long long *b)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     rg_smem(dst)),
                 "l"(src), "r"(bytes), "r"(rg_smem(b))
                 : "memory");
}
#else   /* sm_90 only: never launched elsewhere (main checks) */
static __device__ __forceinline__ void rg_mb_init(unsigned long long *, unsigned) {}
static __device__ __forceinline__ void rg_mb_expect(unsigned long long *, unsigned) {}
static __device__ __forceinline__ void rg_mb_arrive(unsigned long long *) {}
static __device__ __forceinline__ void rg_mb_wait(unsigned long long *, unsigned) {}
static __device__ __forceinline__ void rg_bulk(void *, const void *, unsigned, unsigned long long *) {}
#endif

/* The 8 consumer warps only (the producer warp never joins it). */
static __device__ __forceinline__ void rg_consumers_sync(void)
{
    asm volatile("bar.sync 1, %0;" ::"r"(PT_THREADS) : "memory");
}

/* The grid barrier before matrix i (target = i x blocks). flag: every
 * block polls the counter (bench_persistent's barrier); otherwise the last
 * to arrive publishes i in a flag on its own line, which the others poll,
 * so the polls do not queue behind the counter's atomics. sleep_ns: a delay
 * after the barrier (a diagnostic: is a longer stall hidden by the ring?). */
template <bool FLAG>
static __device__ __forceinline__ void rg_grid_sync(unsigned *ctr, unsigned target, unsigned i,
                                                    unsigned sleep_ns = 0)
{
    rg_consumers_sync();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned old = atomicAdd(ctr, 1u);
        if (!FLAG) {
            while (*(volatile unsigned *)ctr < target) {
            }
        } else if (old + 1 == target) {
            *(volatile unsigned *)(ctr + 32) = i;
        } else {
            while (*(volatile unsigned *)(ctr + 32) < i) {
            }
        }
        __threadfence();
        if (sleep_ns)
            __nanosleep(sleep_ns);
    }
    rg_consumers_sync();
}

/* MODE 11: each matrix's quantized output as "LL" entries (NCCL's
 * low-latency protocol: 4 bytes of data and a 4-byte epoch in one 8-byte
 * store, so no fence), buffers by output parity: q, 4 int8 an entry; s, a
 * group's scale. The epoch of matrix i's output in pass p is 256 p + i + 1. */
struct rg_ll {
    unsigned long long *q[2], *s[2];
};

static __device__ __forceinline__ void rg_ll_store(unsigned long long *p, unsigned v, unsigned epoch)
{
    unsigned long long e = ((unsigned long long)epoch << 32) | v;
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(e) : "memory");
}

/* AND of ok over the 8 consumer warps (named barrier 1). */
static __device__ __forceinline__ bool rg_consumers_all(bool ok)
{
    unsigned r;
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
                 "bar.red.and.pred p, 1, %2, q;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(r)
                 : "r"((unsigned)ok), "r"(PT_THREADS)
                 : "memory");
    return r != 0;
}

/* The input of a matrix from LL entries of epoch ep: staged whole through
 * cp.async, staged again (after a short sleep) until every entry is of ep,
 * then unpacked into xq / dx. st: n_in / 4 + n_in / 32 entries. */
static __device__ void rg_ll_load(const struct rg_ll *ll, int buf, int n_in, unsigned ep,
                                  unsigned long long *st, int8_t *xq, float *dx)
{
    int nq = n_in / 4, ns = n_in / 32;
    for (bool ready = false; !ready;) {
        for (int c = threadIdx.x; c < nq / 2; c += PT_THREADS)
            chain_cp16(st + 2 * c, ll->q[buf] + 2 * c);
        for (int c = threadIdx.x; c < ns / 2; c += PT_THREADS)
            chain_cp16(st + nq + 2 * c, ll->s[buf] + 2 * c);
        chain_cp_wait();
        bool ok = true;
        for (int e = threadIdx.x; e < nq + ns; e += PT_THREADS)
            ok &= (unsigned)(st[e] >> 32) == ep;
        ready = rg_consumers_all(ok);
        if (!ready)
            __nanosleep(100);
    }
    for (int e = threadIdx.x; e < nq; e += PT_THREADS)
        ((unsigned *)xq)[e] = (unsigned)st[e];
    for (int e = threadIdx.x; e < ns; e += PT_THREADS)
        dx[e] = __uint_as_float((unsigned)st[nq + e]);
    rg_consumers_sync();
}

/* rg_ll_load without the staging buffer (MODE 12): each thread's entries
 * in registers, all loads in flight together, the stale ones loaded again. */
static __device__ __forceinline__ unsigned long long rg_ll_ld(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}

static __device__ void rg_ll_load_regs(const struct rg_ll *ll, int buf, int n_in, unsigned ep,
                                       int8_t *xq, float *dx)
{
    enum { MAXE = (PT_MAXK / 4 + PT_MAXK / 32 + PT_THREADS - 1) / PT_THREADS };
    int nq = n_in / 4, ne = nq + n_in / 32;
    const unsigned long long *q = ll->q[buf], *sc = ll->s[buf] - nq;   /* entry e >= nq: sc[e] */
    unsigned long long v[MAXE];
#pragma unroll
    for (int k = 0; k < MAXE; k++) {
        int e = threadIdx.x + k * PT_THREADS;
        v[k] = e < ne ? rg_ll_ld(e < nq ? q + e : sc + e) : (unsigned long long)ep << 32;
    }
    for (;;) {
        bool ok = true;
#pragma unroll
        for (int k = 0; k < MAXE; k++)
            ok &= (unsigned)(v[k] >> 32) == ep;
        if (rg_consumers_all(ok))
            break;
        __nanosleep(100);
#pragma unroll
        for (int k = 0; k < MAXE; k++) {
            int e = threadIdx.x + k * PT_THREADS;
            if ((unsigned)(v[k] >> 32) != ep)
                v[k] = rg_ll_ld(e < nq ? q + e : sc + e);
        }
    }
#pragma unroll
    for (int k = 0; k < MAXE; k++) {
        int e = threadIdx.x + k * PT_THREADS;
        if (e < nq)
            ((unsigned *)xq)[e] = (unsigned)v[k];
        else if (e < ne)
            dx[e - nq] = __uint_as_float((unsigned)v[k]);
    }
    rg_consumers_sync();
}

/* Group u of matrix i's output (x: lane l's row u 32 + l), quantized as
 * pt_quantize does, for matrix i + 1: LL entries (ll) or plain gq / gdx. */
template <bool LL>
static __device__ __forceinline__ void rg_publish_group(const struct pt_args *a,
                                                        const struct rg_ll *ll, int i, int u,
                                                        float x, unsigned pass, int lane)
{
    float am = fabsf(x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    float inv = am > 0.0f ? 127.0f / am : 0.0f;
    int q = __float2int_rn(x * inv);
    if (LL) {   /* lane k < 8 packs lanes 4k .. 4k + 3 */
        unsigned wd = 0, ep = 256u * pass + (unsigned)i + 1u;
#pragma unroll
        for (int b = 0; b < 4; b++)
            wd |= ((unsigned)__shfl_sync(0xffffffffu, q, 4 * (lane & 7) + b) & 0xffu) << (8 * b);
        if (lane < 8)
            rg_ll_store(ll->q[(i + 1) & 1] + u * 8 + lane, wd, ep);
        if (lane == 0)
            rg_ll_store(ll->s[(i + 1) & 1] + u, __float_as_uint(am / 127.0f), ep);
    } else {
        a->gq[(i + 1) & 1][u * 32 + lane] = (int8_t)q;
        if (lane == 0)
            a->gdx[(i + 1) & 1][u] = am / 127.0f;
    }
}

/* Named barriers 2 and 3 between MODE 13's dot warps and its chain warp. */
static __device__ __forceinline__ void rg_bar_arrive(int id)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(PT_THREADS + 32) : "memory");
}

static __device__ __forceinline__ void rg_bar_sync(int id)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(PT_THREADS + 32) : "memory");
}

#endif
