/* test_util.h - a minimal assertion harness for C unit tests.
 *
 * Each test binary defines functions test_<module>_<behaviour>(void) and runs
 * them with RUN(fn). CHECK failures print file:line and the expression and
 * mark the binary failed; main returns test_report(). */
#ifndef CS_TEST_UTIL_H
#define CS_TEST_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

static int test_failures, test_checks, test_count;

#define CHECK(cond)                                                            \
    do {                                                                       \
        test_checks++;                                                         \
        if (!(cond)) {                                                         \
            test_failures++;                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                      \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long _a = (long long)(a), _b = (long long)(b);                    \
        test_checks++;                                                         \
        if (_a != _b) {                                                        \
            test_failures++;                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, \
                    __LINE__, #a, #b, _a, _b);                                 \
        }                                                                      \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double _a = (double)(a), _b = (double)(b);                             \
        test_checks++;                                                         \
        if (!(fabs(_a - _b) <= (tol))) {                                       \
            test_failures++;                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s ~ %s (%g vs %g, tol %g)\n", __FILE__, \
                    __LINE__, #a, #b, _a, _b, (double)(tol));                  \
        }                                                                      \
    } while (0)

#define RUN(fn)                                                                \
    do {                                                                       \
        int _before = test_failures;                                           \
        test_count++;                                                          \
        fn();                                                                  \
        fprintf(stderr, "%s %s\n", test_failures == _before ? "ok  " : "FAIL", #fn); \
    } while (0)

static inline int test_report(void)
{
    fprintf(stderr, "%d tests, %d checks, %d failed\n", test_count, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

/* max |a - b| / max |b| over n values (max |a - b| when b is all zero). */
static inline double test_rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

#endif
