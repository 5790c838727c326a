/* test_attention_prefill.c - proves the tiled prefill attention
 * (kernels/cuda/attention_prefill.cu, entry cuda_attn_prefill) computes what
 * the CPU backend's attention computes, keeps batch invariance, and times it
 * (the backend's attention op runs the same kernel for prefill tokens since
 * attention.cu was wired to it; the op's timing adds only its checks).
 *
 * 1. Accuracy: one batch of four sequences over paged KV (page size 256,
 *    and 100 and 96 for two F16 shapes; scattered pages): 37 prefill tokens at position 100, 600 at 0, 512 at
 *    5000 (KV splits of 2048: three splits, partials and the combine) and a
 *    decode token at 1300, for GQA shapes 16/4 (9B), 24/4 (27B), 2/1, 8/1,
 *    5/1, 4/4, F16 and F32 KV, head_dim 256. Both the entry (prefill rows
 *    only; the decode row is NaN-poisoned and skipped) and the backend op
 *    (every row) against the CPU: max |gpu - cpu| / max |cpu| <= 1e-5.
 * 2. Invariance, bitwise, on the entry's output: the 512-token and the
 *    600-token sequences alone equal their rows in the mixed batch; the
 *    512-token sequence run as two chunks of 77 and 435 tokens (77 is not a
 *    multiple of the 16-token query tile) and the 600 as 250 + 350 equal
 *    them too (the design makes every row's arithmetic depend only on its
 *    position: see the kernel's header comment).
 *    Over F16 KV the int8 kernel's async staging (sm_80+, pages of 256) and
 *    its register staging (sm_70's; cuda_attn_prefill_async_enable off) give
 *    the entry's output bit for bit.
 * 3. Timing (9B, F16 KV): a 2048-token prompt from position 0 and the last
 *    512-token chunk of a 32K prompt (positions 32256..32767), the op vs the
 *    entry, and the entry with register staging, TFLOP/s counted as
 *    bench_launch.cu does (causal half); the op's and the entry's outputs
 *    must agree within 1e-5.
 * Prints "RESULT <name> PASS|FAIL err=..." and "BENCH ..." lines; exit 0
 * only when all pass, 77 without a CUDA device. Not a ctest test. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/log.h"
#include "../../kernels/cuda/attention_prefill.h"
#include "../../kernels/ops.h"
#include "../test_util.h"
#include "gpu_pair.h"

#define D 256
#define PS 256
#define POOL 4   /* sequences whose pages the KV cache holds */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static float *download(struct cs_backend *be, const void *src, size_t n)
{
    float *h = xmalloc(n * sizeof(float));
    CHECK(be->download(be, h, src, n * sizeof(float)) == 0);
    return h;
}

static float *nan_buf(size_t n)
{
    float *h = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    return h;
}

/* max |x - ref| / max |ref| over rows [r0, r1) of w floats each whose
 * keep[row] is set (NULL: all); NaN or inf in x counts as inf. */
static double rel_err(const float *x, const float *ref, int r0, int r1, size_t w, const char *keep)
{
    double md = 0, mr = 0;
    for (int r = r0; r < r1; r++) {
        if (keep && !keep[r])
            continue;
        for (size_t i = (size_t)r * w; i < (size_t)(r + 1) * w; i++) {
            if (fabs(ref[i]) > mr)
                mr = fabs(ref[i]);
            double d = fabs((double)x[i] - (double)ref[i]);
            if (!isfinite(x[i]) || d != d)
                md = INFINITY;
            else if (d > md)
                md = d;
        }
    }
    return mr > 0 ? md / mr : md;
}

/* ---- batches ---- */

struct ptb {
    struct cs_batch b;
    int32_t *tokens, *pos, *seq_of, *seq_start, *slot, *pages;
};

/* Sequence s: len[s] tokens from start[s], pages of pool sequence id[s]
 * (page p of id k is k + POOL * p: disjoint, interleaved). */
static void ptb_init(struct ptb *t, int n_seqs, const int *len, const int *start, const int *id,
                    int max_pages)
{
    int n = 0;
    for (int s = 0; s < n_seqs; s++)
        n += len[s];
    t->tokens = xmalloc(n * 4), t->pos = xmalloc(n * 4), t->seq_of = xmalloc(n * 4);
    t->seq_start = xmalloc((n_seqs + 1) * 4), t->slot = xmalloc(n_seqs * 4);
    t->pages = xmalloc((size_t)n_seqs * max_pages * 4);
    n = 0;
    for (int s = 0; s < n_seqs; s++) {
        t->seq_start[s] = n;
        t->slot[s] = s;
        for (int i = 0; i < len[s]; i++, n++) {
            t->pos[n] = start[s] + i;
            t->seq_of[n] = s;
            t->tokens[n] = n % 1000;
        }
        for (int p = 0; p < max_pages; p++)
            t->pages[s * max_pages + p] = id[s] + POOL * p;
    }
    t->seq_start[n_seqs] = n;
    t->b = (struct cs_batch){.n_tokens = n, .n_seqs = n_seqs, .tokens = t->tokens, .pos = t->pos,
                             .seq_of = t->seq_of, .seq_start = t->seq_start, .slot = t->slot,
                             .page_table = t->pages, .max_pages = max_pages};
}

static void ptb_free(struct ptb *t)
{
    free(t->tokens), free(t->pos), free(t->seq_of), free(t->seq_start), free(t->slot);
    free(t->pages);
}

static int step(int both, const struct cs_batch *b)
{
    if (both && cpu->step_begin(cpu, b) != 0)
        return -1;
    return gpu->step_begin(gpu, b);
}

/* The entry on the GPU batch of the last step_begin. */
static int prefill(float *out, const float *q, int qs, int Hq, const struct cs_kv_layer *kv,
                   const struct cs_batch *b)
{
    return cuda_op_attn_prefill(gpu, out, q, qs, 2 * D, Hq, kv, 1.0f / 16, b);
}

/* ---- 1 and 2: accuracy and invariance ---- */

static void test_shape(int Hq, int Hkv, uint32_t kv_type, int ps, const char *tag)
{
    char name[96];
    int MP = (6144 + ps - 1) / ps;   /* pages per sequence: positions up to 6143 */
    struct cs_kv_layer kvc, kvg;
    struct pair kvp = kv_pair_new(&kvc, &kvg, kv_type, POOL * MP, ps, Hkv, D);
    int kd = Hkv * D, qs = Hq * 2 * D;
    /* history (positions before the step), stored on both backends */
    int hist[4] = {100, 0, 5000, 1300}, id[4] = {0, 1, 2, 3};
    for (int s = 0; s < 4; s++)
        for (int c0 = 0; c0 < hist[s]; c0 += 1024) {
            int len = hist[s] - c0 < 1024 ? hist[s] - c0 : 1024;
            struct ptb t;
            ptb_init(&t, 1, &len, &c0, &id[s], MP);
            CHECK(step(1, &t.b) == 0);
            struct pair k = pair_randv((size_t)len * kd, 2.0f), v = pair_randv((size_t)len * kd, 1.0f);
            CHECK(cpu->kv_store(cpu, &kvc, k.c, kd, v.c, kd, &t.b) == 0);
            CHECK(gpu->kv_store(gpu, &kvg, k.g, kd, v.g, kd, &t.b) == 0);
            pair_free(&k), pair_free(&v);
            ptb_free(&t);
        }
    /* the step: 37 at 100, 600 at 0, 512 at 5000, a decode token at 1300 */
    int len[4] = {37, 600, 512, 1};
    struct ptb t;
    ptb_init(&t, 4, len, hist, id, MP);
    CHECK(step(1, &t.b) == 0);
    int T = t.b.n_tokens;
    size_t on = (size_t)T * Hq * D;
    struct pair q = pair_randv((size_t)T * qs, 1.0f);
    struct pair k = pair_randv((size_t)T * kd, 2.0f), v = pair_randv((size_t)T * kd, 1.0f);
    float *poison = nan_buf(on);
    struct pair o = pair_new(poison, on * 4), od = pair_new(poison, on * 4);
    CHECK(cpu->kv_store(cpu, &kvc, k.c, kd, v.c, kd, &t.b) == 0);
    CHECK(gpu->kv_store(gpu, &kvg, k.g, kd, v.g, kd, &t.b) == 0);
    CHECK(cpu->attention(cpu, o.c, q.c, qs, 2 * D, Hq, &kvc, 1.0f / 16, &t.b) == 0);
    CHECK(gpu->attention(gpu, o.g, q.g, qs, 2 * D, Hq, &kvg, 1.0f / 16, &t.b) == 0);
    int rc = prefill(od.g, q.g, qs, Hq, &kvg, &t.b);
    CHECK(rc == 0);
    float *ref = download(cpu, o.c, on), *gop = download(gpu, o.g, on), *gd = download(gpu, od.g, on);
    char *keep = xmalloc(T);
    for (int i = 0; i < T; i++)
        keep[i] = i < T - 1;   /* the last token is the decode token */
    size_t w = (size_t)Hq * D;
    snprintf(name, sizeof name, "attn prefill entry %s", tag);
    report(name, rc == 0 ? rel_err(gd, ref, 0, T, w, keep) : INFINITY, 1e-5);
    snprintf(name, sizeof name, "attn op (all rows) %s", tag);
    report(name, rel_err(gop, ref, 0, T, w, NULL), 1e-5);
    if (kv_type == CS_DTYPE_F16) {   /* the int8 kernel's two stagings: the same bits */
        struct pair o2 = pair_new(poison, on * 4);
        cuda_attn_prefill_async_enable(gpu, false);
        int rc2 = prefill(o2.g, q.g, qs, Hq, &kvg, &t.b);
        cuda_attn_prefill_async_enable(gpu, true);
        float *g2 = download(gpu, o2.g, on);
        snprintf(name, sizeof name, "attn prefill async == register staging %s", tag);
        report(name, rc2 == 0 && memcmp(g2, gd, on * 4) == 0 ? 0 : 1, 0);
        free(g2);
        pair_free(&o2);
    }
    {   /* the entry left the decode row alone */
        int untouched = 1;
        for (size_t i = (size_t)(T - 1) * w; i < on; i++)
            untouched &= isnan(gd[i]);
        snprintf(name, sizeof name, "attn prefill decode row untouched %s", tag);
        report(name, untouched ? 0 : 1, 0);
    }
    /* invariance: seq 2 (512 at 5000) and seq 1 (600 at 0) alone and in two
     * chunks, against their rows of the mixed batch, bit for bit */
    int bad_alone = 0, bad_chunks = 0;
    for (int which = 1; which <= 2; which++) {
        int first = t.b.seq_start[which], n = len[which];
        int cut = which == 2 ? 77 : 250;
        for (int variant = 0; variant < 2; variant++) {
            int parts = variant ? 2 : 1;
            for (int pi = 0; pi < parts; pi++) {
                int l0 = variant ? (pi ? n - cut : cut) : n, off = variant && pi ? cut : 0;
                int st = hist[which] + off;
                struct ptb t1;
                ptb_init(&t1, 1, &l0, &st, &id[which], MP);
                CHECK(step(0, &t1.b) == 0);
                size_t n1 = (size_t)l0 * w;
                struct pair o1 = pair_new(poison, n1 * 4);
                const float *q1 = (const float *)q.g + (size_t)(first + off) * qs;
                CHECK(prefill(o1.g, q1, qs, Hq, &kvg, &t1.b) == 0);
                float *g1 = download(gpu, o1.g, n1);
                int diff = memcmp(g1, gd + (size_t)(first + off) * w, n1 * 4) != 0;
                if (variant)
                    bad_chunks += diff;
                else
                    bad_alone += diff;
                free(g1);
                pair_free(&o1);
                ptb_free(&t1);
            }
        }
    }
    snprintf(name, sizeof name, "attn prefill alone == batch %s", tag);
    report(name, bad_alone, 0);
    snprintf(name, sizeof name, "attn prefill chunked == batch %s", tag);
    report(name, bad_chunks, 0);
    free(ref), free(gop), free(gd), free(keep), free(poison);
    pair_free(&q), pair_free(&k), pair_free(&v), pair_free(&o), pair_free(&od), pair_free(&kvp);
    ptb_free(&t);
}

/* ---- 3: timing ---- */

/* One prefill chunk of L tokens at position start of one sequence, 9B
 * shape, F16 KV of random values (GPU only): the op and the entry timed
 * (median of reps), their outputs compared. */
static void bench(int L, int start, const char *tag)
{
    char name[96];
    int Hq = 16, Hkv = 4, ctx = start + L, np = (ctx + PS - 1) / PS;
    struct cs_kv_layer kv = {.kv_type = CS_DTYPE_F16, .n_pages = np, .page_size = PS,
                             .n_kv_heads = Hkv, .head_dim = D};
    size_t n_el = (size_t)kv.n_pages * 2 * PS * Hkv * D;
    uint16_t *hk = xmalloc(n_el * 2);
    for (size_t i = 0; i < n_el; i++)
        hk[i] = cs_float_to_half(frand() * (i / ((size_t)PS * Hkv * D) % 2 ? 1.0f : 2.0f));
    struct pair kvp = pair_new(hk, n_el * 2);
    free(hk);
    kv.pages = kvp.g;
    int id = 0;
    struct ptb t;
    ptb_init(&t, 1, &L, &start, &id, np);
    for (int p = 0; p < np; p++)   /* every page of the cache, in order */
        t.pages[p] = p;
    CHECK(step(0, &t.b) == 0);
    int qs = Hq * 2 * D;
    size_t on = (size_t)L * Hq * D;
    struct pair q = pair_randv((size_t)L * qs, 1.0f);
    float *poison = nan_buf(on);
    struct pair o_op = pair_new(poison, on * 4), o_new = pair_new(poison, on * 4);
    double flops = 2.0 * 2 * Hq * D * (double)L * ((double)start + L / 2.0);
    double ms[3];
    for (int k = 0; k < 3; k++) {   /* the op, the entry, the entry with register staging */
        int reps = L * (double)ctx > 4e6 ? 3 : 10;
        double best = INFINITY;
        for (int r = 0; r <= reps; r++) {
            CHECK(gpu->sync(gpu) == 0);
            double t0 = now_s();
            cuda_attn_prefill_async_enable(gpu, k < 2);
            int rc = k ? prefill(o_new.g, q.g, qs, Hq, &kv, &t.b)
                       : gpu->attention(gpu, o_op.g, q.g, qs, 2 * D, Hq, &kv, 1.0f / 16, &t.b);
            cuda_attn_prefill_async_enable(gpu, true);
            CHECK(rc == 0);
            CHECK(gpu->sync(gpu) == 0);
            double dt = (now_s() - t0) * 1e3;
            if (r > 0 && dt < best)   /* run 0 warms up */
                best = dt;
        }
        ms[k] = best;
        printf("BENCH attn_prefill_9B_%s_%s %.3f ms/layer (%.1f TFLOP/s fp32)\n", tag,
               k == 2 ? "regstage" : k ? "tiled" : "op", best, flops / (best * 1e-3) / 1e12);
    }
    printf("BENCH attn_prefill_9B_%s_speedup %.2fx (async staging over register staging %.2fx, "
           "%s)\n", tag, ms[0] / ms[1], ms[2] / ms[1],
           cuda_attn_prefill_async_used(gpu) ? "async ran" : "async never ran here");
    fflush(stdout);
    float *a = download(gpu, o_op.g, on), *b = download(gpu, o_new.g, on);
    snprintf(name, sizeof name, "attn prefill == op at %s", tag);
    report(name, rel_err(b, a, 0, L, (size_t)Hq * D, NULL), 1e-5);
    free(a), free(b), free(poison);
    pair_free(&q), pair_free(&o_op), pair_free(&o_new), pair_free(&kvp);
    ptb_free(&t);
}

int main(void)
{
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    test_shape(16, 4, CS_DTYPE_F16, PS, "9B f16");
    test_shape(16, 4, CS_DTYPE_F32, PS, "9B f32");
    test_shape(24, 4, CS_DTYPE_F16, PS, "27B f16");
    test_shape(24, 4, CS_DTYPE_F32, PS, "27B f32");
    test_shape(2, 1, CS_DTYPE_F16, PS, "G2 f16");
    test_shape(8, 1, CS_DTYPE_F32, PS, "G8 f32");
    test_shape(5, 1, CS_DTYPE_F16, PS, "G5 f16");
    test_shape(4, 4, CS_DTYPE_F32, PS, "G1 f32");
    /* pages that do not hold whole 64-position KV tiles: the int8 path
     * looks each position's page up (attention_prefill_q8.cuh) */
    test_shape(16, 4, CS_DTYPE_F16, 100, "9B f16 pages of 100");
    test_shape(24, 4, CS_DTYPE_F16, 96, "27B f16 pages of 96");
    bench(2048, 0, "T2048");
    bench(512, 32256, "32K_last512");
    gpu_pair_close();
    return test_report();
}
