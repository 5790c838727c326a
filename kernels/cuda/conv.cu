/* conv.cu - conv1d_silu of kernels/ops.h on CUDA: the causal depthwise
 * convolution (kernel 4) of each sequence's stored pre-conv columns then its
 * new tokens, SiLU, and the update of the conv state of its slot. One thread
 * per (channel, 8 tokens) computes their outputs from their 4 columns each
 * (new tokens or the stored state), then one thread per (sequence, channel) writes the new
 * state, the last 3 columns, in a second launch (the first reads the old
 * state). Fully parallel over tokens, so prefill chunks cost one pass. A
 * decode step (one token per sequence) does both in one launch. */
#include "conv_step.cuh"
#include "cuda_util.cuh"
#include "launch.cuh"
#include "ops_cuda.cuh"

#define CONV_THREADS 128

/* y[t][c] = silu(sum_j w[c][j] * col[t-3+j][c]), one thread per channel
 * and CONV_TPT consecutive tokens; columns before a token's sequence start
 * come from that sequence's state. A thread per (token, channel) waited on
 * three dependent loads (the token's sequence, its slot and start, then the
 * columns) for one output: 2K tokens of the 9B model took ~5x their bytes'
 * time. Here the tokens' loads are independent and fly together; each
 * output is the same expression in the same order as before. */
#define CONV_TPT 8
static __global__ void k_conv1d_out(float *y, const float *x, const float *w,
                                   const float *conv_state, int n_slots, int conv_dim,
                                   const int32_t *seq_of, const int32_t *seq_start,
                                   const int32_t *slot, int n_tokens)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    float wc[CONV_K];
    if (c < conv_dim) {   /* weights: before the wait (launch.cuh) */
#pragma unroll
        for (int j = 0; j < CONV_K; j++)
            wc[j] = __ldg(w + c * CONV_K + j);
    }
    cuda_pdl_enter();   /* launch.cuh: before any other read or write */
    if (c >= conv_dim)
        return;
    int tb = blockIdx.y * CONV_TPT;
    int sl[CONV_TPT], t0[CONV_TPT];
#pragma unroll
    for (int u = 0; u < CONV_TPT; u++) {
        int t = tb + u;
        int s = t < n_tokens ? seq_of[t] : 0;
        sl[u] = t < n_tokens ? slot[s] : -1;
        t0[u] = t < n_tokens ? seq_start[s] : 0;
    }
    float col[CONV_TPT][CONV_K];
#pragma unroll
    for (int u = 0; u < CONV_TPT; u++) {
        int t = tb + u;
        bool ok = sl[u] >= 0 && sl[u] < n_slots;
        const float *st = conv_state + (size_t)(ok ? sl[u] : 0) * (CONV_K - 1) * conv_dim + c;
#pragma unroll
        for (int j = 0; j < CONV_K; j++) {
            int tj = t - (CONV_K - 1) + j;   /* token of column j */
            col[u][j] = !ok ? 0.0f
                        : tj >= t0[u] ? x[(size_t)tj * conv_dim + c]
                                      : st[(size_t)(CONV_K - 1 + (tj - t0[u])) * conv_dim];
        }
    }
#pragma unroll
    for (int u = 0; u < CONV_TPT; u++) {
        if (!(sl[u] >= 0 && sl[u] < n_slots))
            continue;
        y[(size_t)(tb + u) * conv_dim + c] = conv_silu_out(wc, col[u]);
    }
}

/* The new state of each sequence's slot: its last 3 pre-conv columns (old
 * state columns when the sequence has fewer than 3 tokens in the step). Runs
 * after k_conv1d_out, which reads the old state. */
static __global__ void k_conv1d_state(const float *x, float *conv_state, int n_slots,
                                      int conv_dim, const int32_t *seq_start, const int32_t *slot)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int s = blockIdx.y;
    if (c >= conv_dim)
        return;
    int sl = slot[s];
    if (sl < 0 || sl >= n_slots)
        return;
    int t0 = seq_start[s], n = seq_start[s + 1] - t0;
    float *st = conv_state + (size_t)sl * (CONV_K - 1) * conv_dim + c;
    float col[2 * CONV_K - 2];   /* old state then up to 3 new columns */
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        col[j] = st[(size_t)j * conv_dim];
    int take = n < CONV_K - 1 ? n : CONV_K - 1;
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        if (j < take)
            col[CONV_K - 1 + j] = x[(size_t)(t0 + n - take + j) * conv_dim + c];
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        st[(size_t)j * conv_dim] = col[take + j];
}

/* A decode step (every sequence one token, token s of sequence s): output
 * and new state in one launch, one thread per (sequence, channel), which
 * is the only reader and writer of its state column. Same arithmetic as
 * k_conv1d_out and k_conv1d_state, so the same bits. */
static __global__ void k_conv1d_step(float *y, const float *x, const float *w, float *conv_state,
                                     int n_slots, int conv_dim, const int32_t *slot)
{
    cuda_pdl_enter();   /* launch.cuh: before any read or write */
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int t = blockIdx.y;
    if (c >= conv_dim)
        return;
    int sl = slot[t];
    if (sl < 0 || sl >= n_slots)
        return;
    float *st = conv_state + (size_t)sl * (CONV_K - 1) * conv_dim + c;
    float col[CONV_K], wc[CONV_K];
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        col[j] = st[(size_t)j * conv_dim];
    col[CONV_K - 1] = x[(size_t)t * conv_dim + c];
#pragma unroll
    for (int j = 0; j < CONV_K; j++)
        wc[j] = w[c * CONV_K + j];
    y[(size_t)t * conv_dim + c] = conv_silu_out(wc, col);
#pragma unroll
    for (int j = 0; j < CONV_K - 1; j++)
        st[(size_t)j * conv_dim] = col[j + 1];
}

int cuda_op_conv1d_silu(struct cs_backend *be, float *y, const float *x, const float *w,
                        struct cs_gdn_layer *st, const struct cs_batch *b)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    int rc = cuda_batch_check(c, b, "conv1d_silu");
    if (rc != CS_OK)
        return rc;
    if (st->conv_kernel != CONV_K) {
        LOG_ERROR("cuda", "conv1d_silu: kernel %d unsupported (%d)", st->conv_kernel, CONV_K);
        return CS_EUNSUPPORTED;
    }
    if (b->n_seqs <= 0)
        return CS_OK;
    if (b->n_tokens > 65535) {
        LOG_ERROR("cuda", "conv1d_silu: %d tokens in one step (max 65535)", b->n_tokens);
        return CS_EINVAL;
    }
    const struct cuda_batch *cb = &c->batch;
    if (b->n_tokens == b->n_seqs && cb->n_dec == b->n_seqs) {   /* decode: token s is sequence s's */
        dim3 grid(cs_div_up(st->conv_dim, CONV_THREADS), b->n_seqs);
        CS_CUDA_CHECK(cuda_launch(k_conv1d_step, grid, CONV_THREADS, 0, c->stream, y, x, w,
                                  st->conv, st->n_slots, st->conv_dim, cb->slot));
        return CS_OK;
    }
    dim3 grid_t(cs_div_up(st->conv_dim, CONV_THREADS), cs_div_up(b->n_tokens, CONV_TPT));
    CS_CUDA_CHECK(cuda_launch(k_conv1d_out, grid_t, CONV_THREADS, 0, c->stream, y, x, w, st->conv,
                              st->n_slots, st->conv_dim, cb->seq_of, cb->seq_start, cb->slot,
                              b->n_tokens));
    dim3 grid_s(cs_div_up(st->conv_dim, CONV_THREADS), b->n_seqs);
    CS_CUDA_CHECK(cuda_launch(k_conv1d_state, grid_s, CONV_THREADS, 0, c->stream, x, st->conv,
                              st->n_slots, st->conv_dim, cb->seq_start, cb->slot));
    return CS_OK;
}
