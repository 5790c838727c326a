/* buf.c - the growable byte buffer of buf.h: geometric growth, always
 * NUL-terminated once allocated, CS_ENOMEM leaves the content intact. */
#include "buf.h"

#include "status.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    buf_init(b);
}

int buf_reserve(struct buf *b, size_t extra)
{
    if (extra > SIZE_MAX - 1 - b->len)
        return CS_ENOMEM;
    size_t need = b->len + extra + 1;
    if (b->data && need <= b->cap)
        return CS_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return CS_ENOMEM;
    if (!b->data)
        p[0] = '\0';
    b->data = p;
    b->cap = cap;
    return CS_OK;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return CS_OK;
}

int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_append_byte(struct buf *b, unsigned char c)
{
    return buf_append(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return CS_EINVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return CS_OK;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_truncate(struct buf *b, size_t n)
{
    if (n >= b->len)
        return;
    b->len = n;
    b->data[n] = '\0';
}

void buf_clear(struct buf *b)
{
    buf_truncate(b, 0);
}

const char *buf_cstr(const struct buf *b)
{
    return b->data ? b->data : "";
}

char *buf_detach(struct buf *b, size_t *len_out)
{
    if (!b->data && buf_reserve(b, 0))
        return NULL;
    char *p = b->data;
    if (len_out)
        *len_out = b->len;
    buf_init(b);
    return p;
}
