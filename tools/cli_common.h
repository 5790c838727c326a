/* cli_common.h - what the in-process cmpserve subcommands of tools/
 * (mkmodel, generate, logits, bench) share: argument parsing, one-line error
 * reporting, and a "session" (a GGUF loaded whole onto one backend with one
 * sequence's state) plus one-sequence batches for model_forward.
 *
 * Conventions of every subcommand: options are "--name VALUE" (or
 * "--name=VALUE"); an unknown option, a missing or malformed value is a usage
 * error (exit status 2, usage on stderr); any other failure prints exactly one
 * line "cmpserve <cmd>: <message>" on stderr and exits with status 1. */
#ifndef CS_CLI_COMMON_H
#define CS_CLI_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_ERROR 1
#define CLI_EXIT_USAGE 2

/* Iterator over argv (argv[0] is the subcommand name). */
struct cli_args {
    int argc;
    char **argv;
    int i;               /* next argument */
    const char *cmd;     /* subcommand name, for messages */
    const char *value;   /* value of the option matched last */
    bool error;          /* a usage error was reported */
};

void cli_args_init(struct cli_args *a, int argc, char **argv);
/* The current argument, or NULL when all are consumed. */
const char *cli_args_peek(const struct cli_args *a);
/* When the current argument is flag "--name" with a value ("--name V" or
 * "--name=V"): consume it, set a->value and return true. A flag with no value
 * following sets a->error (message printed) and returns false. */
bool cli_args_opt(struct cli_args *a, const char *name);
/* When the current argument is the boolean flag "--name": consume it, return true. */
bool cli_args_flag(struct cli_args *a, const char *name);
/* Report the current argument as unknown (usage error) and consume it. */
void cli_args_unknown(struct cli_args *a);

/* Strict number parsers of a->value (whole string, range-checked). On a
 * malformed value they print a usage message naming the option, set
 * a->error and leave *out unchanged. */
void cli_parse_int(struct cli_args *a, const char *name, long min, long max, int *out);
void cli_parse_u64(struct cli_args *a, const char *name, uint64_t *out);
void cli_parse_float(struct cli_args *a, const char *name, double min, double max, float *out);

/* Print "cmpserve <cmd>: <message>" as one line on stderr (newlines and
 * control characters in the message are replaced by spaces). */
void cli_fail(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Parse a comma-separated list of non-negative integers ("1,2,3") into a
 * malloc'd array; returns 0 or CS_EINVAL (malformed, empty) / CS_ENOMEM. */
int cli_parse_id_list(const char *s, int32_t **out, int *n_out);

/* Monotonic clock in seconds. */
double cli_now_s(void);

/* ---- a loaded model for the in-process subcommands (generate, logits) ---- */

#include "../common/gguf.h"
#include "../common/tokenizer.h"
#include "../kernels/ops.h"
#include "../worker/model.h"

struct cli_session_options {
    const char *model_path;
    const char *device;      /* "cpu" or a CUDA index */
    int n_threads;           /* CPU backend threads, 0: all cores */
    bool int8_matmul;        /* CPU backend: Q8_0 x Q8_1 integer dots */
    bool no_cuda_graphs;     /* decode steps eager, never recorded (graph_enable off) */
    bool no_cuda_pdl;        /* plain kernel launches (pdl_enable off) */
    bool need_tokenizer;
    int max_tokens;          /* largest batch of one forward call */
    int max_ctx;             /* positions each sequence may reach */
    int n_seqs;              /* sequences the state holds (0: 1), each max_ctx positions of KV
                              * pages (sequence i: pages [i max_pages, (i + 1) max_pages)) and
                              * GDN slot i */
    int n_spare_slots;       /* GDN slots after those (snapshots: state_slot_copy) */
    const char *kv_type;     /* "f32", "f16", or NULL / "auto": f16 on a GPU, f32 on the CPU
                              * (the rule of serve's kv_type, so generate and bench measure
                              * what serve runs) */
};

/* The whole model on one backend with one sequence slot (slot 0, reset),
 * or n_seqs of them. */
struct cli_session {
    struct gguf_file *f;
    struct cs_backend *be;
    struct cs_model *m;
    struct cs_state *st;
    struct tokenizer *tok;   /* when need_tokenizer */
    int max_pages;           /* KV pages of a sequence (the batch's page table) */
    int page_size;           /* positions per KV page */
    int n_seqs, n_spare_slots;   /* from the options (n_seqs >= 1) */
    uint32_t kv_type;        /* CS_DTYPE_F32 or CS_DTYPE_F16 (from the options) */
};

/* Open the GGUF, create the backend, load all layers and (need_tokenizer)
 * the tokenizer; when max_ctx > 0 also create the state. On failure returns a
 * negative status with err filled ("what failed: why"); everything opened so
 * far is closed. s is zeroed first. */
int cli_session_open(struct cli_session *s, const struct cli_session_options *o,
                     struct cs_error *err);
/* Create the state for the session's sequences (slot 0 reset): batches of
 * up to max_tokens, positions up to max_ctx each. Replaces a state created
 * before. */
int cli_session_state(struct cli_session *s, int max_tokens, int max_ctx, struct cs_error *err);
/* Close whatever is open; s may be partly opened or zeroed. */
void cli_session_close(struct cli_session *s);

/* A batch of n tokens of sequence 0 at positions pos0.. (arrays owned by b). */
struct cli_batch {
    struct cs_batch b;
    int32_t *pos, *seq_of, seq_start[2], slot[1], *page_table;
};
int cli_batch_init(struct cli_batch *cb, const int32_t *tokens, int n, int pos0, int max_pages);
void cli_batch_free(struct cli_batch *cb);

#endif
