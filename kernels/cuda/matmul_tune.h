/* matmul_tune.h - which Q8_0 kernel a call of a few dozen tokens takes,
 * measured once per shape on the card in use. Internal to kernels/cuda.
 *
 * Why: between MM_TUNE_MIN_TOKENS and MM_TUNE_MAX_TOKENS tokens (batched
 * decode) neither the GEMV nor the GEMM wins every call. The GEMV's time
 * grows with the tokens (it reads the weights once per launch of up to 16),
 * the GEMM's stays flat, and where they cross depends on the matrix: on an
 * H100 the 9B's ffn_gate_up crosses at ~22 tokens, its attn_out not below
 * 64 (docs/PERF.md, thirty-first session). Both give the same bits
 * (kernels/numerics.h), so the choice is only a matter of time, and timing
 * both on the call itself answers it for any card, including ones never
 * measured here.
 *
 * The table is keyed by (device, n_in, rows of all the call's weights,
 * n_tokens); an entry never changes once made, so a graph recorded after it
 * replays the choice that was timed. */
#ifndef CS_CUDA_MATMUL_TUNE_H
#define CS_CUDA_MATMUL_TUNE_H

#include <stdint.h>

#define MM_TUNE_MIN_TOKENS 17   /* up to 16 the GEMV (one wide launch) wins on every card measured */
#define MM_TUNE_MAX_TOKENS 64   /* above one GEMM tile of tokens the GEMM wins */

enum mm_tune_choice { MM_TUNE_UNKNOWN = -1, MM_TUNE_GEMV = 0, MM_TUNE_GEMM = 1 };

/* Is n_tokens in the range the table decides? */
static inline int mm_tune_in_range(int n_tokens)
{
    return n_tokens >= MM_TUNE_MIN_TOKENS && n_tokens <= MM_TUNE_MAX_TOKENS;
}

/* The recorded choice for the current device, or MM_TUNE_UNKNOWN. */
enum mm_tune_choice mm_tune_lookup(int64_t n_in, int64_t rows, int n_tokens);

/* Record a choice (the first one recorded for a key stays; a full table
 * records nothing, and the caller's static rule applies). */
void mm_tune_record(int64_t n_in, int64_t rows, int n_tokens, enum mm_tune_choice choice);

/* Forget every entry (tests). */
void mm_tune_reset(void);

/* One run of the call with a forced kernel (the GEMV when gemm is 0), as
 * mm_tune_measure times it. Returns a status (common/status.h). */
typedef int (*mm_tune_run_fn)(void *arg, int gemm);

/* Time run(arg, 0) and run(arg, 1) on stream (one warm-up each, then
 * MM_TUNE_REPS runs each, the stream synchronized first) and record the
 * faster under the key. The outputs are those of the last run, which both
 * kernels compute bit for bit. Must not be called while the stream is being
 * captured. *choice gets the result; status on a failed run. */
int mm_tune_measure(int64_t n_in, int64_t rows, int n_tokens, mm_tune_run_fn run, void *arg,
                    struct CUstream_st *stream, enum mm_tune_choice *choice);

#endif
