/* main.c - `cmpserve worker`: flags and wiring of one pipeline worker
 * process (worker.h); the work is in worker_loop.c and worker_step.c.
 *
 *   cmpserve worker [--config FILE] (--gpu N | --device cpu|N) --run-dir DIR
 *                   [--stage I] [--threads N] [--log-level L] [--heartbeat-ms MS]
 *
 * Spawned by the coordinator (`serve --workers N`, `generate --workers N`)
 * with --stage; started by systemd (cmpserve-worker@.service) without it,
 * then the coordinator assigns the stage in GPU-index order. Exit status 0
 * after SHUTDOWN, 1 after an error (one line on stderr, and an ERROR message
 * to the coordinator when the load failed), 2 on a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/config.h"
#include "../common/log.h"
#include "../tools/commands.h"
#include "worker.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: cmpserve worker [--config FILE] (--gpu N | --device cpu|N) --run-dir DIR "
                 "[--stage I] [options]\n\noptions:\n");
    config_usage(out);
}

/* A whole-string integer in [lo, hi]; false when malformed. */
static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* --stage, --gpu, --device (the flags that are not config settings). */
static int parse_rest(struct worker_opts *o, int n, char **rest)
{
    for (int i = 1; i < n; i++) {
        const char *a = rest[i], *v = i + 1 < n ? rest[i + 1] : NULL;
        bool ok = v != NULL;
        if (strcmp(a, "--stage") == 0)
            ok = ok && parse_int(v, 0, MSG_MAX_STAGES - 1, &o->stage);
        else if (strcmp(a, "--gpu") == 0)
            ok = ok && parse_int(v, 0, 4095, &o->gpu);
        else if (strcmp(a, "--device") == 0)
            ok = ok && (strcmp(v, "cpu") == 0 ? (o->gpu = -1, true) : parse_int(v, 0, 4095, &o->gpu));
        else {
            fprintf(stderr, "cmpserve worker: unknown argument '%s'\n", a);
            return -1;
        }
        if (!ok) {
            fprintf(stderr, "cmpserve worker: bad value for %s\n", a);
            return -1;
        }
        i++;
    }
    return 0;
}

int worker_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    struct cs_config cfg;
    struct cs_error err = {0};
    config_defaults(&cfg);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    if (!rest)
        return 1;
    struct worker_opts o = {.stage = -1, .gpu = -1};
    if (config_parse_args(&cfg, argc, argv, &n_rest, rest, &err) != CS_OK) {
        fprintf(stderr, "cmpserve worker: %s\n", err.msg);
        free(rest);
        return 2;
    }
    int prc = parse_rest(&o, n_rest, rest);
    free(rest);
    if (prc) {
        usage(stderr);
        return 2;
    }
    if (o.stage < 0 && o.gpu < 0) {
        fprintf(stderr, "cmpserve worker: a CPU worker needs --stage (attach mode pairs GPUs)\n");
        return 2;
    }
    o.id = o.stage >= 0 ? o.stage : o.gpu % MSG_MAX_STAGES;
    snprintf(o.run_dir, sizeof o.run_dir, "%s", cfg.run_dir);
    o.threads = (int)cfg.threads;
    o.heartbeat_ms = (int)cfg.heartbeat_ms;
    int level = cs_log_level_parse(cfg.log_level);
    cs_log_set_level(level < 0 ? CS_LOG_INFO : level);
    char pname[32];
    snprintf(pname, sizeof pname, "worker%d", o.id);
    cs_log_set_process(pname);
    int rc = worker_run(&o, &err);
    if (rc) {
        fprintf(stderr, "cmpserve worker: %s\n", err.msg[0] ? err.msg : cs_strerror(rc));
        return 1;
    }
    return 0;
}
