/* status.h - the one list of status codes used by every module of cmpserve.
 *
 * Fallible functions return int: CS_OK (0) or a negative code from this list.
 * Results go out through pointers. Parsers of outside input (GGUF, messages,
 * requests, templates) also fill an optional struct cs_error with a message
 * that carries the numbers (which tensor, expected vs found, byte offset). */
#ifndef CS_STATUS_H
#define CS_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define CS_STATUS_LIST(X)                                              \
    X(CS_OK, 0, "ok")                                                  \
    X(CS_EINVAL, -1, "invalid argument")                               \
    X(CS_ENOMEM, -2, "out of memory")                                  \
    X(CS_EIO, -3, "input/output error")                                \
    X(CS_EFORMAT, -4, "malformed data")                                \
    X(CS_EUNSUPPORTED, -5, "unsupported")                              \
    X(CS_EPROTO, -6, "protocol error")                                 \
    X(CS_ECUDA, -7, "CUDA error")                                      \
    X(CS_EFULL, -8, "capacity exhausted")                              \
    X(CS_ETIMEOUT, -9, "timed out")                                    \
    X(CS_ENOTFOUND, -10, "not found")                                  \
    X(CS_ERANGE, -11, "out of range")                                  \
    X(CS_ECLOSED, -12, "closed")                                       \
    X(CS_EAGAIN, -13, "try again")                                     \
    X(CS_ECANCELED, -14, "canceled")                                   \
    X(CS_EINTERNAL, -15, "internal error")

enum cs_status {
#define CS_STATUS_ENUM(name, value, text) name = value,
    CS_STATUS_LIST(CS_STATUS_ENUM)
#undef CS_STATUS_ENUM
};

/* Human-readable text and the symbolic name ("CS_EFORMAT") of a status. */
const char *cs_strerror(int status);
const char *cs_status_name(int status);

/* A detailed error for parsers of outside input. msg is always NUL-terminated. */
struct cs_error {
    int code;
    char msg[512];
};

/* Set err (may be NULL) to code and a printf-formatted message; returns code,
 * so a parser can write `return cs_error_set(err, CS_EFORMAT, "...", ...);`. */
int cs_error_set(struct cs_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prefix the existing message with context: "loading blk.3: <old message>". */
void cs_error_prefix(struct cs_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
