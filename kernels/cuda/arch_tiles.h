/* arch_tiles.h - the one table of per-architecture tile and launch choices of
 * the CUDA matrix kernels (kernels/cuda/matmul.cu, gemm.cu). No choice here
 * changes the arithmetic of an output element (matmul.h "Numerics"): they
 * only change how the work is spread over threads, so results are bitwise
 * equal across rows of this table.
 *
 * Compile-time tile shapes are shared by all architectures and sized for the
 * smallest target, sm_70: no cp.async, no tensor cores, <= 48 KB static
 * shared memory per block (more only as dynamic shared memory, opted in at
 * run time). Launch choices that may differ per architecture are looked up at
 * run time by compute capability. */
#ifndef CS_CUDA_ARCH_TILES_H
#define CS_CUDA_ARCH_TILES_H

/* GEMM (prefill, gemm.cu): a block computes MM_GEMM_BM rows x MM_GEMM_BN
 * tokens, 256 threads: warp w owns tokens 8w..8w+7, lane l rows l, l+32,
 * l+64, l+96 (BM = 128, BN = 64 are baked into that mapping). K goes by
 * stages of KB 32-value blocks in double-buffered shared memory, 13.5 KB per
 * block of KB: 27 KB at KB = 2 (under sm_70's 48 KB), 54 KB at 4, 108 KB at
 * 8. A row's gemm_kb asks for a KB; the largest of 8, 4, 2 not above it
 * whose shared memory fits MM_GEMM_MIN_BLOCKS blocks per SM runs (2 blocks:
 * KB = 8 on H100/H200's 228 KB, 4 on A100's 164 KB, 2 on V100's 96 KB and
 * sm_86/89's 100 KB).
 * Measured (sm_90 SASS of one steady K-loop stage, per DP4A): 1.00 other
 * instructions per DP4A before gemm.cu; KB = 2 / 4 / 8 now 0.72 / 0.67 /
 * 0.65, no spills (the floor: 0.5 fp32 operations, fixed by matmul.h
 * "Numerics", and 0.1 shared loads of the 4 x 8 register tile). Timed on
 * an H200 (docs/PERF.md, fifth session; `cmpserve bench --kernels`, 9B
 * matrix calls at 2,048 tokens): 58.4% of DP4A peak before, 63.5% / 67.9% /
 * 68.0% at KB = 2 / 4 / 8 (27B: 64.0 / 68.5 / 69.0%). KB = 2 is what
 * V100/CMP run; not yet timed there.
 * MM_GEMM_KB (2, 4 or 8), when defined, overrides every row's gemm_kb;
 * MM_GEMM_KP: blocks per staging piece (staging registers live meanwhile). */
#define MM_GEMM_BM 128
#define MM_GEMM_BN 64
#define MM_GEMM_THREADS 256
#ifndef MM_GEMM_KP
#define MM_GEMM_KP 2
#endif
#ifndef MM_GEMM_MIN_BLOCKS
#define MM_GEMM_MIN_BLOCKS 2   /* 2 blocks per SM (128 registers): 62% vs 49% of DP4A peak on H200
                                * (measured with the kernel before gemm.cu) */
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
    int gemv_max_tokens;   /* n_tokens above which cuda_matmul uses the GEMM, where no time
                            * measured on the card decides (matmul_tune.h) */
    int gemm_kb;           /* 32-value blocks per GEMM stage asked for: 2, 4 or 8 (above) */
};

/* Ordered from newest to oldest: the first row with cc >= cc_min applies. */
static const struct mm_arch_tiles mm_arch_tiles_table[] = {
    {90, 8, 16, 2, 96 * 1024, 1, 32, 8},  /* H100/H200: 132 SMs, 50-60 MB L2 */
    {80, 8, 16, 2, 96 * 1024, 1, 16, 4},  /* A100 / Ampere / Ada */
    {70, 8, 16, 2, 96 * 1024, 1, 16, 2},  /* V100, CMP 100-210, T4 (80 SMs, 6 MB L2) */
    {61, 8, 16, 2, 48 * 1024, 1, 16, 2},  /* P40: DP4A, no fast fp16, 48 KB per block */
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
