/* engine_pipeline.h - the pipeline engine: engine.h implemented over worker
 * processes (one per stage, each a layer slice on one device), driven from
 * the coordinator's libuv loop over ZeroMQ (design.md sections 1-3).
 *
 * Creation is synchronous: it spawns the workers (or, with cfg->attach,
 * waits for workers started by systemd and assigns stages in GPU-index
 * order), sends LOAD and waits for every READY. A worker that cannot load
 * makes creation fail with its reason ("stage 1: <why>"). */
#ifndef CS_ENGINE_PIPELINE_H
#define CS_ENGINE_PIPELINE_H

#include "../common/config.h"
#include "../common/status.h"
#include "engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when cfg asks for the pipeline: workers > 0, attach, or a device list
 * with more than one entry. */
bool engine_pipeline_wanted(const struct cs_config *cfg);

/* engine.h's engine over worker processes; callbacks run on loop. */
int engine_pipeline_create(struct engine **out, struct uv_loop_s *loop, const struct cs_config *cfg,
                           struct cs_error *err);

/* One generation through the pipeline on a private loop (`cmpserve
 * generate --workers N`): prompt, max_tokens, sampling and stop ids as in
 * struct engine_request; on_submit (may be NULL) once every stage has
 * loaded, just before the request is submitted (so that timings exclude
 * the model load); on_token for each token (return false to stop).
 * Returns CS_OK or the failure with err set. */
int engine_pipeline_generate(const struct cs_config *cfg, const int32_t *prompt, int n_prompt,
                             int max_tokens, const struct cs_sample_params *sp,
                             const int32_t *stop_ids, int n_stop, void (*on_submit)(void *user),
                             bool (*on_token)(void *user, const struct cs_sample_result *tok),
                             void *user, struct cs_error *err);

#ifdef __cplusplus
}
#endif
#endif
