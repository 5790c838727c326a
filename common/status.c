/* status.c - status texts and struct cs_error helpers (see status.h). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *cs_strerror(int status)
{
    switch (status) {
#define CS_STATUS_TEXT(name, value, text) \
    case value:                           \
        return text;
        CS_STATUS_LIST(CS_STATUS_TEXT)
#undef CS_STATUS_TEXT
    }
    return "unknown status";
}

const char *cs_status_name(int status)
{
    switch (status) {
#define CS_STATUS_NAME(name, value, text) \
    case value:                           \
        return #name;
        CS_STATUS_LIST(CS_STATUS_NAME)
#undef CS_STATUS_NAME
    }
    return "CS_EUNKNOWN";
}

int cs_error_set(struct cs_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void cs_error_prefix(struct cs_error *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* the message is cut at its buffer size: keep the prefix, then what fits */
    int n = snprintf(err->msg, sizeof err->msg, "%s: ", prefix);
    if (n > 0 && (size_t)n < sizeof err->msg)
        memcpy(err->msg + n, old, sizeof err->msg - (size_t)n - 1);
    err->msg[sizeof err->msg - 1] = 0;
}
