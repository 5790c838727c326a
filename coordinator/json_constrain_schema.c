/* json_constrain_schema.c - compiles what a constraint accepts into a
 * struct jc_grammar (json_constrain_int.h): a JSON schema of the subset in
 * json_constrain.h into schema nodes and literal sets (refusing every other
 * keyword by name), and an OpenAI tools array into the literal sets of the
 * Qwen XML tool-call automaton. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/json_constrain_int.h"

#define JC_MAX_SCHEMA_DEPTH 12
#define JC_NO_MAX 65535

/* ---- growing arrays ---- */

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return CS_OK;
    int cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *q = realloc(*p, (size_t)cap2 * elem);
    if (!q)
        return CS_ENOMEM;
    *p = q;
    *cap = cap2;
    return CS_OK;
}

static int node_new(struct jc_grammar *g)
{
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes))
        return CS_ENOMEM;
    struct jc_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->max_items = JC_NO_MAX;
    return g->n_nodes++;
}

static int lit_new(struct jc_grammar *g)
{
    if (grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof *g->lits))
        return CS_ENOMEM;
    memset(&g->lits[g->n_lits], 0, sizeof g->lits[0]);
    return g->n_lits++;
}

/* Add text[0, len) to literal set `set`; CS_EUNSUPPORTED when full. */
static int lit_add(struct jc_grammar *g, int set, const char *text, size_t len)
{
    struct jc_litset *L = &g->lits[set];
    if (L->n >= JC_MAX_LIT - 1 || len > 4096)
        return CS_EUNSUPPORTED;
    L->text[L->n] = malloc(len + 1);
    if (!L->text[L->n])
        return CS_ENOMEM;
    memcpy(L->text[L->n], text, len);
    L->text[L->n][len] = 0;
    L->len[L->n++] = (uint16_t)len;
    return CS_OK;
}

void jc_grammar_free(struct jc_grammar *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_lits; i++)
        for (int k = 0; k < g->lits[i].n; k++)
            free(g->lits[i].text[k]);
    free(g->lits);
    free(g->nodes);
    free(g->props);
    free(g->alts);
    free(g->tool_params);
    free(g);
}

/* A grammar with node 0 = any value and literal set 0 = true/false/null. */
static struct jc_grammar *grammar_new(void)
{
    struct jc_grammar *g = calloc(1, sizeof *g);
    if (!g || node_new(g) != 0 || lit_new(g) != 0 || lit_add(g, 0, "true", 4) ||
        lit_add(g, 0, "false", 5) || lit_add(g, 0, "null", 4)) {
        jc_grammar_free(g);
        return NULL;
    }
    g->nodes[0].types = JC_T_ALL;
    g->nodes[0].values = g->nodes[0].items = 0;
    g->tool_start = -1;
    return g;
}

/* The JSON text of s as a quoted string (minimal escapes), into a new set
 * member. */
static int lit_add_quoted(struct jc_grammar *g, int set, const char *s)
{
    size_t n = strlen(s), k = 0;
    char *t = malloc(n * 6 + 3);
    if (!t)
        return CS_ENOMEM;
    t[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            t[k++] = '\\';
            t[k++] = (char)c;
        } else if (c < 0x20) {
            k += (size_t)snprintf(t + k, 7, "\\u%04x", c);
        } else {
            t[k++] = (char)c;
        }
    }
    t[k++] = '"';
    int rc = lit_add(g, set, t, k);
    free(t);
    return rc;
}

/* ---- schemas ---- */

static const char *const jc_known[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "anyOf", "title", "description", "default", "examples", "$schema",
    "$comment", NULL,
};

static int check_keywords(const cJSON *s, const char *path, struct cs_error *err)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        int i = 0;
        while (jc_known[i] && strcmp(jc_known[i], k->string) != 0)
            i++;
        if (!jc_known[i])
            return cs_error_set(err, CS_EUNSUPPORTED,
                                "JSON schema keyword '%s' is not supported (at '%s')", k->string,
                                path);
    }
    return CS_OK;
}

static int type_bit(const char *t)
{
    static const char *const names[] = {"null", "boolean", "integer", "number", "string",
                                        "array", "object"};
    for (int i = 0; i < 7; i++)
        if (strcmp(t, names[i]) == 0)
            return 1 << i;
    return 0;
}

static int parse_types(const cJSON *t, const char *path, struct cs_error *err)
{
    int bits = 0;
    if (cJSON_IsString(t)) {
        bits = type_bit(t->valuestring);
    } else if (cJSON_IsArray(t)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, t) {
            int b = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
            if (!b) {
                bits = 0;
                break;
            }
            bits |= b;
        }
    }
    if (!bits)
        return cs_error_set(err, CS_EINVAL, "JSON schema 'type' at '%s' is not a known type name "
                            "or a non-empty array of them", path);
    return bits;
}

static int compile(struct jc_grammar *g, const cJSON *s, int depth, const char *path,
                   struct cs_error *err);

static int compile_enum(struct jc_grammar *g, const cJSON *s, const char *path,
                        struct cs_error *err)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (e && (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0))
        return cs_error_set(err, CS_EINVAL, "JSON schema 'enum' at '%s' must be a non-empty array",
                            path);
    int id = node_new(g), set = lit_new(g);
    if (id < 0 || set < 0)
        return CS_ENOMEM;
    g->nodes[id].kind = JC_N_ENUM;
    g->nodes[id].lit = set;
    const cJSON *v;
    int rc = CS_OK;
    for (v = c ? c : e->child; v && rc == CS_OK; v = c ? NULL : v->next) {
        char *text = cJSON_PrintUnformatted(v);
        rc = text ? lit_add(g, set, text, strlen(text)) : CS_ENOMEM;
        free(text);
    }
    if (rc == CS_EUNSUPPORTED)
        return cs_error_set(err, rc, "JSON schema 'enum' at '%s' has more than %d values", path,
                            JC_MAX_LIT - 1);
    return rc == CS_OK ? id : rc;
}

static int compile_anyof(struct jc_grammar *g, const cJSON *s, int depth, const char *path,
                         struct cs_error *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n == 0 || n > JC_MAX_ALT)
        return cs_error_set(err, CS_EINVAL, "JSON schema 'anyOf' at '%s' must be an array of 1 to "
                            "%d schemas", path, JC_MAX_ALT);
    if (cJSON_GetArraySize(s) > 1 + (cJSON_HasObjectItem(s, "title") ? 1 : 0) +
                                    (cJSON_HasObjectItem(s, "description") ? 1 : 0))
        return cs_error_set(err, CS_EUNSUPPORTED,
                            "JSON schema 'anyOf' together with other keywords is not supported "
                            "(at '%s')", path);
    int ids[JC_MAX_ALT];
    for (int i = 0; i < n; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/anyOf/%d", path, i);
        ids[i] = compile(g, cJSON_GetArrayItem(a, i), depth + 1, sub, err);
        if (ids[i] < 0)
            return ids[i];
    }
    int id = node_new(g);
    if (id < 0 || grow((void **)&g->alts, &g->cap_alts, g->n_alts + n, sizeof *g->alts))
        return CS_ENOMEM;
    g->nodes[id].kind = JC_N_ANYOF;
    g->nodes[id].alts = g->n_alts;
    g->nodes[id].n_alts = n;
    memcpy(g->alts + g->n_alts, ids, sizeof ids[0] * (size_t)n);
    g->n_alts += n;
    return id;
}

static bool is_required(const cJSON *req, const char *name)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, req)
        if (cJSON_IsString(r) && strcmp(r->valuestring, name) == 0)
            return true;
    return false;
}

/* Properties of an object node id (closed). */
static int compile_props(struct jc_grammar *g, int id, const cJSON *s, int depth,
                         const char *path, struct cs_error *err)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    if (!cJSON_IsObject(props) || (req && !cJSON_IsArray(req)))
        return cs_error_set(err, CS_EINVAL, "JSON schema 'properties' at '%s' must be an object "
                            "and 'required' an array", path);
    int n = cJSON_GetArraySize(props);
    if (n >= JC_MAX_LIT)
        return cs_error_set(err, CS_EUNSUPPORTED, "JSON schema at '%s' has more than %d properties",
                            path, JC_MAX_LIT - 1);
    const cJSON *r;
    cJSON_ArrayForEach(r, req)
        if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return cs_error_set(err, CS_EINVAL, "JSON schema 'required' at '%s' names a property "
                                "that 'properties' does not declare", path);
    int set = lit_new(g);
    if (set < 0)
        return CS_ENOMEM;
    struct jc_prop tmp[JC_MAX_LIT];
    int k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/properties/%s", path, p->string);
        int node = compile(g, p, depth + 1, sub, err);
        if (node < 0)
            return node;
        int rc = lit_add_quoted(g, set, p->string);
        if (rc)
            return rc == CS_EUNSUPPORTED ? cs_error_set(err, rc, "property name too long at '%s'",
                                                        sub) : rc;
        tmp[k++] = (struct jc_prop){.node = node, .required = is_required(req, p->string)};
    }
    if (grow((void **)&g->props, &g->cap_props, g->n_props + n, sizeof *g->props))
        return CS_ENOMEM;
    struct jc_node *nd = &g->nodes[id];
    nd->closed = true;
    nd->n_props = n;
    nd->props = g->n_props;
    nd->keys = set;
    memcpy(g->props + g->n_props, tmp, sizeof tmp[0] * (size_t)n);
    g->n_props += n;
    return CS_OK;
}

static int int_field(const cJSON *s, const char *name, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, name);
    if (!v)
        return dflt;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (double)(int)v->valuedouble)
        return -1;
    return v->valueint > JC_NO_MAX ? JC_NO_MAX : v->valueint;
}

static int compile_object(struct jc_grammar *g, int id, const cJSON *s, int depth,
                          const char *path, struct cs_error *err)
{
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return cs_error_set(err, CS_EINVAL, "JSON schema 'additionalProperties' at '%s' must be a "
                            "boolean or a schema", path);
    if (cJSON_HasObjectItem(s, "properties"))
        return compile_props(g, id, s, depth, path, err);
    if (cJSON_IsFalse(ap)) {
        g->nodes[id].closed = true;
        g->nodes[id].keys = 0; /* unused: no properties */
        return CS_OK;
    }
    if (cJSON_IsObject(ap)) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        int v = compile(g, ap, depth + 1, sub, err);
        if (v < 0)
            return v;
        g->nodes[id].values = v;
    }
    return CS_OK;
}

static int compile_array(struct jc_grammar *g, int id, const cJSON *s, int depth,
                         const char *path, struct cs_error *err)
{
    int mn = int_field(s, "minItems", 0), mx = int_field(s, "maxItems", JC_NO_MAX);
    if (mn < 0 || mx < 0 || mn > mx)
        return cs_error_set(err, CS_EINVAL, "JSON schema 'minItems'/'maxItems' at '%s' must be "
                            "non-negative integers with minItems <= maxItems", path);
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/items", path);
        int it = compile(g, items, depth + 1, sub, err);
        if (it < 0)
            return it;
        g->nodes[id].items = it;
    }
    g->nodes[id].min_items = mn;
    g->nodes[id].max_items = mx;
    return CS_OK;
}

static int compile(struct jc_grammar *g, const cJSON *s, int depth, const char *path,
                   struct cs_error *err)
{
    if (cJSON_IsTrue(s))
        return 0;
    if (!cJSON_IsObject(s))
        return cs_error_set(err, CS_EINVAL, "JSON schema at '%s' must be an object", path);
    if (depth > JC_MAX_SCHEMA_DEPTH)
        return cs_error_set(err, CS_EUNSUPPORTED, "JSON schema nested deeper than %d levels",
                            JC_MAX_SCHEMA_DEPTH);
    int rc = check_keywords(s, path, err);
    if (rc)
        return rc;
    if (cJSON_HasObjectItem(s, "anyOf"))
        return compile_anyof(g, s, depth, path, err);
    if (cJSON_HasObjectItem(s, "enum") || cJSON_HasObjectItem(s, "const"))
        return compile_enum(g, s, path, err);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int types = JC_T_ALL;
    if (t)
        types = parse_types(t, path, err);
    else if (cJSON_HasObjectItem(s, "properties") || cJSON_HasObjectItem(s, "additionalProperties"))
        types = JC_T_OBJ;
    else if (cJSON_HasObjectItem(s, "items"))
        types = JC_T_ARR;
    if (types < 0)
        return types;
    int id = node_new(g);
    if (id < 0)
        return CS_ENOMEM;
    g->nodes[id].kind = JC_N_TYPES;
    g->nodes[id].types = (uint8_t)types;
    if ((types & JC_T_OBJ) && (rc = compile_object(g, id, s, depth, path, err)))
        return rc;
    if ((types & JC_T_ARR) && (rc = compile_array(g, id, s, depth, path, err)))
        return rc;
    return id;
}

int jc_grammar_json(struct jc_grammar **out, const cJSON *schema, struct cs_error *err)
{
    struct jc_grammar *g = grammar_new();
    if (!g)
        return CS_ENOMEM;
    int root;
    if (schema) {
        root = compile(g, schema, 0, "#", err);
    } else {
        root = node_new(g);
        if (root >= 0)
            g->nodes[root].types = JC_T_OBJ;
    }
    if (root < 0) {
        jc_grammar_free(g);
        return root;
    }
    g->root = root;
    *out = g;
    return CS_OK;
}

/* ---- tools ---- */

static const char *tool_name(const cJSON *t, const cJSON **params)
{
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *src = fn ? fn : t;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(src, "name");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(src, "parameters");
    *params = cJSON_GetObjectItemCaseSensitive(p, "properties");
    return cJSON_IsString(n) && n->valuestring[0] && !strpbrk(n->valuestring, ">\n")
               ? n->valuestring : NULL;
}

static int tool_add(struct jc_grammar *g, const char *name, const cJSON *props)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s>\n", name);
    if (n >= (int)sizeof buf)
        return CS_EUNSUPPORTED;
    int set = lit_new(g);
    int rc = set < 0 ? CS_ENOMEM : lit_add(g, g->tool_names, buf, (size_t)n);
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        if (rc || !p->string || strpbrk(p->string, ">\n"))
            continue;
        n = snprintf(buf, sizeof buf, "<parameter=%s>\n", p->string);
        rc = n < (int)sizeof buf ? lit_add(g, set, buf, (size_t)n) : CS_EUNSUPPORTED;
    }
    if (rc == CS_OK)
        rc = lit_add(g, set, "</function>\n</tool_call>", 24);
    if (rc == CS_OK)
        g->tool_params[g->n_tools++] = set;
    return rc;
}

int jc_grammar_tools(struct jc_grammar **out, const cJSON *tools, const char *named,
                     bool parallel, struct cs_error *err)
{
    struct jc_grammar *g = grammar_new();
    int n = cJSON_GetArraySize(tools);
    if (!g || !(g->tool_params = calloc((size_t)n + 1, sizeof *g->tool_params)) ||
        (g->tool_names = lit_new(g)) < 0 || (g->tool_next = lit_new(g)) < 0 ||
        lit_add(g, g->tool_next, "\n<tool_call>\n<function=", 23)) {
        jc_grammar_free(g);
        return CS_ENOMEM;
    }
    g->mode = JC_MODE_TOOLS;
    g->parallel = parallel;
    int rc = CS_OK;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *props;
        const char *name = tool_name(t, &props);
        if (!name || rc)
            continue;
        if (named && strcmp(name, named) == 0)
            g->tool_start = g->n_tools;
        rc = tool_add(g, name, props);
    }
    if (rc == CS_OK && g->n_tools == 0)
        rc = cs_error_set(err, CS_EINVAL, "no tool with a usable function name");
    else if (rc == CS_OK && named && g->tool_start < 0)
        rc = cs_error_set(err, CS_EINVAL, "tool_choice names '%s', which is not a tool", named);
    else if (rc == CS_EUNSUPPORTED)
        cs_error_set(err, rc, "too many tools or parameters to constrain (at most %d)",
                     JC_MAX_LIT - 2);
    if (rc) {
        jc_grammar_free(g);
        return rc;
    }
    *out = g;
    return CS_OK;
}
