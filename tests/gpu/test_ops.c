/* test_ops.c - proves the CUDA backend's ops (everything but matmul, which
 * test_matmul covers) compute what the CPU backend computes, on random
 * inputs at the real 9B and 27B shapes (kernels/ops.h semantics):
 * rmsnorm and add_rmsnorm (out = x * w and the row's scale, kernels/
 * numerics.h; add_rmsnorm also bitwise equal to the GPU's add then
 * rmsnorm), add, silu_mul, sigmoid_gate, gated_rmsnorm, head_norm_rope,
 * kv_store + attention (F16 and F32 pages; decode tokens over several splits
 * mixed with prefill chunks in one batch), conv1d_silu + gdn (a prefill
 * chunk and a decode token in one batch, then a second step on the updated
 * state), embed (Q8_0 / F16 / F32 tables, bitwise), and sample (greedy and
 * seeded draws equal to the CPU token for token, flat rows whose top-k or
 * top-p cut lies past the GPU's sorted list of 1024 included; logprobs
 * within 1e-5).
 * It also checks batch invariance on the GPU: a decode token's attention
 * output is bitwise the same alone and inside a mixed batch.
 * Each check prints "RESULT <name> PASS|FAIL <error figure> (bound)", which
 * tests/gpu/run.sh gathers into a table. Error bounds are relative to the
 * largest |reference| value of the output and stated per check. The checks
 * named "... bits" count the output floats whose bits differ from the CPU's
 * (bound 0): the ops between two int8 quantizations follow one arithmetic on
 * both backends (kernels/exact_math.h, kernels/cpu/cpu.h).
 * Not a ctest test (needs a GPU); exits 77 when no CUDA device is present. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/gguf.h"
#include "../../common/half.h"
#include "../../common/log.h"
#include "../../kernels/ops.h"
#include "../test_util.h"
#include "gpu_pair.h"

/* ---- elementwise and norms ---- */

static void test_ops_elementwise(int E, int F, const char *tag)
{
    char name[64];
    int T = 7;
    struct pair x = pair_randv((size_t)T * E, 3.0f), w = pair_randv(E, 1.0f), o = pair_new(NULL, (size_t)T * E * 4);
    struct pair sc = pair_new(NULL, (size_t)T * 4);
    CHECK(cpu->rmsnorm(cpu, o.c, sc.c, x.c, w.c, T, E, 1e-6f) == 0);
    CHECK(gpu->rmsnorm(gpu, o.g, sc.g, x.g, w.g, T, E, 1e-6f) == 0);
    snprintf(name, sizeof name, "rmsnorm %s", tag);
    report(name, pair_err(&o, (size_t)T * E) + pair_err(&sc, T), 1e-5);
    snprintf(name, sizeof name, "rmsnorm bits %s", tag);
    report(name, pair_floats_differ(&o, (size_t)T * E) + pair_floats_differ(&sc, T), 0);
    pair_free(&sc);

    size_t n = (size_t)T * F;
    struct pair g = pair_randv(n, 6.0f), u = pair_randv(n, 2.0f);
    CHECK(cpu->silu_mul(cpu, g.c, g.c, u.c, n) == 0);
    CHECK(gpu->silu_mul(gpu, g.g, g.g, u.g, n) == 0);
    snprintf(name, sizeof name, "silu_mul %s", tag);
    report(name, pair_err(&g, n), 1e-5);
    snprintf(name, sizeof name, "silu_mul bits %s", tag);
    report(name, pair_floats_differ(&g, n), 0);
    CHECK(cpu->add(cpu, g.c, u.c, n) == 0);
    CHECK(gpu->add(gpu, g.g, u.g, n) == 0);
    snprintf(name, sizeof name, "add %s", tag);
    report(name, pair_err(&g, n), 1e-5);
    pair_free(&x), pair_free(&w), pair_free(&o), pair_free(&g), pair_free(&u);
}

/* add_rmsnorm (x += y, out = x * w, scale = the norm's): the CUDA op against
 * the CPU op (x like add, out and scale like rmsnorm), and against the CUDA
 * add then rmsnorm bit for bit (x, out and scale). dim > 8192 takes the
 * looping kernel. */
static void test_ops_add_rmsnorm(int T, int E, const char *tag)
{
    char name[64];
    size_t n = (size_t)T * E;
    float *hx = randv(n, 3.0f);
    struct pair x = pair_new(hx, n * 4), x2 = pair_new(hx, n * 4), y = pair_randv(n, 2.0f);
    struct pair w = pair_randv(E, 1.0f), o = pair_new(NULL, n * 4), o2 = pair_new(NULL, n * 4);
    struct pair sc = pair_new(NULL, (size_t)T * 4), sc2 = pair_new(NULL, (size_t)T * 4);
    CHECK(cpu->add_rmsnorm(cpu, x.c, y.c, o.c, sc.c, w.c, T, E, 1e-6f) == 0);
    CHECK(gpu->add_rmsnorm(gpu, x.g, y.g, o.g, sc.g, w.g, T, E, 1e-6f) == 0);
    snprintf(name, sizeof name, "add_rmsnorm x %s", tag);
    report(name, pair_err(&x, n), 1e-5);
    snprintf(name, sizeof name, "add_rmsnorm out+scale %s", tag);
    report(name, pair_err(&o, n) + pair_err(&sc, T), 1e-5);
    snprintf(name, sizeof name, "add_rmsnorm bits %s", tag);
    report(name, pair_floats_differ(&x, n) + pair_floats_differ(&o, n) +
                     pair_floats_differ(&sc, T), 0);
    CHECK(gpu->add(gpu, x2.g, y.g, n) == 0);
    CHECK(gpu->rmsnorm(gpu, o2.g, sc2.g, x2.g, w.g, T, E, 1e-6f) == 0);
    snprintf(name, sizeof name, "add_rmsnorm == add+rmsnorm %s", tag);
    report(name, (double)(!pair_same(&x, &x2, n * 4) + !pair_same(&o, &o2, n * 4) +
                          !pair_same(&sc, &sc2, (size_t)T * 4)), 0);
    free(hx);
    pair_free(&x), pair_free(&x2), pair_free(&y), pair_free(&w), pair_free(&o), pair_free(&o2);
    pair_free(&sc), pair_free(&sc2);
}

static void test_ops_gated_norm(int Hq, int Hv, const char *tag)
{
    char name[64];
    int T = 5, D = 256;
    /* sigmoid_gate over the q projection layout: per head 256 query then 256 gate */
    size_t qn = (size_t)T * Hq * 2 * D, on = (size_t)T * Hq * D;
    struct pair q = pair_randv(qn, 4.0f), o = pair_randv(on, 2.0f);
    CHECK(cpu->sigmoid_gate(cpu, o.c, (float *)q.c + D, Hq * 2 * D, 2 * D, Hq, D, T) == 0);
    CHECK(gpu->sigmoid_gate(gpu, o.g, (float *)q.g + D, Hq * 2 * D, 2 * D, Hq, D, T) == 0);
    snprintf(name, sizeof name, "sigmoid_gate %s", tag);
    report(name, pair_err(&o, on), 1e-5);
    snprintf(name, sizeof name, "sigmoid_gate bits %s", tag);
    report(name, pair_floats_differ(&o, on), 0);
    size_t gn = (size_t)T * Hv * 128;
    struct pair x = pair_randv(gn, 2.0f), z = pair_randv(gn, 3.0f), w = pair_randv(128, 1.0f);
    CHECK(cpu->gated_rmsnorm(cpu, x.c, z.c, w.c, Hv, 128, 1e-6f, T) == 0);
    CHECK(gpu->gated_rmsnorm(gpu, x.g, z.g, w.g, Hv, 128, 1e-6f, T) == 0);
    snprintf(name, sizeof name, "gated_rmsnorm %s", tag);
    report(name, pair_err(&x, gn), 1e-5);
    snprintf(name, sizeof name, "gated_rmsnorm bits %s", tag);
    report(name, pair_floats_differ(&x, gn), 0);
    pair_free(&q), pair_free(&o), pair_free(&x), pair_free(&z), pair_free(&w);
}

/* The output projections with their gate fused into the GEMV's prologue
 * (ops.h matmul_gated_rmsnorm, matmul_sigmoid_gate, matmul_swiglu) equal
 * the separate op then the matmul on the same backend, bit for bit: one
 * decode token (the GEMV's prologue), 3 tokens (the fallback: op, then the
 * GEMV), 40 and 300 tokens (the prologue fused into the quantization before
 * the GEMM, quantize_pro.cu). Error = differing outputs. */
static void test_ops_matmul_gated(int Hq, int Hv, int E, const char *tag)
{
    char name[80];
    if (!gpu->matmul_gated_rmsnorm || !gpu->matmul_sigmoid_gate) {
        report("matmul_gated: ops present", 1, 0);
        return;
    }
    int D = 256, G = 128;
    struct cs_weight wg, wa;
    memset(&wg, 0, sizeof wg);
    memset(&wa, 0, sizeof wa);
    uint8_t *hg = q8_0_rows((int64_t)Hv * G, E), *ha = q8_0_rows((int64_t)Hq * D, E);
    CHECK(gpu->weight_upload(gpu, &wg, CS_DTYPE_Q8_0, (int64_t)Hv * G, E, hg) == 0);
    CHECK(gpu->weight_upload(gpu, &wa, CS_DTYPE_Q8_0, (int64_t)Hq * D, E, ha) == 0);
    static const int Ts[4] = {1, 3, 40, 300};
    for (int ti = 0; ti < 4; ti++) {
        int T = Ts[ti];
        size_t gn = (size_t)T * Hv * G, an = (size_t)T * Hq * D, qn = (size_t)T * Hq * 2 * D;
        float *hx = randv(gn > an ? gn : an, 2.0f);
        struct pair x1 = pair_new(hx, gn * 4), x2 = pair_new(hx, gn * 4);
        struct pair z = pair_randv(gn, 3.0f), nw = pair_randv(G, 1.0f);
        struct pair y1 = pair_new(NULL, (size_t)T * E * 4), y2 = pair_new(NULL, (size_t)T * E * 4);
        float *ys[1] = {y2.g};
        const struct cs_weight *ws[1] = {&wg};
        CHECK(gpu->matmul_gated_rmsnorm(gpu, y1.g, &wg, x1.g, z.g, nw.g, Hv, G, 1e-6f, T) == 0);
        CHECK(gpu->gated_rmsnorm(gpu, x2.g, z.g, nw.g, Hv, G, 1e-6f, T) == 0);
        CHECK(gpu->matmul(gpu, 1, ys, ws, x2.g, T) == 0);
        snprintf(name, sizeof name, "matmul_gated_rmsnorm %s T=%d", tag, T);
        report(name, !pair_same(&y1, &y2, (size_t)T * E * 4), 0);
        struct pair a1 = pair_new(hx, an * 4), a2 = pair_new(hx, an * 4), q = pair_randv(qn, 4.0f);
        ws[0] = &wa;
        CHECK(gpu->matmul_sigmoid_gate(gpu, y1.g, &wa, a1.g, (float *)q.g + D, Hq * 2 * D, 2 * D,
                                       Hq, D, T) == 0);
        CHECK(gpu->sigmoid_gate(gpu, a2.g, (float *)q.g + D, Hq * 2 * D, 2 * D, Hq, D, T) == 0);
        CHECK(gpu->matmul(gpu, 1, ys, ws, a2.g, T) == 0);
        snprintf(name, sizeof name, "matmul_sigmoid_gate %s T=%d", tag, T);
        report(name, !pair_same(&y1, &y2, (size_t)T * E * 4), 0);
        /* swiglu over the GDN output shape: y = W (silu(x) * z) */
        struct pair s1 = pair_new(hx, gn * 4), s2 = pair_new(hx, gn * 4);
        ws[0] = &wg;
        CHECK(gpu->matmul_swiglu(gpu, y1.g, &wg, s1.g, z.g, T) == 0);
        CHECK(gpu->silu_mul(gpu, s2.g, s2.g, z.g, gn) == 0);
        CHECK(gpu->matmul(gpu, 1, ys, ws, s2.g, T) == 0);
        snprintf(name, sizeof name, "matmul_swiglu %s T=%d", tag, T);
        report(name, !pair_same(&y1, &y2, (size_t)T * E * 4), 0);
        pair_free(&s1), pair_free(&s2);
        free(hx);
        pair_free(&x1), pair_free(&x2), pair_free(&z), pair_free(&nw), pair_free(&y1);
        pair_free(&y2), pair_free(&a1), pair_free(&a2), pair_free(&q);
    }
    gpu->weight_free(gpu, &wg);
    gpu->weight_free(gpu, &wa);
    free(hg);
    free(ha);
}

static void test_ops_head_norm_rope(int Hq, const char *tag)
{
    char name[64];
    int D = 256;
    int len[3] = {1, 9, 1}, start[3] = {4000, 70, 131000}, slot[3] = {0, 1, 2};
    struct tb t;
    tb_init(&t, 3, len, start, slot, 4);
    both_step(&t.b);
    int T = t.b.n_tokens;
    size_t n = (size_t)T * Hq * 2 * D;
    struct pair q = pair_randv(n, 2.0f), w = pair_randv(D, 1.5f);
    CHECK(cpu->head_norm_rope(cpu, q.c, Hq * 2 * D, 2 * D, Hq, D, w.c, 64, 1e7f, 1e-6f, &t.b) == 0);
    CHECK(gpu->head_norm_rope(gpu, q.g, Hq * 2 * D, 2 * D, Hq, D, w.g, 64, 1e7f, 1e-6f, &t.b) == 0);
    snprintf(name, sizeof name, "head_norm_rope %s", tag);
    /* Both compute the angles in double, with glibc's and CUDA's pow and
     * sincos: the floats agree unless a double lands within an ulp or two
     * of a float rounding boundary, a chance that grows with the position
     * (~1e-4 per value at 131000), so bits are held for positions < 5000. */
    report(name, pair_err(&q, (size_t)T * Hq * 2 * D), 1e-6);
    snprintf(name, sizeof name, "head_norm_rope bits %s", tag);
    report(name, pair_floats_differ(&q, (size_t)(T - 1) * Hq * 2 * D), 0);
    pair_free(&q), pair_free(&w);
}

/* ---- attention ---- */

static void test_ops_attention(int Hq, int Hkv, uint32_t kv_type, const char *tag)
{
    char name[64];
    int D = 256, PS = 256, MP = 8;
    struct cs_kv_layer kvc, kvg;
    struct pair kvp = kv_pair_new(&kvc, &kvg, kv_type, 8 * MP, PS, Hkv, D);
    size_t kv_bytes = kvp.bytes;
    /* history: seq 0 positions 0..699, seq 1 0..99, seq 2 none, seq 3 0..1299 */
    int hl[4] = {700, 100, 0, 1300}, sl[4] = {0, 1, 2, 3};
    int kd = Hkv * D;
    for (int s = 0; s < 4; s++)
        kv_fill_history(&kvc, &kvg, sl[s], hl[s], MP, kd);
    /* the step: decode at 700 (6 splits of 128), prefill 37 at 100, decode at 0, decode at 1300 */
    int len[4] = {1, 37, 1, 1}, start[4] = {700, 100, 0, 1300};
    struct tb t;
    tb_init(&t, 4, len, start, sl, MP);
    both_step(&t.b);
    int T = t.b.n_tokens;
    int qs = Hq * 2 * D;
    struct pair q = pair_randv((size_t)T * qs, 1.0f), k = pair_randv((size_t)T * kd, 2.0f),
                v = pair_randv((size_t)T * kd, 1.0f);
    float *poison = malloc((size_t)T * Hq * D * 4);
    for (size_t i = 0; i < (size_t)T * Hq * D; i++)
        poison[i] = NAN;
    struct pair o = pair_new(poison, (size_t)T * Hq * D * 4);
    CHECK(cpu->kv_store(cpu, &kvc, k.c, kd, v.c, kd, &t.b) == 0);
    CHECK(gpu->kv_store(gpu, &kvg, k.g, kd, v.g, kd, &t.b) == 0);
    CHECK(cpu->attention(cpu, o.c, q.c, qs, 2 * D, Hq, &kvc, 1.0f / 16, &t.b) == 0);
    CHECK(gpu->attention(gpu, o.g, q.g, qs, 2 * D, Hq, &kvg, 1.0f / 16, &t.b) == 0);
    snprintf(name, sizeof name, "kv_store %s", tag);
    report(name, pair_bytes_differ(&kvp, kv_bytes), 0);   /* pages bitwise equal */
    snprintf(name, sizeof name, "attention %s", tag);
    report(name, pair_err(&o, (size_t)T * Hq * D), 1e-5);
    snprintf(name, sizeof name, "attention bits %s", tag);
    report(name, pair_floats_differ(&o, (size_t)T * Hq * D), 0);
    /* batch invariance: the decode token of seq 3 alone gives the same bits */
    int l1 = 1, s1 = 1300, sl3 = 3;
    struct tb t1;
    tb_init(&t1, 1, &l1, &s1, &sl3, MP);
    CHECK(gpu->step_begin(gpu, &t1.b) == 0);
    struct pair o1 = pair_new(poison, (size_t)Hq * D * 4);
    const float *q3 = (const float *)q.g + (size_t)(T - 1) * qs;
    CHECK(gpu->attention(gpu, o1.g, q3, qs, 2 * D, Hq, &kvg, 1.0f / 16, &t1.b) == 0);
    struct pair o_last = {NULL, (float *)o.g + (size_t)(T - 1) * Hq * D, 0};
    snprintf(name, sizeof name, "attention invariance %s", tag);
    report(name, pair_same(&o1, &o_last, (size_t)Hq * D * 4) ? 0.0 : 1.0, 0);
    free(poison);
    gpu->free(gpu, o1.g);
    pair_free(&q), pair_free(&k), pair_free(&v), pair_free(&o), pair_free(&kvp);
}

/* ---- conv1d + gdn ---- */

/* plen: the first step's prefill length. 600 takes the chunked form on both
 * backends (gdn_chunked.cu, mirrored by kernels/cpu/gdn_chunked.c); below
 * 512 the scan (gdn.cu, mirrored by kernels/cpu/gdn.c). Either way the CPU
 * follows the GPU bit for bit ("bits" checks: conv outputs, GDN outputs and
 * states over all three steps, each step from the CPU's conv output). */
/* sub: the prefill sequence (slot 2) starts from a zero state and its first
 * 8 tokens have beta_raw = -88 (sigmoid 6.1e-39, subnormal): the GPU
 * flushes such values (-ftz) and the CPU's thread pool must too
 * (kernels/cpu/fpmode.h), or the betas, updates, states and outputs of
 * those tokens differ. */
static void test_ops_gdn_case(int Gk, int Hv, int plen, int sub, const char *tag)
{
    char name[64];
    int conv_dim = 2 * Gk * 128 + Hv * 128, n_slots = 4;
    struct cs_gdn_layer sc = {.n_slots = n_slots, .conv_dim = conv_dim, .conv_kernel = 4,
                              .n_k_heads = Gk, .n_v_heads = Hv, .key_dim = 128, .value_dim = 128};
    struct cs_gdn_layer sg = sc;
    size_t conv_n = (size_t)n_slots * 3 * conv_dim, rec_n = (size_t)n_slots * Hv * 128 * 128;
    struct pair conv = pair_randv(conv_n, 1.0f), rec = pair_randv(rec_n, 0.05f);
    sc.conv = conv.c, sg.conv = conv.g, sc.rec = rec.c, sg.rec = rec.g;
    if (sub) {
        size_t slot_n = (size_t)Hv * 128 * 128;
        CHECK(cpu->zero(cpu, (float *)rec.c + 2 * slot_n, slot_n * 4) == 0);
        CHECK(gpu->zero(gpu, (float *)rec.g + 2 * slot_n, slot_n * 4) == 0);
    }
    struct pair w = pair_randv((size_t)conv_dim * 4, 0.5f), a = pair_randv(Hv, 1.0f),
                dt = pair_randv(Hv, 1.0f);
    {   /* a = -exp(A_log) < 0 */
        float *h = malloc(Hv * 4);
        for (int i = 0; i < Hv; i++)
            h[i] = -expf(frand());
        cpu->upload(cpu, a.c, h, Hv * 4);
        gpu->upload(gpu, a.g, h, Hv * 4);
        free(h);
    }
    double e_out = 0, e_conv = 0, d_out = 0, d_conv = 0;
    /* prefill (plen tokens) + decode, mixed, pure decode (fused conv) */
    for (int step = 0; step < 3; step++) {
        int len[3] = {step ? 1 : plen, 1, step == 1 ? 3 : 1};
        int start[3] = {step ? plen - 1 + step : 0, 9 + step, step == 2 ? 4 : 1};
        int sl[3] = {2, 0, 3};
        struct tb t;
        tb_init(&t, 3, len, start, sl, 1);
        both_step(&t.b);
        int T = t.b.n_tokens;
        struct pair x = pair_randv((size_t)T * conv_dim, 2.0f), y = pair_new(NULL, (size_t)T * conv_dim * 4);
        struct pair br = pair_randv((size_t)T * Hv, 2.0f), ar = pair_randv((size_t)T * Hv, 2.0f);
        if (sub && step == 0) {   /* batch tokens 0..7: the prefill sequence's first */
            float *h = malloc((size_t)T * Hv * 4);
            cpu->download(cpu, h, br.c, (size_t)T * Hv * 4);
            for (int i = 0; i < 8 * Hv; i++)
                h[i] = -88.0f;
            cpu->upload(cpu, br.c, h, (size_t)T * Hv * 4);
            gpu->upload(gpu, br.g, h, (size_t)T * Hv * 4);
            free(h);
        }
        struct pair o = pair_new(NULL, (size_t)T * Hv * 128 * 4);
        CHECK(cpu->conv1d_silu(cpu, y.c, x.c, w.c, &sc, &t.b) == 0);
        CHECK(gpu->conv1d_silu(gpu, y.g, x.g, w.g, &sg, &t.b) == 0);
        double ey = pair_err(&y, (size_t)T * conv_dim);
        e_conv = ey > e_conv ? ey : e_conv;
        d_conv += pair_floats_differ(&y, (size_t)T * conv_dim);
        /* both continue from the CPU's conv output so the gdn error is its own */
        float *yh = malloc((size_t)T * conv_dim * 4);
        cpu->download(cpu, yh, y.c, (size_t)T * conv_dim * 4);
        gpu->upload(gpu, y.g, yh, (size_t)T * conv_dim * 4);
        free(yh);
        CHECK(cpu->gdn(cpu, o.c, y.c, br.c, ar.c, a.c, dt.c, 1e-6f, &sc, &t.b) == 0);
        CHECK(gpu->gdn(gpu, o.g, y.g, br.g, ar.g, a.g, dt.g, 1e-6f, &sg, &t.b) == 0);
        double eo = pair_err(&o, (size_t)T * Hv * 128);
        e_out = eo > e_out ? eo : e_out;
        d_out += pair_floats_differ(&o, (size_t)T * Hv * 128);
        pair_free(&x), pair_free(&y), pair_free(&br), pair_free(&ar), pair_free(&o);
    }
    snprintf(name, sizeof name, "conv1d_silu %s", tag);
    report(name, e_conv, 1e-5);
    snprintf(name, sizeof name, "conv state %s", tag);
    report(name, pair_err(&conv, conv_n), 0);
    snprintf(name, sizeof name, "gdn out %s", tag);
    report(name, e_out, 1e-4);
    snprintf(name, sizeof name, "gdn state %s", tag);
    report(name, pair_err(&rec, rec_n), 1e-4);
    snprintf(name, sizeof name, "conv1d_silu bits %s", tag);
    report(name, d_conv, 0);
    snprintf(name, sizeof name, "gdn out bits %s", tag);
    report(name, d_out, 0);
    snprintf(name, sizeof name, "gdn state bits %s", tag);
    report(name, pair_floats_differ(&rec, rec_n), 0);
    pair_free(&conv), pair_free(&rec), pair_free(&w), pair_free(&a), pair_free(&dt);
}

static void test_ops_gdn(int Gk, int Hv, int plen, const char *tag)
{
    test_ops_gdn_case(Gk, Hv, plen, 0, tag);
}

/* ---- embed ---- */

/* weight_upload reads a large weight in 64 MiB pieces and calls the
 * upload_progress hook after each, growing, ending at the weight's size. */
struct up_log {
    int calls, bad;
    uint64_t last;
};

static void up_log_fn(void *ctx, uint64_t bytes_read)
{
    struct up_log *p = ctx;
    p->bad += bytes_read <= p->last;
    p->last = bytes_read;
    p->calls++;
}

static void test_ops_upload_progress(void)
{
    const int n_in = 5120, n_out = 40000;   /* Q8_0: ~218 MB, a 27B token_embd slice */
    size_t bytes = (size_t)n_out * (n_in / 32) * 34;
    uint8_t *raw = calloc(bytes, 1);
    struct up_log log = {0};
    gpu->upload_progress = up_log_fn;
    gpu->upload_progress_ctx = &log;
    struct cs_weight w;
    int rc = gpu->weight_upload(gpu, &w, CS_DTYPE_Q8_0, n_in, n_out, raw);
    gpu->upload_progress = NULL;
    gpu->upload_progress_ctx = NULL;
    CHECK(rc == 0);
    report("weight upload progress pieces", (double)(log.calls < 3) + log.bad + (log.last != bytes), 0);
    if (rc == 0)
        gpu->weight_free(gpu, &w);
    free(raw);
}

static void test_ops_embed(uint32_t type, int E, const char *tag)
{
    char name[64];
    int V = 1000;
    size_t row_bytes = type == CS_DTYPE_Q8_0 ? (size_t)E / 32 * 34 : (size_t)E * (type == CS_DTYPE_F32 ? 4 : 2);
    uint8_t *h = malloc(row_bytes * V);
    for (int r = 0; r < V; r++) {
        uint8_t *row = h + row_bytes * r;
        for (int i = 0; i < E; i++) {
            float f = frand();
            if (type == CS_DTYPE_Q8_0) {
                if (i % 32 == 0) {
                    uint16_t d = cs_float_to_half(0.01f + 0.01f * fabsf(frand()));
                    memcpy(row + i / 32 * 34, &d, 2);
                }
                row[i / 32 * 34 + 2 + i % 32] = (uint8_t)(int8_t)(f * 127);
            } else if (type == CS_DTYPE_F16) {
                uint16_t v = cs_float_to_half(f);
                memcpy(row + 2 * i, &v, 2);
            } else if (type == CS_DTYPE_BF16) {
                uint16_t v = cs_float_to_bf16(f);
                memcpy(row + 2 * i, &v, 2);
            } else {
                memcpy(row + 4 * i, &f, 4);
            }
        }
    }
    struct cs_weight wc, wg;
    memset(&wc, 0, sizeof wc);
    memset(&wg, 0, sizeof wg);
    CHECK(cpu->weight_upload(cpu, &wc, type, E, V, h) == 0);
    CHECK(gpu->weight_upload(gpu, &wg, type, E, V, h) == 0);
    int len[2] = {5, 1}, start[2] = {0, 3}, sl[2] = {0, 1};
    struct tb t;
    tb_init(&t, 2, len, start, sl, 1);
    t.tokens[0] = V - 1;   /* the last row, and an id in the last 32-row group */
    both_step(&t.b);
    struct pair o = pair_new(NULL, (size_t)t.b.n_tokens * E * 4);
    CHECK(cpu->embed(cpu, o.c, &wc, &t.b) == 0);
    CHECK(gpu->embed(gpu, o.g, &wg, &t.b) == 0);
    snprintf(name, sizeof name, "embed %s", tag);
    report(name, pair_err(&o, (size_t)t.b.n_tokens * E), 0);
    cpu->weight_free(cpu, &wc);
    gpu->weight_free(gpu, &wg);
    pair_free(&o);
    free(h);
}

/* ---- sampling ---- */

/* Equal (also both -inf) or within 1e-5; NaN is never close. */
static int lp_eq(float x, float y)
{
    return x == y || fabsf(x - y) <= 1e-5f;
}

static int lp_close(const struct cs_sample_result *a, const struct cs_sample_result *b)
{
    if (a->token != b->token || a->n_top != b->n_top || !lp_eq(a->logprob, b->logprob))
        return 0;
    for (int k = 0; k < a->n_top; k++)
        if (a->top_ids[k] != b->top_ids[k] || !lp_eq(a->top_logprobs[k], b->top_logprobs[k]))
            return 0;
    return 1;
}

static void test_ops_sample(void)
{
    const int V = 248320, R = 12;
    float *logits = randv((size_t)R * V, 4.0f);
    for (int r = 3; r < R; r++)   /* LM-like rows: a head of 40 tokens well above the bulk */
        if (r != 6 && (r < 8 || r == 11))   /* 6, 8-10 stay flat: thousands of candidates matter */
            for (int i = 0; i < 40; i++)
                logits[(size_t)r * V + (size_t)(i * 6151 + r) % V] = 14.0f + 0.25f * i + frand();
    for (int r = 0; r < R; r++)   /* a peaked row, a row with ties at the top */
        if (r == 1)
            logits[(size_t)r * V + 1234] = 30.0f;
        else if (r == 2)
            logits[(size_t)r * V + 500] = logits[(size_t)r * V + 77] = 9.0f;
    int32_t gen[6] = {5, 77, 77, 1234, 9, 248319}, ctx[8] = {1, 5, 77, 77, 1234, 9, 3, 1};
    int32_t bias_ids[3] = {42, 42, 100};
    float bias_vals[3] = {3.0f, 2.5f, -100.0f};
    uint8_t *allowed = calloc((V + 7) / 8, 1);
    for (int i = 0; i < V; i += 3)
        allowed[i >> 3] |= 1 << (i & 7);
    struct cs_sample_params p[R];
    memset(p, 0, sizeof p);
    for (int r = 0; r < R; r++) {
        p[r].top_p = 1.0f;
        p[r].repetition_penalty = 1.0f;
        p[r].n_logprobs = -1;
        p[r].seed = 1000 + r;
    }
    p[1].n_logprobs = 5;                                                    /* greedy + logprobs */
    p[2].n_logprobs = 20;
    p[3].temperature = 1.0f, p[3].top_p = 0.95f, p[3].top_k = 20, p[3].presence_penalty = 1.5f;
    p[4].temperature = 0.7f, p[4].top_p = 0.8f, p[4].n_logprobs = 3;
    p[5].temperature = 0.6f, p[5].top_p = 0.95f, p[5].repetition_penalty = 1.1f,
    p[5].frequency_penalty = 0.5f;
    p[6].temperature = 1.0f, p[6].min_p = 0.05f, p[6].bias_ids = bias_ids,
    p[6].bias_vals = bias_vals, p[6].n_bias = 3;
    p[7].temperature = 0.8f, p[7].allowed = allowed, p[7].n_logprobs = 2;
    /* step 7's cut past the sorted list of 1024: the full radix selects */
    p[8].temperature = 1.0f, p[8].top_p = 0.9f;                        /* weighted */
    p[9].temperature = 0.9f, p[9].top_k = 5000;                        /* counting */
    p[10].temperature = 1.2f, p[10].top_k = 3000, p[10].top_p = 0.5f, p[10].min_p = 0.01f;
    p[11].temperature = 0.7f, p[11].top_k = 2000, p[11].top_p = 0.99f;  /* peaked, k past list */
    for (int r = 0; r < R; r++) {
        p[r].gen_tokens = gen, p[r].n_gen_tokens = 6, p[r].ctx_tokens = ctx, p[r].n_ctx_tokens = 8;
    }
    int draws = 0, same = 0, lp_ok = 0;
    for (uint64_t draw = 0; draw < 6; draw++) {
        for (int r = 0; r < R; r++)
            p[r].draw = draw;
        struct pair l = pair_new(logits, (size_t)R * V * 4);
        struct cs_sample_result rc_[R], rg[R];
        CHECK(cpu->sample(cpu, rc_, l.c, V, p, R) == 0);
        CHECK(gpu->sample(gpu, rg, l.g, V, p, R) == 0);
        for (int r = 0; r < R; r++) {
            draws++;
            same += rc_[r].token == rg[r].token;
            lp_ok += lp_close(&rc_[r], &rg[r]);
            if (rc_[r].token != rg[r].token || !lp_close(&rc_[r], &rg[r]))
                fprintf(stderr, "row %d draw %d: cpu %d (%g, %d top) gpu %d (%g, %d top)\n", r,
                        (int)draw, rc_[r].token, rc_[r].logprob, rc_[r].n_top, rg[r].token,
                        rg[r].logprob, rg[r].n_top);
        }
        if (draw == 0)   /* penalties, bias and mask land the same in place */
            report("sample logits after penalties", pair_err(&l, (size_t)R * V), 0);
        pair_free(&l);
    }
    report("sample tokens (greedy+seeded)", (double)(draws - same), 0);
    report("sample logprobs", (double)(draws - lp_ok), 0);
    free(allowed);
    free(logits);
}

/* Run the sample op on rows [r0, r0 + n) of logits (V per row) on both
 * backends from the same input; returns both status values, the results in
 * rc_/rg, and the largest difference of the processed logits (pair_err). */
static double sample_both(const float *logits, int V, const struct cs_sample_params *p, int r0,
                          int n, struct cs_sample_result *rc_, struct cs_sample_result *rg,
                          int *st_c, int *st_g)
{
    struct pair l = pair_new(logits + (size_t)r0 * V, (size_t)n * V * 4);
    *st_c = cpu->sample(cpu, rc_, l.c, V, p + r0, n);
    *st_g = gpu->sample(gpu, rg, l.g, V, p + r0, n);
    double err = pair_err(&l, (size_t)n * V);
    pair_free(&l);
    return err;
}

static int result_bits_same(const struct cs_sample_result *a, const struct cs_sample_result *b)
{
    if (a->token != b->token || a->n_top != b->n_top || memcmp(&a->logprob, &b->logprob, 4))
        return 0;
    for (int k = 0; k < a->n_top; k++)
        if (a->top_ids[k] != b->top_ids[k] || memcmp(&a->top_logprobs[k], &b->top_logprobs[k], 4))
            return 0;
    return 1;
}

/* The multi-block prep/stats split: argmax ties in different chunks (lowest
 * id wins), NaN and +-inf logits, a row all -inf but one id, a mask, with
 * and without lists (fused and separate prep), at 5 rows and 1 row: GPU
 * equal to the CPU (tokens exact, logprobs 1e-5, processed logits exact)
 * and each row bitwise the same alone as inside the batch. */
static void test_ops_sample_edges(void)
{
    const int V = 248320, R = 5;
    float *logits = randv((size_t)R * V, 4.0f);
    float *row;
    row = logits;   /* row 0: a 3-way tie at the top, far apart; the lowest is not id 0 */
    row[247000] = row[130001] = row[5] = 10.0f;
    row = logits + (size_t)1 * V;   /* row 1: a tie in two late chunks and one inside a chunk */
    row[200000] = row[200001] = row[130001] = 9.5f;
    row = logits + (size_t)2 * V;   /* row 2: NaN, -inf and two +inf (-> FLT_MAX, tie) */
    for (int i = 11; i < V; i += 97)
        row[i] = NAN;
    for (int i = 13; i < V; i += 89)
        row[i] = -INFINITY;
    row[240000] = row[7000] = INFINITY;
    row = logits + (size_t)3 * V;   /* row 3: all -inf (and NaN) but one id */
    for (int i = 0; i < V; i++)
        row[i] = i % 5 == 0 ? NAN : -INFINITY;
    row[123456] = -5.0f;
    uint8_t *allowed = calloc((V + 7) / 8, 1);   /* row 4: every 7th id, the top one masked */
    for (int i = 0; i < V; i += 7)
        allowed[i >> 3] |= 1 << (i & 7);
    row = logits + (size_t)4 * V;
    row[50002] = 20.0f;   /* 50002 % 7 != 0: disallowed */
    row[100002] = 12.0f;  /* 100002 % 7 == 0: allowed, the winner */
    int32_t bias_ids[2] = {50002, 100002}, gen[3] = {100002, 3, 3};
    float bias_vals[2] = {INFINITY, -1.0f};   /* +inf on a disallowed id: must stay -inf */
    struct cs_sample_params p[R];
    memset(p, 0, sizeof p);
    for (int r = 0; r < R; r++) {
        p[r].top_p = 1.0f;
        p[r].repetition_penalty = 1.0f;
        p[r].n_logprobs = r == 1 ? -1 : r == 2 ? 2 : 2 + 4 * r;
        p[r].seed = 77 + r;
        p[r].draw = 3;
    }
    p[1].temperature = 0.9f;   /* seeded, the rest greedy */
    p[3].temperature = 1.0f;
    p[4].allowed = allowed;
    int bad_tok = 0, bad_lp = 0, bad_inv = 0;
    for (int lists = 0; lists < 2; lists++) {
        if (lists) {   /* bias and presence on the masked row: the prep/lists path */
            p[4].bias_ids = bias_ids, p[4].bias_vals = bias_vals, p[4].n_bias = 2;
            p[4].gen_tokens = gen, p[4].n_gen_tokens = 3, p[4].presence_penalty = 0.5f;
        }
        struct cs_sample_result bc[R], bg[R], oc, og;
        int sc, sg;
        double err = sample_both(logits, V, p, 0, R, bc, bg, &sc, &sg);
        CHECK(sc == 0 && sg == 0);
        report(lists ? "sample edges logits (lists)" : "sample edges logits (fused)", err, 0);
        for (int r = 0; r < R; r++) {
            bad_tok += bc[r].token != bg[r].token;
            bad_lp += !lp_close(&bc[r], &bg[r]);
            err = sample_both(logits, V, p, r, 1, &oc, &og, &sc, &sg);   /* the row alone */
            CHECK(sc == 0 && sg == 0 && err == 0);
            bad_tok += oc.token != og.token;
            bad_lp += !lp_close(&oc, &og);
            bad_inv += !result_bits_same(&og, &bg[r]);
            if (bc[r].token != bg[r].token || !lp_close(&bc[r], &bg[r]) || !result_bits_same(&og, &bg[r]))
                fprintf(stderr, "edges lists=%d row %d: cpu %d (%g) gpu %d (%g) gpu alone %d (%g)\n",
                        lists, r, bc[r].token, bc[r].logprob, bg[r].token, bg[r].logprob, og.token,
                        og.logprob);
        }
        /* the expected greedy winners, independent of both backends' agreement */
        bad_tok += bg[0].token != 5;
        bad_tok += bg[2].token != 7000;
        bad_tok += bg[3].token != 123456;
        bad_tok += bg[4].token != 100002;
        /* row 2: two +inf logits clamp to FLT_MAX; sampler.h's double arithmetic gives
         * logprob = FLT_MAX - (FLT_MAX + log 2) = 0 (log 2 is far below FLT_MAX's ulp),
         * on both backends (the H200 run printed 0 for CPU and GPU) */
        bad_lp += bg[2].logprob != 0.0f;
        bad_lp += bg[3].logprob != 0.0f;
        if (bg[2].logprob != 0.0f || bg[3].logprob != 0.0f)
            fprintf(stderr, "edges lists=%d: row 2 logprob %.9g (cpu %.9g, want 0), row 3 %.9g "
                    "(cpu %.9g, want 0)\n", lists, bg[2].logprob, bc[2].logprob, bg[3].logprob,
                    bc[3].logprob);
    }
    {   /* row 1 greedy: the tie at 130001 (lowest) against 200000/200001 */
        struct cs_sample_result oc, og;
        int sc, sg;
        p[1].temperature = 0.0f;
        sample_both(logits, V, p, 1, 1, &oc, &og, &sc, &sg);
        CHECK(sc == 0 && sg == 0);
        bad_tok += og.token != 130001 || oc.token != 130001;
    }
    report("sample edges tokens", (double)bad_tok, 0);
    report("sample edges logprobs", (double)bad_lp, 0);
    report("sample edges batch invariance", (double)bad_inv, 0);
    {   /* nothing allowed with a finite logit: CS_ERANGE on both */
        struct cs_sample_result oc, og;
        int sc, sg;
        for (int i = 0; i < V; i++)
            logits[i] = i % 3 ? -INFINITY : NAN;
        sample_both(logits, V, p, 0, 1, &oc, &og, &sc, &sg);
        report("sample edges nothing allowed", (double)((sc != CS_ERANGE) + (sg != CS_ERANGE)), 0);
    }
    free(allowed);
    free(logits);
}

int main(void)
{
    int rc = gpu_pair_open();
    if (rc != 0)
        return rc;
    test_ops_elementwise(4096, 12288, "9B");
    test_ops_elementwise(5120, 17408, "27B");
    test_ops_add_rmsnorm(7, 4096, "9B");
    test_ops_add_rmsnorm(1, 5120, "27B decode");
    test_ops_add_rmsnorm(3, 1000, "odd dim");
    test_ops_add_rmsnorm(2, 9000, "long row");
    test_ops_gated_norm(16, 32, "9B");
    test_ops_gated_norm(24, 48, "27B");
    test_ops_matmul_gated(16, 32, 4096, "9B");
    test_ops_matmul_gated(24, 48, 5120, "27B");
    test_ops_matmul_gated(8, 16, 1024, "0.8B");
    test_ops_head_norm_rope(16, "9B");
    test_ops_head_norm_rope(24, "27B");
    test_ops_attention(16, 4, CS_DTYPE_F16, "9B f16");
    test_ops_attention(24, 4, CS_DTYPE_F16, "27B f16");
    test_ops_attention(16, 4, CS_DTYPE_F32, "9B f32");
    test_ops_gdn(16, 32, 600, "9B");
    test_ops_gdn(16, 48, 600, "27B");
    test_ops_gdn(16, 32, 37, "9B scan");
    test_ops_gdn(16, 48, 300, "27B scan");
    test_ops_gdn_case(16, 32, 37, 1, "9B scan subnormal");
    test_ops_gdn_case(16, 32, 600, 1, "9B subnormal");
    test_ops_embed(CS_DTYPE_Q8_0, 4096, "q8_0");
    test_ops_embed(CS_DTYPE_F16, 4096, "f16");
    test_ops_embed(CS_DTYPE_F32, 1024, "f32");
    test_ops_embed(CS_DTYPE_BF16, 1024, "bf16");
    test_ops_sample();
    test_ops_upload_progress();
    test_ops_sample_edges();
    gpu_pair_close();
    return test_report();
}
