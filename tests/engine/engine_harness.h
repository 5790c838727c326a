/* engine_harness.h - helpers of the engine tests: the tiny model file, a
 * reference generator that drives model_forward directly for one sequence
 * (the same chunk grid, sampling counters and stop rules the engine
 * promises), requests that record their callbacks, and a bounded uv loop. */
#ifndef CS_TEST_ENGINE_HARNESS_H
#define CS_TEST_ENGINE_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/config.h"
#include "coordinator/engine.h"
#include "tools/cli_common.h"

#define EH_MAX_GEN 256

/* Write the tiny q8_0 model (seed 1) to path unless it exists; 0 on success. */
int eh_model_ensure(const char *path);

/* Device of the engine and the reference: "cpu" (default) or a CUDA index. */
extern const char *eh_device;

/* A configuration for the tiny model on eh_device: 2 CPU threads, 16-token
 * pages, f32 KV (as the reference keeps it). */
void eh_config(struct cs_config *cfg, const char *model, int ctx_size, int max_seqs,
               int prefill_chunk, int step_tokens, int queue_size);

/* The outcome of one generation (engine or reference). */
struct eh_gen {
    int32_t toks[EH_MAX_GEN];
    float logprobs[EH_MAX_GEN];
    int n;
    int n_done;                 /* done callbacks seen (must end at 1) */
    enum engine_finish finish;
    int status;
    char msg[256];
    int cancel_after;           /* engine_cancel when n reaches it (0: never) */
    int stop_after;             /* on_token returns false when n reaches it (0: never) */
    struct engine *e;
    uint64_t id;
};

/* Reference: one sequence through model_forward alone (slot 0 fresh). */
int eh_reference(struct cli_session *s, const int32_t *prompt, int n_prompt, int max_tokens,
                 const struct cs_sample_params *sp, const int32_t *stop, int n_stop, int chunk,
                 struct eh_gen *out);

/* A request whose callbacks record into g. */
struct engine_request eh_request(struct eh_gen *g, const int32_t *prompt, int n_prompt,
                                 int max_tokens, const struct cs_sample_params *sp);
/* Submit and remember the id in g (g->e is set). */
int eh_submit(struct engine *e, struct eh_gen *g, const struct engine_request *r,
              struct cs_error *err);

/* Run loop until every gens[i].n_done >= 1 or timeout_ms passes; true when
 * all finished. */
bool eh_wait_done(uv_loop_t *loop, struct eh_gen *gens, int n, int timeout_ms);
/* Run loop for ms milliseconds. */
void eh_run_for(uv_loop_t *loop, int ms);
/* Destroy e and let the loop close its handles. */
void eh_engine_destroy(uv_loop_t *loop, struct engine *e);

/* Greedy parameters (no logprobs beyond the chosen token's). */
struct cs_sample_params eh_greedy(void);

#endif
