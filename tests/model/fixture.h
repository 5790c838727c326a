/* fixture.h - tiny qwen35 GGUF files with random weights for the model tests.
 *
 * Shapes follow model.md with small widths but the real head sizes: E = 64,
 * 4 trunk layers (GDN, GDN, GDN, attention) + 1 MTP block, Hq = 2, Hkv = 1,
 * D = 256 (64 rotated), Gk = 2, Hv = 4, Sk = Sv = 128, per-layer FFN widths,
 * vocab 300. Options inject the faults the loader must report. */
#ifndef CS_TEST_MODEL_FIXTURE_H
#define CS_TEST_MODEL_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#define FX_E 64
#define FX_LAYERS 4
#define FX_VOCAB 300
#define FX_HQ 2
#define FX_HKV 1
#define FX_D 256
#define FX_ROPE 64
#define FX_GK 2
#define FX_HV 4
#define FX_S 128
#define FX_CONV (2 * FX_S * FX_GK + FX_S * FX_HV)

/* FFN width of each block (trunk layers then the MTP block). */
extern const int fx_ff[FX_LAYERS + 1];

struct fixture_opts {
    const char *arch;        /* NULL: "qwen35" */
    uint32_t mat_type;       /* CS_DTYPE_F32 or CS_DTYPE_Q8_0 for 2-D weights */
    bool tied;               /* omit output.weight */
    bool mixed_vectors;      /* some norms in F16/BF16, conv1d in F16 */
    const char *drop;        /* tensor to leave out */
    const char *reshape;     /* tensor whose last dim is halved */
    const char *retype_q4;   /* tensor written as q4_0 */
    int n_vocab_tokens;      /* tokenizer.ggml.tokens entries; 0: FX_VOCAB */
    const char *bad_key;     /* a u32 key set (again) to bad_val after the others */
    uint32_t bad_val;
    bool attention_at_1;     /* recurrent_layers array making layer 1 attention */
    uint64_t seed;
};

/* Write the model to path; 0 on success. */
int fixture_write(const char *path, const struct fixture_opts *o);

/* A temporary file name for fixture n (unique per process). */
void fixture_path(char *buf, int size, const char *tag);

#endif
