/* gguf_sample.h - builds the sample GGUF used by the gguf tests and the fuzz
 * seed writer: every metadata type (scalars, strings with odd bytes, arrays
 * of each scalar type, string arrays, nested arrays) and tensors of several
 * ggml types and ranks with deterministic data. */
#ifndef CS_TEST_GGUF_SAMPLE_H
#define CS_TEST_GGUF_SAMPLE_H

#include <stdint.h>

#include "common/gguf.h"

/* The odd strings of the sample's string array (lengths in sample_str_lens). */
#define SAMPLE_N_STRS 6
extern const char *const sample_strs[SAMPLE_N_STRS];
extern const uint64_t sample_str_lens[SAMPLE_N_STRS];

/* One sample tensor: name, type, shape. */
struct sample_tensor {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
};
#define SAMPLE_N_TENSORS 9
extern const struct sample_tensor sample_tensors[SAMPLE_N_TENSORS];

/* Deterministic bytes for tensor number seed. */
void sample_pattern(uint8_t *dst, uint64_t n, uint32_t seed);

/* A writer holding the whole sample; alignment 0 leaves general.alignment
 * unset (default 32). with_tensors false: metadata only. Tensor i's data
 * comes from sample_pattern(.., i), through the fill callback for odd i.
 * Returns a status; *out is the caller's to destroy. */
int sample_writer_build(struct gguf_writer **out, uint32_t alignment, int with_tensors);

/* Build and write the sample to path. */
int sample_write(const char *path, uint32_t alignment, int with_tensors, struct cs_error *err);

/* Read a whole file into a malloc'd buffer; NULL on failure. */
uint8_t *sample_read_file(const char *path, size_t *size);

#endif
