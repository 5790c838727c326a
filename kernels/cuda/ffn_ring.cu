/* ffn_ring.cu - the FFN of one decode token in one persistent kernel (sm_90):
 * x_out = x + y, n = rmsnorm(x_out) * norm_w, out = W_down (silu(W_gate n)
 * * (W_up n)), the norm's scale applied to gate's and up's segment sums
 * (kernels/numerics.h). Bitwise the two launches it replaces (the gate/up GEMV with
 * the add_rmsnorm prologue, the down GEMV with the SwiGLU prologue): the
 * same prologue code (seg_addnorm.cuh), the same block dots and the same
 * per-segment chains in kernels/numerics.h's order, the same Q8_1 rule.
 *
 * Off by default (ffn_ring.h): in the whole decode step it measured no
 * faster than the two launches; it is the first piece of a persistent
 * decode step (docs/DECODE_RING.md), where its ends would go too.
 *
 * With PROJ (cuda_proj_ffn_ring) the mixer's output projection runs first:
 * every block quantizes its input (seg_prologue.cuh, as the GEMV), the
 * owners of its row groups publish each row as an fp32 LL entry, and every
 * block waits for all of them before forming x_out and the norm from shared
 * memory. Bitwise the launches it replaces, but slower than they are
 * (docs/PERF.md, fifteenth session: the grid-wide wait stalls the ring).
 *
 * Why (docs/DECODE_RING.md, docs/PERF.md thirteenth session): each decode
 * matrix call costs 8-11 us beyond its bytes at its launch boundary and in
 * its prologue. Here the down matrix's weights stream while gate/up finish,
 * and down's input needs no prologue: the block that computes a gate/up row
 * group quantizes silu(gate) * up for its 32 rows (one Q8_1 block) itself and
 * publishes it as "LL" entries (4 bytes of data and a 4-byte epoch in one
 * 8-byte store, so no fence or barrier: NCCL's low-latency protocol).
 *
 * One block per SM (its shared memory allows no second), 10 warps:
 * - warp 9, lane 0, the producer: issues the block's items in order, across
 *   the gate/up -> down boundary, as cp.async.bulk copies into a ring of
 *   FR_SLOTS slots, each completing its "full" mbarrier; it waits only for
 *   free slots ("empty", one arrival per dot warp). An item is one row group
 *   (32 rows) x one segment (CS_DOT_SEG_BLOCKS blocks) of one matrix: 32 KB
 *   of quants and 2 KB of scales, contiguous in the repacked layout.
 * - block i takes the gate/up row groups i, i + grid, ... (for each: gate's
 *   segments, then up's) and then the down row groups i, i + grid, ...;
 * - warps 0-7, the dot warps: 4 of the item's 32 blocks each, lane = row,
 *   the exact DP4A block dot and the scale product into shared memory;
 * - warp 8, the chain warp, one item behind (named barrier, double-buffered
 *   terms, as gemv_seg.cu's tail warp): p = fma(s, isum, p) per segment,
 *   the segments added in order; then it publishes the group (gate/up) or
 *   writes the rows (down).
 * Before their first down item the dot warps load down's whole input from
 * the LL entries (FR_SEGWAIT: before each segment, that segment's), waiting
 * until every entry carries this launch's epoch.
 *
 * The epoch lives in the exchange buffer: every block reads it after the
 * PDL wait, publishes with epoch + 1, and the last block to finish stores
 * epoch + 1 (so graph replays need no new parameters). Blocks wait for
 * other blocks' gate/up groups, so all blocks must be resident at once: the
 * grid is at most one block per SM (a block that waited 2 s traps rather
 * than hang). */
#include <cuda_fp16.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/log.h"
#include "../numerics.h"
#include "cuda_util.cuh"
#include "ffn_ring.h"
#include "launch.cuh"
#include "matmul_int.cuh"
#include "seg_addnorm.cuh"
#include "seg_prologue.cuh"

#ifndef CS_FFN_RING
#define CS_FFN_RING 1   /* -DCS_FFN_RING=0: never (A/B timing against the two launches) */
#endif

#define FR_SEG CS_DOT_SEG_BLOCKS             /* blocks of a segment (numerics.h) */
/* Blocks of an item: a segment (32), or half of one (16: the ring in
 * smaller steps, the same bytes in flight with twice the slots). */
#ifndef FR_IB
#define FR_IB FR_SEG
#endif
#define FR_SUB (FR_SEG / FR_IB)              /* items per segment */
#define FR_DOT_WARPS SEG_AN_WARPS            /* 8: also the prologue's warps */
#define FR_BPW (FR_IB / FR_DOT_WARPS)        /* blocks per dot warp */
#define FR_CHAIN_WARP FR_DOT_WARPS
#define FR_PROD_WARP (FR_DOT_WARPS + 1)
#define FR_THREADS ((FR_DOT_WARPS + 2) * 32)
#define FR_DOT_THREADS (FR_DOT_WARPS * 32)
#ifndef FR_SLOTS
#define FR_SLOTS 3   /* measured against 5 (docs/PERF.md, fourteenth session) */
#endif
/* Blocks per SM the register budget allows for (-D to time variants): at 3
 * (64 registers) two segmented-GEMV blocks of the neighbouring launches fit
 * beside this one; at 1 (80 registers) one. */
#ifndef FR_MINB
#define FR_MINB 3
#endif
/* The same for the kernel with the output projection in front (its own
 * instance: the projection's state would make the FFN-only one spill). */
#ifndef FR_MINB_PROJ
#define FR_MINB_PROJ 2   /* 96 registers: at 3 (64) it spills */
#endif
/* 1: down's segment s waits only for its own 32 input blocks (their LL
 * entries), so a block starts down while others finish gate/up; 0: for all. */
#ifndef FR_SEGWAIT
#define FR_SEGWAIT 1
#endif
/* Timing diagnostics only (tests/gpu/bench_ffn.c; wrong results): bit 0
 * leaves out the dot and chain arithmetic, bit 1 the waits for down's input,
 * bit 2 the prologue. 0 in every real build. */
#ifndef FR_DIAG
#define FR_DIAG 0
#endif
#define FR_SLOT_Q (FR_IB * 1024)             /* blocks x 32 rows x 32 int8 */
#define FR_SLOT_D (FR_IB * 64)               /* blocks x 32 rows x fp16 */
#define FR_SLOT_BYTES (FR_SLOT_Q + FR_SLOT_D)
#define FR_BAR_DOTCHAIN 1                    /* named barriers: dot warps + chain warp */
#define FR_BAR_DOT 2                         /* dot warps */
#define FR_SYNC_WORDS 32                     /* [0] epoch, [1] blocks done; 128 bytes */
#define FR_TIMEOUT_NS 2000000000ull

static_assert(FR_SEG % FR_IB == 0 && FR_IB % FR_DOT_WARPS == 0,
              "an item is a whole fraction of a segment, split evenly over the dot warps");

struct fr_args {
    const uint8_t *gq, *uq, *dq;   /* repacked quants: gate, up, down */
    const __half *gd, *ud, *dd;    /* their scales */
    float *out;                    /* [dim] */
    const float *x;
    struct cuda_mm_pro pro;        /* ADD_RMSNORM: aux = y, norm_w, eps, x_out */
    int dim, n_ff;
    unsigned *sync;                /* FR_SYNC_WORDS words, then the entries */
    unsigned long long *ll;        /* n_ff / 4 quant entries, then n_ff / 32 scale entries */
    /* The output projection in front (cuda_proj_ffn_ring; oq NULL: none):
     * y = W_o opro(oa), W_o of dim rows x n_in_o, its rows exchanged as LL
     * entries (lly, dim of them) instead of read from pro.aux. */
    const uint8_t *oq;
    const __half *od;
    const float *oa;
    struct cuda_mm_pro opro;
    int n_in_o;
    unsigned long long *lly;
};

/* Item k of this block: matrix, row group, segment and its bytes. */
struct fr_item {
    const uint8_t *q;
    const __half *d;
    int cn;      /* blocks in the item (FR_IB but in a short last segment; may be <= 0) */
    int proj;    /* 1: the output projection (then down = up = 0) */
    int down;    /* 0: gate/up, 1: down */
    int up;      /* gate/up: 0 gate, 1 up */
    int g, s;    /* row group, segment */
    int sub;     /* item of the segment */
    int b0;      /* its first block in the row */
    int seg_end, last;   /* the segment's last item; the group's */
};

template <bool PROJ>
static __device__ __forceinline__ void fr_item_at(const struct fr_args &a, int k, int items0,
                                                  int items01, struct fr_item &it)
{
    int nb, segs, gi;
    const uint8_t *q;
    const __half *d;
    it.proj = 0;
    if (PROJ && k < items0) {
        nb = a.n_in_o / 32;
        segs = (nb + FR_SEG - 1) / FR_SEG;
        int per = segs * FR_SUB;
        gi = k / per;
        int r = k - gi * per;
        it.s = r / FR_SUB;
        it.sub = r - it.s * FR_SUB;
        it.proj = 1;
        it.up = 0;
        it.down = 0;
        q = a.oq;
        d = a.od;
    } else if (k < items01) {
        k -= items0;
        nb = a.dim / 32;
        segs = (nb + FR_SEG - 1) / FR_SEG;
        int per = segs * FR_SUB;   /* items of one matrix's group */
        gi = k / (2 * per);
        int r = k - gi * 2 * per;
        it.up = r / per;
        r -= it.up * per;
        it.s = r / FR_SUB;
        it.sub = r - it.s * FR_SUB;
        it.down = 0;
        q = it.up ? a.uq : a.gq;
        d = it.up ? a.ud : a.gd;
    } else {
        nb = a.n_ff / 32;
        segs = (nb + FR_SEG - 1) / FR_SEG;
        int per = segs * FR_SUB, r = k - items01;
        gi = r / per;
        r -= gi * per;
        it.s = r / FR_SUB;
        it.sub = r - it.s * FR_SUB;
        it.up = 0;
        it.down = 1;
        q = a.dq;
        d = a.dd;
    }
    it.g = blockIdx.x + gi * gridDim.x;
    it.seg_end = it.sub == FR_SUB - 1;
    it.last = it.seg_end && it.s == segs - 1;
    it.b0 = it.s * FR_SEG + it.sub * FR_IB;
    it.cn = nb - it.b0 < FR_IB ? nb - it.b0 : FR_IB;
    size_t b0 = (size_t)it.g * nb + (size_t)it.b0;
    it.q = q + b0 * 1024;
    it.d = d + b0 * 32;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ __forceinline__ unsigned fr_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void fr_mb_init(unsigned long long *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(fr_smem_addr(b)), "r"(count)
                 : "memory");
}

static __device__ __forceinline__ void fr_mb_arrive(unsigned long long *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(fr_smem_addr(b)) : "memory");
}

static __device__ __forceinline__ void fr_mb_wait(unsigned long long *b, unsigned parity)
{
    unsigned ok;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(ok)
                     : "r"(fr_smem_addr(b)), "r"(parity)
                     : "memory");
    } while (!ok);
}

/* The item's quants and scales into slot, completing full's transaction. */
static __device__ __forceinline__ void fr_fetch(unsigned char *slot, const struct fr_item &it,
                                                unsigned long long *full)
{
    unsigned n = it.cn > 0 ? (unsigned)it.cn : 0u, qb = n * 1024, db = n * 64;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     fr_smem_addr(full)),
                 "r"(qb + db)
                 : "memory");
    if (n == 0)
        return;   /* an empty item: the arrival alone completes the phase */
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(fr_smem_addr(slot)),
                 "l"(it.q), "r"(qb), "r"(fr_smem_addr(full))
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(fr_smem_addr(slot + FR_SLOT_Q)),
                 "l"(it.d), "r"(db), "r"(fr_smem_addr(full))
                 : "memory");
}

static __device__ __forceinline__ void fr_bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* AND of ok over the dot warps. */
static __device__ __forceinline__ bool fr_dots_all(bool ok)
{
    unsigned r;
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
                 "bar.red.and.pred p, %2, %3, q;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(r)
                 : "r"((unsigned)ok), "n"(FR_BAR_DOT), "n"(FR_DOT_THREADS)
                 : "memory");
    return r != 0;
}

static __device__ __forceinline__ unsigned long long fr_now(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ void fr_ll_store(unsigned long long *p, unsigned v, unsigned ep)
{
    unsigned long long e = ((unsigned long long)ep << 32) | v;
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(e) : "memory");
}

static __device__ __forceinline__ unsigned long long fr_ll_load(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}

/* The chain warp's row group g of down's input (lane = value): its Q8_1
 * block, 4 int8 an entry, and the scale. */
static __device__ __forceinline__ void fr_publish(const struct fr_args &a, int g, int lane, int q,
                                                  float d, unsigned ep)
{
    unsigned b = (unsigned)q & 0xffu;
    unsigned b1 = __shfl_down_sync(CS_FULL_MASK, b, 1), b2 = __shfl_down_sync(CS_FULL_MASK, b, 2),
             b3 = __shfl_down_sync(CS_FULL_MASK, b, 3);
    if ((lane & 3) == 0)
        fr_ll_store(a.ll + (size_t)g * 8 + lane / 4, b | b1 << 8 | b2 << 16 | b3 << 24, ep);
    if (lane == 0)
        fr_ll_store(a.ll + a.n_ff / 4 + g, __float_as_uint(d), ep);
}

/* Down's whole input from the LL entries of epoch ep into xs / xd (the dot
 * warps; 8 loads in flight a thread). Entries of an older epoch are loaded
 * again after a short sleep. */
static __device__ void fr_ll_wait(const struct fr_args &a, unsigned ep, int8_t *xs, float *xd)
{
    const int nq = a.n_ff / 4, n = nq + a.n_ff / 32;
    unsigned long long t0 = fr_now();
    for (;;) {
        bool ok = true;
        for (int e0 = threadIdx.x; e0 < n; e0 += 8 * FR_DOT_THREADS) {
            unsigned long long v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int e = e0 + j * FR_DOT_THREADS;
                v[j] = e < n ? fr_ll_load(a.ll + e) : 0;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int e = e0 + j * FR_DOT_THREADS;
                if (e >= n)
                    break;
                if ((unsigned)(v[j] >> 32) != ep) {
                    ok = false;
                } else if (e < nq) {
                    ((unsigned *)xs)[e] = (unsigned)v[j];
                } else {
                    xd[e - nq] = __uint_as_float((unsigned)v[j]);
                }
            }
        }
        if (fr_dots_all(ok))
            return;
        if (fr_now() - t0 > FR_TIMEOUT_NS)
            __trap();   /* a block never ran: an error, not a hang */
        __nanosleep(200);
    }
}

/* fr_ll_wait for down's input segment s only (cn blocks: 8 cn quant
 * entries, cn scale entries; at most 288, two a thread). */
static __device__ void fr_ll_wait_seg(const struct fr_args &a, unsigned ep, int s, int cn,
                                      int8_t *xs, float *xd)
{
    const int nq = 8 * cn, n = nq + cn, q0 = s * FR_SEG * 8, b0 = s * FR_SEG;
    unsigned long long t0 = fr_now();
    for (;;) {
        unsigned long long v[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int e = threadIdx.x + j * FR_DOT_THREADS;
            v[j] = e < nq ? fr_ll_load(a.ll + q0 + e)
                          : (e < n ? fr_ll_load(a.ll + a.n_ff / 4 + b0 + (e - nq)) : 0);
        }
        bool ok = true;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int e = threadIdx.x + j * FR_DOT_THREADS;
            if (e >= n)
                break;
            if ((unsigned)(v[j] >> 32) != ep)
                ok = false;
            else if (e < nq)
                ((unsigned *)xs)[q0 + e] = (unsigned)v[j];
            else
                xd[b0 + e - nq] = __uint_as_float((unsigned)v[j]);
        }
        if (fr_dots_all(ok))
            return;
        if (fr_now() - t0 > FR_TIMEOUT_NS)
            __trap();
        __nanosleep(100);
    }
}

/* The output projection's n rows y from their LL entries of epoch ep into
 * y (shared), as fr_ll_wait (the dot warps, 8 loads in flight a thread). */
static __device__ void fr_ll_wait_rows(const unsigned long long *src, int n, unsigned ep, float *y)
{
    unsigned long long t0 = fr_now();
    for (;;) {
        bool ok = true;
        for (int e0 = threadIdx.x; e0 < n; e0 += 8 * FR_DOT_THREADS) {
            unsigned long long v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int e = e0 + j * FR_DOT_THREADS;
                v[j] = e < n ? fr_ll_load(src + e) : 0;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int e = e0 + j * FR_DOT_THREADS;
                if (e >= n)
                    break;
                if ((unsigned)(v[j] >> 32) != ep)
                    ok = false;
                else
                    y[e] = __uint_as_float((unsigned)v[j]);
            }
        }
        if (fr_dots_all(ok))
            return;
        if (fr_now() - t0 > FR_TIMEOUT_NS)
            __trap();
        __nanosleep(100);
    }
}
#endif

/* Dynamic shared memory: the ring, then x's and down's input as Q8_1;
 * with the output projection (n_in_o > 0), from a 16-byte boundary, its
 * input as Q8_1, later its output y (fp32) over it. */
static __host__ __device__ size_t fr_proj_offset(int dim, int n_ff)
{
    size_t o = (size_t)FR_SLOTS * FR_SLOT_BYTES + (size_t)dim + (size_t)n_ff +
               sizeof(float) * (size_t)(dim / 32 + n_ff / 32);
    return (o + 15) & ~(size_t)15;
}

static size_t fr_smem_bytes(int dim, int n_ff, int n_in_o)
{
    size_t pin = (size_t)n_in_o + sizeof(float) * (size_t)(n_in_o / 32);
    size_t py = sizeof(float) * (size_t)dim;
    return fr_proj_offset(dim, n_ff) + (n_in_o > 0 ? (pin > py ? pin : py) : 0);
}

/* After seg_addnorm_row: a barrier of the dot warps, then warp 0 forms the
 * row's norm scale from the span sums into *r (the chain warp reads it after
 * its next barrier with the dot warps). */
static __device__ __forceinline__ void fr_norm_scale(const float *sp, int dim, float eps,
                                                     int warp, int lane, float *r)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    fr_bar_sync(FR_BAR_DOT, FR_DOT_THREADS);
    if (warp == 0) {
        int n_seg = (dim / 32 + CS_DOT_SEG_BLOCKS - 1) / CS_DOT_SEG_BLOCKS;
        float ss = rms_row_sum_from_spans(sp, n_seg * SEG_AN_WARPS, lane);
        if (lane == 0)
            *r = rms_scale(ss, dim, eps);
    }
#endif
}

template <bool PROJ>
static __global__ void __launch_bounds__(FR_THREADS, PROJ ? FR_MINB_PROJ : FR_MINB)
    k_ffn_ring(struct fr_args a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char fr_dyn[];
    __shared__ unsigned long long full[FR_SLOTS], empty[FR_SLOTS];
    __shared__ float terms[2][FR_IB][32];    /* block dots, exact as float */
    __shared__ float scl[2][FR_IB][32];      /* fp32(d_w) * d_x */
    __shared__ float sp[SEG_AN_WARPS * (NORM_THREADS * NORM_NPT / (CS_DOT_SEG_BLOCKS * 32))];
    __shared__ float s_r;                    /* the norm's scale, for the chain warp */
    unsigned char *slots = fr_dyn;
    int8_t *xs_e = (int8_t *)(fr_dyn + (size_t)FR_SLOTS * FR_SLOT_BYTES);
    int8_t *xs_f = xs_e + a.dim;
    float *xd_e = (float *)(xs_f + a.n_ff);
    float *xd_f = xd_e + a.dim / 32;
    /* the output projection's input (Q8_1), later its output y */
    unsigned char *preg = fr_dyn + fr_proj_offset(a.dim, a.n_ff);
    int8_t *xs_o = (int8_t *)preg;
    float *xd_o = (float *)(preg + a.n_in_o), *y_s = (float *)preg;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int G = gridDim.x, bi = blockIdx.x, nbE = a.dim / 32;
    int segE = (nbE + FR_SEG - 1) / FR_SEG, segF = (a.n_ff / 32 + FR_SEG - 1) / FR_SEG;
    int segO = (a.n_in_o / 32 + FR_SEG - 1) / FR_SEG;
    int U0 = PROJ ? a.dim / 32 : 0, U1 = a.n_ff / 32, U2 = a.dim / 32;
    int n0 = bi < U0 ? (U0 - bi + G - 1) / G : 0;
    int n1 = bi < U1 ? (U1 - bi + G - 1) / G : 0, n2 = bi < U2 ? (U2 - bi + G - 1) / G : 0;
    int items0 = n0 * segO * FR_SUB, items01 = items0 + n1 * 2 * segE * FR_SUB;
    int items = items01 + n2 * segF * FR_SUB;

    if (threadIdx.x == 0) {
        for (int s = 0; s < FR_SLOTS; s++) {
            fr_mb_init(&full[s], 1);
            fr_mb_init(&empty[s], FR_DOT_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == FR_PROD_WARP) {
        /* weights only: they may be read before the PDL wait */
        for (int k = 0; k < items; k++) {
            if (k == FR_SLOTS || (k == 0 && items <= FR_SLOTS))
                cuda_pdl_enter();   /* the ring's first fill is in flight */
            if (lane != 0)
                continue;
            int s = k % FR_SLOTS;
            if (k >= FR_SLOTS)
                fr_mb_wait(&empty[s], (k / FR_SLOTS - 1) & 1);
            struct fr_item it;
            fr_item_at<PROJ>(a, k, items0, items01, it);
            fr_fetch(slots + (size_t)s * FR_SLOT_BYTES, it, &full[s]);
        }
    } else {
        /* Triggering early cannot deadlock the waits below: the next kernel
         * launches only once every block of this grid has triggered, that
         * is, once every block is resident. */
        cuda_pdl_enter();
        unsigned ep = *(volatile unsigned *)a.sync + 1u;
        if (warp < FR_DOT_WARPS) {
            if (FR_DIAG & 4) {
            } else if (PROJ) {
                /* the output projection's input, as its GEMV's prologue */
                seg_prologue_row(a.opro, a.oa, a.n_in_o / 32, warp, lane, xs_o, xd_o);
            } else {
                /* x_out and x's norm quantized, as the gate/up GEMV's prologue */
                seg_addnorm_row(a.pro, a.x, a.dim, warp, lane, bi == 0, xs_e, xd_e, sp);
                fr_norm_scale(sp, a.dim, a.pro.eps, warp, lane, &s_r);
            }
            fr_bar_sync(FR_BAR_DOT, FR_DOT_THREADS);
            for (int k = 0; k < items; k++) {
                struct fr_item it;
                fr_item_at<PROJ>(a, k, items0, items01, it);
                if (PROJ && k == items0 && !(FR_DIAG & 6)) {
                    /* the projection's rows from every block, then the add
                     * and the norm as above, y read from shared memory; the
                     * ring meanwhile fills with gate/up's weights */
                    struct cuda_mm_pro pro = a.pro;
                    pro.aux = y_s;
                    fr_bar_sync(FR_BAR_DOT, FR_DOT_THREADS);   /* xs_o read: y_s may go over it */
                    fr_ll_wait_rows(a.lly, a.dim, ep, y_s);
                    seg_addnorm_row<false>(pro, a.x, a.dim, warp, lane, bi == 0, xs_e, xd_e, sp);
                    fr_norm_scale(sp, a.dim, a.pro.eps, warp, lane, &s_r);
                    fr_bar_sync(FR_BAR_DOT, FR_DOT_THREADS);
                }
                if (!(FR_DIAG & 2) && (FR_SEGWAIT ? (it.down && it.sub == 0 &&
                                                     k - items01 < segF * FR_SUB)
                                                  : k == items01)) {
                    if (FR_SEGWAIT) {
                        int nbF = a.n_ff / 32, b0 = it.s * FR_SEG;
                        fr_ll_wait_seg(a, ep, it.s, nbF - b0 < FR_SEG ? nbF - b0 : FR_SEG, xs_f,
                                       xd_f);
                    } else {
                        fr_ll_wait(a, ep, xs_f, xd_f);
                    }
                }
                const int8_t *xs = it.down ? xs_f : (PROJ && it.proj ? xs_o : xs_e);
                const float *xd = it.down ? xd_f : (PROJ && it.proj ? xd_o : xd_e);
                int s = k % FR_SLOTS, tb = k & 1;
                const unsigned char *slot = slots + (size_t)s * FR_SLOT_BYTES;
                const int4 *sq = (const int4 *)slot;
                const __half *sd = (const __half *)(slot + FR_SLOT_Q);
                fr_mb_wait(&full[s], (k / FR_SLOTS) & 1);
#pragma unroll
                for (int j = 0; j < FR_BPW; j++) {
                    int kb = warp * FR_BPW + j;
                    if (kb < it.cn && !(FR_DIAG & 1)) {
                        int4 w0 = sq[kb * 64 + lane], w1 = sq[kb * 64 + 32 + lane];
                        float dw = __half2float(sd[kb * 32 + lane]);
                        const int4 *xv = (const int4 *)(xs + (size_t)(it.b0 + kb) * 32);
                        float dx = xd[it.b0 + kb];
                        int isum = dot32(w0, w1, xv[0], xv[1], MM_DOT_BIAS);
                        terms[tb][kb][lane] = biased_dot_to_float(isum);
                        scl[tb][kb][lane] = __fmul_rn(dw, dx);
                    }
                }
                __syncwarp();
                if (lane == 0)
                    fr_mb_arrive(&empty[s]);   /* the slot is free for the producer */
                fr_bar_sync(FR_BAR_DOTCHAIN, FR_DOT_THREADS + 32);
            }
        } else {   /* the chain warp: lane = row of the item's group */
            float total = 0.0f, gate = 0.0f, p = 0.0f;
            bool fenced = false;
            for (int k = 0; k < items; k++) {
                struct fr_item it;
                fr_item_at<PROJ>(a, k, items0, items01, it);
                int tb = k & 1;
                fr_bar_sync(FR_BAR_DOTCHAIN, FR_DOT_THREADS + 32);
                if (it.sub == 0)
                    p = 0.0f;   /* a segment's chain runs on over its items */
                int kb = (FR_DIAG & 1) ? it.cn : 0;
                for (; kb + 8 <= it.cn; kb += 8) {
                    float v[8], sc[8];
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        v[u] = terms[tb][kb + u][lane];
                        sc[u] = scl[tb][kb + u][lane];
                    }
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        p = __fmaf_rn(sc[u], v[u], p);
                }
                for (; kb < it.cn; kb++)
                    p = __fmaf_rn(scl[tb][kb][lane], terms[tb][kb][lane], p);
                if (!it.seg_end)
                    continue;
                if (it.s == 0)
                    total = 0.0f;
                /* segments in order, from 0; gate's and up's scaled first
                 * by the norm's (kernels/numerics.h) */
                total = __fadd_rn(total, it.down || (PROJ && it.proj) ? p : __fmul_rn(p, s_r));
                if (!it.last)
                    continue;
                if (!fenced) {
                    /* every read of y (the prologue's, which ended before
                     * the first item) ordered before any write: out may be y */
                    __threadfence();
                    fenced = true;
                }
                if (PROJ && it.proj) {
                    fr_ll_store(a.lly + (size_t)it.g * 32 + lane, __float_as_uint(total), ep);
                } else if (!it.down && !it.up) {
                    gate = total;
                } else if (!it.down) {
                    float d;
                    int q = cuda_q8_1_quantize_lane(__fmul_rn(silu_f(gate), total), &d);
                    fr_publish(a, it.g, lane, q, d, ep);   /* k_silu_mul's value, quantized */
                } else {
                    a.out[(size_t)it.g * 32 + lane] = total;
                }
            }
        }
    }
    /* the last block to finish makes this launch's epoch the stored one */
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned done = atomicAdd(a.sync + 1, 1u);
        if (done == gridDim.x - 1) {
            unsigned ep = *(volatile unsigned *)a.sync + 1u;
            a.sync[1] = 0;
            *(volatile unsigned *)a.sync = ep;
            __threadfence();
        }
    }
#else
    __trap();   /* never launched below sm_90 (cuda_ffn_ring) */
#endif
}

extern "C" size_t cuda_ffn_ring_buffer_bytes(int64_t n_ff, int64_t dim)
{
    return FR_SYNC_WORDS * sizeof(unsigned) +
           (size_t)(n_ff / 4 + n_ff / 32 + dim) * sizeof(unsigned long long);
}

static bool fr_overlap(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return x < y + bn && y < x + an;
}

/* Per device: SM count, and whether the kernel is usable (sm_90, its
 * shared memory granted, one block per SM resident); -1 unknown. */
#define FR_MAX_DEV 64
static int g_fr_sms[2][FR_MAX_DEV], g_fr_state[2][FR_MAX_DEV];
static size_t g_fr_smem[2][FR_MAX_DEV];

/* proj: the instance with the output projection in front. */
static bool fr_ready(int dev, size_t smem, bool proj, int *sms)
{
    if (dev < 0 || dev >= FR_MAX_DEV)
        return false;
    int *state = &g_fr_state[proj][dev], *nsm = &g_fr_sms[proj][dev];
    size_t *granted = &g_fr_smem[proj][dev];
    if (*state != 0 && *granted >= smem) {
        *sms = *nsm;
        return *state > 0;
    }
    void (*k)(struct fr_args) = proj ? k_ffn_ring<true> : k_ffn_ring<false>;
    cudaDeviceProp prop;
    int blocks = 0;
    bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess && cuda_code_arch() >= 900 &&
              smem <= prop.sharedMemPerBlockOptin &&
              cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) ==
                  cudaSuccess &&
              cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, FR_THREADS, smem) ==
                  cudaSuccess &&
              blocks >= 1;
    cudaGetLastError();
    *state = ok ? 1 : -1;
    *granted = smem;
    *nsm = ok ? prop.multiProcessorCount : 0;
    *sms = *nsm;
    LOG_DEBUG("cuda", "fused FFN kernel %s on device %d (%zu bytes of shared memory)",
              ok ? "ready" : "unusable", dev, smem);
    return ok;
}

/* cuda_ffn_ring, with the output projection wo opro(oa) in front when wo
 * is not NULL (then y is unused). */
static int fr_run(float *out, const struct cs_weight *wo, const float *oa,
                  const struct cuda_mm_pro *opro, const struct cs_weight *gate,
                  const struct cs_weight *up, const struct cs_weight *down, float *x_out,
                  const float *x, const float *y, const float *norm_w, int dim, float eps,
                  void *buffer, size_t buffer_bytes, struct CUstream_st *stream)
{
    if (!CS_FFN_RING || !gate || !up || !down || !out || !x_out || !x || (!wo && !y) || !norm_w ||
        !buffer)
        return CS_EUNSUPPORTED;
    int64_t ff = gate->n_out;
    if (gate->type != CS_DTYPE_Q8_0 || up->type != CS_DTYPE_Q8_0 || down->type != CS_DTYPE_Q8_0 ||
        gate->n_in != dim || up->n_in != dim || up->n_out != ff || down->n_in != ff ||
        down->n_out != dim || dim % 32 != 0 || ff % 32 != 0 || dim > NORM_THREADS * NORM_NPT ||
        ff > (1 << 20) || buffer_bytes < cuda_ffn_ring_buffer_bytes(ff, dim))
        return CS_EUNSUPPORTED;
    size_t vb = (size_t)dim * sizeof(float);
    if (fr_overlap(x_out, vb, x, vb) || fr_overlap(out, vb, x, vb) || fr_overlap(out, vb, x_out, vb) ||
        (!wo && fr_overlap(x_out, vb, y, vb)))
        return CS_EUNSUPPORTED;
    int n_in_o = 0;
    if (wo) {
        /* the prologue's shapes as the GEMV takes them (matmul.cu) */
        n_in_o = (int)wo->n_in;
        if (wo->type != CS_DTYPE_Q8_0 || wo->n_out != dim || n_in_o % 128 != 0 ||
            n_in_o > (1 << 16) || !oa || !opro || !opro->aux ||
            (opro->kind == CUDA_MM_PRO_GATED_RMSNORM &&
             (opro->head_dim != GATED_NORM_HEAD || !opro->norm_w)) ||
            (opro->kind == CUDA_MM_PRO_SIGMOID_GATE &&
             (opro->head_dim <= 0 || n_in_o % opro->head_dim != 0)) ||
            (opro->kind != CUDA_MM_PRO_GATED_RMSNORM && opro->kind != CUDA_MM_PRO_SIGMOID_GATE))
            return CS_EUNSUPPORTED;
        size_t ob = (size_t)n_in_o * sizeof(float);
        if (fr_overlap(out, vb, oa, ob) || fr_overlap(x_out, vb, oa, ob))
            return CS_EUNSUPPORTED;
    }
    int dev = 0, sms = 0;
    size_t smem = fr_smem_bytes(dim, (int)ff, n_in_o);
    if (cudaGetDevice(&dev) != cudaSuccess || !fr_ready(dev, smem, wo != NULL, &sms))
        return CS_EUNSUPPORTED;
    struct fr_args a;
    memset(&a, 0, sizeof a);
    a.gq = (const uint8_t *)gate->data;
    a.uq = (const uint8_t *)up->data;
    a.dq = (const uint8_t *)down->data;
    a.gd = (const __half *)gate->aux;
    a.ud = (const __half *)up->aux;
    a.dd = (const __half *)down->aux;
    a.out = out;
    a.x = x;
    a.pro.kind = CUDA_MM_PRO_ADD_RMSNORM;
    a.pro.aux = y;
    a.pro.norm_w = norm_w;
    a.pro.eps = eps;
    a.pro.x_out = x_out;
    a.dim = dim;
    a.n_ff = (int)ff;
    a.sync = (unsigned *)buffer;
    a.ll = (unsigned long long *)((char *)buffer + FR_SYNC_WORDS * sizeof(unsigned));
    if (wo) {
        a.oq = (const uint8_t *)wo->data;
        a.od = (const __half *)wo->aux;
        a.oa = oa;
        a.opro = *opro;
        a.n_in_o = n_in_o;
        a.lly = a.ll + ff / 4 + ff / 32;
    }
    int grid = sms < (int)(ff / 32) ? sms : (int)(ff / 32);
    cudaError_t e = wo ? cuda_launch(k_ffn_ring<true>, dim3(grid), dim3(FR_THREADS), smem, stream, a)
                       : cuda_launch(k_ffn_ring<false>, dim3(grid), dim3(FR_THREADS), smem, stream, a);
    if (e != cudaSuccess) {
        LOG_ERROR("cuda", "fused FFN launch: %s", cudaGetErrorString(e));
        return CS_ECUDA;
    }
    return CS_OK;
}

extern "C" int cuda_ffn_ring(float *out, const struct cs_weight *gate, const struct cs_weight *up,
                             const struct cs_weight *down, float *x_out, const float *x,
                             const float *y, const float *norm_w, int dim, float eps,
                             void *buffer, size_t buffer_bytes, struct CUstream_st *stream)
{
    return fr_run(out, NULL, NULL, NULL, gate, up, down, x_out, x, y, norm_w, dim, eps, buffer,
                  buffer_bytes, stream);
}

extern "C" int cuda_proj_ffn_ring(float *out, const struct cs_weight *wo, const float *oa,
                                  const struct cuda_mm_pro *opro, const struct cs_weight *gate,
                                  const struct cs_weight *up, const struct cs_weight *down,
                                  float *x_out, const float *x, const float *norm_w, int dim,
                                  float eps, void *buffer, size_t buffer_bytes,
                                  struct CUstream_st *stream)
{
    if (!wo)
        return CS_EUNSUPPORTED;
    return fr_run(out, wo, oa, opro, gate, up, down, x_out, x, NULL, norm_w, dim, eps, buffer,
                  buffer_bytes, stream);
}
