/* messages.h - the messages between the coordinator and the workers, and
 * their msgpack encoding (protocol version CS_PROTO_VERSION).
 *
 * It owns: one struct per message, the wire layout, the limits every field is
 * checked against, and the conversion of a step into the arrays of struct
 * cs_batch. It leaves the sockets to transport.h and the meaning of a step
 * (what a worker does with it) to the worker.
 *
 * Wire layout: every message is ONE msgpack array
 *     [version, type, step_id, sender, body]
 * where body is a positional array whose layout depends on type (messages.c
 * lists them). Integer arrays (token ids, page tables, top ids) and float
 * arrays (bias values, top logprobs) travel as msgpack bin of little-endian
 * 32-bit values, so a long penalty list costs 4 bytes a token. Floats are
 * float32. Strings never contain NUL bytes. Byte arrays (the allowed-token
 * mask) travel as msgpack bin as they are.
 *
 * Decoding is strict: types, array lengths, string lengths, ranges and the
 * consistency of counts (the token counts of a step sum to its n_tokens, a
 * sample block is present exactly when the sample flag is set, no two
 * sequences of a step share a state slot) are all checked, and any violation
 * is CS_EPROTO with a message naming the field and the numbers. A malformed
 * or unknown message never crashes the decoder and never allocates more than
 * a small multiple of its size. Encoding applies the same checks, so what one
 * side sends the other side accepts.
 *
 * Flow (design.md section 1): a worker says HELLO, the coordinator sends
 * LOAD, the worker answers READY; STEP goes to stage 0 and each
 * stage forwards it (with its timing appended) over the edge notify socket;
 * the last stage answers STEP_DONE to the coordinator. */
#ifndef CS_PROTO_MESSAGES_H
#define CS_PROTO_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "../kernels/ops.h"
#include "../worker/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_PROTO_VERSION 3

/* ---- limits (a message beyond any of them is refused) ---- */
#define MSG_MAX_BYTES (64u << 20)        /* one encoded message */
#define MSG_MAX_SEQS 1024                /* sequences of one step */
#define MSG_MAX_STEP_TOKENS 65536        /* tokens of one step */
#define MSG_MAX_SLOTS 65536              /* state slot index bound */
#define MSG_MAX_PAGES 65536              /* pages of one sequence */
#define MSG_MAX_PAGE_ENTRIES (1 << 20)   /* pages of all sequences of a step */
#define MSG_MAX_PENALTY_TOKENS (1 << 20) /* gen_tokens or ctx_tokens of one sequence */
#define MSG_MAX_BIAS 4096                /* logit_bias entries */
#define MSG_MAX_STAGES 64                /* pipeline stages (timings) */
#define MSG_MAX_EDGE_SLOTS 64            /* slots of a shared-memory edge */
#define MSG_MAX_NAME 256                 /* device names, endpoints, shm names (bytes) */
#define MSG_MAX_PATH 4096                /* model path */
#define MSG_MAX_CONFIG (1 << 20)         /* config JSON */
#define MSG_MAX_TEXT 4096                /* error messages */
#define MSG_MAX_ALLOWED_BYTES (1 << 20)  /* allowed-token mask of one sequence (8M ids) */

enum msg_type {
    MSG_HELLO = 1,      /* worker -> coord: who I am, what I have */
    MSG_LOAD = 2,       /* coord -> worker: load this slice */
    MSG_READY = 3,      /* worker -> coord: loaded, capacity */
    MSG_STEP = 4,       /* coord -> stage 0, stage i -> stage i+1: run a batch */
    MSG_STEP_DONE = 5,  /* last stage -> coord: sampled tokens, timings */
    MSG_SEQ_FREE = 6,   /* coord -> workers: a sequence ended */
    MSG_SNAPSHOT = 7,   /* coord -> workers: copy a slot's state (prefix cache) */
    MSG_RESTORE = 8,    /* coord -> workers: copy a snapshot back */
    MSG_HEARTBEAT = 9,  /* both ways */
    MSG_SHUTDOWN = 10,  /* coord -> worker */
    MSG_ERROR = 11,     /* worker -> coord */
};
#define MSG_TYPE_FIRST MSG_HELLO
#define MSG_TYPE_LAST MSG_ERROR

/* sender of the coordinator; workers send their stage index (>= 0) */
#define MSG_SENDER_COORD (-1)

struct msg_header {
    uint32_t version;   /* CS_PROTO_VERSION (filled by msg_encode when 0) */
    uint32_t type;      /* enum msg_type */
    uint64_t step_id;   /* the step this message is about; 0 when none */
    int32_t sender;     /* MSG_SENDER_COORD or the worker's stage index */
};

/* capabilities of a worker (HELLO) */
#define MSG_CAP_CUDA (1u << 0)        /* CUDA backend (else CPU) */
#define MSG_CAP_F16_EDGE (1u << 1)    /* can write/read fp16 hidden states */
#define MSG_CAP_HOST_REGISTER (1u << 2) /* edges are pinned with cudaHostRegister */
#define MSG_CAP_ALL (MSG_CAP_CUDA | MSG_CAP_F16_EDGE | MSG_CAP_HOST_REGISTER)

struct msg_hello {
    int32_t stage;          /* stage index this worker was started for */
    int32_t gpu_index;      /* -1: CPU */
    char *device_name;      /* "NVIDIA H200", "cpu" */
    uint64_t free_bytes;    /* device memory */
    uint64_t total_bytes;
    uint32_t capabilities;  /* MSG_CAP_* */
    int32_t pid;
    uint32_t proto_version; /* the worker's CS_PROTO_VERSION (also in the header) */
};

struct msg_load {
    char *model_path;
    int32_t stage, n_stages;           /* 0 <= stage < n_stages <= MSG_MAX_STAGES */
    int32_t layer_begin, layer_end;    /* 0 <= begin < end */
    struct cs_state_config state;      /* KV pages, GDN slots, scratch size */
    uint32_t edge_dtype;               /* CS_DTYPE_F32 or CS_DTYPE_F16 */
    int32_t edge_slots;                /* slots per edge, 1..MSG_MAX_EDGE_SLOTS */
    char *edge_in, *edge_out;          /* shm names of the edges; "" when none (first/last stage) */
    char *notify_in, *notify_out;      /* ZeroMQ endpoints of the edge notifies; "" when none */
    char *config_json;                 /* the rest of the configuration (cs_config as JSON) */
};

struct msg_ready {
    int32_t stage;
    int32_t layer_begin, layer_end;
    uint64_t kv_tokens;     /* KV capacity in tokens (pages * page size) */
    int32_t n_slots;        /* GDN state slots */
    int32_t max_tokens;     /* largest batch */
    uint32_t load_ms;
    uint64_t weight_bytes, state_bytes;
};

/* per-sequence flags of a step */
#define MSG_SEQ_SAMPLE (1u << 0)    /* sample after this sequence's last token (last stage) */
#define MSG_SEQ_RESET (1u << 1)     /* zero the slot's state before running (a new sequence) */
#define MSG_SEQ_SNAPSHOT (1u << 2)  /* copy the slot's state to snapshot_slot after running */
#define MSG_SEQ_FLAGS_ALL (MSG_SEQ_SAMPLE | MSG_SEQ_RESET | MSG_SEQ_SNAPSHOT)

/* Sampling parameters of one sequence: struct cs_sample_params on the wire. */
struct msg_sample {
    float temperature;              /* >= 0; 0: greedy */
    int32_t top_k;                  /* >= 0; 0: off */
    float top_p, min_p;             /* in [0, 1] */
    float presence_penalty, frequency_penalty; /* finite */
    float repetition_penalty;       /* > 0; 1: off */
    uint64_t seed, draw;
    int32_t n_logprobs;             /* -1 .. CS_MAX_TOP_LOGPROBS */
    int32_t *gen_tokens;            /* [n_gen_tokens] */
    int32_t n_gen_tokens;
    int32_t *ctx_tokens;            /* [n_ctx_tokens] */
    int32_t n_ctx_tokens;
    int32_t *bias_ids;              /* [n_bias] */
    float *bias_vals;               /* [n_bias], finite */
    int32_t n_bias;
    uint8_t *allowed;               /* [n_allowed] allowed-token bitmask (bit t & 7 of byte
                                     * t >> 3: id t may be sampled), constrained decoding;
                                     * NULL with n_allowed 0: every id (version 2) */
    int32_t n_allowed;              /* 0 or bytes, <= MSG_MAX_ALLOWED_BYTES; the last stage
                                     * checks it equals ceil(n_vocab / 8) */
};

struct msg_seq {
    int64_t seq_id;          /* the coordinator's sequence id */
    int32_t slot;            /* GDN state slot, 0 <= slot < MSG_MAX_SLOTS, unique in a step */
    int32_t n_past;          /* tokens already in the state; positions n_past .. n_past+n_tokens-1 */
    int32_t n_tokens;        /* >= 1 */
    uint32_t flags;          /* MSG_SEQ_* */
    int32_t snapshot_slot;   /* destination with MSG_SEQ_SNAPSHOT, else -1 */
    int32_t *tokens;         /* [n_tokens] ids (used by stage 0, carried along) */
    int32_t *pages;          /* [n_pages] KV page table */
    int32_t n_pages;
    struct msg_sample sample;/* meaningful with MSG_SEQ_SAMPLE */
};

/* One stage's account of one step. recv_us and sent_us are CLOCK_MONOTONIC
 * microseconds (when the step arrived, when it left): stages and the
 * coordinator of one host share that clock, so their differences give each
 * message's transit time (0 when not known). */
struct msg_timing {
    int32_t stage;
    uint32_t compute_us;
    uint32_t copy_us;
    uint64_t recv_us;
    uint64_t sent_us;
};

struct msg_step {
    int32_t edge_slot;       /* slot of the incoming edge holding the hidden states; -1: none (stage 0) */
    int32_t n_tokens;        /* sum of seqs[].n_tokens, <= MSG_MAX_STEP_TOKENS */
    int32_t n_seqs;          /* 1 .. MSG_MAX_SEQS */
    struct msg_seq *seqs;
    int32_t n_timings;       /* timings of the stages already run, <= MSG_MAX_STAGES */
    struct msg_timing *timings;
};

struct msg_sampled {
    int64_t seq_id;
    struct cs_sample_result result;  /* token >= 0, n_top in [0, CS_MAX_TOP_LOGPROBS] */
};

struct msg_step_done {
    int32_t n_samples;       /* <= MSG_MAX_SEQS */
    struct msg_sampled *samples;
    int32_t n_timings;       /* one per stage, <= MSG_MAX_STAGES */
    struct msg_timing *timings;
};

struct msg_seq_free {
    int64_t seq_id;
    int32_t slot;            /* -1: none */
    int32_t *pages;          /* [n_pages] pages now free */
    int32_t n_pages;
};

/* MSG_SNAPSHOT and MSG_RESTORE: copy the state of src_slot to dst_slot. */
struct msg_slot_copy {
    int64_t seq_id;
    int32_t src_slot, dst_slot;   /* distinct, in [0, MSG_MAX_SLOTS) */
};

enum msg_worker_state { MSG_STATE_LOADING = 0, MSG_STATE_READY = 1, MSG_STATE_BUSY = 2 };

struct msg_heartbeat {
    uint64_t seq;            /* increments per heartbeat of this sender */
    uint64_t time_us;        /* sender's CLOCK_MONOTONIC */
    uint32_t state;          /* enum msg_worker_state */
};

struct msg_shutdown {
    bool drain;              /* finish the steps in flight first */
};

struct msg_error {
    int32_t code;            /* a cs_status (negative) */
    bool fatal;              /* the worker cannot continue */
    char *message;           /* the failing step is header.step_id */
};

struct msg_mem;  /* memory of a decoded message */

struct msg {
    struct msg_header h;
    union {
        struct msg_hello hello;
        struct msg_load load;
        struct msg_ready ready;
        struct msg_step step;
        struct msg_step_done step_done;
        struct msg_seq_free seq_free;
        struct msg_slot_copy slot_copy;   /* MSG_SNAPSHOT, MSG_RESTORE */
        struct msg_heartbeat heartbeat;
        struct msg_shutdown shutdown;
        struct msg_error error;
    } u;
    struct msg_mem *mem;     /* NULL unless decoded */
};

/* "step", "hello", ...; "unknown" for other values. */
const char *msg_type_name(uint32_t type);

/* Initialise m as an empty message of a type: header filled, body zeroed
 * (fields whose "none" value is -1, such as edge_slot and snapshot_slot,
 * start at 0: set them). */
void msg_init(struct msg *m, uint32_t type, uint64_t step_id, int32_t sender);

/* Check a message against every rule the decoder applies. CS_OK or
 * CS_EPROTO with err naming the field. */
int msg_validate(const struct msg *m, struct cs_error *err);

/* Encode m (validated first; header.version 0 means CS_PROTO_VERSION) into a
 * malloc'ed buffer *data of *size bytes, which the caller frees with free().
 * Returns CS_OK, CS_EPROTO (invalid message, err says why) or CS_ENOMEM. */
int msg_encode(const struct msg *m, void **data, size_t *size, struct cs_error *err);

/* Decode size bytes into *m, which then owns its memory (release with
 * msg_free). On failure *m is left empty (msg_free is still safe) and the
 * return is CS_EPROTO with err saying why ("protocol version 2, expected 1",
 * "unknown message type 99", "step: seq 3: n_tokens 0 out of range [1, 65536]"),
 * or CS_ENOMEM. Never crashes on any input. */
int msg_decode(struct msg *m, const void *data, size_t size, struct cs_error *err);

/* Release what msg_decode allocated; a no-op on a message built by the caller
 * (whose pointers stay the caller's). Leaves *m zeroed. */
void msg_free(struct msg *m);

/* A step as the arrays of struct cs_batch, plus per-sequence sampling
 * (model_forward's sample and params arguments). */
struct msg_batch {
    struct cs_batch batch;
    bool *sample;                      /* [n_seqs] */
    struct cs_sample_params *params;   /* [n_seqs]; lists point into the step */
    void *mem;                         /* one allocation behind the arrays */
};

/* Fill out from a (validated) step: tokens, pos (n_past + i), seq_of,
 * seq_start, slot, and a [n_seqs][max_pages] page table padded with -1 where
 * max_pages is the longest page list. With page_size > 0, also checks each
 * sequence's pages cover its last position (CS_EPROTO otherwise). The params'
 * token lists point into step, which must outlive out. Release with
 * msg_batch_free. */
int msg_step_to_batch(struct msg_batch *out, const struct msg_step *step, int page_size,
                      struct cs_error *err);
void msg_batch_free(struct msg_batch *b);

#ifdef __cplusplus
}
#endif
#endif
