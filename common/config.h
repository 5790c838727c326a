/* config.h - the one configuration surface of cmpserve.
 *
 * Every setting is one row of CS_CONFIG_FIELDS: a struct field, a JSON key in
 * the config file (/etc/cmpserve/cmpserve.json) and the command-line flag
 * --key-with-dashes, with a default and a help text. Precedence: defaults,
 * then the config file (--config FILE), then flags. The whole configuration
 * is printed at start-up (config_print) and carried to workers in LOAD.
 * No environment variables are read anywhere else. */
#ifndef CS_CONFIG_H
#define CS_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum cs_config_kind { CS_CFG_STR, CS_CFG_INT, CS_CFG_FLOAT, CS_CFG_BOOL };

/* X(kind, field, default, help). STR fields are char[256]. */
#define CS_CONFIG_FIELDS(X)                                                                     \
    X(STR, model, "", "path of the qwen35 GGUF model")                                         \
    X(STR, model_name, "", "model id reported by the API (default: the file name)")            \
    X(STR, host, "127.0.0.1", "address to listen on")                                          \
    X(INT, port, 8080, "TCP port to listen on")                                                \
    X(STR, gpus, "auto", "devices of the workers: 'cpu', 'auto' or a list like 0,1,2")         \
    X(INT, workers, 0, "number of pipeline workers (0: one per listed device)")                \
    X(STR, layer_split, "", "layers per worker, e.g. 20,22,22 (default: balanced by bytes)")   \
    X(BOOL, attach, false, "wait for workers started on their own (systemd) instead of spawning") \
    X(STR, run_dir, "/tmp/cmpserve", "runtime directory for sockets and shared memory (mode 0700)") \
    X(INT, ctx_size, 32768, "maximum tokens per sequence (prompt + output)")                   \
    X(INT, max_seqs, 16, "maximum concurrent sequences")                                       \
    X(INT, prefill_chunk, 512, "prefill chunk size in tokens")                                 \
    X(INT, step_tokens, 2048, "token budget of one pipeline step")                             \
    X(INT, pipeline_inflight, 0, "steps in flight in the pipeline (0: one per stage, or 1 when workers share a GPU)") \
    X(INT, pipeline_spin_ms, -1, "ms a pipeline process keeps polling without sleeping after a step message (-1: auto, 0: never)") \
    X(STR, kv_type, "auto", "KV cache type: f32, f16 or auto (f16 on GPU, f32 on CPU)")        \
    X(INT, kv_page_size, 256, "tokens per KV page")                                            \
    X(STR, hidden_type, "f32", "hidden states between stages: f32 or f16")                     \
    X(INT, threads, 0, "CPU backend threads per worker (0: all cores)")                        \
    X(FLOAT, mem_fraction, 0.92, "fraction of free device memory a worker may use")            \
    X(BOOL, cuda_graphs, true, "record decode steps as CUDA graphs and replay them (off: launch every kernel)") \
    X(BOOL, cuda_pdl, true, "sm_90+: launch each kernel as a programmatic dependent of the previous one (off: plain launches)") \
    X(INT, queue_size, 64, "requests waiting for a slot before 429")                           \
    X(INT, max_body_bytes, 8388608, "largest accepted request body")                           \
    X(INT, header_timeout_ms, 10000, "time allowed to receive request headers and body")       \
    X(STR, api_key, "", "require 'Authorization: Bearer KEY' (empty: no key)")                 \
    X(STR, cors_origin, "", "value of Access-Control-Allow-Origin (empty: no CORS)")           \
    X(INT, heartbeat_ms, 500, "heartbeat interval between coordinator and workers")            \
    X(INT, dead_after_ms, 2000, "a worker silent this long is declared dead")                  \
    X(INT, shutdown_grace_ms, 10000, "on SIGTERM, time to finish in-flight requests")          \
    X(STR, log_level, "info", "error, warn, info or debug")                                    \
    X(STR, test_script, "", "TEST ONLY: file of scripted token sequences the last stage emits; refused unless --allow-test-options") \
    X(BOOL, allow_test_options, false, "TEST ONLY: permit test-only options")

struct cs_config {
#define CS_CFG_FIELD_STR(name) char name[256];
#define CS_CFG_FIELD_INT(name) long name;
#define CS_CFG_FIELD_FLOAT(name) double name;
#define CS_CFG_FIELD_BOOL(name) bool name;
#define CS_CFG_FIELD(kind, name, def, help) CS_CFG_FIELD_##kind(name)
    CS_CONFIG_FIELDS(CS_CFG_FIELD)
#undef CS_CFG_FIELD
};

/* Fill cfg with the defaults. */
void config_defaults(struct cs_config *cfg);
/* Apply a JSON object of settings (the config file's text). Unknown keys and
 * wrong types are errors naming the key. */
int config_apply_json(struct cs_config *cfg, const char *json, size_t len, struct cs_error *err);
/* Apply a config file. */
int config_load_file(struct cs_config *cfg, const char *path, struct cs_error *err);
/* Parse flags: defaults must already be set. "--config FILE" is applied
 * first wherever it appears, then the other flags in order. Flags take
 * "--name value" or "--name=value"; booleans also "--name" and "--no-name".
 * Arguments that are not config flags are returned through rest (argv order
 * kept, rest[0] = argv[0]) when rest is not NULL, else they are an error. */
int config_parse_args(struct cs_config *cfg, int argc, char **argv, int *n_rest, char **rest,
                      struct cs_error *err);
/* Print every setting as "key = value" lines (the api key masked). */
void config_print(const struct cs_config *cfg, FILE *out);
/* Print the flags with defaults and help. */
void config_usage(FILE *out);
/* The whole configuration as a JSON object (malloc'd string; api key masked
 * unless include_secrets). Used to carry it to workers. */
char *config_to_json(const struct cs_config *cfg, bool include_secrets);

#ifdef __cplusplus
}
#endif
#endif
