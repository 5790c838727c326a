/* scheduler.c - the batching policy of one step (see scheduler.h): decodes
 * first, then grid-aligned prefill chunks into the remaining budget. */
#include "scheduler.h"

int sched_step_budget(int step_tokens, int prefill_chunk, int max_seqs)
{
    if (step_tokens < 1)
        step_tokens = 1;
    if (prefill_chunk < 1)
        prefill_chunk = 1;
    if (max_seqs < 1)
        max_seqs = 1;
    long need = (long)max_seqs - 1 + prefill_chunk;
    return step_tokens >= need ? step_tokens : (int)need;
}

int sched_pages_for(int n_tokens, int page_size)
{
    if (page_size < 1)
        page_size = 1;
    if (n_tokens <= 0)
        return 0;
    return (int)(((long)n_tokens + page_size - 1) / page_size);
}

/* A sequence decodes when its prompt is done and exactly one token waits. */
static bool seq_is_decoding(const struct sched_seq *s)
{
    return s->n_done >= s->n_prompt && s->n_ctx - s->n_done == 1;
}

/* Tokens of the next prefill chunk: up to the next multiple of chunk. */
static int seq_chunk_tokens(const struct sched_seq *s, int chunk)
{
    int to_grid = chunk - s->n_done % chunk;
    int left = s->n_ctx - s->n_done;
    return left < to_grid ? left : to_grid;
}

int sched_plan(const struct sched_seq *seqs, int n, const struct sched_limits *lim,
               struct sched_entry *out)
{
    if (!seqs || !lim || !out || n <= 0 || lim->step_tokens < 1 || lim->prefill_chunk < 1)
        return 0;
    int n_out = 0, budget = lim->step_tokens;
    for (int i = 0; i < n && budget > 0; i++) {
        const struct sched_seq *s = &seqs[i];
        if (s->n_done >= s->n_ctx || !seq_is_decoding(s))
            continue;
        out[n_out++] = (struct sched_entry){.seq = i, .first = s->n_done, .n = 1, .sample = true};
        budget--;
    }
    for (int i = 0; i < n; i++) {
        const struct sched_seq *s = &seqs[i];
        if (s->n_done >= s->n_ctx || seq_is_decoding(s))
            continue;
        int k = seq_chunk_tokens(s, lim->prefill_chunk);
        if (k > budget)
            break;
        out[n_out++] = (struct sched_entry){
            .seq = i, .first = s->n_done, .n = k, .sample = s->n_done + k == s->n_ctx};
        budget -= k;
    }
    return n_out;
}
