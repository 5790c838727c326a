/* bench_ring.cu - an experiment, not product code: the decode chain of
 * bench_chain.cuh (129 matrices, 8.5 GB a pass) as one persistent kernel
 * whose weights stream through a ring of shared-memory slots filled by bulk
 * copies (sm_90 cp.async.bulk, completion on an mbarrier), so that DRAM
 * keeps working across the dependency between two matrices.
 *
 * Why: bench_persistent.cu measured that the chain's rows alone stream at
 * ~97% of the read probe, but every dependency between two matrices (a
 * launch boundary, a grid barrier, or per-segment flags) costs 3-6 us, in
 * which the memory system drains: the next matrix's weights can be
 * requested before its input exists, but registers hold only ~128 KB an
 * SM, and L2 prefetches slow the tail the dependency waits for. Here one
 * producer lane per block requests the block's items of every matrix in
 * order, as far ahead as the ring has free slots (up to SLOTS x 34 KB an
 * SM, ~27 MB over the GPU: ~6 us of the read bandwidth), ignoring the
 * matrix boundaries; eight consumer warps wait for the grid barrier and
 * quantize the input once per matrix as before, then compute the items from
 * shared memory and free their slots.
 *
 * An item is 8 rows x 4,096 (32 KB) or 2 rows x 12,288 (24 KB), contiguous
 * in the row-major weights, plus the rows' scales. Every row is computed by
 * one warp in k_pt_one's order (16 values per DP4A chain, chunks of 512 in
 * increasing order, the same shuffle tree), so the outputs must equal the
 * launch-per-matrix reference bit for bit: the checksum is compared.
 * Prints BENCH lines as bench_persistent.cu does, with the reference (one
 * launch per matrix, and the same as a CUDA graph) measured in the same
 * run. The variants (k_ring's MODE) add, in turn: whole 32-row groups per
 * block quantized by their producer, LL entries instead of the barrier
 * (bench_ring_sync.cuh), and a consumer in the product's summation order
 * over a packed item layout (bench_ring_contract.cuh), whose bits are
 * compared with a reference chain in that order. Figures: docs/PERF.md,
 * "Thirteenth session"; the plan they lead to: docs/DECODE_RING.md. */
#include "bench_chain.cuh"
#include "bench_ring_contract.cuh"
#include "bench_ring_sync.cuh"

#define RG_SLOT_Q 32768          /* quants of an item */
#define RG_SLOT_D 2048           /* its scales */
#define RG_SLOT (RG_SLOT_Q + RG_SLOT_D)
#define RG_THREADS (PT_THREADS + 32)   /* 8 consumer warps, the producer warp */

/* Rows an item of m holds: 32 KB of quants at n_in 4,096, 24 KB at 12,288. */
static __device__ __forceinline__ int rg_rows(const struct pt_mat &m)
{
    return m.n_in > PT_CH ? 2 : 8;
}

/* One row from shared memory (q: its quants, d: its scales), k_pt_one's
 * expression and order; the warp's total in every lane. */
template <bool FAST>
static __device__ __forceinline__ float rg_row(const int8_t *q, const __half *d, const int8_t *xq,
                                               const float *dx, int n_in, int lane)
{
    float acc = 0.0f;
    if (FAST) {   /* 8 chunks' loads first, then their chain: the same order, the same bits */
        for (int c0 = 0; c0 < n_in; c0 += PT_CH) {
            int4 w[8], xv[8];
            float sc[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int e = c0 + u * 512 + lane * 16;
                w[u] = *(const int4 *)(q + e);
                xv[u] = *(const int4 *)(xq + e);
                sc[u] = __half2float(d[e / 32]) * dx[e / 32];
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int s = __dp4a(w[u].x, xv[u].x, 0);
                s = __dp4a(w[u].y, xv[u].y, s);
                s = __dp4a(w[u].z, xv[u].z, s);
                s = __dp4a(w[u].w, xv[u].w, s);
                acc = fmaf(sc[u], (float)s, acc);
            }
        }
    } else {
        for (int c = 0; c < n_in; c += 512) {
            int e = c + lane * 16;
            int4 w = *(const int4 *)(q + e), xv = *(const int4 *)(xq + e);
            int s = __dp4a(w.x, xv.x, 0);
            s = __dp4a(w.y, xv.y, s);
            s = __dp4a(w.z, xv.z, s);
            s = __dp4a(w.w, xv.w, s);
            acc = fmaf(__half2float(d[e / 32]) * dx[e / 32], (float)s, acc);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

/* A block's walk of its items in static order (blockIdx + c G units of per
 * items, matrix by matrix), for the producer that prefetches ahead. */
struct rg_it {
    int i, c, t;
};

template <bool PQ>
static __device__ __forceinline__ void rg_settle(const struct pt_args *a, struct rg_it &it)
{
    while (it.i < a->n_mats) {
        const struct pt_mat &m = a->m[it.i];
        int R = rg_rows(m), per = PQ ? 32 / R : 1, units = m.n_out / R / per;
        if ((int)blockIdx.x + it.c * (int)gridDim.x < units)
            return;
        it.i++;
        it.c = 0;
        it.t = 0;
    }
}

template <bool PQ>
static __device__ __forceinline__ void rg_advance(const struct pt_args *a, struct rg_it &it)
{
    int per = PQ ? 32 / rg_rows(a->m[it.i]) : 1;
    if (++it.t == per) {
        it.t = 0;
        it.c++;
    }
    rg_settle<PQ>(a, it);
}

static __device__ __forceinline__ void rg_prefetch_l2(const void *src, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#endif
}

/* MODE 0: as described at the top; 1: the producer issues an item only
 * after the consumers took the previous one (a ring of one in flight, the
 * same code: how much the lookahead itself gives). Diagnostics (outputs
 * not the chain's): 2, neither the grid barrier nor the input's
 * quantization after the first matrix (the ring's streaming alone); 3, the
 * barriers kept, no quantization after the first.
 * 4: MODE 0 with the quantization moved to the producer: a block takes
 * whole groups of 32 rows (32 / R consecutive items), so it can quantize
 * each group of its output itself (pt_quantize's expressions: the same
 * bits) into gq / gdx, and after the barrier every block loads the int8
 * input in one round trip instead of quantizing the fp32 one. No atomics:
 * a group never spans blocks. 5: MODE 4 with a 2 us sleep after each
 * barrier (diagnostic: how much of a stall the ring hides); 6: MODE 4 with
 * the last arriver's flag as the barrier (rg_grid_sync); 7: MODE 4 with
 * the groups claimed by the producers from a counter per matrix instead of
 * dealt round robin (the blocks finish a matrix together: no ring fills up
 * while a straggler ends its last group).
 * 8, 9: MODE 4 with the producer also prefetching into L2 the item 6 (8)
 * or 12 (9) past the one it copies into the ring: lookahead beyond the
 * ring's 192 KB an SM, in the 50 MB L2. 10: MODE 4 with the consumers'
 * row loop unrolled (rg_row FAST: its loads issued together), so that a
 * ring filled during a stall drains sooner. 11: MODE 10 without the grid
 * barrier: the producers' quantized groups are LL entries (rg_ll), and a
 * block starts a matrix once its whole input carries the epoch of the
 * matrix before (5 slots: the staging takes the sixth's shared memory).
 * 12: MODE 11 with the input's entries in registers (rg_ll_load_regs), no
 * staging buffer, so 6 slots. 13: MODE 12 with the rows in the product's
 * summation order (rg_item_dots / rg_item_chains; 5 slots: the terms take
 * the sixth's shared memory; its bits are compared
 * with k_ref_contract's, not k_pt_one's). Diagnostics of it: 14, the
 * chain warp skips the chains; 15, the dot warps skip the dots. 
 * The producer tells the consumers each slot's item (slot_mat, slot_j); a
 * slot of the next matrix ends the consumers' walk of this one. */
template <int SLOTS, int MODE>
static __global__ void __launch_bounds__(RG_THREADS + 32, 1)
    k_ring(const struct pt_args *a, const struct rg_ll *ll, unsigned pass)
{
    constexpr bool PQ = MODE >= 4;   /* producer-side quantization */
    constexpr bool L2P = MODE == 8 || MODE == 9;
    constexpr bool LL = MODE >= 11;   /* LL entries instead of a grid barrier */
    constexpr bool CO = MODE >= 13;   /* the contract order: dot warps and a chain warp */
    extern __shared__ __align__(128) unsigned char ring[];   /* SLOTS x RG_SLOT */
    __shared__ __align__(16) int8_t xq[PT_MAXK];
    __shared__ float dx[PT_MAXK / 32];
    __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS];
    __shared__ int slot_mat[SLOTS], slot_j[SLOTS];   /* the item a slot holds; n_mats: the end */
    __shared__ __align__(16) unsigned long long llst[MODE == 11 ? PT_MAXK / 4 + PT_MAXK / 32 : 2];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = gridDim.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < SLOTS; s++) {
            rg_mb_init(&full[s], 1);
            rg_mb_init(&empty[s], PT_WARPS);
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
    }
    __syncthreads();
    if (warp == PT_WARPS) {   /* the producer: this block's items, in order, then the end */
        if (lane != 0)
            return;
        int n = 0;
        if (L2P) {   /* the static walk with an L2 prefetch LEAD items ahead */
            constexpr int LEAD = MODE == 8 ? 6 : 12;
            struct rg_it cur = {0, 0, 0}, pre;
            rg_settle<PQ>(a, cur);
            pre = cur;
            for (int k = 0; k < LEAD && pre.i < a->n_mats; k++)
                rg_advance<PQ>(a, pre);
            for (; cur.i < a->n_mats; n++) {
                int s = n % SLOTS;
                if (n >= SLOTS)
                    rg_mb_wait(&empty[s], (n / SLOTS - 1) & 1);
                const struct pt_mat &m = a->m[cur.i];
                int R = rg_rows(m), per = 32 / R, j = ((int)blockIdx.x + cur.c * G) * per + cur.t;
                slot_mat[s] = cur.i;
                slot_j[s] = j;
                unsigned char *slot = ring + (size_t)s * RG_SLOT;
                unsigned qb = (unsigned)(R * m.n_in), db = (unsigned)(R * (m.n_in / 32) * 2);
                rg_mb_expect(&full[s], qb + db);
                rg_bulk(slot, m.w + (size_t)j * R * m.n_in, qb, &full[s]);
                rg_bulk(slot + RG_SLOT_Q, m.d + (size_t)j * R * (m.n_in / 32), db, &full[s]);
                if (pre.i < a->n_mats) {
                    const struct pt_mat &pm = a->m[pre.i];
                    int pR = rg_rows(pm), pj = ((int)blockIdx.x + pre.c * G) * (32 / pR) + pre.t;
                    rg_prefetch_l2(pm.w + (size_t)pj * pR * pm.n_in, (unsigned)(pR * pm.n_in));
                    rg_prefetch_l2(pm.d + (size_t)pj * pR * (pm.n_in / 32), (unsigned)(pR * (pm.n_in / 32) * 2));
                    rg_advance<PQ>(a, pre);
                }
                rg_advance<PQ>(a, cur);
            }
        }
        for (int i = 0; i < (L2P ? 0 : a->n_mats); i++) {
            const struct pt_mat &m = a->m[i];
            int R = rg_rows(m), per = PQ ? 32 / R : 1, units = m.n_out / R / per;
            unsigned qb = (unsigned)(R * m.n_in), db = (unsigned)(R * (m.n_in / 32) * 2);
            /* units (groups of per items): blockIdx + c G, or (MODE 7) claimed */
            for (int c = 0;; c++) {
                int u = MODE == 7 ? (int)atomicAdd(a->claims + i, 1u) : blockIdx.x + c * G;
                if (u >= units)
                    break;
                for (int t = 0; t < per; t++, n++) {
                    int s = n % SLOTS, j = u * per + t;
                    if (MODE == 1 && n > 0)
                        rg_mb_wait(&empty[(n - 1) % SLOTS], ((n - 1) / SLOTS) & 1);
                    if (n >= SLOTS)
                        rg_mb_wait(&empty[s], (n / SLOTS - 1) & 1);
                    slot_mat[s] = i;
                    slot_j[s] = j;
                    unsigned char *slot = ring + (size_t)s * RG_SLOT;
                    rg_mb_expect(&full[s], qb + db);
                    rg_bulk(slot, (CO ? m.wp : m.w) + (size_t)j * R * m.n_in, qb, &full[s]);
                    rg_bulk(slot + RG_SLOT_Q, (CO ? m.dp : m.d) + (size_t)j * R * (m.n_in / 32), db,
                            &full[s]);
                }
            }
        }
        /* the end: a slot without a copy, its phase completed by the arrival */
        int s = n % SLOTS;
        if (n >= SLOTS)
            rg_mb_wait(&empty[s], (n / SLOTS - 1) & 1);
        slot_mat[s] = a->n_mats;
        rg_mb_arrive(&full[s]);
        return;
    }
    __shared__ float ygroup[2][32];   /* PQ: a group's outputs, by group parity */
    __shared__ float terms[CO ? 2 : 1][CO ? RG_TERMS : 1];   /* by hand-over parity */
    __shared__ float scs[CO ? 2 : 1][CO ? RG_TERMS : 1];
    __shared__ int info_i[2], info_j[2];
    __shared__ float pbuf[32];
    if (CO && warp == PT_WARPS + 1) {   /* the chain warp, one item behind the dots */
        for (int h = 0, gp = 0;; h++) {
            rg_bar_sync(2);   /* the dots of hand-over h */
            int i = info_i[h & 1], j = info_j[h & 1];
            if (i >= a->n_mats)
                return;
            const struct pt_mat &m = a->m[i];
            int R = rg_rows(m), per = 32 / R, t = j % per, u = j / per;
            float v = MODE == 14 ? terms[h & 1][lane]   /* diagnostic: no chains */
                                 : rg_item_chains(R, m.n_in, terms[h & 1], scs[h & 1], pbuf, lane);
            if (lane < R) {
                a->buf[(i + 1) & 1][j * R + lane] = v;
                ygroup[gp][t * R + lane] = v;
            }
            __syncwarp();
            rg_bar_arrive(3);   /* terms[h & 1] may be written again */
            if (t == per - 1 && i + 1 < a->n_mats) {
                rg_publish_group<LL>(a, ll, i, u, ygroup[gp][lane], pass, lane);
                gp ^= 1;
            }
        }
    }
    if (CO) {   /* the dot warps: block dots of each item, handed to the chain warp */
        int n = 0, h = 0;
        for (int i = 0; i <= a->n_mats; i++) {
            bool end = i == a->n_mats;
            const struct pt_mat &m = a->m[end ? 0 : i];
            if (end) {
            } else if (i > 0) {
                rg_ll_load_regs(ll, i & 1, m.n_in, 256u * pass + (unsigned)i, xq, dx);
            } else {
                pt_quantize_batched(a->buf[0], m.n_in, xq, dx);
                rg_consumers_sync();
            }
            for (;; n++, h++) {
                int s = n % SLOTS;
                if (!end) {
                    rg_mb_wait(&full[s], (n / SLOTS) & 1);
                    if (slot_mat[s] != i)
                        break;
                }
                /* buffer h & 1: the chain warp finished hand-over h - 2 (waited
                 * for below, one hand-over ago) */
                if (threadIdx.x == 0) {
                    info_i[h & 1] = i;
                    info_j[h & 1] = end ? 0 : slot_j[s];
                }
                if (!end) {
                    if (MODE != 15)   /* 15, diagnostic: no block dots */
                        rg_item_dots((const int4 *)(ring + (size_t)s * RG_SLOT),
                                     (const __half *)(ring + (size_t)s * RG_SLOT + RG_SLOT_Q),
                                     rg_rows(m), m.n_in, xq, dx, terms[h & 1], scs[h & 1]);
                    __syncwarp();
                    if (lane == 0)
                        rg_mb_arrive(&empty[s]);
                }
                /* a named barrier holds one generation: hand over h only once the
                 * chain warp has finished h - 1 (so it waits on barrier 2 again) */
                if (h >= 1)
                    rg_bar_sync(3);
                rg_bar_arrive(2);
                if (end)
                    return;
            }
        }
        return;
    }
    int n = 0, gp = 0;
    for (int i = 0; i < a->n_mats; i++) {
        const struct pt_mat &m = a->m[i];
        if (i > 0 && MODE != 2 && !LL)
            rg_grid_sync<MODE == 6>(a->barrier, (unsigned)i * G, (unsigned)i, MODE == 5 ? 2000 : 0);
        if (MODE == 11 && i > 0) {
            rg_ll_load(ll, i & 1, m.n_in, 256u * pass + (unsigned)i, llst, xq, dx);
        } else if (MODE >= 12 && i > 0) {
            rg_ll_load_regs(ll, i & 1, m.n_in, 256u * pass + (unsigned)i, xq, dx);
        } else if (PQ && i > 0) {
            pt_load_quantized(a->gq[i & 1], a->gdx[i & 1], m.n_in, xq, dx);
            rg_consumers_sync();
        } else if (i == 0 || MODE < 2) {   /* 2, 3: the first input, padded */
            pt_quantize_batched(a->buf[i & 1], MODE == 2 || MODE == 3 ? PT_MAXK : m.n_in, xq, dx);
            rg_consumers_sync();
        }
        float *y = a->buf[(i + 1) & 1];
        int R = rg_rows(m), per = PQ ? 32 / R : 1;
        for (int k = 0;; n++, k++) {
            int s = n % SLOTS;
            rg_mb_wait(&full[s], (n / SLOTS) & 1);
            if (slot_mat[s] != i)   /* the next matrix's: taken there (its phase stays complete) */
                break;
            int j = slot_j[s], t = j % per, u = j / per;
            const unsigned char *slot = ring + (size_t)s * RG_SLOT;
            /* 8 rows: warp w takes row w; 2 rows: warps 2 (k % 4) and + 1 */
            int r = R == 8 ? warp : warp - 2 * (k & 3);
            if (r >= 0 && r < R) {
                float v = rg_row<MODE >= 10>((const int8_t *)slot + (size_t)r * m.n_in,
                                 (const __half *)(slot + RG_SLOT_Q) + (size_t)r * (m.n_in / 32), xq, dx,
                                 m.n_in, lane);
                if (lane == 0) {
                    y[j * R + r] = v;
                    if (PQ)
                        ygroup[gp][t * R + r] = v;
                }
            }
            /* every consumer has read slot_mat / slot_j before the slot is freed */
            __syncwarp();
            if (lane == 0)
                rg_mb_arrive(&empty[s]);
            if (PQ && t == per - 1 && i + 1 < a->n_mats) {   /* the group, quantized */
                rg_consumers_sync();
                if (warp == 0)
                    rg_publish_group<LL>(a, ll, i, u, ygroup[gp][lane], pass, lane);
                gp ^= 1;
            }
        }
    }
}

template <int SLOTS, int MODE>
static int rg_prepare(void)
{
    return cudaFuncSetAttribute(k_ring<SLOTS, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SLOTS * RG_SLOT) == cudaSuccess;
}

int main(void)
{
    struct cuda_probe p;
    if (cuda_probe_run(&p, 0) != 0) {
        fprintf(stderr, "probe failed\n");
        return 1;
    }
    int major = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major < 9) {
        printf("SKIP: the ring needs sm_90 (bulk copies, mbarrier transactions)\n");
        return 0;
    }
    printf("probe: read %.1f GB/s, %d SMs\n", p.read_gbps, p.sm_count);
    static struct pt_args a;
    double bytes = chain_build(a);
    for (int i = 0; i < a.n_mats; i++) {   /* the contract-order modes' packed copies */
        struct pt_mat *m = &a.m[i];
        int R = m->n_in > PT_CH ? 2 : 8;
        int8_t *wp;
        __half *dp;
        CK(cudaMalloc(&wp, (size_t)m->n_out * m->n_in));
        CK(cudaMalloc(&dp, (size_t)m->n_out * m->n_in / 32 * 2));
        k_repack_w<<<1024, 256>>>(m->w, wp, m->n_out, m->n_in, R);
        k_repack_d<<<1024, 256>>>(m->d, dp, m->n_out, m->n_in / 32, R);
        m->wp = wp;
        m->dp = dp;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    struct pt_args *a_dev;
    CK(cudaMalloc(&a_dev, sizeof a));
    CK(cudaMemcpy(a_dev, &a, sizeof a, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    printf("matrices: %d, %.3f GB a pass\n", a.n_mats, bytes / 1e9);
    float *x0;
    CK(cudaMalloc(&x0, 248320 * 4));
    CK(cudaMemcpy(x0, a.buf[0], 248320 * 4, cudaMemcpyDeviceToDevice));
    int out = a.n_mats & 1, n_last = a.m[a.n_mats - 1].n_out;
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_pt_one, PT_THREADS, 0));
    int grid_l = p.sm_count * per_sm;

    if (!rg_prepare<6, 0>() || !rg_prepare<6, 1>() || !rg_prepare<3, 0>() || !rg_prepare<6, 2>() ||
        !rg_prepare<6, 3>() || !rg_prepare<6, 4>() || !rg_prepare<6, 5>() || !rg_prepare<6, 6>() ||
        !rg_prepare<6, 7>() || !rg_prepare<6, 8>() || !rg_prepare<6, 9>() || !rg_prepare<6, 10>() ||
        !rg_prepare<5, 10>() || !rg_prepare<5, 11>() || !rg_prepare<6, 12>() || !rg_prepare<5, 13>() ||
        !rg_prepare<5, 14>() || !rg_prepare<5, 15>()) {
        fprintf(stderr, "cannot allow %d bytes of shared memory\n", 6 * RG_SLOT);
        return 1;
    }
    struct {
        const char *name;
        void (*k)(const struct pt_args *, const struct rg_ll *, unsigned);
        int slots;
        int threads;
    } rings[18] = {{"ring6", k_ring<6, 0>, 6, RG_THREADS},
                  {"ring3", k_ring<3, 0>, 3, RG_THREADS},
                  {"ring6_no_lookahead", k_ring<6, 1>, 6, RG_THREADS},
                  {"diag_ring6_items_only", k_ring<6, 2>, 6, RG_THREADS},
                  {"diag_ring6_no_requantize", k_ring<6, 3>, 6, RG_THREADS},
                  {"ring6+producerq", k_ring<6, 4>, 6, RG_THREADS},
                  {"diag_ring6+producerq+sleep2us", k_ring<6, 5>, 6, RG_THREADS},
                  {"ring6+producerq+flag", k_ring<6, 6>, 6, RG_THREADS},
                  {"ring6+producerq+claims", k_ring<6, 7>, 6, RG_THREADS},
                  {"ring6+producerq+l2ahead6", k_ring<6, 8>, 6, RG_THREADS},
                  {"ring6+producerq+l2ahead12", k_ring<6, 9>, 6, RG_THREADS},
                  {"ring6+producerq+fastrows", k_ring<6, 10>, 6, RG_THREADS},
                  {"ring5+producerq+fastrows", k_ring<5, 10>, 5, RG_THREADS},
                  {"ring5+producerq+fastrows+llflags", k_ring<5, 11>, 5, RG_THREADS},
                  {"ring6+producerq+fastrows+llflags_regs", k_ring<6, 12>, 6, RG_THREADS},
                  {"ring5+producerq+llflags_regs+contract_order", k_ring<5, 13>, 5, RG_THREADS + 32},
                  {"diag_contract_order_no_chains", k_ring<5, 14>, 5, RG_THREADS + 32},
                  {"diag_contract_order_no_dots", k_ring<5, 15>, 5, RG_THREADS + 32}};

    static struct rg_ll ll;
    for (int j = 0; j < 2; j++) {
        CK(cudaMalloc(&ll.q[j], 248320 / 4 * 8));
        CK(cudaMalloc(&ll.s[j], 248320 / 32 * 8));
        CK(cudaMemset(ll.q[j], 0, 248320 / 4 * 8));   /* epoch 0: never a pass's */
        CK(cudaMemset(ll.s[j], 0, 248320 / 32 * 8));
    }
    struct rg_ll *ll_dev;
    CK(cudaMalloc(&ll_dev, sizeof ll));
    CK(cudaMemcpy(ll_dev, &ll, sizeof ll, cudaMemcpyHostToDevice));
    unsigned pass = 0;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < a.n_mats; i++)
        k_pt_one<<<grid_l, PT_THREADS, 0, s>>>(a.m[i], a.buf[i & 1], a.buf[(i + 1) & 1]);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* MODE 13's reference: the product's order, one launch per matrix (slow) */
    CK(cudaMemcpy(a.buf[0], x0, 248320 * 4, cudaMemcpyDeviceToDevice));
    for (int i = 0; i < a.n_mats; i++)
        k_ref_contract<<<(a.m[i].n_out + PT_THREADS - 1) / PT_THREADS, PT_THREADS, 0, s>>>(
            a.m[i], a.buf[i & 1], a.buf[(i + 1) & 1]);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    double ref_contract = checksum(a.buf[out], n_last);
    printf("reference in the product's order: checksum %.9g\n", ref_contract);
    double ref = 0;
    int differ = 0;
    for (int round = 0; round < 2; round++)
        for (int v = 0; v < 20; v++) {
            float best = 1e30f;
            for (int rep = 0; rep < 6; rep++) {
                CK(cudaMemcpyAsync(a.buf[0], x0, 248320 * 4, cudaMemcpyDeviceToDevice, s));
                CK(cudaMemsetAsync(a.barrier, 0, 256, s));
                CK(cudaMemsetAsync(a.claims, 0, PT_MAXM * sizeof(unsigned), s));
                CK(cudaEventRecord(e0, s));
                if (v == 0) {
                    for (int i = 0; i < a.n_mats; i++)
                        k_pt_one<<<grid_l, PT_THREADS, 0, s>>>(a.m[i], a.buf[i & 1], a.buf[(i + 1) & 1]);
                } else if (v == 1) {
                    CK(cudaGraphLaunch(exec, s));
                } else {
                    pass++;
                    void *args[] = {&a_dev, &ll_dev, &pass};
                    CK(cudaLaunchCooperativeKernel((void *)rings[v - 2].k, p.sm_count, rings[v - 2].threads, args,
                                                   (size_t)rings[v - 2].slots * RG_SLOT, s));
                }
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (rep > 0 && ms < best)
                    best = ms;
            }
            double sum = checksum(a.buf[out], n_last);
            bool diag = v == 5 || v == 6 || v >= 18, contract = v == 17;
            if (v == 0)
                ref = sum;
            double want = contract ? ref_contract : ref;
            differ += !diag && sum != want;
            double gbps = bytes / (best * 1e-3) / 1e9;
            printf("BENCH %s %.3f ms a pass, %.1f GB/s, %.1f%% of read, checksum %.9g%s\n",
                   v == 0 ? "launch" : v == 1 ? "graph" : rings[v - 2].name, best, gbps,
                   100.0 * gbps / p.read_gbps, sum, diag ? " (diagnostic)" : sum == want ? "" : " DIFFERS");
        }
    printf("RESULT ring variants same output as their reference %s\n", differ ? "FAIL" : "PASS");
    return differ ? 1 : 0;
}
