/* sample.c - the reference sampler, step for step as kernels/sampler.h defines
 * it (penalties, bias, mask, logprobs, greedy or temperature/top-k/top-p/min-p
 * with the counter-based RNG), and the CPU backend's sample op over rows.
 * Host memory only; scratch is allocated per call. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/status.h"
#include "../sampler.h"
#include "cpu.h"

struct cand {
    float l;
    int32_t id;
};

/* Candidate order: logit descending, then id ascending. */
static int cand_before(const struct cand *a, const struct cand *b)
{
    return a->l > b->l || (a->l == b->l && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* ---- steps 0-4: sanitise, bias, penalties, mask ---- */

static void logits_sanitise(float *l, int n)
{
    for (int i = 0; i < n; i++) {
        if (isnan(l[i]))
            l[i] = -INFINITY;
        else if (l[i] == INFINITY)
            l[i] = FLT_MAX;
    }
}

static void logits_bias(float *l, int n, const struct cs_sample_params *p)
{
    for (int i = 0; i < p->n_bias && p->bias_ids && p->bias_vals; i++)
        if (p->bias_ids[i] >= 0 && p->bias_ids[i] < n)
            l[p->bias_ids[i]] += p->bias_vals[i];
}

static void logits_repetition(float *l, int n, const struct cs_sample_params *p, uint8_t *seen)
{
    float r = p->repetition_penalty;
    if (r == 1.0f || !(r > 0.0f) || !p->ctx_tokens)
        return;
    memset(seen, 0, (size_t)n);
    for (int i = 0; i < p->n_ctx_tokens; i++) {
        int32_t id = p->ctx_tokens[i];
        if (id < 0 || id >= n || seen[id])
            continue;
        seen[id] = 1;
        l[id] = l[id] > 0.0f ? l[id] / r : l[id] * r;
    }
}

static void logits_presence(float *l, int n, const struct cs_sample_params *p, int32_t *count)
{
    if ((p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) || !p->gen_tokens)
        return;
    for (int i = 0; i < p->n_gen_tokens; i++)
        if (p->gen_tokens[i] >= 0 && p->gen_tokens[i] < n)
            count[p->gen_tokens[i]] = 0;
    for (int i = 0; i < p->n_gen_tokens; i++)
        if (p->gen_tokens[i] >= 0 && p->gen_tokens[i] < n)
            count[p->gen_tokens[i]]++;
    for (int i = 0; i < p->n_gen_tokens; i++) {
        int32_t id = p->gen_tokens[i];
        if (id < 0 || id >= n || count[id] == 0)
            continue;
        l[id] = l[id] - (p->presence_penalty * 1.0f + p->frequency_penalty * (float)count[id]);
        count[id] = 0;   /* applied once per distinct id */
    }
}

static void logits_mask(float *l, int n, const uint8_t *allowed)
{
    if (!allowed)
        return;
    for (int i = 0; i < n; i++)
        if (!((allowed[i >> 3] >> (i & 7)) & 1))
            l[i] = -INFINITY;
}

/* ---- step 5: log-probabilities ---- */

static void logprobs_fill(struct cs_sample_result *r, const float *l, int n, int n_logprobs)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        m = l[i] > m ? l[i] : m;
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)l[i] - (double)m);
    double base = (double)m + log(sum);
    r->logprob = (float)((double)l[r->token] - base);
    int want = n_logprobs > CS_MAX_TOP_LOGPROBS ? CS_MAX_TOP_LOGPROBS : n_logprobs;
    r->n_top = 0;
    for (int i = 0; i < n && want > 0; i++) {
        float lp = (float)((double)l[i] - base);
        int k = r->n_top;
        if (k == want && !(lp > r->top_logprobs[k - 1]))
            continue;   /* ties keep the lower id already there */
        if (k < want)
            r->n_top++;
        else
            k--;
        while (k > 0 && lp > r->top_logprobs[k - 1]) {
            r->top_logprobs[k] = r->top_logprobs[k - 1];
            r->top_ids[k] = r->top_ids[k - 1];
            k--;
        }
        r->top_logprobs[k] = lp;
        r->top_ids[k] = i;
    }
}

/* ---- steps 6-7: choose ---- */

static int32_t choose_greedy(const float *l, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

static void heap_sift_down(struct cand *h, int n, int i)
{
    /* Min-heap by candidate order: the root is the worst kept candidate. */
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && cand_before(&h[c], &h[c + 1]))
            c++;
        if (!cand_before(&h[i], &h[c]))
            return;
        struct cand tmp = h[i];
        h[i] = h[c];
        h[c] = tmp;
        i = c;
    }
}

/* A uint32 whose ascending order is the candidate order of the values
 * (descending); -0 and +0 share a key, as they compare equal in cand_before. */
static uint32_t cand_radix_key(float v)
{
    if (v == 0.0f)
        v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);   /* ascending in v */
    return ~u;                                        /* descending in v */
}

/* Sort c[0..n) built in ascending id order into the candidate order (value
 * descending, id ascending): a stable LSD radix sort on cand_radix_key, 4
 * passes of 8 bits, so equal values keep their ascending ids. The same order
 * as qsort with cand_cmp in O(n): a full vocabulary (248,320 candidates at
 * temperature > 0 without top-k) took ~30 ms through qsort. false: no memory
 * (the caller sorts with qsort). */
static bool candidates_radix_sort(struct cand *c, int n)
{
    struct cand *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp)
        return false;
    struct cand *src = c, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        int count[257] = {0};
        for (int i = 0; i < n; i++)
            count[((cand_radix_key(src[i].l) >> shift) & 0xff) + 1]++;
        for (int b = 0; b < 256; b++)
            count[b + 1] += count[b];
        for (int i = 0; i < n; i++)
            dst[count[(cand_radix_key(src[i].l) >> shift) & 0xff]++] = src[i];
        struct cand *t = src;
        src = dst;
        dst = t;
    }
    /* four passes: the result is back in c */
    free(tmp);
    return true;
}

/* Order the candidates (finite logits by their order value), keeping the
 * best top_k (all when top_k <= 0); returns how many are kept in c[0..). */
static int candidates_build(struct cand *c, const float *l, int n, int top_k)
{
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(l[i]))
            c[nc++] = (struct cand){sampler_order_value(l[i]), i};
    if (top_k > 0 && top_k < nc) {
        for (int i = top_k / 2 - 1; i >= 0; i--)
            heap_sift_down(c, top_k, i);
        for (int i = top_k; i < nc; i++)
            if (cand_before(&c[i], &c[0])) {
                c[0] = c[i];
                heap_sift_down(c, top_k, 0);
            }
        nc = top_k;
    } else if (nc > 4096 && candidates_radix_sort(c, nc)) {
        return nc;   /* still in id order before the sort: the radix sort applies */
    }
    qsort(c, (size_t)nc, sizeof(*c), cand_cmp);
    return nc;
}

/* Step 7 (sampler.h): mark the kept ids in keep[0..n), return v_0. Only
 * top-k and top-p need the candidate order; without them nothing is sorted. */
static float step7_keep(uint8_t *keep, const float *l, int n, const struct cs_sample_params *p,
                        struct cand *c)
{
    float T = p->temperature, v0 = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(l[i])) {
            float v = sampler_scaled(l[i], T);
            v0 = v > v0 ? v : v0;
        }
    uint64_t floor_w = sampler_min_p_floor(p->min_p);
    memset(keep, 0, (size_t)n);
    if (p->top_k <= 0 && !(p->top_p < 1.0f)) {
        for (int i = 0; i < n; i++)
            keep[i] = isfinite(l[i]) && sampler_weight(sampler_scaled(l[i], T) - v0) >= floor_w;
        return v0;
    }
    int nc = candidates_build(c, l, n, p->top_k);   /* the first top_k, in order */
    if (p->top_p < 1.0f) {
        uint64_t total = 0;
        for (int j = 0; j < nc; j++)
            total += sampler_weight(sampler_scaled(c[j].l, T) - v0);
        uint64_t target = sampler_top_p_target(p->top_p, total), run = 0;
        for (int j = 0; j < nc; j++) {
            run += sampler_weight(sampler_scaled(c[j].l, T) - v0);
            if (run >= target) {
                nc = j + 1;
                break;
            }
        }
    }
    for (int j = 0; j < nc; j++)
        keep[c[j].id] = sampler_weight(sampler_scaled(c[j].l, T) - v0) >= floor_w;
    return v0;
}

/* Step 7f: the draw over the kept ids in ascending id order. */
static int32_t choose_random(const float *l, int n, const struct cs_sample_params *p,
                             struct cand *c, uint8_t *keep)
{
    float T = p->temperature, v0 = step7_keep(keep, l, n, p, c);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (keep[i])
            total += sampler_weight(sampler_scaled(l[i], T) - v0);
    uint64_t r = sampler_draw_point(p->seed, p->draw, total), run = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++)
        if (keep[i]) {
            run += sampler_weight(sampler_scaled(l[i], T) - v0);
            last = i;
            if (run > r)
                return i;
        }
    return last;   /* not reached: r < total */
}

int sampler_sample(struct cs_sample_result *result, float *logits, int n_vocab,
                   const struct cs_sample_params *params)
{
    if (!result || !logits || !params || n_vocab <= 0)
        return CS_EINVAL;
    const struct cs_sample_params *p = params;
    /* candidates, then one keep flag per id (the penalties reuse the front) */
    void *scratch = malloc((size_t)n_vocab * (sizeof(struct cand) + 1));
    if (!scratch)
        return CS_ENOMEM;
    logits_sanitise(logits, n_vocab);
    logits_bias(logits, n_vocab, p);
    logits_repetition(logits, n_vocab, p, scratch);
    logits_presence(logits, n_vocab, p, scratch);
    logits_mask(logits, n_vocab, p->allowed);
    int32_t best = choose_greedy(logits, n_vocab);
    if (!isfinite(logits[best])) {
        free(scratch);
        return CS_ERANGE;
    }
    memset(result, 0, sizeof(*result));
    result->token = sampler_is_greedy(p->temperature)
                        ? best
                        : choose_random(logits, n_vocab, p, scratch,
                                        (uint8_t *)scratch + (size_t)n_vocab * sizeof(struct cand));
    logprobs_fill(result, logits, n_vocab, p->n_logprobs);
    free(scratch);
    return CS_OK;
}

struct sample_job {
    struct cs_sample_result *results;
    float *logits;
    int n_vocab;
    const struct cs_sample_params *params;
    int *status;
};

static void sample_range(void *arg, int64_t begin, int64_t end, int tid)
{
    const struct sample_job *job = arg;
    for (int64_t i = begin; i < end; i++)
        job->status[i] = sampler_sample(&job->results[i], job->logits + i * job->n_vocab,
                                        job->n_vocab, &job->params[i]);
}

int cpu_sample(struct cs_backend *be, struct cs_sample_result *results, float *logits,
               int n_vocab, const struct cs_sample_params *params, int n)
{
    if (!results || !logits || !params || n < 0 || n_vocab <= 0)
        return CS_EINVAL;
    int *status = calloc((size_t)n + 1, sizeof(int));
    if (!status)
        return CS_ENOMEM;
    struct sample_job job = {.results = results, .logits = logits, .n_vocab = n_vocab,
                             .params = params, .status = status};
    threadpool_for(cpu_ctx_of(be)->pool, n, 1, sample_range, &job);
    int rc = CS_OK;
    for (int i = 0; i < n && rc == CS_OK; i++)
        rc = status[i];
    free(status);
    return rc;
}
