/* gguf_int.h - helpers shared by the GGUF reader's files (gguf.c, gguf_get.c);
 * not part of the public interface (libuv's double-underscore convention). */
#ifndef CS_GGUF_INT_H
#define CS_GGUF_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"

/* Bytes of one scalar of each metadata type (0 for string and array). */
extern const uint8_t gguf__meta_scalar_size[GGUF_TYPE_COUNT];
const char *gguf__meta_type_name(uint32_t t);
bool gguf__type_is_uint(uint32_t t);
bool gguf__type_is_sint(uint32_t t);
bool gguf__type_is_float(uint32_t t);
/* Widen the scalar of type t at p into kv->val. */
void gguf__scalar_decode(const uint8_t *p, uint32_t t, struct gguf_kv *kv);

#endif
