/* bench_model.h - what `cmpserve bench --model`'s parts share (tools/bench.c:
 * options, probes, prefill; tools/bench_decode.c: decode per depth and batch
 * size; tools/bench_model.c: the helpers below). Only bench.c needs CUDA. */
#ifndef CS_TOOLS_BENCH_MODEL_H
#define CS_TOOLS_BENCH_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "cli_common.h"

/* What a token costs, counted as hardware.md "Physics of a token" says. */
struct mcount {
    double trunk_params;    /* prefill: 2 int8 ops each per token */
    double read_bytes;      /* decode: projection weights + LM head per step */
    double kv_bytes_per_pos;/* all attention layers, K and V, at the KV type's size */
    double gdn_state_bytes; /* read + written per sequence and step */
};

void bench_model_count(struct mcount *mc, const struct cs_model *m, double kv_elem_bytes);

/* Run n tokens of sequence 0 from position pos0 in chunks; the last chunk
 * samples greedily into *next. */
int bench_model_run(struct cli_session *s, int32_t *tokens, int n, int pos0, int chunk,
                    int32_t *next);

struct bench_decode_opts {
    const int *depths;
    int n_depths;
    const int *batches;     /* sequences decoding together, each a row of figures */
    int n_batches;
    int gen;                /* timed steps per row (one untimed step before them) */
    int chunk;              /* prefill chunk for reaching a depth */
    bool json;
};

/* For each depth: sequence 0 is prefilled to it, and each batch size B then
 * decodes B sequences that start from copies of that state (KV pages and
 * GDN slot; the session holds max(B) sequences and one spare slot). Prints
 * one row per (depth, B); with json, the elements of the "decode" array.
 * Every sequence of every row must produce the token stream of the first
 * row at that depth (greedy, the same start: kernels/numerics.h makes a
 * token's bits independent of its batch); *same is cleared where one does
 * not. Returns a status. */
int bench_decode(struct cli_session *s, const struct bench_decode_opts *o, const struct mcount *mc,
                 double read_gbps, int32_t *tokens, bool *same);

#endif
