/* metrics.h - the coordinator's counters and histograms, rendered as
 * Prometheus text for GET /metrics (api.md "Endpoints").
 *
 * Everything is updated on the loop thread only, so no locking. Engine-side
 * numbers (running, queued, rates, totals) are read from engine_stats at
 * render time rather than copied here (one source of truth). */
#ifndef CS_METRICS_H
#define CS_METRICS_H

#include <stdint.h>

#include "common/buf.h"
#include "coordinator/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define METRICS_N_BUCKETS 12

struct metrics_histogram {
    uint64_t counts[METRICS_N_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t n;
};

struct metrics {
    uint64_t requests_total[2];        /* [0] chat, [1] completions */
    uint64_t responses_by_class[6];    /* index status/100 (1xx..5xx) */
    uint64_t prompt_tokens_total, completion_tokens_total;
    uint64_t canceled_total, rejected_full_total;
    int active_requests;               /* accepted, not yet fully finished */
    struct metrics_histogram ttft;     /* seconds, submit to first token */
    struct metrics_histogram itl;      /* seconds between tokens */
};

void metrics_init(struct metrics *m);
/* Record one observation (seconds). */
void metrics_histogram_observe(struct metrics_histogram *h, double seconds);
/* Count a response status (any code; out-of-range ignored). */
void metrics_count_status(struct metrics *m, int status);
/* Render Prometheus text into out (appended). st may be NULL. n_connections:
 * open HTTP connections. CS_OK or CS_ENOMEM. */
int metrics_render(const struct metrics *m, const struct engine_stats *st, int n_connections,
                   struct buf *out);

#ifdef __cplusplus
}
#endif
#endif
