/* ref_model.h - an independent naive fp32/fp64 implementation of the whole
 * qwen35 forward (model.md section 5) for the fixture's shapes, reading the
 * raw GGUF tensors itself. One token per call, direct loops, no op table: the
 * yardstick the model code is checked against. */
#ifndef CS_TEST_REF_MODEL_H
#define CS_TEST_REF_MODEL_H

#include "fixture.h"

struct ref_model;

/* Load path (written by fixture_write); NULL on failure. */
struct ref_model *ref_model_load(const char *path);
void ref_model_free(struct ref_model *r);
/* Zero the state (a new sequence at position 0). */
void ref_model_reset(struct ref_model *r);
/* Run one token at the next position; logits receives FX_VOCAB values. */
void ref_model_step(struct ref_model *r, int token, float *logits);

#endif
