/* test_load_progress.c - proves that the weight-load progress reporter
 * (worker/load_progress.h) writes its lines when due and only then: at most
 * one a second, after 10% more of the total or 10 s of silence with progress,
 * exactly one final line; that the text carries MB (1e6 bytes), the
 * percentage, the elapsed time and the mean rate; and that model_load drives
 * it to the final line with the bytes it uploaded. Times are injected. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "fixture.h"
#include "tests/test_util.h"
#include "worker/load_progress.h"
#include "worker/model.h"

#define MB 1000000ull

static void test_load_progress_final_line_text(void)
{
    struct load_progress p;
    char line[160];
    load_progress_init(&p, 100.0);
    uint64_t total = 9512300000ull;
    CHECK(load_progress_update(&p, 114.2, total, total, line, sizeof line));
    CHECK(strcmp(line, "loaded 9512.3 MB of 9512.3 MB in 14.2 s (670 MB/s)") == 0);
    if (strcmp(line, "loaded 9512.3 MB of 9512.3 MB in 14.2 s (670 MB/s)") != 0)
        fprintf(stderr, "  got \"%s\"\n", line);
    CHECK(p.finished);
    /* the final line once: the loader's closing call after a step at the end */
    CHECK(!load_progress_update(&p, 114.3, total, total, line, sizeof line));
}

static void test_load_progress_intermediate_line_text(void)
{
    struct load_progress p;
    char line[160];
    load_progress_init(&p, 0.0);
    CHECK(load_progress_update(&p, 3.1, 2048 * MB, 9512300000ull, line, sizeof line));
    /* 2048 / 9512.3 = 21.5%: the percentage is truncated; 2048 / 3.1 = 660.6 MB/s */
    CHECK(strcmp(line, "loaded 2048.0 MB of 9512.3 MB (21%) in 3.1 s (661 MB/s)") == 0);
    if (strcmp(line, "loaded 2048.0 MB of 9512.3 MB (21%) in 3.1 s (661 MB/s)") != 0)
        fprintf(stderr, "  got \"%s\"\n", line);
    CHECK(!p.finished);
    CHECK_EQ_INT(p.last_bytes, 2048 * MB);
    CHECK_NEAR(p.t_last, 3.1, 1e-12);
}

/* The schedule of lines over a 1000 MB load. */
static void test_load_progress_throttle(void)
{
    struct load_progress p;
    char line[160];
    uint64_t total = 1000 * MB;
    load_progress_init(&p, 50.0);
    CHECK(!load_progress_update(&p, 50.5, 200 * MB, total, line, sizeof line)); /* < 1 s */
    CHECK(load_progress_update(&p, 51.5, 200 * MB, total, line, sizeof line));  /* 1 s, 20% */
    CHECK(strstr(line, "(20%)") != NULL);
    CHECK(!load_progress_update(&p, 52.0, 500 * MB, total, line, sizeof line)); /* 0.5 s */
    CHECK(!load_progress_update(&p, 52.6, 290 * MB, total, line, sizeof line)); /* +9% only */
    CHECK(load_progress_update(&p, 52.6, 300 * MB, total, line, sizeof line));  /* +10% */
    CHECK(!load_progress_update(&p, 62.5, 310 * MB, total, line, sizeof line)); /* 9.9 s, +1% */
    CHECK(load_progress_update(&p, 62.7, 310 * MB, total, line, sizeof line));  /* 10 s silent */
    CHECK(strstr(line, "(31%) in 12.7 s") != NULL);
    CHECK(!load_progress_update(&p, 80.0, 310 * MB, total, line, sizeof line)); /* no progress */
    /* the final line does not wait for the second */
    CHECK(load_progress_update(&p, 62.8, total, total, line, sizeof line));
    CHECK(strcmp(line, "loaded 1000.0 MB of 1000.0 MB in 12.8 s (78 MB/s)") == 0);
    CHECK(!load_progress_update(&p, 90.0, total, total, line, sizeof line));
}

/* Zero elapsed time or an empty load: no rate (no division by zero). */
static void test_load_progress_degenerate(void)
{
    struct load_progress p;
    char line[160];
    load_progress_init(&p, 7.0);
    CHECK(load_progress_update(&p, 7.0, 5 * MB, 5 * MB, line, sizeof line));
    CHECK(strcmp(line, "loaded 5.0 MB of 5.0 MB in 0.0 s") == 0);
    load_progress_init(&p, 7.0);
    CHECK(load_progress_update(&p, 8.0, 0, 0, line, sizeof line));
    CHECK(strcmp(line, "loaded 0.0 MB of 0.0 MB in 1.0 s (0 MB/s)") == 0);
    /* a short buffer: truncated and terminated */
    char small[12];
    memset(small, 'x', sizeof small);
    load_progress_init(&p, 0.0);
    CHECK(load_progress_update(&p, 2.0, 5 * MB, 5 * MB, small, sizeof small));
    CHECK(small[sizeof small - 1] == '\0' && strlen(small) == sizeof small - 1);
}

/* model_load drives the reporter (the real clock) to its final line. */
static void test_load_progress_from_model_load(void)
{
    char path[256];
    fixture_path(path, sizeof path, "lprog");
    struct fixture_opts o = {.mat_type = CS_DTYPE_Q8_0};
    CHECK_EQ_INT(fixture_write(path, &o), 0);
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    CHECK_EQ_INT(gguf_open(&f, path, &err), CS_OK);
    struct cs_backend *be = NULL;
    struct cs_backend_cpu_options co = {.n_threads = 1};
    CHECK_EQ_INT(cs_backend_cpu_create(&be, &co), CS_OK);
    struct cs_model *m = calloc(1, sizeof *m);
    struct load_progress lp;
    memset(&lp, 0xff, sizeof lp);   /* load_progress_begin must set every field */
    CHECK_EQ_INT(model_load(m, f, be, 0, FX_LAYERS, load_progress_cb, load_progress_begin(&lp),
                            &err), CS_OK);
    CHECK(lp.finished);
    CHECK(m->weight_bytes > 0);
    CHECK_EQ_INT(lp.last_bytes, m->weight_bytes);
    CHECK(lp.t_last >= lp.t_start);
    model_free(m);
    free(m);
    be->destroy(be);
    gguf_close(f);
    unlink(path);
}

int main(void)
{
    RUN(test_load_progress_final_line_text);
    RUN(test_load_progress_intermediate_line_text);
    RUN(test_load_progress_throttle);
    RUN(test_load_progress_degenerate);
    RUN(test_load_progress_from_model_load);
    return test_report();
}
