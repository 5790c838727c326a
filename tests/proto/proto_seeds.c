/* proto_seeds.c - writes the seed corpus of fuzz_messages into the folder
 * given as argument: a few random valid messages of every type, encoded by
 * the real encoder (msg_encode). */
#include <stdio.h>
#include <stdlib.h>

#include "proto/messages.h"
#include "tests/proto/msg_testlib.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    struct rnd r;
    rnd_init(&r, 2024);
    for (uint32_t type = MSG_TYPE_FIRST; type <= MSG_TYPE_LAST; type++) {
        for (int i = 0; i < 4; i++) {
            struct msg m;
            struct cs_error err = {0};
            void *buf;
            size_t n;
            rnd_msg(&r, &m, type, i / 2);
            if (msg_encode(&m, &buf, &n, &err) != CS_OK) {
                fprintf(stderr, "proto_seeds: %s\n", err.msg);
                return 1;
            }
            char path[4096];
            snprintf(path, sizeof path, "%s/%s-%d.msgpack", argv[1], msg_type_name(type), i);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) {
                fprintf(stderr, "proto_seeds: cannot write %s\n", path);
                return 1;
            }
            free(buf);
            rnd_release(&r);
        }
    }
    return 0;
}
