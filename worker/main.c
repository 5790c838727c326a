/* main.c - `cmpserve worker`: one pipeline worker process (one GPU or the
 * CPU backend, one layer slice), driven by the coordinator over ZeroMQ.
 *
 * NOT IMPLEMENTED YET: the multi-process pipeline (proto/, worker/edge.c and
 * this loop) is the pipeline issue's work. Until then the command says so and
 * fails; `cmpserve serve` runs the model in-process (coordinator/engine_local.c). */
#include <stdio.h>

#include "../tools/commands.h"

int worker_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cmpserve worker: the multi-process pipeline is not implemented in this build\n");
    return 1;
}
