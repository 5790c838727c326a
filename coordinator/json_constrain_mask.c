/* json_constrain_mask.c - the vocabulary trie and the constraint object of
 * json_constrain.h: token masks by a preorder walk of the byte trie with
 * the automaton state cloned per depth (dead subtrees skipped whole), the
 * plain-string shortcut, the per-state mask cache, and advancing by tokens. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"
#include "coordinator/json_constrain_int.h"

#define JC_CACHE 32
#define NODE_NONPLAIN 1

/* A trie node in preorder: its subtree is [index, end). */
struct jc_tnode {
    uint32_t end;
    int32_t tok;            /* first index into vocab->ids of tokens ending here */
    uint16_t depth;         /* 1 for the first byte */
    uint8_t byte;
    uint8_t n_tok;          /* tokens ending here (same bytes) */
    uint8_t flags;
};

struct jc_vocab {
    const struct tokenizer *tok;
    int n_vocab, max_len;
    struct jc_tnode *nodes;
    uint32_t n_nodes;
    int32_t *ids;           /* token ids sorted by bytes */
    uint8_t *plain_mask;    /* tokens made of plain string bytes */
};

struct jc_cache_entry {
    uint64_t hash;
    uint8_t *key;
    int key_len;
    uint8_t *mask;
};

struct jc_constraint {
    struct jc_grammar *g;
    const struct jc_vocab *v;
    int32_t end_id;
    struct jc_state st;
    struct jc_state *walk;  /* per depth, max_len + 1 */
    uint8_t *keybuf;
    struct jc_cache_entry cache[JC_CACHE];
    int cache_next;
    long computed, hits;
};

/* ---- plain string bytes ---- */

/* Length of the complete well-formed UTF-8 character at s (n left), or 0. */
static int utf8_char_len(const uint8_t *s, size_t n)
{
    int len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    if (s[0] < 0xC2 || s[0] > 0xF4 || (size_t)len > n)
        return 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (s[0] == 0xE0) lo = 0xA0;
    if (s[0] == 0xED) hi = 0x9F;
    if (s[0] == 0xF0) lo = 0x90;
    if (s[0] == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

/* True when the bytes leave a plain string state as it is. */
static bool bytes_plain(const uint8_t *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            if (s[i] < 0x20 || s[i] == '"' || s[i] == '\\')
                return false;
            i++;
            continue;
        }
        int k = utf8_char_len(s + i, n - i);
        if (!k)
            return false;
        i += (size_t)k;
    }
    return true;
}

/* ---- the trie ---- */

struct tok_ref {
    const uint8_t *b;
    size_t len;
    int32_t id;
};

static int tok_ref_cmp(const void *pa, const void *pb)
{
    const struct tok_ref *a = pa, *b = pb;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->b, b->b, n);
    if (c)
        return c;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : (a->id > b->id) - (a->id < b->id);
}

static size_t lcp(const struct tok_ref *a, const struct tok_ref *b)
{
    size_t i = 0;
    while (i < a->len && i < b->len && a->b[i] == b->b[i])
        i++;
    return i;
}

/* Build nodes from the sorted refs (open: the node index per depth). */
static int trie_build(struct jc_vocab *v, const struct tok_ref *refs, int n, size_t total)
{
    v->nodes = malloc(sizeof *v->nodes * (total + 1));
    uint32_t *open = malloc(sizeof *open * ((size_t)v->max_len + 2));
    if (!v->nodes || !open) {
        free(open);
        return CS_ENOMEM;
    }
    uint32_t nn = 0;
    size_t depth = 0;
    for (int i = 0; i < n; i++) {
        size_t keep = i ? lcp(&refs[i - 1], &refs[i]) : 0;
        for (; depth > keep; depth--)
            v->nodes[open[depth]].end = nn;
        for (; depth < refs[i].len; depth++) {
            struct jc_tnode *t = &v->nodes[nn];
            *t = (struct jc_tnode){.tok = -1, .depth = (uint16_t)(depth + 1),
                                   .byte = refs[i].b[depth]};
            open[depth + 1] = nn++;
        }
        struct jc_tnode *last = &v->nodes[open[depth]];
        if (last->n_tok == 0)
            last->tok = i;
        if (last->n_tok < 255)
            last->n_tok++;
        v->ids[i] = refs[i].id;
    }
    for (; depth > 0; depth--)
        v->nodes[open[depth]].end = nn;
    free(open);
    v->n_nodes = nn;
    return CS_OK;
}

/* NODE_NONPLAIN on every node whose subtree holds a non-plain token. */
static void trie_mark(struct jc_vocab *v)
{
    for (uint32_t i = v->n_nodes; i-- > 0;) {
        struct jc_tnode *t = &v->nodes[i];
        for (int k = 0; k < t->n_tok; k++) {
            int32_t id = v->ids[t->tok + k];
            if (!((v->plain_mask[id >> 3] >> (id & 7)) & 1))
                t->flags |= NODE_NONPLAIN;
        }
        /* children: i+1 .. end, each child's flag already final */
        for (uint32_t c = i + 1; c < t->end && !(t->flags & NODE_NONPLAIN); c = v->nodes[c].end)
            t->flags |= v->nodes[c].flags & NODE_NONPLAIN;
    }
}

int jc_vocab_create(struct jc_vocab **out, const struct tokenizer *tok, int n_vocab)
{
    int n_tok = (int)tokenizer_vocab_size(tok);
    if (n_vocab < n_tok || n_vocab <= 0)
        return CS_EINVAL;
    struct jc_vocab *v = calloc(1, sizeof *v);
    struct tok_ref *refs = malloc(sizeof *refs * (size_t)n_tok);
    if (!v || !refs)
        goto nomem;
    v->n_vocab = n_vocab;
    v->tok = tok;
    v->plain_mask = calloc(((size_t)n_vocab + 7) / 8, 1);
    v->ids = malloc(sizeof *v->ids * (size_t)n_tok);
    if (!v->plain_mask || !v->ids)
        goto nomem;
    int n = 0;
    size_t total = 0;
    for (int32_t id = 0; id < n_tok; id++) {
        size_t len = 0;
        const char *b = tokenizer_token_bytes(tok, id, &len);
        if (!b || len == 0 || len > 1024 || tokenizer_is_special(tok, id))
            continue;
        refs[n++] = (struct tok_ref){(const uint8_t *)b, len, id};
        total += len;
        if ((int)len > v->max_len)
            v->max_len = (int)len;
        if (bytes_plain((const uint8_t *)b, len))
            v->plain_mask[id >> 3] |= (uint8_t)(1u << (id & 7));
    }
    qsort(refs, (size_t)n, sizeof *refs, tok_ref_cmp);
    if (trie_build(v, refs, n, total))
        goto nomem;
    trie_mark(v);
    free(refs);
    LOG_DEBUG("constrain", "vocab trie: %d tokens, %u nodes, longest %d bytes", n, v->n_nodes,
              v->max_len);
    *out = v;
    return CS_OK;
nomem:
    free(refs);
    jc_vocab_destroy(v);
    return CS_ENOMEM;
}

void jc_vocab_destroy(struct jc_vocab *v)
{
    if (!v)
        return;
    free(v->nodes);
    free(v->ids);
    free(v->plain_mask);
    free(v);
}

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct jc_vocab *shared_vocab;
static const struct tokenizer *shared_tok;

const struct jc_vocab *jc_vocab_shared(const struct tokenizer *tok, int n_vocab)
{
    pthread_mutex_lock(&shared_mu);
    if (!shared_vocab || shared_tok != tok || shared_vocab->n_vocab != n_vocab) {
        struct jc_vocab *v = NULL;
        if (jc_vocab_create(&v, tok, n_vocab) == CS_OK) {
            /* the previous one may still be in use: kept (leaked) on purpose */
            shared_vocab = v;
            shared_tok = tok;
        }
    }
    const struct jc_vocab *v = shared_tok == tok ? shared_vocab : NULL;
    pthread_mutex_unlock(&shared_mu);
    return v;
}

/* ---- the constraint object ---- */

static int constraint_new(struct jc_constraint **out, struct jc_grammar *g,
                          const struct jc_vocab *v, int32_t end_id)
{
    struct jc_constraint *c = calloc(1, sizeof *c);
    if (!c) {
        jc_grammar_free(g);
        return CS_ENOMEM;
    }
    c->g = g;
    c->v = v;
    c->end_id = end_id;
    jc_state_init(g, &c->st);
    if (v) {
        c->walk = malloc(sizeof *c->walk * ((size_t)v->max_len + 1));
        c->keybuf = malloc(sizeof(struct jc_state) + 1);
        if (!c->walk || !c->keybuf) {
            jc_constraint_free(c);
            return CS_ENOMEM;
        }
    }
    *out = c;
    return CS_OK;
}

int jc_constraint_json(struct jc_constraint **out, const struct jc_vocab *vocab,
                       const cJSON *schema, int32_t end_id, struct cs_error *err)
{
    struct jc_grammar *g = NULL;
    int rc = jc_grammar_json(&g, schema, err);
    return rc ? rc : constraint_new(out, g, vocab, end_id);
}

int jc_constraint_tools(struct jc_constraint **out, const struct jc_vocab *vocab,
                        const cJSON *tools, const char *named, bool parallel, int32_t end_id,
                        struct cs_error *err)
{
    struct jc_grammar *g = NULL;
    int rc = jc_grammar_tools(&g, tools, named, parallel, err);
    return rc ? rc : constraint_new(out, g, vocab, end_id);
}

void jc_constraint_free(struct jc_constraint *c)
{
    if (!c)
        return;
    for (int i = 0; i < JC_CACHE; i++) {
        free(c->cache[i].key);
        free(c->cache[i].mask);
    }
    free(c->walk);
    free(c->keybuf);
    jc_grammar_free(c->g);
    free(c);
}

int jc_constraint_feed(struct jc_constraint *c, const char *bytes, size_t n, size_t *at)
{
    struct jc_state *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return CS_ENOMEM;
    int rc = CS_OK;
    for (size_t i = 0; i < n; i++) {
        jc_state_feed(c->g, &c->st, (uint8_t)bytes[i], tmp);
        jc_state_copy(&c->st, tmp);
        if (c->st.n == 0) {
            if (at)
                *at = i;
            rc = CS_EINVAL;
            break;
        }
    }
    free(tmp);
    return rc;
}

bool jc_constraint_complete(const struct jc_constraint *c)
{
    return jc_state_can_end(c->g, &c->st);
}

/* ---- masks ---- */

static uint64_t key_hash(const uint8_t *k, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    return h;
}

static struct jc_cache_entry *cache_find(struct jc_constraint *c, uint64_t h, int len)
{
    for (int i = 0; i < JC_CACHE; i++) {
        struct jc_cache_entry *e = &c->cache[i];
        if (e->mask && e->hash == h && e->key_len == len && memcmp(e->key, c->keybuf, len) == 0)
            return e;
    }
    return NULL;
}

static void cache_store(struct jc_constraint *c, uint64_t h, int len, const uint8_t *mask,
                        size_t bytes)
{
    struct jc_cache_entry *e = &c->cache[c->cache_next];
    uint8_t *k = realloc(e->key, (size_t)len);
    uint8_t *m = e->mask ? e->mask : malloc(bytes);
    if (!k || !m) {
        e->key = k;
        free(m);
        e->mask = NULL;
        return;
    }
    memcpy(k, c->keybuf, (size_t)len);
    memcpy(m, mask, bytes);
    *e = (struct jc_cache_entry){.hash = h, .key = k, .key_len = len, .mask = m};
    c->cache_next = (c->cache_next + 1) % JC_CACHE;
}

/* The trie walk: every token whose bytes keep the state alive. */
static void mask_walk(struct jc_constraint *c, uint8_t *mask, bool plain)
{
    const struct jc_vocab *v = c->v;
    jc_state_copy(&c->walk[0], &c->st);
    for (uint32_t i = 0; i < v->n_nodes;) {
        const struct jc_tnode *t = &v->nodes[i];
        if (plain && !(t->flags & NODE_NONPLAIN)) {
            i = t->end;
            continue;
        }
        struct jc_state *dst = &c->walk[t->depth];
        jc_state_feed(c->g, &c->walk[t->depth - 1], t->byte, dst);
        if (dst->n == 0) {
            i = t->end;
            continue;
        }
        for (int k = 0; k < t->n_tok; k++) {
            int32_t id = v->ids[t->tok + k];
            mask[id >> 3] |= (uint8_t)(1u << (id & 7));
        }
        i++;
    }
}

int jc_constraint_mask(struct jc_constraint *c, uint8_t *mask, int n_vocab)
{
    if (!c->v || n_vocab != c->v->n_vocab)
        return CS_EINVAL;
    if (c->st.n == 0)
        return CS_ERANGE;
    size_t bytes = ((size_t)n_vocab + 7) / 8;
    int len = jc_state_key(&c->st, c->keybuf);
    uint64_t h = key_hash(c->keybuf, len);
    struct jc_cache_entry *e = cache_find(c, h, len);
    if (e) {
        memcpy(mask, e->mask, bytes);
        c->hits++;
        return CS_OK;
    }
    bool plain = jc_state_plain(&c->st);
    if (plain)
        memcpy(mask, c->v->plain_mask, bytes);
    else
        memset(mask, 0, bytes);
    mask_walk(c, mask, plain);
    if (c->end_id >= 0 && c->end_id < n_vocab && jc_state_can_end(c->g, &c->st))
        mask[c->end_id >> 3] |= (uint8_t)(1u << (c->end_id & 7));
    c->computed++;
    cache_store(c, h, len, mask, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (mask[i])
            return CS_OK;
    return CS_ERANGE;
}

int jc_constraint_advance(struct jc_constraint *c, int32_t token)
{
    if (c->st.n == 0)
        return CS_EINVAL;
    if (token == c->end_id)
        return jc_state_can_end(c->g, &c->st) ? CS_OK : CS_EINVAL;
    size_t len = 0;
    const char *b = c->v ? tokenizer_token_bytes(c->v->tok, token, &len) : NULL;
    if (!b || len == 0 || tokenizer_is_special(c->v->tok, token)) {
        c->st.n = 0;
        return CS_EINVAL;
    }
    return jc_constraint_feed(c, b, len, NULL);
}

void jc_constraint_cache_stats(const struct jc_constraint *c, long *computed, long *hits)
{
    *computed = c->computed;
    *hits = c->hits;
}

static int ops_mask(void *c, uint8_t *mask, int n_vocab)
{
    return jc_constraint_mask(c, mask, n_vocab);
}

static int ops_advance(void *c, int32_t token) { return jc_constraint_advance(c, token); }

static void ops_free(void *c) { jc_constraint_free(c); }

const struct engine_constraint_ops jc_engine_ops = {ops_mask, ops_advance, ops_free};
