/* gemv_seg.cu - the segmented decode GEMV: y = W x for 1..8 tokens with the
 * K dimension split over blocks: a work item is (row group of 32, segment of
 * CS_DOT_SEG_BLOCKS 32-value blocks); a block keeps one segment and walks
 * row groups, the next group's weights in flight while it finishes one.
 *
 * Why: the plain GEMV (matmul.cu) gives each 32-row group one block that
 * walks all of K, so a 4096 x 4096 matrix has 128 blocks, one per SM, each
 * streaming its rows in dependent rounds: 37% of read bandwidth on an H200.
 * Here the same matrix is 512 (group, segment) items spread over a wave of
 * small blocks, several per SM (256 blocks of 2 items on an H200); on large
 * matrices (gate/up, the LM head) each block of the wave streams many
 * groups.
 *
 * Numerics (kernels/numerics.h): each block folds its segment's blocks in
 * increasing order into p = fma(d_w * d_x, isum, p); the groups' p are then
 * added in segment order by one block, so the result is bitwise the plain
 * GEMV's and the GEMM's. How the p meet: on sm_90+ (one or two tokens, at
 * most SEG_CL_MAX segments) through the shared memory of a thread-block
 * cluster (gemv_seg_kernel's CL); otherwise through a per-stream workspace,
 * where the last block of a row group to finish (an atomic ticket per group,
 * reset by that block for the next launch or graph replay) adds them. */
#include <pthread.h>

#include "../../common/log.h"
#include "../numerics.h"
#include "cuda_util.cuh"
#include "gated_norm.cuh"
#include "launch.cuh"
#include "arch_tiles.h"
#include "conv_step.cuh"
#include "matmul_int.cuh"
#include "ops_cuda.cuh"
#include "rms_row.cuh"
#include "seg_addnorm.cuh"
#include "seg_prologue.cuh"

#define SEG CS_DOT_SEG_BLOCKS
#define SEG_WARPS 8
#define SEG_BPW (SEG / SEG_WARPS)   /* 32-value blocks per warp: 4 */
static_assert(SEG_WARPS == SEG_AN_WARPS, "seg_addnorm.cuh plays 4 norm warps per loader warp");
#define SEG_THREADS (SEG_WARPS * 32 + 32)   /* loader warps and the tail warp */
#define SEG_BLOCKS_PER_SM 3          /* the __launch_bounds__ below (4 spilled at 56 registers) */
#define SEG_MAX_NT 4                 /* tokens per launch (shared memory) */
#define SEG_MAX_UNITS 8192           /* row groups per launch (tickets in the workspace) */
#define SEG_CL_FLOATS 2048           /* partials a block of a cluster launch receives (8 KB) */
#ifndef SEG_CL_MAX
#define SEG_CL_MAX 8                 /* segments a cluster launch may have: the portable cluster
                                      * size (docs/PERF.md, eighth session: clusters of 12 made
                                      * the 9B decode slower, and so did a block walking 2 of
                                      * them in a cluster of 6, so ffn_down keeps the tickets) */
#endif

/* The cluster launch's exchange (sm_90+): v into the shared memory of block
 * rank of this block's cluster, at the address local has in this block. */
static __device__ __forceinline__ void seg_cl_store(float *local, int rank, float v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned a = (unsigned)__cvta_generic_to_shared(local), r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(r), "f"(v) : "memory");
#else
    __trap();   /* never launched below sm_90 (gemv_seg_launch) */
#endif
}

/* Every thread of the cluster, in this order: arrive once the block has
 * started, wait before the first store above (a block's shared memory may
 * be written only once it runs), then sync after the last store. */
static __device__ __forceinline__ void seg_cl_arrive(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

static __device__ __forceinline__ void seg_cl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

static __device__ __forceinline__ void seg_cl_sync(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/* This warp's SEG_BPW weight blocks of (unit, segment starting at block b0)
 * into registers: the loads are issued, not waited for. */
static __device__ __forceinline__ void seg_load(const struct mm_parts &ps, int unit, int nb, int b0,
                                                int warp, int lane, int4 (&wv0)[SEG_BPW],
                                                int4 (&wv1)[SEG_BPW], float (&wd)[SEG_BPW])
{
    int pi = mm_part_find(ps, unit);
    int g = unit - ps.p[pi].unit_begin;
    const int4 *qg = ps.p[pi].q + (size_t)g * nb * 64;
    const __half *dg = ps.p[pi].d + (size_t)g * nb * 32;
#pragma unroll
    for (int j = 0; j < SEG_BPW; j++) {
        int b = b0 + warp * SEG_BPW + j;
        if (b < nb) {
            wv0[j] = __ldg(qg + (size_t)b * 64 + lane);
            wv1[j] = __ldg(qg + (size_t)b * 64 + 32 + lane);
            wd[j] = __half2float(dg[(size_t)b * 32 + lane]);
        }
    }
}

/* Block i works on segment i % n_seg of row groups i / n_seg, i / n_seg +
 * ustride, ... (ustride = gridDim.x / n_seg): the grid is sized to the GPU
 * (gemv_seg_launch), so a block stays resident over several row groups.
 * Its SEG_WARPS loader warps compute a group's block dots into shared
 * memory, with the weight and x scales, and at once fetch the next group's
 * weights; one more warp, the tail warp, folds them and writes the group's
 * partial meanwhile (double-buffered: one barrier per group). Tickets are taken once
 * per block after its last group, and the groups it completed are added
 * up then. Each step was measured on an H200 (docs/PERF.md): a block per
 * (group, segment), 57-61% of read bandwidth on large matrices; resident
 * blocks with a per-group fence and ticket, little better. The segment of
 * x is quantized once per block. */
/* The conv epilogue (matmul.h) of output row `row` of part 0: its inputs,
 * loaded by seg_conv_load (issued, not waited for: the CL path issues them
 * before its cluster barrier), then k_conv1d_step's output and state update
 * by seg_conv_store, the same expressions in the same order, so the same
 * bits as the two launches. An invalid slot (as k_conv1d_step) or a row
 * past the part: nothing written. */
struct seg_conv_in {
    float *st;       /* the slot's column 0 of this row; NULL: nothing to write */
    float col[CONV_K - 1], w[CONV_K];
};

static __device__ __forceinline__ void seg_conv_load(const struct mm_parts &ps,
                                                     const struct cuda_mm_pro &pro, int row,
                                                     struct seg_conv_in &c)
{
    int sl = pro.conv_slot[0], cd = pro.conv_dim;
    c.st = NULL;
    if (row >= ps.p[0].n_out || sl < 0 || sl >= pro.conv_n_slots)
        return;
    c.st = pro.conv_state + (size_t)sl * (CONV_K - 1) * cd + row;
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        c.col[j] = c.st[(size_t)j * cd];
#pragma unroll
    for (int j = 0; j < CONV_K; j++)
        c.w[j] = __ldg(pro.conv_w + (size_t)row * CONV_K + j);
}

static __device__ __forceinline__ void seg_conv_store(const struct mm_parts &ps,
                                                      const struct cuda_mm_pro &pro, int row,
                                                      const struct seg_conv_in &c, float v)
{
    if (!c.st)
        return;
    int cd = pro.conv_dim;
    float col[CONV_K];
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        col[j] = c.col[j];
    col[CONV_K - 1] = v;
    ps.p[0].y[row] = conv_silu_out(c.w, col);   /* k_conv1d_step's expression */
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        c.st[(size_t)j * cd] = col[j + 1];
}

/* Output row `row` of part pi, token t: the value v, or (CV: the conv
 * epilogue's instance, one token) through the epilogue for part 0. */
template <bool CV>
static __device__ __forceinline__ void seg_store(const struct mm_parts &ps,
                                                 const struct cuda_mm_pro &pro, int pi, int t,
                                                 int row, float v)
{
    if (CV && pi == 0) {
        struct seg_conv_in c;
        seg_conv_load(ps, pro, row, c);
        seg_conv_store(ps, pro, row, c, v);
        return;
    }
    int n_out = ps.p[pi].n_out;
    if (row < n_out)
        ps.p[pi].y[(size_t)t * n_out + row] = v;
}

/* A segment's partial as added (kernels/numerics.h): AN, times the row
 * norm's scale r; else as mm_out (ps.rs, matmul_scaled). */
template <bool AN>
static __device__ __forceinline__ float seg_scaled(const struct mm_parts &ps, int t, float v,
                                                   float r)
{
    return AN ? __fmul_rn(v, r) : mm_out(ps, t, v);
}

/* XS: one token, x quantized in shared memory through a prologue; AN: the
 * add_rmsnorm prologue (its own instance: it needs more registers and a
 * row-norm scale, formed from each block's segment sum where the partial
 * dots meet, which the other one-token GEMVs should not pay for). CV: with
 * the conv epilogue (its own instance too: the same code without it ran
 * the 9B gate/up and q/k/v projections ~1.3 us slower a call, ncu on an
 * H200, docs/PERF.md twelfth session).
 * CL (sm_90+): the n_seg blocks of a row-group sequence form a cluster, and
 * the partials go through distributed shared memory instead of the
 * workspace and tickets: the tail warp stores group i's partial into the
 * block of rank i % n_seg (slot (i / n_seg) n_seg + seg), one cluster
 * barrier after the last group, then each block adds up the groups it
 * received in segment order. The same bits; what goes is the fence, atomic
 * and global round trip that ended every launch (~2 us a call, docs/
 * PERF.md eighth session). */
template <int NT, bool XS, bool AN, bool CL = false, bool CV = false>
static __global__ void __launch_bounds__(SEG_THREADS, SEG_BLOCKS_PER_SM)
    gemv_seg_kernel(struct mm_parts ps, int units, int n_seg, const float *x,
                    struct cuda_mm_pro pro, const int8_t *xq, const float *xd, int n_in, int nb,
                    float *part, int *tickets)
{
    __shared__ float recv[CL ? SEG_CL_FLOATS / (NT * 32) : 1][NT][32];   /* CL: slots */
    __shared__ float terms[2][SEG][NT][32];   /* block dots, exact as float */
    __shared__ float wscale[2][SEG][32];      /* d_w of (block, row) */
    __shared__ float xscale[2][SEG][NT];      /* d_x of (block, token) */
    __shared__ __align__(16) int8_t xs[XS ? NT * SEG * 32 : 16];
    __shared__ float xds[XS ? NT * SEG : 1];
    __shared__ float ssw[AN ? SEG_WARPS : 1];     /* AN: this block's span sums */
    __shared__ float ssg[AN && CL ? SEG_CL_MAX : 1];   /* AN, CL: the cluster's segment sums */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    bool tail = warp == SEG_WARPS;
    int ustride = gridDim.x / n_seg;
    int seg = blockIdx.x % n_seg, unit = blockIdx.x / n_seg;
    int b0 = seg * SEG, cn = nb - b0 < SEG ? nb - b0 : SEG;

    /* the first group's weights in flight first */
    int4 wv0[SEG_BPW], wv1[SEG_BPW];
    float wd[SEG_BPW];
    if (!tail)
        seg_load(ps, unit, nb, b0, warp, lane, wv0, wv1, wd);
    if (CL)
        seg_cl_arrive();
    cuda_pdl_enter();   /* launch.cuh: x, the workspace and y only from here */
    if (CL)
        seg_cl_wait();   /* every block of the cluster runs: its recv may be written */
    static_assert(!XS || (NT == 1 && SEG == 4 * SEG_WARPS), "the prologue: one token, 4 blocks a warp");
    static_assert(XS || !AN, "add_rmsnorm is a prologue");
    static_assert(!CV || (XS && AN), "the conv epilogue follows the add_rmsnorm prologue");
    if (AN && !tail) {   /* this segment of (x + aux) * norm_w, and its span sums */
        float sp = seg_addnorm_prologue(pro, x, b0, cn, warp, lane, blockIdx.x < n_seg, xs, xds);
        if (lane == 0)
            ssw[warp] = sp;
    } else if (XS && !tail) {   /* quantize this segment of pro(x) into shared memory */
        seg_prologue(pro, x, b0, cn, warp, lane, xs, xds);
    }
    if (XS)
        __syncthreads();
    /* AN: the segment's sum of squares goes where the partial dots go: into
     * ssg[seg] of every block of the cluster (published by the barrier
     * before the sums are added), or the workspace after the partials (by
     * the tail's fence before its tickets); with one segment it is the row's */
    float r = 0.0f;
    float *seg_ss = part + (size_t)units * n_seg * NT * 32;   /* tickets: [gridDim.x] */
    if (AN && tail) {
        float ss = rms_seg_sum(ssw, SEG_WARPS);
        if (n_seg == 1)
            r = rms_scale(ss, n_in, pro.eps);
        else if (CL && lane < n_seg)
            seg_cl_store(&ssg[seg], lane, ss);
        else if (!CL && lane == 0)
            seg_ss[blockIdx.x] = ss;
    }
    for (int it = 0, gi = 0; unit < units; unit += ustride, it ^= 1, gi++) {
        if (!tail) {
#pragma unroll
            for (int j = 0; j < SEG_BPW; j++) {
                int k = warp * SEG_BPW + j, b = b0 + k;
                if (k >= cn)
                    break;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    int4 x0, x1;
                    float dx;
                    if (XS) {
                        const int4 *xv = (const int4 *)(xs + (t * SEG + k) * 32);
                        x0 = xv[0];
                        x1 = xv[1];
                        dx = xds[t * SEG + k];
                    } else {
                        const int4 *xv = (const int4 *)(xq + (size_t)t * n_in + (size_t)b * 32);
                        x0 = __ldg(xv);
                        x1 = __ldg(xv + 1);
                        dx = __ldg(xd + (size_t)t * nb + b);
                    }
                    int isum = dot32(wv0[j], wv1[j], x0, x1, MM_DOT_BIAS);
                    terms[it][k][t][lane] = biased_dot_to_float(isum);
                    if (lane == 0)
                        xscale[it][k][t] = dx;
                }
                wscale[it][k][lane] = wd[j];
            }
            if (unit + ustride < units)   /* the next group's weights fly from here */
                seg_load(ps, unit + ustride, nb, b0, warp, lane, wv0, wv1, wd);
        }
        /* terms[it] complete; the tail warp is done with terms[it ^ 1] */
        __syncthreads();
        if (!tail)
            continue;
        int pi = mm_part_find(ps, unit);
        int row = (unit - ps.p[pi].unit_begin) * 32 + lane;
        for (int t = 0; t < NT; t++) {   /* lane = row */
            float p = 0.0f;
            int k = 0;
            for (; k + 8 <= cn; k += 8) {
                float v[8], sc[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    v[u] = terms[it][k + u][t][lane];
                    sc[u] = __fmul_rn(wscale[it][k + u][lane], xscale[it][k + u][t]);
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    p = __fmaf_rn(sc[u], v[u], p);
            }
            for (; k < cn; k++)
                p = __fmaf_rn(__fmul_rn(wscale[it][k][lane], xscale[it][k][t]), terms[it][k][t][lane],
                              p);
            if (n_seg == 1) {
                seg_store<CV>(ps, pro, pi, t, row, __fadd_rn(0.0f, seg_scaled<AN>(ps, t, p, r)));
            } else if (CL) {
                seg_cl_store(&recv[gi / n_seg * n_seg + seg][t][lane], gi % n_seg, p);
            } else {
                __stcg(part + (((size_t)unit * n_seg + seg) * NT + t) * 32 + lane, p);
            }
        }
    }
    if (n_seg == 1)
        return;
    int unit0 = blockIdx.x / n_seg, n_mine = (units - unit0 + ustride - 1) / ustride;
    if (CL) {   /* the groups gi = seg, seg + n_seg, ... of this block's sequence */
        /* the conv epilogue's inputs of this warp's first group: their DRAM
         * round trip overlaps the cluster barrier */
        struct seg_conv_in c0;
        c0.st = NULL;
        bool pre = false;
        if (CV && warp * n_seg + seg < n_mine) {
            int u = unit0 + (warp * n_seg + seg) * ustride;
            if (mm_part_find(ps, u) == 0) {
                seg_conv_load(ps, pro, (u - ps.p[0].unit_begin) * 32 + lane, c0);
                pre = true;
            }
        }
        seg_cl_sync();
        if (AN)
            r = rms_scale(rms_seg_sum(ssg, n_seg), n_in, pro.eps);   /* segments in order */
        for (int j = warp; j * n_seg + seg < n_mine; j += SEG_WARPS + 1) {
            int u = unit0 + (j * n_seg + seg) * ustride;
            int pi = mm_part_find(ps, u);
            int row = (u - ps.p[pi].unit_begin) * 32 + lane;
            for (int t = 0; t < NT; t++) {
                float tot = 0.0f;
                for (int sg = 0; sg < n_seg; sg++)
                    tot = __fadd_rn(tot, seg_scaled<AN>(ps, t, recv[j * n_seg + sg][t][lane], r));
                if (pre && j == warp)
                    seg_conv_store(ps, pro, row, c0, tot);
                else
                    seg_store<CV>(ps, pro, pi, t, row, tot);
            }
        }
        return;
    }
    /* Tickets, once for all of this block's groups (a fence and an atomic
     * round trip per group kept the tail warp busier than the loads took):
     * in chunks of 32 groups, lane i of the tail warp takes the ticket of
     * the chunk's group i; the groups this block completed last are added
     * up in segment order by all warps, one group per warp. */
    __shared__ int s_done[32], s_n_done;
    if (tail)
        __threadfence();   /* this block's partials visible device-wide before its tickets */
    for (int c0 = 0; c0 < n_mine; c0 += 32) {
        if (tail) {
            int u = unit0 + (c0 + lane) * ustride;
            bool last = c0 + lane < n_mine && atomicAdd(tickets + u, 1) == n_seg - 1;
            unsigned m = __ballot_sync(0xffffffffu, last);
            if (last)
                s_done[__popc(m & ((1u << lane) - 1))] = u;
            if (lane == 0)
                s_n_done = __popc(m);
        }
        __syncthreads();
        for (int i = warp; i < s_n_done; i += SEG_WARPS + 1) {
            int u = s_done[i];
            __threadfence();   /* the other blocks' partials of u, seen through their tickets */
            int pi = mm_part_find(ps, u);
            int row = (u - ps.p[pi].unit_begin) * 32 + lane;
            if (AN) {   /* u's blocks are (u % ustride) n_seg + sg: their segment sums */
                float ss = 0.0f;
                for (int sg = 0; sg < n_seg; sg++)
                    ss = __fadd_rn(ss, __ldcg(seg_ss + (size_t)(u % ustride) * n_seg + sg));
                r = rms_scale(ss, n_in, pro.eps);
            }
            for (int t = 0; t < NT; t++) {
                float tot = 0.0f;
                const float *pp = part + ((size_t)u * n_seg * NT + t) * 32 + lane;
                for (int sg = 0; sg < n_seg; sg++)
                    tot = __fadd_rn(tot, seg_scaled<AN>(ps, t, __ldcg(pp + (size_t)sg * NT * 32), r));
                seg_store<CV>(ps, pro, pi, t, row, tot);
            }
            if (lane == 0)
                tickets[u] = 0;   /* ready for the next launch */
        }
        __syncthreads();   /* s_done is reused */
    }
}

/* ---- per-stream workspace: tickets [SEG_MAX_UNITS] ints, then partials ---- */

struct seg_ws {
    int dev;
    cudaStream_t stream;
    void *buf;
    size_t cap;
};

#define SEG_WS_MAX 32
static struct seg_ws g_ws[SEG_WS_MAX];
static int g_ws_n;
static pthread_mutex_t g_ws_mu = PTHREAD_MUTEX_INITIALIZER;

/* The workspace of (current device, s) with >= part_floats partials; grows
 * it when needed, never while s is being captured into a graph (a decode
 * step is always run eagerly before it is recorded, so the size is known).
 * It grows to the largest (row groups x segments x tokens) launched, which a
 * model reaches within its first decode step (run eagerly); a growth bumps the memory
 * generation so that recorded graphs holding the old pointer are re-recorded. */
static cudaError_t seg_workspace(cudaStream_t s, size_t part_floats, float **part, int **tickets)
{
    int dev = 0;
    cudaGetDevice(&dev);
    size_t need = SEG_MAX_UNITS * sizeof(int) + part_floats * sizeof(float);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&g_ws_mu);
    struct seg_ws *w = NULL;
    for (int i = 0; i < g_ws_n && !w; i++)
        if (g_ws[i].dev == dev && g_ws[i].stream == s)
            w = &g_ws[i];
    if (!w && g_ws_n < SEG_WS_MAX) {
        w = &g_ws[g_ws_n++];
        w->dev = dev;
        w->stream = s;
        w->buf = NULL;
        w->cap = 0;
    }
    if (!w) {
        e = cudaErrorNotReady;
    } else if (w->cap < need) {
        cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone) {
            e = cudaErrorNotReady;
        } else {
            if (w->buf) {
                cudaStreamSynchronize(s);   /* queued launches may still use it */
                cudaFree(w->buf);
                w->buf = NULL;
                w->cap = 0;
            }
            size_t cap = need + need / 4;
            cuda_mem_generation_bump();
            if ((e = cudaMalloc(&w->buf, cap)) == cudaSuccess &&
                (e = cudaMemsetAsync(w->buf, 0, SEG_MAX_UNITS * sizeof(int), s)) == cudaSuccess)
                w->cap = cap;
            cuda_pdl_barrier();   /* the launch after the memset is plain */
        }
    }
    if (e == cudaSuccess) {
        *tickets = (int *)w->buf;
        *part = (float *)((char *)w->buf + SEG_MAX_UNITS * sizeof(int));
    }
    pthread_mutex_unlock(&g_ws_mu);
    return e;
}

extern "C" void cuda_matmul_release_stream(struct CUstream_st *stream)
{
    int dev = 0;
    cudaGetDevice(&dev);
    pthread_mutex_lock(&g_ws_mu);
    for (int i = 0; i < g_ws_n; i++)
        if (g_ws[i].dev == dev && g_ws[i].stream == (cudaStream_t)stream) {
            cudaFree(g_ws[i].buf);
            g_ws[i] = g_ws[--g_ws_n];
            break;
        }
    pthread_mutex_unlock(&g_ws_mu);
}

template <int NT, bool XS, bool AN = false, bool CV = false>
static cudaError_t seg_launch_nt(const struct mm_parts &ps, int units, int n_seg, int grid,
                                 const float *x, const struct cuda_mm_pro &pro, const int8_t *xq,
                                 const float *xd, int n_in, int nb, float *part, int *tickets,
                                 cudaStream_t s)
{
    return cuda_launch(gemv_seg_kernel<NT, XS, AN, false, CV>, grid, SEG_THREADS, 0, s, ps, units, n_seg, x,
                       pro, xq, xd, n_in, nb, part, tickets);
}

/* ---- the cluster launch (sm_90+) ---- */

#ifndef SEG_CLUSTERS
#define SEG_CLUSTERS 1   /* 0: always the tickets (a build option for A/B runs) */
#endif

/* Clusters of n_seg blocks of this instance that can be resident at once on
 * the current device (cached; 0: none, cluster launches not possible).
 * refuse: a cluster launch failed; answer 0 from now on, so that the
 * failure is met once, in an eager step, never inside a graph capture. */
template <int NT, bool XS, bool AN, bool CV = false>
static int seg_max_clusters(int n_seg, bool refuse = false)
{
    static int cached[16][SEG_CL_MAX + 1];   /* + 1; 0: not asked yet */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16 || n_seg > SEG_CL_MAX)
        return 0;
    pthread_mutex_lock(&g_ws_mu);
    if (refuse)
        cached[dev][n_seg] = 1;
    int n = cached[dev][n_seg] - 1;
    pthread_mutex_unlock(&g_ws_mu);
    if (n >= 0)
        return n;
    n = 0;
    if (cuda_code_arch() >= 900) {   /* clusters and DSMEM are in sm_90 code only */
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        cfg.gridDim = dim3(n_seg);
        cfg.blockDim = dim3(SEG_THREADS);
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)n_seg;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaOccupancyMaxActiveClusters(&n, gemv_seg_kernel<NT, XS, AN, true, CV>, &cfg) !=
            cudaSuccess)
            n = 0;
    }
    (void)cudaGetLastError();   /* a refusal only means the tickets */
    LOG_DEBUG("cuda", "segmented GEMV: clusters of %d blocks (%d tokens): %d resident", n_seg, NT,
              n);
    pthread_mutex_lock(&g_ws_mu);
    cached[dev][n_seg] = n + 1;
    pthread_mutex_unlock(&g_ws_mu);
    return n;
}

/* Launches the cluster form when it applies (2..SEG_CL_MAX segments, every
 * block's received partials within recv, the clusters resident at once):
 * cudaSuccess, or cudaErrorNotSupported (nothing queued: use the tickets). */
template <int NT, bool XS, bool AN, bool CV = false>
static cudaError_t seg_launch_cluster(const struct mm_parts &ps, int units, int n_seg,
                                      int per_seg, const float *x, const struct cuda_mm_pro &pro,
                                      const int8_t *xq, const float *xd, int n_in, int nb,
                                      cudaStream_t s)
{
    if (!SEG_CLUSTERS || n_seg < 2 || n_seg > SEG_CL_MAX)
        return cudaErrorNotSupported;
    int max_cl = seg_max_clusters<NT, XS, AN, CV>(n_seg);
    per_seg = per_seg < max_cl ? per_seg : max_cl;
    if (per_seg < 1)
        return cudaErrorNotSupported;
    int rounds = (units + per_seg - 1) / per_seg;   /* groups a block walks */
    if ((rounds + n_seg - 1) / n_seg * n_seg * NT * 32 > SEG_CL_FLOATS)
        return cudaErrorNotSupported;
    int grid = (units + rounds - 1) / rounds * n_seg;
    cudaError_t e = cuda_launch_cluster(gemv_seg_kernel<NT, XS, AN, true, CV>, n_seg, grid,
                                        SEG_THREADS, 0, s, ps, units, n_seg, x, pro, xq, xd,
                                        n_in, nb, (float *)NULL, (int *)NULL);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        LOG_WARN("cuda", "segmented GEMV: a cluster launch of %d blocks failed (%s); tickets from "
                 "now on", n_seg, cudaGetErrorString(e));
        seg_max_clusters<NT, XS, AN, CV>(n_seg, true);
        return cudaErrorNotSupported;
    }
    return e;
}

cudaError_t gemv_seg_launch(int nt, const struct mm_parts &ps, int units, const float *x,
                            const int8_t *xq, const float *xd, int n_in, int nb, bool xs,
                            cudaStream_t s, const struct cuda_mm_pro *pro_in)
{
    int n_seg = (nb + SEG - 1) / SEG;
    struct cuda_mm_pro pro = {};
    if (pro_in)
        pro = *pro_in;
    if (units > SEG_MAX_UNITS || nt < 1 || nt > MM_GEMV_MAX_TOKENS || (xs && nt != 1) ||
        (pro.kind != CUDA_MM_PRO_NONE && !xs) ||
        (pro.conv_w && (!xs || pro.kind != CUDA_MM_PRO_ADD_RMSNORM)) ||
        (pro.kind == CUDA_MM_PRO_ADD_RMSNORM &&
         (n_in > NORM_THREADS * NORM_NPT || !pro.x_out || !pro.norm_w)))
        return cudaErrorInvalidValue;
    if (nt > SEG_MAX_NT) {   /* double-buffered terms of 8 tokens exceed 48 KB: two launches */
        struct mm_parts rest = ps;
        for (int i = 0; i < ps.n; i++)
            rest.p[i].y = ps.p[i].y + (size_t)SEG_MAX_NT * ps.p[i].n_out;
        rest.rs = ps.rs ? ps.rs + SEG_MAX_NT : NULL;
        cudaError_t e = gemv_seg_launch(SEG_MAX_NT, ps, units, x, xq, xd, n_in, nb, false, s);
        if (e != cudaSuccess)
            return e;
        return gemv_seg_launch(nt - SEG_MAX_NT, rest, units, x + (size_t)SEG_MAX_NT * n_in,
                               xq + (size_t)SEG_MAX_NT * n_in, xd + (size_t)SEG_MAX_NT * nb, n_in,
                               nb, false, s);
    }
    /* blocks per segment: at most one resident wave, the groups spread evenly */
    int per_seg = cuda_sm_count() * SEG_BLOCKS_PER_SM / n_seg;
    per_seg = per_seg < 1 ? 1 : per_seg;
    cudaError_t e = cudaErrorNotSupported;
    bool cv = pro.conv_w != NULL;   /* the conv epilogue: its own instances (matmul.h) */
    if (xs && pro.kind == CUDA_MM_PRO_ADD_RMSNORM && cv)
        e = seg_launch_cluster<1, true, true, true>(ps, units, n_seg, per_seg, x, pro, xq, xd, n_in,
                                                    nb, s);
    else if (xs && pro.kind == CUDA_MM_PRO_ADD_RMSNORM)
        e = seg_launch_cluster<1, true, true>(ps, units, n_seg, per_seg, x, pro, xq, xd, n_in, nb, s);
    else if (xs)
        e = seg_launch_cluster<1, true, false>(ps, units, n_seg, per_seg, x, pro, xq, xd, n_in, nb, s);
    else if (nt == 1)
        e = seg_launch_cluster<1, false, false>(ps, units, n_seg, per_seg, x, pro, xq, xd, n_in, nb, s);
    else if (nt == 2)
        e = seg_launch_cluster<2, false, false>(ps, units, n_seg, per_seg, x, pro, xq, xd, n_in, nb, s);
    if (e != cudaErrorNotSupported)
        return e;
    int rounds = (units + per_seg - 1) / per_seg;
    int grid = (units + rounds - 1) / rounds * n_seg;
    float *part = NULL;
    int *tickets = NULL;
    /* the partials, then (add_rmsnorm) a segment sum per block */
    e = seg_workspace(s, (size_t)units * n_seg * nt * 32 + grid, &part, &tickets);
    if (e != cudaSuccess)
        return e;
    if (xs && pro.kind == CUDA_MM_PRO_ADD_RMSNORM && cv)
        return seg_launch_nt<1, true, true, true>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb,
                                                  part, tickets, s);
    if (xs && pro.kind == CUDA_MM_PRO_ADD_RMSNORM)
        return seg_launch_nt<1, true, true>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb, part,
                                            tickets, s);
    if (xs)
        return seg_launch_nt<1, true>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb, part,
                                      tickets, s);
    switch (nt) {
    case 1: return seg_launch_nt<1, false>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb, part, tickets, s);
    case 2: return seg_launch_nt<2, false>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb, part, tickets, s);
    case 3: return seg_launch_nt<3, false>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb, part, tickets, s);
    default: return seg_launch_nt<4, false>(ps, units, n_seg, grid, x, pro, xq, xd, n_in, nb, part, tickets, s);
    }
}

int gemv_seg_max_units(void)
{
    return SEG_MAX_UNITS;
}
