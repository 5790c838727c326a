/* metrics.c - counters and histograms of the coordinator in Prometheus text
 * exposition format (metrics.h). */
#include "metrics.h"

#include <string.h>

static const double bucket_bounds[METRICS_N_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10,
};

void metrics_init(struct metrics *m) { memset(m, 0, sizeof *m); }

void metrics_histogram_observe(struct metrics_histogram *h, double seconds)
{
    int i = 0;
    while (i < METRICS_N_BUCKETS && seconds > bucket_bounds[i])
        i++;
    h->counts[i]++;
    h->sum += seconds;
    h->n++;
}

void metrics_count_status(struct metrics *m, int status)
{
    int cls = status / 100;
    if (cls >= 1 && cls <= 5)
        m->responses_by_class[cls]++;
}

static int render_histogram(struct buf *out, const char *name, const char *help,
                            const struct metrics_histogram *h)
{
    int rc = buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_N_BUCKETS && rc == 0; i++) {
        cum += h->counts[i];
        rc = buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_bounds[i],
                        (unsigned long long)cum);
    }
    if (rc == 0)
        rc = buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                        (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
    return rc;
}

static int gauge(struct buf *out, const char *name, const char *help, const char *type, double v)
{
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name,
                      v);
}

static int render_engine(struct buf *out, const struct engine_stats *st)
{
    int rc = gauge(out, "cmpserve_running_sequences", "Sequences being generated.", "gauge",
                   st->running);
    if (rc == 0)
        rc = gauge(out, "cmpserve_queue_depth", "Requests waiting for a slot.", "gauge", st->queued);
    if (rc == 0)
        rc = gauge(out, "cmpserve_max_running", "Slots for concurrent sequences.", "gauge",
                   st->max_running);
    if (rc == 0)
        rc = gauge(out, "cmpserve_prefill_tokens_per_second", "Recent prefill rate.", "gauge",
                   st->prefill_tok_s);
    if (rc == 0)
        rc = gauge(out, "cmpserve_decode_tokens_per_second", "Recent decode rate.", "gauge",
                   st->decode_tok_s);
    if (rc == 0)
        rc = gauge(out, "cmpserve_ready", "1 when every stage is ready.", "gauge", st->ready);
    return rc;
}

int metrics_render(const struct metrics *m, const struct engine_stats *st, int n_connections,
                   struct buf *out)
{
    int rc = buf_printf(out, "# HELP cmpserve_requests_total Completion requests received.\n"
                             "# TYPE cmpserve_requests_total counter\n"
                             "cmpserve_requests_total{endpoint=\"chat\"} %llu\n"
                             "cmpserve_requests_total{endpoint=\"completions\"} %llu\n",
                        (unsigned long long)m->requests_total[0],
                        (unsigned long long)m->requests_total[1]);
    if (rc == 0)
        rc = buf_printf(out, "# HELP cmpserve_responses_total Responses by status class.\n"
                             "# TYPE cmpserve_responses_total counter\n");
    for (int c = 2; c <= 5 && rc == 0; c++)
        rc = buf_printf(out, "cmpserve_responses_total{class=\"%dxx\"} %llu\n", c,
                        (unsigned long long)m->responses_by_class[c]);
    if (rc == 0)
        rc = gauge(out, "cmpserve_prompt_tokens_total", "Prompt tokens of accepted requests.",
                   "counter", (double)m->prompt_tokens_total);
    if (rc == 0)
        rc = gauge(out, "cmpserve_generation_tokens_total", "Tokens generated.", "counter",
                   (double)m->completion_tokens_total);
    if (rc == 0)
        rc = gauge(out, "cmpserve_canceled_total", "Generations canceled (client gone).",
                   "counter", (double)m->canceled_total);
    if (rc == 0)
        rc = gauge(out, "cmpserve_rejected_queue_full_total", "Requests answered 429.", "counter",
                   (double)m->rejected_full_total);
    if (rc == 0)
        rc = gauge(out, "cmpserve_active_requests", "Requests in progress.", "gauge",
                   m->active_requests);
    if (rc == 0)
        rc = gauge(out, "cmpserve_http_connections", "Open HTTP connections.", "gauge",
                   n_connections);
    if (rc == 0)
        rc = gauge(out, "cmpserve_prefix_cache_hits_total", "Prefix cache hits (no cache yet).",
                   "counter", 0);
    if (rc == 0)
        rc = gauge(out, "cmpserve_worker_restarts_total", "Worker restarts.", "counter", 0);
    if (rc == 0 && st)
        rc = render_engine(out, st);
    if (rc == 0)
        rc = render_histogram(out, "cmpserve_time_to_first_token_seconds",
                              "Time from submit to the first token.", &m->ttft);
    if (rc == 0)
        rc = render_histogram(out, "cmpserve_inter_token_seconds", "Time between tokens.",
                              &m->itl);
    return rc;
}
