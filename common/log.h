/* log.h - leveled logging to stderr, one line per event (journald keeps it).
 *
 * Line format: "2026-12-02T14:00:00.123Z INFO coord gguf: message key=value".
 * The level is checked before formatting (Redis' serverLog). No logging inside
 * kernels or per-token hot loops. */
#ifndef CS_LOG_H
#define CS_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

enum cs_log_level { CS_LOG_ERROR = 0, CS_LOG_WARN = 1, CS_LOG_INFO = 2, CS_LOG_DEBUG = 3 };

extern int cs_log_level_current;

/* Set the process name shown on every line ("coord", "worker1", "cli"). */
void cs_log_set_process(const char *name);
void cs_log_set_level(int level);
/* Parse "error", "warn", "info", "debug"; returns -1 when unknown. */
int cs_log_level_parse(const char *s);

void cs_log_write(int level, const char *module, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#define CS_LOG(level, module, ...)                     \
    do {                                               \
        if ((level) <= cs_log_level_current)           \
            cs_log_write((level), (module), __VA_ARGS__); \
    } while (0)

#define LOG_ERROR(module, ...) CS_LOG(CS_LOG_ERROR, module, __VA_ARGS__)
#define LOG_WARN(module, ...) CS_LOG(CS_LOG_WARN, module, __VA_ARGS__)
#define LOG_INFO(module, ...) CS_LOG(CS_LOG_INFO, module, __VA_ARGS__)
#define LOG_DEBUG(module, ...) CS_LOG(CS_LOG_DEBUG, module, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
