/* prompt.c - thinking directives and span-aware tokenization of a rendered
 * chat template (prompt.h). */
#include "prompt.h"

#include <stdlib.h>
#include <string.h>

/* ---- special tokens ---- */

static int special_cmp(const void *a, const void *b)
{
    const struct prompt_special *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int prompt_specials_init(struct prompt_specials *ps, const struct tokenizer *tok)
{
    ps->items = NULL;
    ps->n = 0;
    uint32_t v = tokenizer_vocab_size(tok);
    int cap = 0;
    for (uint32_t id = 0; id < v; id++) {
        if (!tokenizer_is_special(tok, (int32_t)id))
            continue;
        size_t len = 0;
        const char *s = tokenizer_token_bytes(tok, (int32_t)id, &len);
        if (!s || len == 0)
            continue;
        if (ps->n == cap) {
            cap = cap ? cap * 2 : 64;
            void *p = realloc(ps->items, (size_t)cap * sizeof *ps->items);
            if (!p) {
                prompt_specials_free(ps);
                return CS_ENOMEM;
            }
            ps->items = p;
        }
        ps->items[ps->n++] = (struct prompt_special){s, len, (int32_t)id};
    }
    if (ps->n)
        qsort(ps->items, (size_t)ps->n, sizeof *ps->items, special_cmp);
    return CS_OK;
}

void prompt_specials_free(struct prompt_specials *ps)
{
    free(ps->items);
    ps->items = NULL;
    ps->n = 0;
}

/* ---- directives ---- */

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* If s ends with a directive, cut it (and surrounding whitespace) and set
 * *thinking. Returns the new string (malloc'd) or NULL when unchanged. */
static char *cut_directive(const char *s, enum template_thinking *thinking)
{
    size_t n = strlen(s);
    while (n > 0 && is_space(s[n - 1]))
        n--;
    static const struct { const char *word; enum template_thinking t; } dirs[] = {
        {"/no_think", TEMPLATE_THINKING_OFF},
        {"/think", TEMPLATE_THINKING_ON},
    };
    for (size_t i = 0; i < 2; i++) {
        size_t wl = strlen(dirs[i].word);
        if (n < wl || memcmp(s + n - wl, dirs[i].word, wl) != 0)
            continue;
        size_t start = n - wl;
        if (start > 0 && !is_space(s[start - 1]))
            continue;                   /* part of a longer word: "foo/think" */
        while (start > 0 && is_space(s[start - 1]))
            start--;
        *thinking = dirs[i].t;
        return strndup(s, start);
    }
    return NULL;
}

/* Apply cut_directive to a message's content (a string or the last text part). */
static void message_directive(cJSON *msg, enum template_thinking *thinking)
{
    cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    cJSON *target = NULL;
    if (cJSON_IsString(content)) {
        target = content;
    } else if (cJSON_IsArray(content)) {
        cJSON *it;
        cJSON_ArrayForEach(it, content) {
            cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
            cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "text");
            if (cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0 &&
                cJSON_IsString(text))
                target = text;
        }
    }
    if (!target)
        return;
    char *cut = cut_directive(target->valuestring, thinking);
    if (cut) {
        cJSON_SetValuestring(target, cut);
        free(cut);
    }
}

static bool role_is(const cJSON *msg, const char *role)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "role");
    return cJSON_IsString(r) && strcmp(r->valuestring, role) == 0;
}

void prompt_thinking_directives(cJSON *messages, enum template_thinking *thinking)
{
    if (!cJSON_IsArray(messages) || !messages->child)
        return;
    cJSON *first = messages->child;
    if (cJSON_IsObject(first) && (role_is(first, "system") || role_is(first, "developer")))
        message_directive(first, thinking);
    cJSON *last_user = NULL, *it;
    cJSON_ArrayForEach(it, messages) {
        if (cJSON_IsObject(it) && role_is(it, "user"))
            last_user = it;
    }
    if (last_user)
        message_directive(last_user, thinking);
}

/* ---- tokenization ---- */

struct ids_out {
    int32_t *ids;
    size_t n, cap;
};

static int ids_push(struct ids_out *o, const int32_t *ids, size_t n)
{
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n)
            cap *= 2;
        void *p = realloc(o->ids, cap * sizeof *o->ids);
        if (!p)
            return CS_ENOMEM;
        o->ids = p;
        o->cap = cap;
    }
    if (n)
        memcpy(o->ids + o->n, ids, n * sizeof *ids);
    o->n += n;
    return CS_OK;
}

static int encode_piece(const struct tokenizer *tok, const char *s, size_t len, struct ids_out *o)
{
    if (len == 0)
        return CS_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tokenizer_encode(tok, s, len, false, &ids, &n);
    if (rc == CS_OK)
        rc = ids_push(o, ids, n);
    free(ids);
    return rc;
}

/* The special token starting at text[i] and ending before limit, or NULL. */
static const struct prompt_special *special_at(const struct prompt_specials *ps,
                                               const char *text, size_t i, size_t limit)
{
    for (int k = 0; k < ps->n; k++) {
        const struct prompt_special *sp = &ps->items[k];
        if (i + sp->len <= limit && text[i] == sp->text[0] && memcmp(text + i, sp->text, sp->len) == 0)
            return sp;
    }
    return NULL;
}

int prompt_tokenize(const struct tokenizer *tok, const struct prompt_specials *ps,
                    const struct template_output *out, int32_t **ids, size_t *n)
{
    const char *text = buf_cstr(&out->text);
    size_t len = out->text.len, piece = 0, span = 0, i = 0;
    struct ids_out o = {0};
    int rc = CS_OK;
    while (i < len && rc == CS_OK) {
        /* skip client-supplied spans entirely */
        if (span < out->n_user_spans && i >= out->user_spans[span].offset) {
            i = out->user_spans[span].offset + out->user_spans[span].len;
            span++;
            continue;
        }
        size_t limit = span < out->n_user_spans ? out->user_spans[span].offset : len;
        const struct prompt_special *sp = special_at(ps, text, i, limit);
        if (!sp) {
            i++;
            continue;
        }
        rc = encode_piece(tok, text + piece, i - piece, &o);
        if (rc == CS_OK)
            rc = ids_push(&o, &sp->id, 1);
        i += sp->len;
        piece = i;
    }
    if (rc == CS_OK)
        rc = encode_piece(tok, text + piece, len - piece, &o);
    if (rc != CS_OK) {
        free(o.ids);
        return rc;
    }
    *ids = o.ids;
    *n = o.n;
    return CS_OK;
}
