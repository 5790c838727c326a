/* conv.c - the GDN causal depthwise conv1d + SiLU with per-slot state (ops.h
 * conv1d_silu).
 *
 * For channel c of a sequence, the window is the slot's K-1 stored pre-conv
 * columns (oldest first) followed by the sequence's tokens; token t gets
 *     y[t][c] = silu(w[c][0] col[t-K+1][c] + ... + w[c][K-1] col[t][c])
 * summed in j order as an fmaf chain from 0 (kernels/cuda/conv.cu's FFMA
 * chain: the same bits). Afterwards the slot holds the last K-1 pre-conv
 * columns. Work items are (sequence, block of channels). */
#include "../../common/log.h"
#include "../../common/status.h"
#include "cpu.h"

#define CONV_MAX_KERNEL 16
#define CONV_CHANNELS 64

struct conv_job {
    float *y;
    const float *x;
    const float *w;
    struct cs_gdn_layer *st;
    const struct cs_batch *b;
    int n_cblocks;
};

static void conv_channel(const struct conv_job *job, int s, int c)
{
    const struct cs_gdn_layer *st = job->st;
    int K = st->conv_kernel, C = st->conv_dim;
    float *state = st->conv + (size_t)job->b->slot[s] * (K - 1) * C;
    const float *w = job->w + (size_t)c * K;
    float hist[CONV_MAX_KERNEL];
    for (int j = 0; j < K - 1; j++)
        hist[j] = state[(size_t)j * C + c];
    for (int t = job->b->seq_start[s]; t < job->b->seq_start[s + 1]; t++) {
        float xt = job->x[(size_t)t * C + c];
        float acc = 0.0f;
        for (int j = 0; j < K - 1; j++)
            acc = fmaf(w[j], hist[j], acc);
        acc = fmaf(w[K - 1], xt, acc);
        job->y[(size_t)t * C + c] = cpu_silu(acc);
        for (int j = 0; j + 1 < K - 1; j++)
            hist[j] = hist[j + 1];
        if (K > 1)
            hist[K - 2] = xt;
    }
    for (int j = 0; j < K - 1; j++)
        state[(size_t)j * C + c] = hist[j];
}

static void conv_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct conv_job *job = arg;
    for (int64_t item = begin; item < end; item++) {
        int s = (int)(item / job->n_cblocks);
        int c0 = (int)(item % job->n_cblocks) * CONV_CHANNELS;
        int c1 = c0 + CONV_CHANNELS < job->st->conv_dim ? c0 + CONV_CHANNELS : job->st->conv_dim;
        for (int c = c0; c < c1; c++)
            conv_channel(job, s, c);
    }
}

/* Check a GDN state and the batch's slots. */
int cpu_gdn_state_check(const struct cs_gdn_layer *st, const struct cs_batch *b)
{
    if (!st || st->n_slots <= 0 || cpu_batch_check(b) != CS_OK)
        return CS_EINVAL;
    if (b->n_seqs > 0 && !b->slot)
        return CS_EINVAL;
    for (int s = 0; s < b->n_seqs; s++)
        if (b->slot[s] < 0 || b->slot[s] >= st->n_slots) {
            LOG_ERROR("cpu", "sequence %d uses GDN slot %d, outside 0..%d", s, b->slot[s],
                      st->n_slots - 1);
            return CS_ERANGE;
        }
    return CS_OK;
}

int cpu_conv1d_silu(struct cs_backend *be, float *y, const float *x, const float *w,
                    struct cs_gdn_layer *st, const struct cs_batch *b)
{
    int rc = cpu_gdn_state_check(st, b);
    if (rc != CS_OK)
        return rc;
    if (!y || !x || !w || !st->conv || st->conv_dim <= 0 || st->conv_kernel < 1 ||
        st->conv_kernel > CONV_MAX_KERNEL)
        return CS_EINVAL;
    struct conv_job job = {.y = y, .x = x, .w = w, .st = st, .b = b,
                           .n_cblocks = (st->conv_dim + CONV_CHANNELS - 1) / CONV_CHANNELS};
    threadpool_for(cpu_ctx_of(be)->pool, (int64_t)b->n_seqs * job.n_cblocks, 4, conv_range, &job);
    return CS_OK;
}
