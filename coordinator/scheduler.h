/* scheduler.h - the batching policy of one step, shared by the in-process
 * engine (engine_local.c) and the pipeline engine.
 *
 * It owns the rules of design.md section 2, and nothing else (no memory, no
 * model): every decoding sequence contributes its one pending token, oldest
 * first; then prefill chunks fill the rest of the step's token budget, oldest
 * first, and the first chunk that does not fit ends the step (no overtaking,
 * so no sequence starves).
 *
 * Chunk boundaries are fixed: a prompt is cut at multiples of prefill_chunk
 * from position 0, whatever else runs. With batch-invariant ops this makes a
 * sequence's numbers independent of its neighbours, and a replay after a
 * crash repeats the same chunks. */
#ifndef CS_SCHEDULER_H
#define CS_SCHEDULER_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the policy needs to know of one admitted sequence. */
struct sched_seq {
    int n_prompt;   /* prompt tokens */
    int n_ctx;      /* tokens known: prompt + generated */
    int n_done;     /* tokens already run through the model */
};

/* One sequence's share of a step: tokens [first, first + n) of it. */
struct sched_entry {
    int seq;        /* index into the array given to sched_plan */
    int first;      /* position of the first token */
    int n;          /* tokens (>= 1) */
    bool sample;    /* the entry reaches n_ctx: sample the next token */
};

struct sched_limits {
    int step_tokens;    /* token budget of one step */
    int prefill_chunk;  /* largest prefill chunk, and the chunk grid */
};

/* The budget a step needs so that, with max_seqs - 1 sequences decoding, one
 * whole prefill chunk still fits: max(step_tokens, max_seqs - 1 + chunk).
 * Inputs below 1 count as 1. */
int sched_step_budget(int step_tokens, int prefill_chunk, int max_seqs);

/* Plan one step over seqs[0..n), given oldest first. Writes at most n entries
 * to out (decodes first, then prefill chunks, each in the order of seqs) and
 * returns how many; the entries' token counts sum to at most
 * lim->step_tokens. Sequences with nothing to run (n_done >= n_ctx) are
 * skipped. Returns 0 when there is nothing to do or the limits are < 1. */
int sched_plan(const struct sched_seq *seqs, int n, const struct sched_limits *lim,
               struct sched_entry *out);

/* Pages of page_size tokens needed for n_tokens tokens (0 for n_tokens <= 0;
 * page_size < 1 counts as 1). */
int sched_pages_for(int n_tokens, int page_size);

#ifdef __cplusplus
}
#endif
#endif
