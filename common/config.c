/* config.c - the one configuration surface (see config.h). */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct field {
    enum cs_config_kind kind;
    const char *key;
    size_t offset;
    const char *help;
};

static const struct field fields[] = {
#define CS_CFG_ROW(kind, name, def, help) {CS_CFG_##kind, #name, offsetof(struct cs_config, name), help},
    CS_CONFIG_FIELDS(CS_CFG_ROW)
#undef CS_CFG_ROW
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

void config_defaults(struct cs_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
#define CS_CFG_DEF_STR(name, def) snprintf(cfg->name, sizeof cfg->name, "%s", def);
#define CS_CFG_DEF_INT(name, def) cfg->name = def;
#define CS_CFG_DEF_FLOAT(name, def) cfg->name = def;
#define CS_CFG_DEF_BOOL(name, def) cfg->name = def;
#define CS_CFG_DEF(kind, name, def, help) CS_CFG_DEF_##kind(name, def)
    CS_CONFIG_FIELDS(CS_CFG_DEF)
#undef CS_CFG_DEF
}

static const struct field *field_find(const char *key, size_t len)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strlen(fields[i].key) == len && strncmp(fields[i].key, key, len) == 0)
            return &fields[i];
    return NULL;
}

/* Set a field from text (flags). */
static int field_set_text(struct cs_config *cfg, const struct field *f, const char *text,
                          struct cs_error *err)
{
    void *p = (char *)cfg + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case CS_CFG_STR:
        if (strlen(text) >= 256)
            return cs_error_set(err, CS_EINVAL, "--%s: value longer than 255 bytes", f->key);
        snprintf((char *)p, 256, "%s", text);
        return CS_OK;
    case CS_CFG_INT: {
        long v = strtol(text, &end, 10);
        if (end == text || *end || errno)
            return cs_error_set(err, CS_EINVAL, "--%s: expected an integer, got '%s'", f->key, text);
        *(long *)p = v;
        return CS_OK;
    }
    case CS_CFG_FLOAT: {
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v))
            return cs_error_set(err, CS_EINVAL, "--%s: expected a number, got '%s'", f->key, text);
        *(double *)p = v;
        return CS_OK;
    }
    case CS_CFG_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes"))
            *(bool *)p = true;
        else if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no"))
            *(bool *)p = false;
        else
            return cs_error_set(err, CS_EINVAL, "--%s: expected true or false, got '%s'", f->key, text);
        return CS_OK;
    }
    return CS_EINTERNAL;
}

int config_apply_json(struct cs_config *cfg, const char *json, size_t len, struct cs_error *err)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return cs_error_set(err, CS_EFORMAT, "config is not valid JSON (near byte %ld)",
                            cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json) : -1L);
    int rc = CS_OK;
    if (!cJSON_IsObject(root)) {
        rc = cs_error_set(err, CS_EFORMAT, "config must be a JSON object");
        goto out;
    }
    for (cJSON *it = root->child; it; it = it->next) {
        const struct field *f = field_find(it->string, strlen(it->string));
        if (!f) {
            rc = cs_error_set(err, CS_EINVAL, "config: unknown key '%s'", it->string);
            goto out;
        }
        void *p = (char *)cfg + f->offset;
        switch (f->kind) {
        case CS_CFG_STR:
            if (!cJSON_IsString(it) || strlen(it->valuestring) >= 256) {
                rc = cs_error_set(err, CS_EINVAL, "config: '%s' must be a string (< 256 bytes)", f->key);
                goto out;
            }
            snprintf((char *)p, 256, "%s", it->valuestring);
            break;
        case CS_CFG_INT:
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
                fabs(it->valuedouble) > 9.0e15) {
                rc = cs_error_set(err, CS_EINVAL, "config: '%s' must be an integer", f->key);
                goto out;
            }
            *(long *)p = (long)it->valuedouble;
            break;
        case CS_CFG_FLOAT:
            if (!cJSON_IsNumber(it)) {
                rc = cs_error_set(err, CS_EINVAL, "config: '%s' must be a number", f->key);
                goto out;
            }
            *(double *)p = it->valuedouble;
            break;
        case CS_CFG_BOOL:
            if (!cJSON_IsBool(it)) {
                rc = cs_error_set(err, CS_EINVAL, "config: '%s' must be true or false", f->key);
                goto out;
            }
            *(bool *)p = cJSON_IsTrue(it);
            break;
        }
    }
out:
    cJSON_Delete(root);
    return rc;
}

int config_load_file(struct cs_config *cfg, const char *path, struct cs_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return cs_error_set(err, CS_EIO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            if (cap > (1u << 20)) {
                free(buf);
                fclose(fp);
                return cs_error_set(err, CS_EFORMAT, "%s: larger than 1 MiB", path);
            }
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return cs_error_set(err, CS_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, fp);
        len += n;
        if (n == 0)
            break;
    }
    fclose(fp);
    int rc = config_apply_json(cfg, buf ? buf : "", len, err);
    if (rc)
        cs_error_prefix(err, "%s", path);
    free(buf);
    return rc;
}

/* "--foo-bar" -> field foo_bar. */
static const struct field *flag_field(const char *arg, size_t len, bool *negated)
{
    char key[64];
    *negated = false;
    if (len >= sizeof key)
        return NULL;
    for (size_t i = 0; i < len; i++)
        key[i] = arg[i] == '-' ? '_' : arg[i];
    key[len] = 0;
    const struct field *f = field_find(key, len);
    if (!f && len > 3 && strncmp(key, "no_", 3) == 0) {
        f = field_find(key + 3, len - 3);
        if (f && f->kind == CS_CFG_BOOL)
            *negated = true;
        else
            f = NULL;
    }
    return f;
}

int config_parse_args(struct cs_config *cfg, int argc, char **argv, int *n_rest, char **rest,
                      struct cs_error *err)
{
    int nr = 0;
    if (rest)
        rest[nr++] = argv[0];
    /* --config first, wherever it is */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--config=", 9) == 0) {
            int rc = config_load_file(cfg, a + 9, err);
            if (rc)
                return rc;
        } else if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc)
                return cs_error_set(err, CS_EINVAL, "--config needs a file");
            int rc = config_load_file(cfg, argv[++i], err);
            if (rc)
                return rc;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--config=", 9) == 0)
            continue;
        const struct field *f = NULL;
        bool negated = false;
        const char *eq = NULL;
        if (strncmp(a, "--", 2) == 0) {
            eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            f = flag_field(a + 2, len, &negated);
        }
        if (!f) {
            if (!rest)
                return cs_error_set(err, CS_EINVAL, "unknown option '%s'", a);
            rest[nr++] = argv[i];
            continue;
        }
        int rc;
        if (f->kind == CS_CFG_BOOL && !eq) {
            *(bool *)((char *)cfg + f->offset) = !negated;
            continue;
        }
        if (negated)
            return cs_error_set(err, CS_EINVAL, "'%s' takes no value", a);
        if (eq) {
            rc = field_set_text(cfg, f, eq + 1, err);
        } else {
            if (i + 1 >= argc)
                return cs_error_set(err, CS_EINVAL, "--%s needs a value", f->key);
            rc = field_set_text(cfg, f, argv[++i], err);
        }
        if (rc)
            return rc;
    }
    if (n_rest)
        *n_rest = nr;
    return CS_OK;
}

static void print_value(const struct cs_config *cfg, const struct field *f, FILE *out, bool mask)
{
    const void *p = (const char *)cfg + f->offset;
    switch (f->kind) {
    case CS_CFG_STR:
        if (mask && strcmp(f->key, "api_key") == 0 && ((const char *)p)[0])
            fprintf(out, "\"***\"");
        else
            fprintf(out, "\"%s\"", (const char *)p);
        break;
    case CS_CFG_INT: fprintf(out, "%ld", *(const long *)p); break;
    case CS_CFG_FLOAT: fprintf(out, "%g", *(const double *)p); break;
    case CS_CFG_BOOL: fprintf(out, "%s", *(const bool *)p ? "true" : "false"); break;
    }
}

void config_print(const struct cs_config *cfg, FILE *out)
{
    for (size_t i = 0; i < N_FIELDS; i++) {
        fprintf(out, "  %-18s = ", fields[i].key);
        print_value(cfg, &fields[i], out, true);
        fputc('\n', out);
    }
}

void config_usage(FILE *out)
{
    struct cs_config def;
    config_defaults(&def);
    fprintf(out, "  --config FILE         JSON file with the same keys as the flags (key_name for --key-name)\n");
    for (size_t i = 0; i < N_FIELDS; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", fields[i].key);
        for (char *c = flag + 2; *c; c++)
            if (*c == '_')
                *c = '-';
        fprintf(out, "  %-21s %s (default ", flag, fields[i].help);
        print_value(&def, &fields[i], out, false);
        fprintf(out, ")\n");
    }
}

char *config_to_json(const struct cs_config *cfg, bool include_secrets)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const struct field *f = &fields[i];
        const void *p = (const char *)cfg + f->offset;
        switch (f->kind) {
        case CS_CFG_STR: {
            const char *s = p;
            if (!include_secrets && strcmp(f->key, "api_key") == 0 && s[0])
                s = "***";
            cJSON_AddStringToObject(o, f->key, s);
            break;
        }
        case CS_CFG_INT: cJSON_AddNumberToObject(o, f->key, (double)*(const long *)p); break;
        case CS_CFG_FLOAT: cJSON_AddNumberToObject(o, f->key, *(const double *)p); break;
        case CS_CFG_BOOL: cJSON_AddBoolToObject(o, f->key, *(const bool *)p); break;
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
