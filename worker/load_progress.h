/* load_progress.h - progress lines of a weight load (a model_progress_cb for
 * model_load), for every caller: the worker, the in-process engine and the
 * tools. On a slow link (PCIe Gen1 x1: 10 GB in a minute or more) they show
 * that the load advances and how fast:
 *
 *   weights: loaded 2048.0 MB of 9512.3 MB (22%) in 3.1 s (661 MB/s)
 *   weights: loaded 9512.3 MB of 9512.3 MB in 14.2 s (670 MB/s)
 *
 * (MB = 1e6 bytes; the rate is the mean since the start.) A line is written
 * at most once per second: when at least 10% of the total has been loaded
 * since the last line, or 10 s have passed with some progress; plus exactly
 * one final line when everything is loaded. Logged at INFO with module
 * "weights". The decision and the text are a pure function of the times and
 * byte counts given (load_progress_update), so tests inject the clock. */
#ifndef CS_LOAD_PROGRESS_H
#define CS_LOAD_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOAD_PROGRESS_MIN_INTERVAL_S 1.0   /* never two lines closer than this */
#define LOAD_PROGRESS_MAX_INTERVAL_S 10.0  /* a line at least this often while moving */
#define LOAD_PROGRESS_STEP_PERCENT 10      /* or after this much of the total */

struct load_progress {
    double t_start;        /* seconds (any clock; the same as the update calls) */
    double t_last;         /* time of the last line (t_start before any) */
    uint64_t last_bytes;   /* bytes done at the last line */
    bool finished;         /* the final line was written */
};

/* Start a load at time now_s (seconds of any monotonic clock). */
void load_progress_init(struct load_progress *p, double now_s);

/* Start a load now (CLOCK_MONOTONIC); returns p, so a caller can pass
 * load_progress_begin(&(struct load_progress){0}) straight to model_load. */
struct load_progress *load_progress_begin(struct load_progress *p);

/* At time now_s, done of total bytes are loaded: when a line is due, write
 * it (without the module prefix, NUL-terminated, truncated to size) into
 * line, note it and return true; else return false. done >= total makes the
 * final line, written once (later calls return false). */
bool load_progress_update(struct load_progress *p, double now_s, uint64_t done, uint64_t total,
                          char *line, size_t size);

/* A model_progress_cb (worker/model.h): ctx is a struct load_progress
 * started by load_progress_init or load_progress_begin; logs due lines. */
void load_progress_cb(void *ctx, uint64_t done_bytes, uint64_t total_bytes);

#ifdef __cplusplus
}
#endif
#endif
