/* arch_tiles.h - the one table of per-architecture tile and launch choices of
 * the CUDA matrix kernels (kernels/cuda/matmul.cu, gemm.cu). No choice here
 * changes the arithmetic of an output element (matmul.h "Numerics"): they
 * only change how the work is spread over threads, so results are bitwise
 * equal across rows of this table.
 *
 * Compile-time tile shapes are shared by all architectures and sized for the
 * smallest target, sm_70: <= 48 KB static shared memory per block, no
 * cp.async, no tensor cores. Launch choices that may differ per architecture
 * are looked up at run time by compute capability. */
#ifndef CS_CUDA_ARCH_TILES_H
#define CS_CUDA_ARCH_TILES_H

/* GEMM (prefill, gemm.cu): a block computes MM_GEMM_BM rows x MM_GEMM_BN
 * tokens, staging MM_GEMM_KB 32-value blocks of K per step in
 * double-buffered shared memory (27 KB). 256 threads: warp w owns tokens
 * 8w..8w+7, lane l rows l, l+32, l+64, l+96 (BM = 128, BN = 64 are baked
 * into that mapping). */
#define MM_GEMM_BM 128
#define MM_GEMM_BN 64
#define MM_GEMM_KB 2
#define MM_GEMM_THREADS 256
#ifndef MM_GEMM_MIN_BLOCKS
#define MM_GEMM_MIN_BLOCKS 2   /* 2 blocks per SM (128 registers): 62% vs 49% of DP4A peak on H200 */
#endif

/* GEMV (decode): one block per group of 32 rows; lane = row. */
#define MM_GEMV_MAX_TOKENS 8   /* tokens per GEMV launch (template 1..8) */
#ifndef MM_GEMV_MIN_BLOCKS
#define MM_GEMV_MIN_BLOCKS 1   /* resident 512-thread blocks per SM asked of the compiler (n <= 2) */
#endif

struct mm_arch_tiles {
    int cc_min;            /* first compute capability (major*10+minor) of this row */
    int gemv_warps;        /* warps per GEMV block (>= MM_GEMV_MAX_TOKENS) */
    int gemv_warps_small;  /* warps per GEMV block when n_tokens <= gemv_small_nt */
    int gemv_small_nt;     /* <= 2: the GEMV's __launch_bounds__ allows 512 threads only there */
    int gemv_smem_max;     /* dynamic shared memory a GEMV block may take (sm_70: <= 96 KB) */
    int gemv_fuse_quant_nt;/* up to this many tokens the GEMV quantizes x itself (each block
                            * redoes it, so only worth it for single-token decode) */
    int gemv_max_tokens;   /* n_tokens above which cuda_matmul uses the GEMM */
};

/* Ordered from newest to oldest: the first row with cc >= cc_min applies. */
static const struct mm_arch_tiles mm_arch_tiles_table[] = {
    {90, 8, 16, 2, 96 * 1024, 1, 16},  /* H100/H200: 132 SMs, 50-60 MB L2 */
    {80, 8, 16, 2, 96 * 1024, 1, 16},  /* A100 / Ampere / Ada */
    {70, 8, 16, 2, 96 * 1024, 1, 16},  /* V100, CMP 100-210, T4 (80 SMs, 6 MB L2) */
    {61, 8, 16, 2, 48 * 1024, 1, 16},  /* P40: DP4A, no fast fp16, 48 KB per block */
};

static inline const struct mm_arch_tiles *mm_arch_tiles_for(int cc)
{
    int n = (int)(sizeof mm_arch_tiles_table / sizeof mm_arch_tiles_table[0]);
    for (int i = 0; i < n; i++)
        if (cc >= mm_arch_tiles_table[i].cc_min)
            return &mm_arch_tiles_table[i];
    return &mm_arch_tiles_table[n - 1];
}

#endif
