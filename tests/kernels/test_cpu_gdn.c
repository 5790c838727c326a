/* test_cpu_gdn.c - proves conv1d_silu and gdn: both equal a direct double
 * translation of model.md section 5 (GDN steps 2-6: causal conv over the
 * stored columns, L2-normalised q/k, q scaled by 1/sqrt(Dk), beta = sigmoid,
 * g = a * softplus(alpha + dt_bias), S = exp(g) S; S += k (beta (v - S^T k))^T;
 * o = S^T q, value head h on key head h % Gk) over sequences that continue
 * from state left by an earlier step, at small and real (Dk = Dv = 128)
 * sizes; the conv state ends holding the last K-1 pre-conv columns; results
 * are bit-identical for 1, 2 and 3 threads, for a sequence alone vs in a
 * batch, and for one prefill step vs token-by-token steps; bad slots are
 * refused with CS_ERANGE. Prefills of 600 and 1100 tokens (one step; 512 or
 * more take the chunked form of kernels/cpu/gdn_chunked.c, as on the GPU:
 * 9 and 17 full 64-token chunks plus a partial one, the second sequence's
 * chunks aligned to its start at batch token 603) agree with the same tokens
 * run through the recurrence in steps of fewer than 512 tokens to 1e-4 of
 * the largest output and state value, and give the same bits for 1, 2 and 3
 * threads. No output or state is subnormal (the GPU flushes them; the
 * CPU's thread pool runs its items with FTZ | DAZ), in either form. */
#include "../../common/status.h"
#include "kernel_test.h"

#define NS 3
#define MAXT 12

struct gcfg {
    int Gk, Hv, Dk, Dv, K;
    int total[NS];             /* tokens of each sequence over all steps */
    int slot[NS];
    int n_slots;
};

struct gdata {
    float *x[NS], *braw[NS], *araw[NS];
    float *w, *a, *dt;
};

static int conv_dim(const struct gcfg *c) { return 2 * c->Gk * c->Dk + c->Hv * c->Dv; }

static void gdata_make(struct gdata *d, const struct gcfg *c)
{
    int C = conv_dim(c);
    for (int s = 0; s < NS; s++) {
        d->x[s] = kt_randv((size_t)c->total[s] * C, 1.5f);
        d->braw[s] = kt_randv((size_t)c->total[s] * c->Hv, 3.0f);
        d->araw[s] = kt_randv((size_t)c->total[s] * c->Hv, 3.0f);
    }
    d->w = kt_randv((size_t)C * c->K, 0.8f);
    d->a = kt_randv(c->Hv, 1.0f);
    d->dt = kt_randv(c->Hv, 1.0f);
    for (int h = 0; h < c->Hv; h++)
        d->a[h] = -expf(d->a[h]);
}

static void gdata_free(struct gdata *d)
{
    for (int s = 0; s < NS; s++) {
        free(d->x[s]);
        free(d->braw[s]);
        free(d->araw[s]);
    }
    free(d->w);
    free(d->a);
    free(d->dt);
}

struct gout {
    float *y[NS], *o[NS];      /* conv output and gdn output per sequence */
    float *conv_state;         /* final conv state of all slots */
    float *rec;                /* final recurrent state of all slots */
};

static void gout_free(struct gout *g)
{
    for (int s = 0; s < NS; s++) {
        free(g->y[s]);
        free(g->o[s]);
    }
    free(g->conv_state);
    free(g->rec);
}

/* Run steps: steps[k][s] tokens of sequence s in step k (0: absent). Only the
 * sequences with present[s] are run at all. */
static struct gout gdn_run(int n_threads, const struct gcfg *c, const struct gdata *d,
                           int n_steps, const int (*steps)[NS])
{
    struct cs_backend *be = kt_backend(n_threads, 0);
    int C = conv_dim(c), O = c->Hv * c->Dv;
    struct cs_gdn_layer st = {.n_slots = c->n_slots, .conv_dim = C, .conv_kernel = c->K,
                              .n_k_heads = c->Gk, .n_v_heads = c->Hv, .key_dim = c->Dk,
                              .value_dim = c->Dv};
    be->alloc(be, (void **)&st.conv, sizeof(float) * c->n_slots * (c->K - 1) * C);
    be->alloc(be, (void **)&st.rec, sizeof(float) * c->n_slots * c->Hv * c->Dk * c->Dv);
    struct gout g = {0};
    int done[NS] = {0};
    for (int s = 0; s < NS; s++) {
        g.y[s] = calloc((size_t)c->total[s] * C + 1, 4);
        g.o[s] = calloc((size_t)c->total[s] * O + 1, 4);
    }
    for (int k = 0; k < n_steps; k++) {
        int lens[NS], starts[NS], slots[NS], ids[NS], n = 0;
        for (int s = 0; s < NS; s++)
            if (steps[k][s] > 0) {
                lens[n] = steps[k][s];
                starts[n] = done[s];
                slots[n] = c->slot[s];
                ids[n++] = s;
            }
        static struct kt_batch kb;
        kt_batch_init(&kb, n, lens, starts, slots, 1);
        int nt = kb.b.n_tokens;
        float *x = calloc((size_t)nt * C, 4), *y = calloc((size_t)nt * C, 4);
        float *br = calloc((size_t)nt * c->Hv, 4), *ar = calloc((size_t)nt * c->Hv, 4);
        float *o = calloc((size_t)nt * O, 4);
        for (int t = 0; t < nt; t++) {
            int s = ids[kb.seq_of[t]], p = kb.pos[t];
            memcpy(x + t * C, d->x[s] + (size_t)p * C, C * 4);
            memcpy(br + t * c->Hv, d->braw[s] + p * c->Hv, c->Hv * 4);
            memcpy(ar + t * c->Hv, d->araw[s] + p * c->Hv, c->Hv * 4);
        }
        CHECK_EQ_INT(be->conv1d_silu(be, y, x, d->w, &st, &kb.b), CS_OK);
        CHECK_EQ_INT(be->gdn(be, o, y, br, ar, d->a, d->dt, 1e-6f, &st, &kb.b), CS_OK);
        for (int t = 0; t < nt; t++) {
            int s = ids[kb.seq_of[t]], p = kb.pos[t];
            memcpy(g.y[s] + (size_t)p * C, y + t * C, C * 4);
            memcpy(g.o[s] + (size_t)p * O, o + t * O, O * 4);
        }
        for (int i = 0; i < n; i++)
            done[ids[i]] += lens[i];
        free(x);
        free(y);
        free(br);
        free(ar);
        free(o);
    }
    size_t cs = (size_t)c->n_slots * (c->K - 1) * C;
    g.conv_state = malloc(cs * 4);
    memcpy(g.conv_state, st.conv, cs * 4);
    size_t rs = (size_t)c->n_slots * c->Hv * c->Dk * c->Dv;
    g.rec = malloc(rs * 4);
    memcpy(g.rec, st.rec, rs * 4);
    be->free(be, st.conv);
    be->free(be, st.rec);
    be->destroy(be);
    return g;
}

static double sig(double x) { return 1 / (1 + exp(-x)); }

/* model.md section 5 steps 2-6 for one sequence, in double; returns the
 * worst differences of conv output and gdn output against g. */
static void naive_seq(const struct gcfg *c, const struct gdata *d, int s, const struct gout *g,
                      double *worst_y, double *worst_o)
{
    int C = conv_dim(c), T = c->total[s], Gk = c->Gk, Dk = c->Dk, Dv = c->Dv;
    double *y = calloc((size_t)T * C, sizeof(double));
    double *S = calloc((size_t)c->Hv * Dk * Dv, sizeof(double));
    double q[256], k[256], kv[256];
    for (int t = 0; t < T; t++) {
        for (int ch = 0; ch < C; ch++) {      /* step 2 */
            double acc = 0;
            for (int j = 0; j < c->K; j++) {
                int tt = t - (c->K - 1) + j;
                acc += (double)d->w[ch * c->K + j] * (tt >= 0 ? d->x[s][(size_t)tt * C + ch] : 0.0);
            }
            y[(size_t)t * C + ch] = acc * sig(acc);
            *worst_y = fmax(*worst_y, fabs(y[(size_t)t * C + ch] - g->y[s][(size_t)t * C + ch]));
        }
        const double *yt = y + (size_t)t * C;
        for (int h = 0; h < c->Hv; h++) {
            int kh = h % Gk;
            double qn = 0, kn = 0;                                 /* step 4 */
            for (int i = 0; i < Dk; i++) {
                qn += yt[kh * Dk + i] * yt[kh * Dk + i];
                kn += yt[(Gk + kh) * Dk + i] * yt[(Gk + kh) * Dk + i];
            }
            for (int i = 0; i < Dk; i++) {
                q[i] = yt[kh * Dk + i] / sqrt(qn + 1e-6) / sqrt((double)Dk);
                k[i] = yt[(Gk + kh) * Dk + i] / sqrt(kn + 1e-6);
            }
            const double *v = yt + 2 * Gk * Dk + h * Dv;
            double beta = sig(d->braw[s][t * c->Hv + h]);           /* step 5 */
            double sp = log1p(exp((double)d->araw[s][t * c->Hv + h] + d->dt[h]));
            double gg = d->a[h] * sp;
            double *Sh = S + (size_t)h * Dk * Dv;                   /* step 6 */
            for (int i = 0; i < Dk * Dv; i++)
                Sh[i] *= exp(gg);
            for (int j = 0; j < Dv; j++) {
                kv[j] = 0;
                for (int i = 0; i < Dk; i++)
                    kv[j] += Sh[i * Dv + j] * k[i];
            }
            for (int i = 0; i < Dk; i++)
                for (int j = 0; j < Dv; j++)
                    Sh[i * Dv + j] += k[i] * beta * (v[j] - kv[j]);
            for (int j = 0; j < Dv; j++) {
                double o = 0;
                for (int i = 0; i < Dk; i++)
                    o += Sh[i * Dv + j] * q[i];
                float got = g->o[s][(size_t)t * c->Hv * Dv + h * Dv + j];
                *worst_o = fmax(*worst_o, fabs(o - got));
            }
        }
    }
    free(y);
    free(S);
}

static void check_gdn_cfg(const struct gcfg *c)
{
    struct gdata d;
    gdata_make(&d, c);
    /* two steps: a prefill then a continuation, all three sequences */
    const int two[2][NS] = {{c->total[0] - 1, 3, c->total[2] - 2}, {1, c->total[1] - 3, 2}};
    struct gout g1 = gdn_run(1, c, &d, 2, two), g2 = gdn_run(2, c, &d, 2, two),
                g3 = gdn_run(3, c, &d, 2, two);
    int C = conv_dim(c), O = c->Hv * c->Dv;
    for (int s = 0; s < NS; s++) {
        size_t ny = (size_t)c->total[s] * C, no = (size_t)c->total[s] * O;
        CHECK(kt_same(g1.y[s], g2.y[s], ny) && kt_same(g1.y[s], g3.y[s], ny));
        CHECK(kt_same(g1.o[s], g2.o[s], no) && kt_same(g1.o[s], g3.o[s], no));
        double wy = 0, wo = 0;
        naive_seq(c, &d, s, &g1, &wy, &wo);
        CHECK(wy < 1e-5);
        CHECK(wo < 1e-4);
        if (!(wo < 1e-4) || !(wy < 1e-5))
            fprintf(stderr, "seq %d: conv diff %g, gdn diff %g\n", s, wy, wo);
        /* final conv state = last K-1 pre-conv columns, oldest first */
        for (int j = 0; j < c->K - 1; j++) {
            int t = c->total[s] - (c->K - 1) + j;
            CHECK(kt_same(g1.conv_state + ((size_t)c->slot[s] * (c->K - 1) + j) * C,
                          d.x[s] + (size_t)t * C, C));
        }
    }
    /* sequence 1 alone, token by token: bit-identical to the batched prefill */
    int steps1[MAXT][NS];
    memset(steps1, 0, sizeof(steps1));
    for (int t = 0; t < c->total[1]; t++)
        steps1[t][1] = 1;
    struct gout ga = gdn_run(2, c, &d, c->total[1], (const int (*)[NS])steps1);
    CHECK(kt_same(ga.o[1], g1.o[1], (size_t)c->total[1] * O));
    CHECK(kt_same(ga.y[1], g1.y[1], (size_t)c->total[1] * C));
    gout_free(&ga);
    gout_free(&g1);
    gout_free(&g2);
    gout_free(&g3);
    gdata_free(&d);
}

static void test_gdn_small(void)
{
    struct gcfg c = {.Gk = 2, .Hv = 4, .Dk = 8, .Dv = 12, .K = 4, .total = {6, 9, 4},
                     .slot = {3, 0, 2}, .n_slots = 5};
    check_gdn_cfg(&c);
}

static void test_gdn_real_size(void)
{
    struct gcfg c = {.Gk = 2, .Hv = 4, .Dk = 128, .Dv = 128, .K = 4, .total = {5, 7, 3},
                     .slot = {1, 2, 0}, .n_slots = 3};
    check_gdn_cfg(&c);
}

/* Long prefills take the chunked form (>= 512 tokens of a sequence in the
 * step): close to the recurrence, thread invariant. Sequence 2 stays short
 * (the recurrence) in the same batch and keeps its bits. */
static void test_gdn_chunked_prefill(void)
{
    struct gcfg c = {.Gk = 2, .Hv = 4, .Dk = 128, .Dv = 128, .K = 4, .total = {603, 1103, 5},
                     .slot = {2, 0, 1}, .n_slots = 3};
    struct gdata d;
    gdata_make(&d, &c);
    /* a short step first (state not zero), then the prefills in one step */
    const int chunked[2][NS] = {{3, 3, 2}, {600, 1100, 3}};
    /* the same tokens by the recurrence: steps of fewer than 512 tokens */
    const int split[5][NS] = {{3, 3, 2}, {300, 275, 3}, {300, 275, 0}, {0, 275, 0}, {0, 275, 0}};
    struct gout g1 = gdn_run(1, &c, &d, 2, chunked), g2 = gdn_run(2, &c, &d, 2, chunked),
                g3 = gdn_run(3, &c, &d, 2, chunked), gr = gdn_run(3, &c, &d, 5, split);
    int O = c.Hv * c.Dv;
    size_t rs = (size_t)c.n_slots * c.Hv * c.Dk * c.Dv;
    for (int s = 0; s < NS; s++) {
        size_t no = (size_t)c.total[s] * O;
        CHECK(kt_same(g1.o[s], g2.o[s], no) && kt_same(g1.o[s], g3.o[s], no));
        double e = test_rel_diff(g1.o[s], gr.o[s], no);
        CHECK(e < 1e-4);
        if (!(e < 1e-4))
            fprintf(stderr, "seq %d: chunked vs recurrence out rel diff %g\n", s, e);
    }
    CHECK(kt_same(g1.rec, g2.rec, rs) && kt_same(g1.rec, g3.rec, rs));
    double es = test_rel_diff(g1.rec, gr.rec, rs);
    CHECK(es < 1e-4);
    fprintf(stderr, "chunked vs recurrence: out %g %g, state %g (relative, bound 1e-4)\n",
            test_rel_diff(g1.o[0], gr.o[0], (size_t)c.total[0] * O),
            test_rel_diff(g1.o[1], gr.o[1], (size_t)c.total[1] * O), es);
    /* the short sequence ran the recurrence in both: same bits */
    CHECK(kt_same(g1.o[2], gr.o[2], (size_t)c.total[2] * O));
    /* the chunked one is not the recurrence's arithmetic (not the same bits) */
    CHECK(!kt_same(g1.o[1], gr.o[1], (size_t)c.total[1] * O));
    gout_free(&g1);
    gout_free(&g2);
    gout_free(&g3);
    gout_free(&gr);
    gdata_free(&d);
}

/* No value the CPU backend computes is subnormal: the CUDA build flushes
 * them (fast math's -ftz), so the CPU runs its ops with FTZ | DAZ
 * (kernels/cpu/fpmode.h, set by the thread pool) to give the same bits. A
 * sequence starting from a zero state with beta_raw = -88 (sigmoid 6.1e-39,
 * a subnormal unless flushed) for its first 8 tokens makes subnormal betas,
 * updates, states and outputs without the flush, in the scan (40 tokens)
 * and in the chunked form (603). The later tokens' normal betas follow. */
static int count_subnormal(const float *v, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += fpclassify(v[i]) == FP_SUBNORMAL;
    return k;
}

static void test_gdn_flushes_subnormals(void)
{
    struct gcfg c = {.Gk = 2, .Hv = 4, .Dk = 128, .Dv = 128, .K = 4, .total = {40, 603, 5},
                     .slot = {0, 1, 2}, .n_slots = 3};
    struct gdata d;
    gdata_make(&d, &c);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 8 * c.Hv; i++)
            d.braw[s][i] = -88.0f;
    const int steps[1][NS] = {{40, 603, 5}};
    for (int threads = 1; threads <= 2; threads++) {
        struct gout g = gdn_run(threads, &c, &d, 1, steps);
        int O = c.Hv * c.Dv, n_sub = 0;
        for (int s = 0; s < NS; s++)
            n_sub += count_subnormal(g.o[s], (size_t)c.total[s] * O);
        n_sub += count_subnormal(g.rec, (size_t)c.n_slots * c.Hv * c.Dk * c.Dv);
        CHECK_EQ_INT(n_sub, 0);
        /* the later tokens are not all zero: the test runs real values */
        CHECK(fabsf(g.o[0][(size_t)39 * O]) + fabsf(g.o[1][(size_t)602 * O]) > 0.0f);
        gout_free(&g);
    }
    gdata_free(&d);
}

static void test_gdn_refuses_bad_slot(void)
{
    struct cs_backend *be = kt_backend(1, 0);
    float conv[3 * 48] = {0}, rec[1 * 2 * 8 * 8] = {0}, x[48] = {0}, y[48], o[16];
    float w[48 * 4] = {0}, a[2] = {-1, -1}, dt[2] = {0}, br[2] = {0}, ar[2] = {0};
    struct cs_gdn_layer st = {.conv = conv, .rec = rec, .n_slots = 1, .conv_dim = 48,
                              .conv_kernel = 4, .n_k_heads = 2, .n_v_heads = 2, .key_dim = 8,
                              .value_dim = 16};
    int len[1] = {1}, start[1] = {0}, slot[1] = {1};
    struct kt_batch kb;
    kt_batch_init(&kb, 1, len, start, slot, 1);
    CHECK_EQ_INT(be->conv1d_silu(be, y, x, w, &st, &kb.b), CS_ERANGE);
    CHECK_EQ_INT(be->gdn(be, o, y, br, ar, a, dt, 1e-6f, &st, &kb.b), CS_ERANGE);
    slot[0] = 0;
    kt_batch_init(&kb, 1, len, start, slot, 1);
    st.conv_dim = 40;   /* inconsistent with the head sizes */
    CHECK_EQ_INT(be->gdn(be, o, y, br, ar, a, dt, 1e-6f, &st, &kb.b), CS_EINVAL);
    be->destroy(be);
}

int main(void)
{
    RUN(test_gdn_small);
    RUN(test_gdn_real_size);
    RUN(test_gdn_chunked_prefill);
    RUN(test_gdn_flushes_subnormals);
    RUN(test_gdn_refuses_bad_slot);
    return test_report();
}
