/* msg_testlib.h - random valid protocol messages and a field-by-field
 * comparison, shared by the message tests, the fuzz seed writer and the
 * fuzz target. */
#ifndef CS_TEST_MSG_TESTLIB_H
#define CS_TEST_MSG_TESTLIB_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/messages.h"

/* A deterministic generator and the memory of the messages it made. */
struct rnd {
    uint64_t state;
    void **blocks;
    int n_blocks, cap_blocks;
};

void rnd_init(struct rnd *r, uint64_t seed);
/* Free every array made by rnd_msg since rnd_init (or the last release). */
void rnd_release(struct rnd *r);
uint64_t rnd_u64(struct rnd *r);
/* uniform in [lo, hi] */
int64_t rnd_range(struct rnd *r, int64_t lo, int64_t hi);

/* Fill m with a random message of type that passes msg_validate; size 0
 * keeps arrays short, larger sizes make longer ones. Its arrays live until
 * rnd_release. */
void rnd_msg(struct rnd *r, struct msg *m, uint32_t type, int size);

/* true when every field of a and b is equal (floats bitwise, NULL string ==
 * ""); otherwise false, and *what names the first field that differs. */
bool msg_equal(const struct msg *a, const struct msg *b, const char **what);

#endif
