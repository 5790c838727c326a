/* supervisor.h - the worker processes seen from the coordinator: how many
 * stages and on which devices, which layers each one gets (balanced by weight
 * bytes, or cfg->layer_split), and spawning / stopping the children
 * (fork + exec of /proc/self/exe worker ...). Liveness (heartbeats) lives in
 * the pipeline engine, which owns the sockets. */
#ifndef CS_SUPERVISOR_H
#define CS_SUPERVISOR_H

#include <stdbool.h>
#include <sys/types.h>

#include "../common/config.h"
#include "../common/gguf.h"
#include "../common/status.h"

#define SUP_MAX_STAGES 64

struct sup_plan {
    int n_stages;
    int gpu[SUP_MAX_STAGES];          /* device of each stage, -1: CPU */
    int layer_begin[SUP_MAX_STAGES];
    int layer_end[SUP_MAX_STAGES];
    unsigned long long bytes[SUP_MAX_STAGES];  /* weight bytes of each slice */
};

/* Stages and devices from cfg (workers, gpus): "cpu" or "auto" -> CPU
 * stages (cfg->workers of them, at least 1); a list "0,1,2" -> one stage per
 * device unless cfg->workers says otherwise (devices then repeat). */
int sup_plan_devices(struct sup_plan *p, const struct cs_config *cfg, struct cs_error *err);

/* Layer slices for n_layer layers of f: cfg->layer_split ("20,22,22": one
 * positive count per stage, summing to n_layer) or contiguous slices of about
 * equal weight bytes (tensors "blk.N.*"; the embedding counts for stage 0 and
 * the LM head for the last). CS_EINVAL with a message for a bad split. */
int sup_plan_slices(struct sup_plan *p, const struct gguf_file *f, int n_layer,
                    const char *layer_split, struct cs_error *err);

/* fork + exec "/proc/self/exe worker --run-dir DIR --stage I --device D
 * --threads T --log-level L --heartbeat-ms H". The child dies with the
 * parent (PR_SET_PDEATHSIG). *pid receives the child. */
int sup_spawn(pid_t *pid, const char *run_dir, int stage, int gpu, int threads,
              const char *log_level, int heartbeat_ms, struct cs_error *err);

/* Non-blocking: true when pid has exited (its wait status in *status). */
bool sup_reaped(pid_t pid, int *status);

/* Wait up to grace_ms for the children to exit (SHUTDOWN already sent),
 * then SIGTERM, then after another grace SIGKILL; reaps them all. Entries
 * <= 0 are skipped. */
void sup_stop_all(pid_t *pids, int n, int grace_ms);

/* "exited with status 1", "killed by signal 9" into out. */
void sup_status_text(char *out, size_t cap, int status);

#endif
