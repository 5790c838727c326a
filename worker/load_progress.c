/* load_progress.c - progress lines of a weight load (see load_progress.h):
 * when a line is due, its text, and the model_progress_cb that logs it. */
#include "load_progress.h"

#include <stdio.h>
#include <time.h>

#include "../common/log.h"

static double now_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void load_progress_init(struct load_progress *p, double now_s)
{
    p->t_start = now_s;
    p->t_last = now_s;
    p->last_bytes = 0;
    p->finished = false;
}

struct load_progress *load_progress_begin(struct load_progress *p)
{
    load_progress_init(p, now_monotonic_s());
    return p;
}

/* An intermediate line: at least a second since the last one, and 10% more
 * of the total or 10 s of silence with some progress. */
static bool line_due(const struct load_progress *p, double now_s, uint64_t done, uint64_t total)
{
    double since = now_s - p->t_last;
    if (since < LOAD_PROGRESS_MIN_INTERVAL_S || done <= p->last_bytes)
        return false;
    uint64_t step = total / 100 * LOAD_PROGRESS_STEP_PERCENT +
                    total % 100 * LOAD_PROGRESS_STEP_PERCENT / 100;
    return done - p->last_bytes >= step || since >= LOAD_PROGRESS_MAX_INTERVAL_S;
}

bool load_progress_update(struct load_progress *p, double now_s, uint64_t done, uint64_t total,
                          char *line, size_t size)
{
    bool final = done >= total;
    if (p->finished || (!final && !line_due(p, now_s, done, total)))
        return false;
    double elapsed = now_s - p->t_start;
    double mb = (double)done / 1e6, total_mb = (double)total / 1e6;
    int n;
    if (final)
        n = snprintf(line, size, "loaded %.1f MB of %.1f MB in %.1f s", mb, total_mb, elapsed);
    else
        n = snprintf(line, size, "loaded %.1f MB of %.1f MB (%d%%) in %.1f s", mb, total_mb,
                     (int)((double)done * 100.0 / (double)total), elapsed);
    if (elapsed > 0 && n > 0 && (size_t)n < size)
        snprintf(line + n, size - (size_t)n, " (%.0f MB/s)", mb / elapsed);
    p->t_last = now_s;
    p->last_bytes = done;
    p->finished = final;
    return true;
}

void load_progress_cb(void *ctx, uint64_t done_bytes, uint64_t total_bytes)
{
    char line[160];
    if (ctx && load_progress_update(ctx, now_monotonic_s(), done_bytes, total_bytes, line,
                                    sizeof line))
        LOG_INFO("weights", "%s", line);
}
