/* buf.h - a growable byte buffer.
 *
 * struct buf owns a heap block holding len bytes followed by a NUL, so
 * buf.data can always be used as a C string (the content itself may hold
 * NULs). A zero-initialised struct buf (or buf_init) is a valid empty buffer
 * whose data is NULL until the first append; buf_cstr gives "" for it.
 * Appends grow the block geometrically; on allocation failure they return
 * CS_ENOMEM and leave the buffer unchanged. The caller owns the struct;
 * buf_free releases the block. Not thread-safe: one owner at a time. */
#ifndef CS_BUF_H
#define CS_BUF_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct buf {
    char *data; /* len bytes + NUL; NULL while nothing was ever reserved */
    size_t len; /* bytes in use, not counting the NUL */
    size_t cap; /* bytes allocated (always > len once data != NULL) */
};

/* Make b an empty buffer (no allocation). */
void buf_init(struct buf *b);

/* Release b's memory and make it empty again. Safe on an empty buffer. */
void buf_free(struct buf *b);

/* Ensure room for `extra` more bytes plus the NUL. CS_OK or CS_ENOMEM
 * (also when len + extra would overflow). */
int buf_reserve(struct buf *b, size_t extra);

/* Append n bytes (may contain NULs). CS_OK or CS_ENOMEM. data may be NULL
 * only when n == 0. */
int buf_append(struct buf *b, const void *data, size_t n);

/* Append a NUL-terminated string (without its NUL). CS_OK or CS_ENOMEM. */
int buf_append_str(struct buf *b, const char *s);

/* Append one byte. CS_OK or CS_ENOMEM. */
int buf_append_byte(struct buf *b, unsigned char c);

/* Append printf-formatted text. CS_OK, CS_ENOMEM, or CS_EINVAL when the
 * format itself fails. */
int buf_printf(struct buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);

/* Cut the content to its first n bytes (no-op when n >= len); keeps memory. */
void buf_truncate(struct buf *b, size_t n);

/* Empty the content, keeping the memory for reuse. */
void buf_clear(struct buf *b);

/* The content as a C string: "" for a buffer that never allocated. */
const char *buf_cstr(const struct buf *b);

/* Hand the block to the caller (free() it) and leave b empty. Returns a
 * NUL-terminated string, or NULL on allocation failure for an empty buffer;
 * *len_out (may be NULL) receives the length. */
char *buf_detach(struct buf *b, size_t *len_out);

#ifdef __cplusplus
}
#endif
#endif
