/* toolparse_check.h - a harness shared by the toolparse unit test and its
 * fuzzer: run the parser over a text cut into chunks at given offsets,
 * reassemble the streamed events, check the event protocol, and compare two
 * runs. Everything here is test code; it aborts nothing and reports through
 * return values. */
#ifndef CS_TOOLPARSE_CHECK_H
#define CS_TOOLPARSE_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "coordinator/toolparse.h"

#define TPC_MAX_CALLS 64

/* One assembled message (strings malloc'ed; NULL where the parser says none). */
struct tpc_message {
    char *reasoning, *content;
    size_t n_calls;
    char *ids[TPC_MAX_CALLS], *names[TPC_MAX_CALLS], *args[TPC_MAX_CALLS];
    bool cut_in_reasoning, has_tool_calls;
};

/* A run: the parser's final message and the message the events reassemble
 * to. protocol_error names the first broken event rule ("" when none). */
struct tpc_run {
    struct tpc_message final, streamed;
    int status;
    char protocol_error[160];
};

/* Run over text[0, len) fed in chunks ending at the sorted offsets cuts[0, n_cuts)
 * (then the rest). check_utf8: the text is valid UTF-8, so every delta must be. */
void tpc_run_chunks(struct tpc_run *r, const struct toolparse_options *opt, const char *text,
                    size_t len, const size_t *cuts, size_t n_cuts, bool check_utf8);

/* Free a run's strings. */
void tpc_run_free(struct tpc_run *r);

/* NULL when a and b agree on everything but ids, else a static description. */
const char *tpc_message_diff(const struct tpc_message *a, const struct tpc_message *b);

/* Is s[0, n) valid UTF-8? */
bool tpc_utf8_valid(const char *s, size_t n);

/* Is id "call_" followed by 24 lowercase hex digits? */
bool tpc_id_valid(const char *id);

#endif
