/* gguf_seeds.c - writes the seed corpus of fuzz_gguf into the folder given as
 * argument, with the real writer: the test sample with tensors (alignment 32
 * and 64), its metadata alone, and an empty GGUF (no keys, no tensors). */
#include <stdio.h>

#include "common/gguf.h"
#include "tests/gguf/gguf_sample.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    struct cs_error err = {0};
    char path[4096];
    struct gguf_writer *w;
    int rc = CS_OK;
    snprintf(path, sizeof path, "%s/sample.gguf", argv[1]);
    rc = rc ? rc : sample_write(path, 0, 1, &err);
    snprintf(path, sizeof path, "%s/sample64.gguf", argv[1]);
    rc = rc ? rc : sample_write(path, 64, 1, &err);
    snprintf(path, sizeof path, "%s/meta.gguf", argv[1]);
    rc = rc ? rc : sample_write(path, 0, 0, &err);
    snprintf(path, sizeof path, "%s/empty.gguf", argv[1]);
    rc = rc ? rc : gguf_writer_create(&w);
    if (rc == CS_OK) {
        rc = gguf_writer_write(w, path, &err);
        gguf_writer_destroy(w);
    }
    if (rc != CS_OK) {
        fprintf(stderr, "gguf_seeds: %s\n", err.msg);
        return 1;
    }
    return 0;
}
