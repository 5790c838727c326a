/* fake_engine.h - a scripted stand-in for the generation engine (see
 * fake_engine.c), used by the API tests to run the real HTTP server without
 * a model. */
#ifndef CS_TEST_FAKE_ENGINE_H
#define CS_TEST_FAKE_ENGINE_H

#include <uv.h>

#include "common/config.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"

/* Create the fake engine: cfg gives ctx_size, max_seqs, queue_size and
 * test_script (loaded with tok); one token per sequence every tick_ms.
 * CS_OK, CS_ENOMEM, or the script's load error (err set). */
int fake_engine_create(struct engine **out, uv_loop_t *loop, const struct cs_config *cfg,
                       const struct tokenizer *tok, int tick_ms, struct cs_error *err);

#endif
