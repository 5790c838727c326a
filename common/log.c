/* log.c - leveled logging (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int cs_log_level_current = CS_LOG_INFO;
static char log_process[32] = "cmpserve";

void cs_log_set_process(const char *name)
{
    snprintf(log_process, sizeof log_process, "%s", name);
}

void cs_log_set_level(int level)
{
    cs_log_level_current = level;
}

int cs_log_level_parse(const char *s)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

void cs_log_write(int level, const char *module, const char *fmt, ...)
{
    static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level < 0 ? 0 : level > 3 ? 3 : level],
                     log_process, module);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && n < (int)sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one write per line so lines of concurrent processes do not interleave */
    fprintf(stderr, "%s\n", line);
}
