/* fuzz_messages.c - libFuzzer entry for the protocol decoder: any input
 * either decodes to a message that passes msg_validate, re-encodes, and
 * decodes again to an equal message with the same bytes, or is refused with
 * CS_EPROTO (CS_ENOMEM tolerated) and a non-empty message. Crashes, sanitizer
 * reports and broken invariants abort. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/messages.h"
#include "tests/proto/msg_testlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct msg m, m2;
    struct cs_error err = {0};
    int rc = msg_decode(&m, data, size, &err);
    if (rc != CS_OK) {
        if ((rc != CS_EPROTO && rc != CS_ENOMEM) || err.msg[0] == 0 || m.mem != NULL)
            __builtin_trap();
        return 0;
    }
    void *buf = NULL, *buf2 = NULL;
    size_t n = 0, n2 = 0;
    if (msg_validate(&m, &err) != CS_OK || msg_encode(&m, &buf, &n, &err) != CS_OK)
        __builtin_trap();
    if (msg_decode(&m2, buf, n, &err) != CS_OK || !msg_equal(&m, &m2, NULL))
        __builtin_trap();
    if (msg_encode(&m2, &buf2, &n2, &err) != CS_OK || n2 != n || memcmp(buf, buf2, n) != 0)
        __builtin_trap();
    if (m.h.type == MSG_STEP) {
        struct msg_batch b;
        if (msg_step_to_batch(&b, &m.u.step, 0, &err) != CS_OK ||
            b.batch.seq_start[b.batch.n_seqs] != b.batch.n_tokens)
            __builtin_trap();
        msg_batch_free(&b);
    }
    free(buf);
    free(buf2);
    msg_free(&m2);
    msg_free(&m);
    return 0;
}
