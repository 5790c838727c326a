/* backend.c - choose a backend by name ("cpu" or a CUDA device index). */
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/status.h"
#include "ops.h"

#ifndef CS_HAVE_CUDA
int cs_backend_cuda_create(struct cs_backend **out, int device)
{
    (void)out;
    LOG_ERROR("backend", "device %d requested but this build has no CUDA backend", device);
    return CS_EUNSUPPORTED;
}
#endif

int cs_backend_create(struct cs_backend **out, const char *device, int n_threads)
{
    if (!device || strcmp(device, "cpu") == 0) {
        struct cs_backend_cpu_options opt = {.n_threads = n_threads, .int8_matmul = false};
        return cs_backend_cpu_create(out, &opt);
    }
    char *end = NULL;
    long idx = strtol(device, &end, 10);
    if (end == device || *end != '\0' || idx < 0 || idx > 1024) {
        LOG_ERROR("backend", "unknown device '%s' (expected cpu or a GPU index)", device);
        return CS_EINVAL;
    }
    return cs_backend_cuda_create(out, (int)idx);
}
