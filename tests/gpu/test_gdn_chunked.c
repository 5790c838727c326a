/* test_gdn_chunked.c - proves that cuda_op_gdn_chunked (kernels/cuda/gdn_chunked.cu, the
 * chunked WY form of the gated delta rule) computes what the sequential scan computes
 * (cuda_gdn_scan, gdn.cu; the gdn op, which picks between the two per sequence, is checked
 * against the CPU by test_gpu_ops), and
 * measures both, at the real 9B (16 key heads, 32 value heads) and 27B (16, 48) shapes:
 * prompts of 512, 2048 and 8192 tokens in one sequence (8192 spans four 2048-token windows
 * of the chunked kernels), and a batch of three sequences of 100, 1 and 300 tokens in slots
 * 3, 0, 2 (partial chunks, a one-token sequence, per-sequence state slots; slot 1 must stay
 * untouched). Inputs are shaped like real ones: y ~ N(0,1), beta_raw and alpha_raw ~ N(0,1),
 * a = -exp(U(-1,1)), dt_bias ~ U(-0.5,0.5), initial state ~ U(-0.05,0.05).
 *
 * Both kernels start from the same state. Checked: every output row is written (outputs are
 * NaN-poisoned first), and out and the whole state buffer (all slots) agree within 1e-4 of
 * the largest |value| of the scan's result. Why 1e-4: the two are equal in exact arithmetic;
 * in fp32 a numpy prototype of the same chunked algorithm and the scan each stayed within
 * ~1e-6 of a float64 recurrence (at up to 2,200 tokens), fast-math exp/rsqrt add a few ulp,
 * so 1e-4 leaves a wide margin, while an indexing or algebra error gives O(1).
 *
 * Timing: CUDA events on the backend's stream around each call, the state restored before
 * each run, median of 7 runs (alternating scan and chunked). Prints one table line per
 * shape and length (tokens, scan ms, chunked ms, speedup, errors) and "RESULT" lines for
 * tests/gpu/run.sh. Not a ctest test (needs a GPU); exits 77 when no CUDA device is present
 * or the device lacks the chunked kernels' shared memory. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../../common/status.h"
#include "../../kernels/cuda/gdn_chunked.h"
#include "../../kernels/ops.h"
#include "../test_util.h"

#define D 128
#define N_SLOTS 4
#define REPS 7
#define BOUND 1e-4

static struct cs_backend *gpu;
static int unsupported;

static uint64_t rs = 0x9E3779B97F4A7C15ull;

static double urand(void)   /* uniform in [0, 1) */
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (double)((rs * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

static float nrand(void)
{
    double u = urand(), v = urand();
    return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v));
}

static void *dev_upload(const void *host, size_t bytes)
{
    void *p = NULL;
    if (gpu->alloc(gpu, &p, bytes) != CS_OK || (host && gpu->upload(gpu, p, host, bytes) != CS_OK)) {
        fprintf(stderr, "device alloc/upload of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

/* max |x - ref| / max |ref|; a non-finite value in either is inf */
static double rel_err(const float *x, const float *ref, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i]))
            return INFINITY;
        double d = fabs((double)x[i] - ref[i]);
        md = d > md ? d : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    return mr > 0 ? md / mr : md;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

struct gdn_io {
    float *y, *br, *ar, *a, *dt, *out, *rec, *rec0;
    struct cs_gdn_layer st;
    const struct cs_batch *b;
};

/* One call from the initial state, timed with events on the backend's stream (ms). */
static float run_once(struct gdn_io *io, int chunked, cudaEvent_t e0, cudaEvent_t e1, int *rc)
{
    size_t rec_bytes = (size_t)N_SLOTS * io->st.n_v_heads * D * D * sizeof(float);
    cudaStream_t s = cuda_gdn_chunked_stream(gpu);
    CHECK(gpu->copy(gpu, io->rec, io->rec0, rec_bytes) == CS_OK);
    cudaEventRecord(e0, s);
    if (chunked)
        *rc = cuda_op_gdn_chunked(gpu, io->out, io->y, io->br, io->ar, io->a, io->dt, 1e-6f, &io->st,
                                  io->b);
    else
        *rc = cuda_gdn_scan(gpu, io->out, io->y, io->br, io->ar, io->a, io->dt, 1e-6f, &io->st,
                            io->b);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms;
}

/* The scan and the chunked form on one batch: outputs and final states equal within
 * BOUND (relative), every output written; prints the timing line. */
static void test_gdn_chunked_case(int Gk, int Hv, int n_seqs, const int *len, const int *slot,
                                  const char *shape)
{
    int conv_dim = 2 * Gk * D + Hv * D, T = 0;
    int32_t *seq_start = malloc((n_seqs + 1) * sizeof(int32_t));
    for (int s = 0; s < n_seqs; s++) {
        seq_start[s] = T;
        T += len[s];
    }
    seq_start[n_seqs] = T;
    int32_t *tokens = malloc(T * sizeof(int32_t)), *pos = malloc(T * sizeof(int32_t));
    int32_t *seq_of = malloc(T * sizeof(int32_t)), *slots = malloc(n_seqs * sizeof(int32_t));
    for (int s = 0; s < n_seqs; s++) {
        slots[s] = slot[s];
        for (int t = seq_start[s]; t < seq_start[s + 1]; t++)
            tokens[t] = t % 1000, pos[t] = t - seq_start[s], seq_of[t] = s;
    }
    struct cs_batch b = {.n_tokens = T, .n_seqs = n_seqs, .tokens = tokens, .pos = pos,
                         .seq_of = seq_of, .seq_start = seq_start, .slot = slots,
                         .page_table = NULL, .max_pages = 0};
    CHECK(gpu->step_begin(gpu, &b) == CS_OK);

    size_t ny = (size_t)T * conv_dim, nb = (size_t)T * Hv, no = (size_t)T * Hv * D;
    size_t nrec = (size_t)N_SLOTS * Hv * D * D;
    float *h = malloc((ny > nrec ? ny : nrec) * sizeof(float));
    struct gdn_io io = {.b = &b};
    for (size_t i = 0; i < ny; i++)
        h[i] = nrand();
    io.y = dev_upload(h, ny * sizeof(float));
    for (size_t i = 0; i < nb; i++)
        h[i] = nrand();
    io.br = dev_upload(h, nb * sizeof(float));
    for (size_t i = 0; i < nb; i++)
        h[i] = nrand();
    io.ar = dev_upload(h, nb * sizeof(float));
    for (int i = 0; i < Hv; i++)
        h[i] = -(float)exp(2.0 * urand() - 1.0);
    io.a = dev_upload(h, Hv * sizeof(float));
    for (int i = 0; i < Hv; i++)
        h[i] = (float)(urand() - 0.5);
    io.dt = dev_upload(h, Hv * sizeof(float));
    for (size_t i = 0; i < nrec; i++)
        h[i] = (float)(0.05 * (2.0 * urand() - 1.0));
    io.rec0 = dev_upload(h, nrec * sizeof(float));
    io.rec = dev_upload(NULL, nrec * sizeof(float));
    io.out = dev_upload(NULL, no * sizeof(float));
    io.st = (struct cs_gdn_layer){.n_slots = N_SLOTS, .conv_dim = conv_dim, .conv_kernel = 4,
                                  .n_k_heads = Gk, .n_v_heads = Hv, .key_dim = D, .value_dim = D};
    io.st.rec = io.rec;

    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float *out_s = malloc(no * sizeof(float)), *out_c = malloc(no * sizeof(float));
    float *rec_s = malloc(nrec * sizeof(float)), *rec_c = malloc(nrec * sizeof(float));
    for (size_t i = 0; i < no; i++)
        h[i] = NAN;
    int rc_s = 0, rc_c = 0;
    /* results: scan, then chunked, each from the initial state into a NaN-poisoned out */
    CHECK(gpu->upload(gpu, io.out, h, no * sizeof(float)) == CS_OK);
    run_once(&io, 0, e0, e1, &rc_s);
    CHECK(rc_s == CS_OK);
    CHECK(gpu->download(gpu, out_s, io.out, no * sizeof(float)) == CS_OK);
    CHECK(gpu->download(gpu, rec_s, io.rec, nrec * sizeof(float)) == CS_OK);
    CHECK(gpu->upload(gpu, io.out, h, no * sizeof(float)) == CS_OK);
    run_once(&io, 1, e0, e1, &rc_c);
    if (rc_c == CS_EUNSUPPORTED) {
        unsupported = 1;
        fprintf(stderr, "gdn_chunked unsupported on this device: skipped\n");
    } else {
        CHECK(rc_c == CS_OK);
        CHECK(gpu->download(gpu, out_c, io.out, no * sizeof(float)) == CS_OK);
        CHECK(gpu->download(gpu, rec_c, io.rec, nrec * sizeof(float)) == CS_OK);
        double eo = rel_err(out_c, out_s, no), es = rel_err(rec_c, rec_s, nrec);
        float ts[REPS], tc[REPS];
        for (int r = 0; r < REPS; r++) {
            ts[r] = run_once(&io, 0, e0, e1, &rc_s);
            tc[r] = run_once(&io, 1, e0, e1, &rc_c);
        }
        CHECK(rc_s == CS_OK && rc_c == CS_OK);
        qsort(ts, REPS, sizeof(float), cmp_float);
        qsort(tc, REPS, sizeof(float), cmp_float);
        float ms_s = ts[REPS / 2], ms_c = tc[REPS / 2];
        char lens[64];
        int off = 0;
        for (int s = 0; s < n_seqs && off < (int)sizeof lens - 8; s++)
            off += snprintf(lens + off, sizeof lens - off, s ? "+%d" : "%d", len[s]);
        printf("%-4s %-12s %7d %10.3f %12.3f %8.2fx %12.2e %12.2e\n", shape, lens, T, ms_s, ms_c,
               ms_s / ms_c, eo, es);
        printf("RESULT gdn_chunked out %s %-12s %s err=%.3g (bound %.0e)\n", shape, lens,
               eo <= BOUND ? "PASS" : "FAIL", eo, BOUND);
        printf("RESULT gdn_chunked state %s %-12s %s err=%.3g (bound %.0e)\n", shape, lens,
               es <= BOUND ? "PASS" : "FAIL", es, BOUND);
        fflush(stdout);
        CHECK(eo <= BOUND);
        CHECK(es <= BOUND);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    float *bufs[8] = {io.y, io.br, io.ar, io.a, io.dt, io.out, io.rec, io.rec0};
    for (int i = 0; i < 8; i++)
        gpu->free(gpu, bufs[i]);
    free(h), free(out_s), free(out_c), free(rec_s), free(rec_c);
    free(seq_start), free(tokens), free(pos), free(seq_of), free(slots);
}

static void test_gdn_chunked_shape(int Gk, int Hv, const char *shape)
{
    static const int lens[3] = {512, 2048, 8192}, one_slot[1] = {2};
    for (int i = 0; i < 3 && !unsupported; i++)
        test_gdn_chunked_case(Gk, Hv, 1, &lens[i], one_slot, shape);
    static const int mix_len[3] = {100, 1, 300}, mix_slot[3] = {3, 0, 2};
    if (!unsupported)
        test_gdn_chunked_case(Gk, Hv, 3, mix_len, mix_slot, shape);
}

int main(void)
{
    cs_log_set_level(CS_LOG_WARN);
    if (cs_backend_cuda_create(&gpu, 0) != CS_OK) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    printf("%-4s %-12s %7s %10s %12s %9s %12s %12s\n", "", "seq lens", "tokens", "scan ms",
           "chunked ms", "speedup", "out err", "state err");
    test_gdn_chunked_shape(16, 32, "9B");
    test_gdn_chunked_shape(16, 48, "27B");
    gpu->destroy(gpu);
    if (unsupported && !test_failures)
        return 77;
    return test_report();
}
