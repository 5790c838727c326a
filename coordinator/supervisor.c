/* supervisor.c - stage planning (devices, layer slices) and the worker
 * child processes (see supervisor.h). */
#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"

/* ---- planning ---- */

/* Parse "a,b,c" of integers in [lo, hi]; the count, or -1 when malformed. */
static int parse_list(const char *s, int *out, int cap, long lo, long hi)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < lo || v > hi || n >= cap || (*end && *end != ','))
            return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
        if (*end == ',' && !*s)
            return -1;
    }
    return n;
}

int sup_plan_devices(struct sup_plan *p, const struct cs_config *cfg, struct cs_error *err)
{
    memset(p, 0, sizeof *p);
    if (cfg->workers < 0 || cfg->workers > SUP_MAX_STAGES)
        return cs_error_set(err, CS_EINVAL, "workers = %ld out of range (0..%d)", cfg->workers,
                            SUP_MAX_STAGES);
    int devs[SUP_MAX_STAGES], n_dev = 0;
    bool cpu = strcmp(cfg->gpus, "cpu") == 0 || strcmp(cfg->gpus, "auto") == 0 || !cfg->gpus[0];
    if (!cpu && (n_dev = parse_list(cfg->gpus, devs, SUP_MAX_STAGES, 0, 4095)) < 1)
        return cs_error_set(err, CS_EINVAL, "gpus: '%s' is not cpu, auto or a list like 0,1,2",
                            cfg->gpus);
    if (strcmp(cfg->gpus, "auto") == 0)
        LOG_INFO("supervisor", "gpus auto: pipeline workers run on the CPU (list devices to use GPUs)");
    p->n_stages = cfg->workers > 0 ? (int)cfg->workers : (cpu ? 1 : n_dev);
    for (int i = 0; i < p->n_stages; i++)
        p->gpu[i] = cpu ? -1 : devs[i % n_dev];
    return CS_OK;
}

/* Weight bytes per layer ("blk.N.") and of the rest (embedding, head). */
static void layer_bytes(const struct gguf_file *f, int n_layer, double *per_layer, double *embd,
                        double *head)
{
    for (uint64_t t = 0; t < f->n_tensors; t++) {
        const struct gguf_tensor *x = &f->tensors[t];
        char name[128];
        size_t len = x->name.len < sizeof name - 1 ? x->name.len : sizeof name - 1;
        memcpy(name, x->name.ptr, len);
        name[len] = '\0';
        int layer;
        if (sscanf(name, "blk.%d.", &layer) == 1) {
            if (layer >= 0 && layer < n_layer)
                per_layer[layer] += (double)x->n_bytes;
        } else if (strncmp(name, "token_embd", 10) == 0) {
            *embd += (double)x->n_bytes;
        } else {
            *head += (double)x->n_bytes;
        }
    }
}

static int slices_from_split(struct sup_plan *p, int n_layer, const char *split, struct cs_error *err)
{
    int counts[SUP_MAX_STAGES];
    int n = parse_list(split, counts, SUP_MAX_STAGES, 1, 1 << 20);
    if (n < 0)
        return cs_error_set(err, CS_EINVAL, "bad layer split '%s': expected positive layer counts "
                            "like 20,22,22", split);
    if (n != p->n_stages)
        return cs_error_set(err, CS_EINVAL, "bad layer split '%s': %d counts for %d workers",
                            split, n, p->n_stages);
    int at = 0;
    for (int i = 0; i < n; i++) {
        p->layer_begin[i] = at;
        at += counts[i];
        p->layer_end[i] = at;
    }
    if (at != n_layer)
        return cs_error_set(err, CS_EINVAL, "bad layer split '%s': %d layers, the model has %d",
                            split, at, n_layer);
    return CS_OK;
}

/* Contiguous slices cut where the running byte total crosses k/P of it. */
static void slices_balanced(struct sup_plan *p, const double *per_layer, int n_layer, double embd,
                            double head)
{
    double total = embd + head;
    for (int l = 0; l < n_layer; l++)
        total += per_layer[l];
    int P = p->n_stages, at = 0;
    double acc = embd;
    for (int s = 0; s < P; s++) {
        p->layer_begin[s] = at;
        int must_leave = P - 1 - s;       /* at least one layer per later stage */
        double target = total * (double)(s + 1) / (double)P;
        do {
            acc += per_layer[at++];
        } while (at < n_layer - must_leave && acc + per_layer[at] / 2 < target);
        if (s == P - 1)
            at = n_layer;
        p->layer_end[s] = at;
    }
}

int sup_plan_slices(struct sup_plan *p, const struct gguf_file *f, int n_layer,
                    const char *layer_split, struct cs_error *err)
{
    if (p->n_stages > n_layer)
        return cs_error_set(err, CS_EINVAL, "%d workers for a model of %d layers", p->n_stages,
                            n_layer);
    double *per = calloc((size_t)n_layer, sizeof *per), embd = 0, head = 0;
    if (!per)
        return cs_error_set(err, CS_ENOMEM, "out of memory");
    layer_bytes(f, n_layer, per, &embd, &head);
    int rc = CS_OK;
    if (layer_split && layer_split[0])
        rc = slices_from_split(p, n_layer, layer_split, err);
    else
        slices_balanced(p, per, n_layer, embd, head);
    for (int s = 0; rc == CS_OK && s < p->n_stages; s++) {
        double b = s == 0 ? embd : 0;
        b += s == p->n_stages - 1 ? head : 0;
        for (int l = p->layer_begin[s]; l < p->layer_end[s]; l++)
            b += per[l];
        p->bytes[s] = (unsigned long long)b;
    }
    free(per);
    return rc;
}

/* ---- children ---- */

int sup_spawn(pid_t *pid, const char *run_dir, int stage, int gpu, int threads,
              const char *log_level, int heartbeat_ms, struct cs_error *err)
{
    char s_stage[16], s_dev[16], s_threads[16], s_hb[16];
    snprintf(s_stage, sizeof s_stage, "%d", stage);
    snprintf(s_threads, sizeof s_threads, "%d", threads);
    snprintf(s_hb, sizeof s_hb, "%d", heartbeat_ms);
    if (gpu >= 0)
        snprintf(s_dev, sizeof s_dev, "%d", gpu);
    else
        snprintf(s_dev, sizeof s_dev, "cpu");
    char *argv[] = {"cmpserve", "worker", "--run-dir", (char *)run_dir, "--stage", s_stage,
                    "--device", s_dev, "--threads", s_threads, "--log-level",
                    (char *)log_level, "--heartbeat-ms", s_hb, NULL};
    pid_t parent = getpid();
    pid_t c = fork();
    if (c < 0)
        return cs_error_set(err, CS_EIO, "fork: %s", strerror(errno));
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "cmpserve worker: cannot exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    *pid = c;
    return CS_OK;
}

bool sup_reaped(pid_t pid, int *status)
{
    if (pid <= 0)
        return false;
    return waitpid(pid, status, WNOHANG) == pid;
}

static bool wait_all(pid_t *pids, int n, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++) {
            int st;
            if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i])
                pids[i] = 0;
            all = all && pids[i] <= 0;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (all || el >= ms)
            return all;
        usleep(10000);
    }
}

void sup_stop_all(pid_t *pids, int n, int grace_ms)
{
    if (wait_all(pids, n, grace_ms))
        return;
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGCONT);   /* a stopped child cannot handle SIGTERM */
            kill(pids[i], SIGTERM);
        }
    if (wait_all(pids, n, grace_ms))
        return;
    for (int i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    wait_all(pids, n, 5000);
}

void sup_status_text(char *out, size_t cap, int status)
{
    if (WIFEXITED(status))
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, cap, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(out, cap, "stopped (wait status %d)", status);
}
