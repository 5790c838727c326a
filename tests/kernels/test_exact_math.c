/* test_exact_math.c - proves kernels/exact_math.h's functions are accurate
 * (xm_exp and xm_log within 2 ulp of double-precision libm over a sweep of
 * their domains, log1p, softplus, sigmoid, silu within 3 ulp) and that the
 * edge cases are what the header says (exp: 0 below -87, +inf above 88.72,
 * NaN through; log1p(0) = 0; softplus passes x through above 20), and that
 * xm_exp_nonpos, the softmax's cheaper form, equals xm_exp on x <= 0. Bitwise
 * agreement with the GPU is tests/gpu's job; this is the CPU half. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../kernels/exact_math.h"
#include "../test_util.h"

/* distance in ulps of float got from the double reference */
static double ulps(float got, double ref)
{
    if (ref == 0.0)
        return got == 0.0f ? 0.0 : 1e30;
    float rf = (float)ref;
    double ulp = nextafterf(fabsf(rf), INFINITY) - fabsf(rf);
    return fabs((double)got - ref) / ulp;
}

static void sweep(const char *name, float (*f)(float), double (*ref)(double), float lo, float hi,
                  double bound)
{
    double worst = 0.0;
    float at = lo;
    int n = 2000003;
    for (int i = 0; i <= n; i++) {
        float x = lo + (hi - lo) * (float)((double)i / n);
        double e = ulps(f(x), ref((double)x));
        if (e > worst)
            worst = e, at = x;
    }
    printf("%-10s [%g, %g]: max %.3f ulp at %.9g\n", name, lo, hi, worst, at);
    CHECK(worst <= bound);
}

static double ref_log1p(double x) { return log1p(x); }
static double ref_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static float f_exp(float x) { return xm_exp(x); }
static float f_log(float x) { return xm_log(x); }
static float f_log1p(float x) { return xm_log1p_pos(x); }
static float f_softplus(float x) { return xm_softplus(x); }
static float f_sigmoid(float x) { return xm_sigmoid(x); }
static float f_silu(float x) { return xm_silu(x); }

static void test_exact_math_accuracy(void)
{
    sweep("exp", f_exp, exp, -86.99f, 88.7f, 2.0);
    sweep("exp", f_exp, exp, -1.0f, 1.0f, 2.0);
    sweep("log", f_log, log, 1e-30f, 10.0f, 2.0);
    sweep("log", f_log, log, 0.5f, 2.0f, 2.0);
    sweep("log", f_log, log, 1.0f, 3e38f, 2.0);
    sweep("log1p", f_log1p, ref_log1p, 0.0f, 1e-3f, 3.0);
    sweep("log1p", f_log1p, ref_log1p, 0.0f, 5e8f, 3.0);
    sweep("softplus", f_softplus, ref_softplus, -80.0f, 30.0f, 3.0);
    sweep("sigmoid", f_sigmoid, ref_sigmoid, -80.0f, 30.0f, 3.0);
    sweep("silu", f_silu, ref_silu, -80.0f, 80.0f, 3.0);
}

/* xm_exp_nonpos equals xm_exp bit for bit on x <= 0: every 97th float from
 * -0 down to -88 (their bit patterns in steps of 97), about 11.6 million. */
static void test_exact_math_exp_nonpos(void)
{
    long n = 0, differ = 0;
    float lim = -88.0f;
    uint32_t end;
    memcpy(&end, &lim, 4);
    for (uint32_t u = 0x80000000u; u <= end; u += 97) {
        float x, ea, eb;
        uint32_t a, b;
        memcpy(&x, &u, 4);
        ea = xm_exp(x), eb = xm_exp_nonpos(x);
        memcpy(&a, &ea, 4);
        memcpy(&b, &eb, 4);
        differ += a != b;
        n++;
    }
    printf("exp_nonpos: %ld values, %ld differ from xm_exp\n", n, differ);
    CHECK(n > 10000000);
    CHECK(differ == 0);
    CHECK(xm_exp_nonpos(-INFINITY) == 0.0f);
    CHECK(isnan(xm_exp_nonpos(NAN)));
}

static void test_exact_math_edges(void)
{
    CHECK(xm_exp(-87.5f) == 0.0f);
    CHECK(xm_exp(-INFINITY) == 0.0f);
    CHECK(isinf(xm_exp(89.0f)) && xm_exp(89.0f) > 0);
    CHECK(isnan(xm_exp(NAN)));
    CHECK(xm_exp(0.0f) == 1.0f);
    CHECK(xm_exp(-86.99f) >= 1.17549435e-38f);   /* never a denormal */
    CHECK(xm_log(1.0f) == 0.0f);
    CHECK(xm_log1p_pos(0.0f) == 0.0f);
    CHECK(xm_softplus(25.0f) == 25.0f);
    CHECK(xm_sigmoid(-100.0f) == 0.0f);
    CHECK(xm_silu(-100.0f) == 0.0f);
    CHECK(xm_rms_scale(4.0f * 256, 256, 0.0f) == 0.5f);
    CHECK(xm_l2_scale(16.0f, 0.0f) == 0.25f);
}

int main(void)
{
    RUN(test_exact_math_accuracy);
    RUN(test_exact_math_edges);
    RUN(test_exact_math_exp_nonpos);
    return test_report();
}
