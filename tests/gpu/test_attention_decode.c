/* test_attention_decode.c - proves the CUDA decode attention
 * (kernels/cuda/attention_decode.cu) and the fused q/k norm, RoPE and KV
 * store (ops.h qk_norm_rope_store, kernels/cuda/kv.cu) against the CPU
 * backend and the separate GPU ops, where test_ops does not reach:
 *  - decode tokens at long contexts, one per split length (splits of 128,
 *    256 and 512 positions: positions 63, 700, 10000, 20000), at GQA groups 2,
 *    4 and 6, F16 and F32 pages, and pages of 100 positions (a chunk of
 *    positions then straddles pages: the per-position lookup); error
 *    relative to max |cpu| <= 1e-5;
 *  - batch invariance: each decode token alone gives the bits it gives in
 *    the batch;
 *  - F16 pages: the cp.async kernel (sm_80+) gives the bits of the register
 *    kernel (cuda_attn_decode_pipe_enable off), also with pages out of range
 *    (a -1 and a too-large page in the context: they read as zeros);
 *  - qk_norm_rope_store == head_norm_rope (q), head_norm_rope (k), kv_store
 *    on the GPU, bit for bit (q, k and every page byte), a token whose page
 *    is out of range included (nothing written for it);
 *  - timing (BENCH lines): one decode token at 4K and 32K, 9B and 27B
 *    shapes, F16 KV, the cp.async and the register kernel, microseconds per
 *    layer and the KV read rate (build with -DDEC_NSTAGE=... etc. to compare
 *    variants: attention_decode.cu).
 * Not a ctest test (needs a GPU); exits 77 when no CUDA device is present. */
#include <time.h>

#include "../../kernels/cuda/attention_decode.h"
#include "../test_util.h"
#include "gpu_pair.h"

#define D 256

/* The decode tokens of t with the cp.async kernel and with the register
 * kernel: the same bits (on a device without cp.async both are the
 * register kernel). */
static void test_pipe_vs_regs(struct tb *t, const struct pair *q, int qs, int Hq,
                              struct cs_kv_layer *kvg, const char *tag)
{
    char name[80];
    size_t bytes = (size_t)t->b.n_tokens * Hq * D * 4;
    struct pair a = pair_new(NULL, bytes), b = pair_new(NULL, bytes);
    CHECK(gpu->step_begin(gpu, &t->b) == 0);
    CHECK(gpu->attention(gpu, a.g, q->g, qs, 2 * D, Hq, kvg, 1.0f / 16, &t->b) == 0);
    cuda_attn_decode_pipe_enable(gpu, false);
    CHECK(gpu->attention(gpu, b.g, q->g, qs, 2 * D, Hq, kvg, 1.0f / 16, &t->b) == 0);
    cuda_attn_decode_pipe_enable(gpu, true);
    snprintf(name, sizeof name, "decode cp.async == registers %s", tag);
    report(name, !pair_same(&a, &b, bytes), 0);
    if (!cuda_attn_decode_pipe_used(gpu))
        printf("note: the cp.async kernel did not run here (pre-sm_80 device or build)\n");
    pair_free(&a), pair_free(&b);
}

static void test_decode(int Hq, int Hkv, uint32_t kv_type, int PS, int n_seqs, const int *pos,
                        const char *tag)
{
    char name[80];
    int max_pos = 0;
    for (int s = 0; s < n_seqs; s++)
        max_pos = pos[s] > max_pos ? pos[s] : max_pos;
    int MP = (max_pos + PS) / PS;
    CHECK(MP <= 128);
    struct cs_kv_layer kvc, kvg;
    struct pair kvp = kv_pair_new(&kvc, &kvg, kv_type, 8 * MP, PS, Hkv, D);
    int slots[8], ones[8];
    for (int s = 0; s < n_seqs; s++) {
        slots[s] = s;
        ones[s] = 1;
        kv_fill_history(&kvc, &kvg, s, pos[s], MP, Hkv * D);
    }
    struct tb t;
    tb_init(&t, n_seqs, ones, pos, slots, MP);
    both_step(&t.b);
    int kd = Hkv * D, qs = Hq * 2 * D;
    struct pair q = pair_randv((size_t)n_seqs * qs, 1.0f), k = pair_randv((size_t)n_seqs * kd, 2.0f),
                v = pair_randv((size_t)n_seqs * kd, 1.0f);
    size_t on = (size_t)n_seqs * Hq * D;
    float *poison = malloc(on * 4);
    for (size_t i = 0; i < on; i++)
        poison[i] = NAN;
    struct pair o = pair_new(poison, on * 4);
    CHECK(cpu->kv_store(cpu, &kvc, k.c, kd, v.c, kd, &t.b) == 0);
    CHECK(gpu->kv_store(gpu, &kvg, k.g, kd, v.g, kd, &t.b) == 0);
    CHECK(cpu->attention(cpu, o.c, q.c, qs, 2 * D, Hq, &kvc, 1.0f / 16, &t.b) == 0);
    CHECK(gpu->attention(gpu, o.g, q.g, qs, 2 * D, Hq, &kvg, 1.0f / 16, &t.b) == 0);
    snprintf(name, sizeof name, "decode %s", tag);
    report(name, pair_err(&o, on), 1e-5);
    /* each token alone: the same bits */
    int differ = 0;
    for (int s = 0; s < n_seqs; s++) {
        struct tb t1;
        tb_init(&t1, 1, &ones[s], &pos[s], &slots[s], MP);
        CHECK(gpu->step_begin(gpu, &t1.b) == 0);
        struct pair o1 = pair_new(poison, (size_t)Hq * D * 4);
        CHECK(gpu->attention(gpu, o1.g, (const float *)q.g + (size_t)s * qs, qs, 2 * D, Hq, &kvg,
                             1.0f / 16, &t1.b) == 0);
        struct pair os = {NULL, (float *)o.g + (size_t)s * Hq * D, 0};
        differ += !pair_same(&o1, &os, (size_t)Hq * D * 4);
        pair_free(&o1);
    }
    snprintf(name, sizeof name, "decode invariance %s", tag);
    report(name, differ, 0);
    if (kv_type == CS_DTYPE_F16) {
        test_pipe_vs_regs(&t, &q, qs, Hq, &kvg, tag);
        /* sequence 0's pages 1 and MP - 2 out of range (page_size divides
         * or not the chunk: both lookups) */
        t.pages[1] = -1;
        t.pages[MP - 2] = kvg.n_pages + 3;
        snprintf(name, sizeof name, "%s, pages out of range", tag);
        test_pipe_vs_regs(&t, &q, qs, Hq, &kvg, name);
    }
    free(poison);
    pair_free(&q), pair_free(&k), pair_free(&v), pair_free(&o), pair_free(&kvp);
}

/* qk_norm_rope_store against the three ops it replaces, on the GPU. */
static void test_qk_prep(int Hq, int Hkv, uint32_t kv_type, const char *tag)
{
    char name[80];
    if (!gpu->qk_norm_rope_store) {
        report("qk_norm_rope_store present", 1, 0);
        return;
    }
    int PS = 64, MP = 8;
    size_t esz = kv_type == CS_DTYPE_F16 ? 2 : 4;
    struct cs_kv_layer kv1 = {.kv_type = kv_type, .n_pages = 8 * MP, .page_size = PS,
                              .n_kv_heads = Hkv, .head_dim = D};
    struct cs_kv_layer kv2 = kv1;
    size_t kv_bytes = (size_t)kv1.n_pages * 2 * PS * Hkv * D * esz;
    unsigned char *zero = calloc(1, kv_bytes);
    struct pair p1 = pair_new(zero, kv_bytes), p2 = pair_new(zero, kv_bytes);
    kv1.pages = p1.g;
    kv2.pages = p2.g;
    /* a decode token, a 9-token chunk across a page boundary, and a token
     * whose page (index 5 of slot 2) is out of range */
    int len[3] = {1, 9, 1}, start[3] = {300, 60, 5 * 64 + 3}, slot[3] = {0, 1, 2};
    struct tb t;
    tb_init(&t, 3, len, start, slot, MP);
    t.pages[2 * MP + 5] = -1;
    CHECK(gpu->step_begin(gpu, &t.b) == 0);
    int T = t.b.n_tokens, qs = Hq * 2 * D, kd = Hkv * D;
    struct pair q1 = pair_randv((size_t)T * qs, 2.0f), k1 = pair_randv((size_t)T * kd, 2.0f);
    struct pair v = pair_randv((size_t)T * kd, 1.0f), wq = pair_randv(D, 1.5f), wk = pair_randv(D, 1.5f);
    struct pair q2 = pair_new(NULL, q1.bytes), k2 = pair_new(NULL, k1.bytes);
    gpu->copy(gpu, q2.g, q1.g, q1.bytes);
    gpu->copy(gpu, k2.g, k1.g, k1.bytes);
    CHECK(gpu->head_norm_rope(gpu, q1.g, qs, 2 * D, Hq, D, wq.g, 64, 1e7f, 1e-6f, &t.b) == 0);
    CHECK(gpu->head_norm_rope(gpu, k1.g, kd, D, Hkv, D, wk.g, 64, 1e7f, 1e-6f, &t.b) == 0);
    CHECK(gpu->kv_store(gpu, &kv1, k1.g, kd, v.g, kd, &t.b) == 0);
    CHECK(gpu->qk_norm_rope_store(gpu, q2.g, qs, 2 * D, Hq, k2.g, v.g, kd, Hkv, D, wq.g, wk.g, 64,
                                  1e7f, 1e-6f, &kv2, &t.b) == 0);
    snprintf(name, sizeof name, "qk_norm_rope_store q %s", tag);
    report(name, !pair_same(&q1, &q2, q1.bytes), 0);
    snprintf(name, sizeof name, "qk_norm_rope_store k %s", tag);
    report(name, !pair_same(&k1, &k2, k1.bytes), 0);
    snprintf(name, sizeof name, "qk_norm_rope_store pages %s", tag);
    report(name, !pair_same(&p1, &p2, kv_bytes), 0);
    free(zero);
    pair_free(&q1), pair_free(&q2), pair_free(&k1), pair_free(&k2), pair_free(&v);
    pair_free(&wq), pair_free(&wk), pair_free(&p1), pair_free(&p2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define BENCH_LAYERS 8   /* KV caches called in turn: more than the L2 holds */

/* One decode token at position pos over BENCH_LAYERS KV caches (F16,
 * random, pages of 256 in order): each kernel timed as the best of 10
 * rounds of BENCH_LAYERS back-to-back attention calls (their launches
 * overlap as in a decode step), per layer; the outputs compared bitwise. */
static void bench(int Hq, int Hkv, int pos, const char *tag)
{
    char name[96];
    int PS = 256, np = pos / PS + 1, qs = Hq * 2 * D;
    struct cs_kv_layer kv = {.kv_type = CS_DTYPE_F16, .n_pages = np, .page_size = PS,
                             .n_kv_heads = Hkv, .head_dim = D};
    size_t kv_bytes = (size_t)np * 2 * PS * Hkv * D * 2, on = (size_t)Hq * D;
    uint16_t *h = malloc(kv_bytes);
    for (size_t i = 0; i < kv_bytes / 2; i++)
        h[i] = cs_float_to_half(frand());
    void *pages[BENCH_LAYERS];
    struct pair kvp = pair_new(h, kv_bytes);   /* the CPU copy is never read */
    free(h);
    pages[0] = kvp.g;
    for (int l = 1; l < BENCH_LAYERS; l++) {
        CHECK(gpu->alloc(gpu, &pages[l], kv_bytes) == 0);
        CHECK(gpu->copy(gpu, pages[l], kvp.g, kv_bytes) == 0);
    }
    int one = 1, slot = 0;
    struct tb t;
    tb_init(&t, 1, &one, &pos, &slot, np);
    for (int p = 0; p < np; p++)
        t.pages[p] = p;
    CHECK(gpu->step_begin(gpu, &t.b) == 0);
    struct pair q = pair_randv((size_t)qs, 1.0f);
    struct pair o[2] = {pair_new(NULL, on * 4), pair_new(NULL, on * 4)};
    double bytes = (double)Hkv * D * 2 * 2 * (pos + 1);   /* K and V read once */
    for (int k = 0; k < 2; k++) {   /* 0: cp.async, 1: registers */
        cuda_attn_decode_pipe_enable(gpu, k == 0);
        double best = INFINITY;
        for (int r = 0; r <= 10; r++) {   /* round 0 warms up */
            CHECK(gpu->sync(gpu) == 0);
            double t0 = now_s();
            for (int l = 0; l < BENCH_LAYERS; l++) {
                kv.pages = pages[l];
                CHECK(gpu->attention(gpu, o[k].g, q.g, qs, 2 * D, Hq, &kv, 1.0f / 16, &t.b) == 0);
            }
            CHECK(gpu->sync(gpu) == 0);
            double us = (now_s() - t0) * 1e6 / BENCH_LAYERS;
            if (r > 0 && us < best)
                best = us;
        }
        printf("BENCH attn_decode_%s_%s %.1f us/layer (%.2f TB/s of KV)\n", tag,
               k ? "registers" : "cp.async", best, bytes / (best * 1e-6) / 1e12);
    }
    cuda_attn_decode_pipe_enable(gpu, true);
    fflush(stdout);
    snprintf(name, sizeof name, "decode cp.async == registers %s", tag);
    report(name, !pair_same(&o[0], &o[1], on * 4), 0);
    for (int l = 1; l < BENCH_LAYERS; l++)
        gpu->free(gpu, pages[l]);
    pair_free(&q), pair_free(&o[0]), pair_free(&o[1]), pair_free(&kvp);
}

int main(void)
{
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    int long_pos[4] = {20000, 63, 10000, 700}, short_pos[3] = {4500, 1, 700};
    test_decode(16, 4, CS_DTYPE_F16, 256, 4, long_pos, "9B f16");
    test_decode(24, 4, CS_DTYPE_F16, 256, 4, long_pos, "27B f16");
    test_decode(4, 2, CS_DTYPE_F16, 256, 3, short_pos, "group 2 f16");
    test_decode(16, 4, CS_DTYPE_F32, 256, 3, short_pos, "9B f32");
    test_decode(24, 4, CS_DTYPE_F32, 256, 3, short_pos, "27B f32");
    test_decode(16, 4, CS_DTYPE_F16, 100, 3, short_pos, "9B f16 pages of 100");
    test_decode(24, 4, CS_DTYPE_F32, 100, 3, short_pos, "27B f32 pages of 100");
    test_qk_prep(16, 4, CS_DTYPE_F16, "9B f16");
    test_qk_prep(24, 4, CS_DTYPE_F16, "27B f16");
    test_qk_prep(16, 4, CS_DTYPE_F32, "9B f32");
    bench(16, 4, 4095, "9B_4K");
    bench(16, 4, 32767, "9B_32K");
    bench(24, 4, 32767, "27B_32K");
    gpu_pair_close();
    return test_report();
}
