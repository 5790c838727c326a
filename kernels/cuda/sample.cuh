/* sample.cuh - what the two halves of the CUDA sample op share: the row
 * descriptors and per-block partials (sample.cu: steps 0-6, the candidate
 * lists, logprobs and the host side) and step 7 of kernels/sampler.h
 * (sample_draw.cu: integer weights, the top-k/top-p cut, the draw). */
#ifndef CS_CUDA_SAMPLE_CUH
#define CS_CUDA_SAMPLE_CUH

#include <cuda_runtime.h>

#include "../sampler.h"

#define SAMP_C 1024          /* sorted candidates kept for step 7's cut */
#define SAMP_LP_C 32         /* candidates kept for the top logprobs */
#define SAMP_THREADS 1024    /* k_samp_select, k_samp_cut_full */
#define SAMP_PT 256          /* the streaming kernels and the one-block-per-row ones */

struct samp_row {
    float temperature, top_p, min_p, rep, presence, frequency;
    int top_k, n_logprobs;
    unsigned long long seed, draw;
    int bias_off, n_bias, rep_off, n_rep, gen_off, n_gen, mask_off;
};

/* One block's share of a row (k_samp_stats), combined by k_samp_choose. */
struct samp_part {
    float max;
    int argmax, n_finite;
    double sum;   /* sum of exp(l - max) over the block's ids; 0 when max is -inf */
};

/* One block's integer weight sums of a row (step 7): all finite candidates,
 * those min-p keeps, those the cut and min-p keep. Exact, in any order. */
struct samp_wpart {
    unsigned long long all, minp, kept;
};

enum { SAMP_CUT_NONE = 0, SAMP_CUT_AT = 1, SAMP_CUT_FULL = 2 };

/* Step 7's state of a row, written by the step-7 kernels in turn. */
struct samp_cut {
    float v0;                     /* the largest scaled value */
    int mode;                     /* SAMP_CUT_*: no cut, kept = order key <= cut, cut unknown yet */
    int n_finite;
    int token;                    /* the draw, -1 when nothing is kept */
    unsigned long long floor_w;   /* min-p */
    unsigned long long total;     /* sum of w over every finite candidate */
    unsigned long long cut;
};

/* Order-preserving map of a float to unsigned (larger float, larger code). */
static __device__ __forceinline__ unsigned samp_code(float v)
{
    unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* A candidate order as one integer: ascending = key descending, then id
 * ascending (step 7's key, sampler_order_value, has no -0 or subnormal). */
static __device__ __forceinline__ unsigned long long samp_order(float key, int id)
{
    return ((unsigned long long)(~samp_code(key)) << 32) | (unsigned)id;
}

/* Queue step 7 for the rows with temperature (sample_draw.cu): weights, the
 * cut (from the sorted lists cand_key/cand_id of SAMP_C per row when it lies
 * inside them, else a full radix select), the kept sums and the draw into
 * cut[row].token. wp: n * B partials; cut: n states. */
int samp_step7_queue(cudaStream_t st, struct samp_wpart *wp, struct samp_cut *cut,
                     const float *logits, int V, int chunk, int B, int n,
                     const struct samp_row *rows, const struct samp_part *part,
                     const float *cand_key, const int *cand_id);

#endif
