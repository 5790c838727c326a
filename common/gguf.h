/* gguf.h - GGUF v3 reader (over mmap) and writer.
 *
 * The reader validates every size and offset against the file size with
 * overflow-safe arithmetic before anything is dereferenced; after a successful
 * gguf_open every key, array and tensor it exposes lies inside the mapping.
 * Errors name the file and the exact problem (bad magic, unsupported version,
 * truncated at byte N, tensor X outside the file, unsupported type T).
 *
 * The writer (gguf_write.c) builds a file from metadata and tensors; it is used
 * by `cmpserve mkmodel`, tests and tools. */
#ifndef CS_GGUF_H
#define CS_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types, numbered as in the GGUF specification. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

/* Tensor data types, numbered as ggml does. Only these four are supported by
 * the model loader; the reader accepts any ggml type whose block size it knows
 * and refuses the rest by number. */
enum cs_dtype {
    CS_DTYPE_F32 = 0,
    CS_DTYPE_F16 = 1,
    CS_DTYPE_Q8_0 = 8,
    CS_DTYPE_BF16 = 30,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32
#define Q8_0_BLOCK 32          /* values per Q8_0 block */
#define Q8_0_BLOCK_BYTES 34    /* fp16 scale + 32 int8 */

/* A string inside the mapping: not NUL-terminated. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

/* One metadata key/value. For arrays, arr_type and arr_len describe the
 * elements and arr_data points at the first one inside the mapping (strings
 * and nested arrays are variable-size: walk them with gguf_arr_str or
 * gguf_arr_nested; nested arrays are refused beyond 8 levels). */
struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;
    union {
        uint64_t u64;  /* any unsigned integer type, widened */
        int64_t i64;   /* any signed integer type, widened */
        double f64;    /* float32 or float64, widened */
        bool b;
        struct gguf_str str;
    } val;
    enum gguf_type arr_type;   /* when type == GGUF_TYPE_ARRAY */
    uint64_t arr_len;
    const uint8_t *arr_data;   /* first element */
    const uint8_t *arr_end;    /* one past the last byte of the array */
    const struct gguf_str *arr_strs; /* when arr_type == STRING: arr_len parsed strings (owned by the file) */
    const struct gguf_kv *arr_elems; /* when arr_type == ARRAY: arr_len parsed arrays, key empty (owned by the file) */
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];  /* ne[0] is the contiguous (input) dimension; unused dims are 1 */
    uint32_t type;              /* ggml type number (enum cs_dtype for the supported ones) */
    uint64_t offset;            /* relative to the data section */
    uint64_t n_bytes;
    const void *data;           /* inside the mapping */
};

struct gguf_file {
    char *path;
    int fd;
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;       /* absolute offset of the tensor data section */
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
};

/* Open and validate path. On failure returns a negative status and fills err
 * with "<path>: <problem>"; *out is then untouched. */
int gguf_open(struct gguf_file **out, const char *path, struct cs_error *err);
/* Parse an in-memory buffer (used by the fuzz target and tests). The buffer
 * must outlive the returned file; name is used in error messages. */
int gguf_open_buffer(struct gguf_file **out, const void *buf, size_t size, const char *name,
                     struct cs_error *err);
void gguf_close(struct gguf_file *f);

/* Lookups: NULL when absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters: CS_ENOTFOUND when the key is absent, CS_EFORMAT (with err
 * naming key, expected and found type) when it has another type. Integer
 * getters accept any integer type whose value fits (CS_ERANGE otherwise). */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct cs_error *err);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out, struct cs_error *err);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct cs_error *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct cs_error *err);
/* The string is copied NUL-terminated into a malloc'd buffer the caller frees. */
int gguf_get_str(const struct gguf_file *f, const char *key, char **out, struct cs_error *err);
/* Array element access; index is checked against arr_len. */
int gguf_arr_u32(const struct gguf_kv *kv, uint64_t i, uint32_t *out);   /* any integer elements */
int gguf_arr_i64(const struct gguf_kv *kv, uint64_t i, int64_t *out);
int gguf_arr_f32(const struct gguf_kv *kv, uint64_t i, float *out);     /* float32/float64 */
int gguf_arr_bool(const struct gguf_kv *kv, uint64_t i, bool *out);
int gguf_arr_str(const struct gguf_kv *kv, uint64_t i, struct gguf_str *out);
/* Element i of an array of arrays: *out is a kv with type ARRAY (empty key)
 * owned by the file. CS_EFORMAT when kv is not an array of arrays. */
int gguf_arr_nested(const struct gguf_kv *kv, uint64_t i, const struct gguf_kv **out);

/* Bytes of a tensor of the given type and shape: CS_EUNSUPPORTED for an
 * unknown type, CS_ERANGE on overflow or a row not a multiple of the block. */
int gguf_tensor_nbytes(uint32_t type, const int64_t *ne, uint32_t n_dims, uint64_t *out);
const char *gguf_type_name(uint32_t ggml_type);   /* "q8_0", "f32", ... or "unknown" */

/* ---- writer ---- */
struct gguf_writer;

int gguf_writer_create(struct gguf_writer **out);
void gguf_writer_destroy(struct gguf_writer *w);
/* Metadata setters; keys are copied. Later keys with the same name replace earlier ones. */
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Arrays of scalars: elem_type one of the scalar gguf types; data packed as in the file. */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                        const void *data, uint64_t n);
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            uint64_t n);
/* Same, with explicit lengths (strings may contain NUL bytes). */
int gguf_writer_set_arr_strn(struct gguf_writer *w, const char *key, const char *const *strs,
                             const uint64_t *lens, uint64_t n);
/* Any value, already encoded as in the file after its type field (a scalar
 * packed; a string: u64 length + bytes; an array: u32 element type, u64 count,
 * elements). Not validated: tests use it for nested arrays and for corrupt files. */
int gguf_writer_set_raw(struct gguf_writer *w, const char *key, enum gguf_type type,
                        const void *value, uint64_t n_bytes);
/* Copy a key/value read by gguf_open (any type, nested arrays included) verbatim. */
int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Add a tensor. When data is NULL the writer calls fill(ctx, dst, n_bytes) while
 * writing, so huge models stream to disk without being held in memory. data
 * (not copied) must stay valid until gguf_writer_write. fill is called once per
 * tensor, in tensor order, with a buffer of the tensor's n_bytes; a nonzero
 * return aborts the write with that status. CS_EINVAL for a duplicate or empty
 * name, n_dims > 4 or a dimension < 1; CS_EUNSUPPORTED for an unknown type;
 * CS_ERANGE when the row is not a multiple of the type's block. */
typedef int (*gguf_fill_cb)(void *ctx, void *dst, uint64_t n_bytes);
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                           const int64_t *ne, uint32_t n_dims, const void *data,
                           gguf_fill_cb fill, void *fill_ctx);
/* Write the file (alignment from general.alignment or 32): keys in insertion
 * order, tensors in add order, each tensor's data padded to the alignment.
 * Writes PATH.tmp with large buffered writes, then renames it to PATH; on
 * failure PATH.tmp is removed and err names the path and the problem. */
int gguf_writer_write(struct gguf_writer *w, const char *path, struct cs_error *err);

#ifdef __cplusplus
}
#endif
#endif
