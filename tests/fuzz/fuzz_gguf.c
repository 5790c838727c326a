/* fuzz_gguf.c - libFuzzer entry for the GGUF reader: any input either opens
 * (and then everything it exposes is walked and every tensor is found again
 * by name) or fails with CS_EFORMAT / CS_EUNSUPPORTED and a message naming
 * the input. Crashes, sanitizer reports and broken invariants abort. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/gguf.h"
#include "tests/gguf/gguf_walk.h"

static void check_tensor_lookup(const struct gguf_file *f)
{
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        char name[128];
        if (t->name.len >= sizeof name || memchr(t->name.ptr, 0, t->name.len))
            continue;
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        if (gguf_find_tensor(f, name) != t)
            __builtin_trap();
        if ((const uint8_t *)t->data < f->map ||
            t->n_bytes > f->size - (uint64_t)((const uint8_t *)t->data - f->map))
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *f = NULL;
    struct cs_error err = {0};
    int rc = gguf_open_buffer(&f, data, size, "fuzz.gguf", &err);
    if (rc != CS_OK) {
        if ((rc != CS_EFORMAT && rc != CS_EUNSUPPORTED && rc != CS_ENOMEM) ||
            strncmp(err.msg, "fuzz.gguf: ", 11) != 0)
            __builtin_trap();
        return 0;
    }
    volatile uint64_t h = gguf_walk(f);
    (void)h;
    check_tensor_lookup(f);
    gguf_close(f);
    return 0;
}
