/* json_constrain.c - the byte steps of the constrained-decoding automaton
 * (json_constrain_int.h): a set of alternative frame stacks, each fed one
 * byte at a time. Frames: VALUE (a value of a schema node not begun yet),
 * OBJ, ARR, STR (inside a string), NUM (a number; ends lazily, on the first
 * byte that cannot extend it, which is then fed to the parent), LIT (one of
 * a set of literal texts: true/false/null, enum values, object keys, tool
 * tags; ends lazily too), TOOL (the tool-call sequence) and RAW (a tool
 * parameter's free text up to "</parameter>\n"). An anyOf VALUE splits its
 * alternative into one per branch at its first byte. */
#include <stddef.h>
#include <string.h>

#include "coordinator/json_constrain_int.h"

enum { ALIVE, DEAD, EXPAND };

/* object / array phases */
enum { P_OPEN, P_AFTER_KEY, P_WAIT_VAL, P_AFTER_VAL, P_COMMA, P_WAIT_KEY };
/* tool phases */
enum { T_NAME, T_NAME_WAIT, T_PARAMS, T_PARAMS_WAIT, T_RAW_WAIT, T_AFTER, T_NEXT_WAIT };

static const char JC_RAW_END[] = "</parameter>\n";
#define JC_RAW_END_LEN 13

static bool is_ws(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int ws_take(struct jc_stack *s)
{
    if (s->ws >= JC_MAX_WS)
        return DEAD;
    s->ws++;
    return ALIVE;
}

static struct jc_frame *push(struct jc_stack *s, int kind, int node)
{
    if (s->depth >= JC_MAX_DEPTH)
        return NULL;
    struct jc_frame *f = &s->f[s->depth++];
    memset(f, 0, sizeof *f);
    f->kind = (uint8_t)kind;
    f->node = (uint16_t)node;
    return f;
}

static struct jc_frame *push_lit(struct jc_stack *s, const struct jc_grammar *g, int set,
                                 uint64_t cand, int pos)
{
    struct jc_frame *f = push(s, JC_F_LIT, set);
    if (!f)
        return NULL;
    int n = g->lits[set].n;
    f->cand = cand & (n >= 64 ? ~0ull : ((1ull << n) - 1));
    f->a = (uint16_t)pos;
    return f;
}

/* ---- completion of a value: tell the parent ---- */

static void tool_done(const struct jc_grammar *g, struct jc_frame *p, int matched)
{
    switch (p->sub) {
    case T_NAME_WAIT:
        p->a = (uint16_t)matched;
        p->sub = T_PARAMS;
        break;
    case T_PARAMS_WAIT:
        p->sub = matched == g->lits[g->tool_params[p->a]].n - 1 ? T_AFTER : T_RAW_WAIT;
        break;
    case T_RAW_WAIT:
        p->sub = T_PARAMS;
        break;
    case T_NEXT_WAIT:
        p->sub = T_NAME;
        break;
    }
}

/* Pop the finished top frame (matched: the literal it matched, or -1). */
static void value_done(const struct jc_grammar *g, struct jc_stack *s, int matched)
{
    s->depth--;
    if (s->depth == 0)
        return;
    struct jc_frame *p = &s->f[s->depth - 1];
    if (p->kind == JC_F_OBJ) {
        if (p->sub == P_WAIT_KEY) {
            p->sub = P_AFTER_KEY;
            if (g->nodes[p->node].closed) {
                p->b = (uint16_t)matched;
                p->a = (uint16_t)(matched + 1);
            }
        } else {
            p->sub = P_AFTER_VAL;
        }
    } else if (p->kind == JC_F_ARR) {
        p->a++;
        p->sub = P_AFTER_VAL;
    } else if (p->kind == JC_F_TOOL) {
        tool_done(g, p, matched);
    }
}

/* ---- objects ---- */

/* Keys allowed at cursor: from it up to and including the next required. */
static uint64_t obj_key_cand(const struct jc_grammar *g, const struct jc_node *n, int cursor)
{
    uint64_t cand = 0;
    for (int i = cursor; i < n->n_props; i++) {
        cand |= 1ull << i;
        if (g->props[n->props + i].required)
            break;
    }
    return cand;
}

static bool obj_closable(const struct jc_grammar *g, const struct jc_node *n, int cursor)
{
    if (!n->closed)
        return true;
    for (int i = cursor; i < n->n_props; i++)
        if (g->props[n->props + i].required)
            return false;
    return true;
}

static int obj_key_start(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f)
{
    const struct jc_node *n = &g->nodes[f->node];
    f->sub = P_WAIT_KEY;
    if (!n->closed)
        return push(s, JC_F_STR, 0) ? ALIVE : DEAD;
    uint64_t cand = obj_key_cand(g, n, f->a);
    if (!cand)
        return DEAD;
    return push_lit(s, g, n->keys, cand, 1) ? ALIVE : DEAD;
}

static int obj_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    const struct jc_node *n = &g->nodes[f->node];
    if (is_ws(c))
        return ws_take(s);
    switch (f->sub) {
    case P_OPEN:
    case P_AFTER_VAL:
        if (c == '}' && obj_closable(g, n, f->a)) {
            value_done(g, s, -1);
            return ALIVE;
        }
        if (f->sub == P_OPEN && c == '"')
            return obj_key_start(g, s, f);
        if (f->sub == P_AFTER_VAL && c == ',' && (!n->closed || f->a < n->n_props)) {
            f->sub = P_COMMA;
            return ALIVE;
        }
        return DEAD;
    case P_COMMA:
        return c == '"' ? obj_key_start(g, s, f) : DEAD;
    case P_AFTER_KEY:
        if (c != ':')
            return DEAD;
        f->sub = P_WAIT_VAL;
        return push(s, JC_F_VALUE, n->closed ? g->props[n->props + f->b].node : n->values) ? ALIVE
                                                                                           : DEAD;
    }
    return DEAD;
}

/* ---- arrays: returns EXPAND-free results; -2 asks to feed c again ---- */

#define REFEED (-2)

static int arr_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    const struct jc_node *n = &g->nodes[f->node];
    if (is_ws(c))
        return ws_take(s);
    if (c == ']' && f->sub != P_COMMA && f->a >= n->min_items) {
        value_done(g, s, -1);
        return ALIVE;
    }
    if (f->sub == P_AFTER_VAL) {
        if (c != ',' || f->a >= n->max_items)
            return DEAD;
        f->sub = P_COMMA;
        return ALIVE;
    }
    if (f->a >= n->max_items || c == ']')
        return DEAD;
    f->sub = P_WAIT_VAL;
    return push(s, JC_F_VALUE, n->items) ? REFEED : DEAD;
}

/* ---- strings (and the UTF-8 of raw text) ---- */

/* UTF-8 continuation check; a = bytes still due, b = range of the next. */
static int utf8_cont(struct jc_frame *f, int c)
{
    static const uint8_t lo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
    static const uint8_t hi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
    if (c < lo[f->b] || c > hi[f->b])
        return DEAD;
    f->b = 0;
    f->a--;
    return ALIVE;
}

/* A byte >= 0x80 starting a character. */
static int utf8_lead(struct jc_frame *f, int c)
{
    if (c >= 0xC2 && c <= 0xDF)
        f->a = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        f->a = 2, f->b = c == 0xE0 ? 1 : c == 0xED ? 2 : 0;
    else if (c >= 0xF0 && c <= 0xF4)
        f->a = 3, f->b = c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0;
    else
        return DEAD;
    return ALIVE;
}

enum { E_NONE = 0, E_BS = 1, E_HEX0 = 10 };

static int str_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    if (f->a)
        return utf8_cont(f, c);
    if (f->sub == E_BS) {
        if (c == 'u')
            f->sub = E_HEX0 + 4;
        else if (strchr("\"\\/bfnrt", c) && c)
            f->sub = E_NONE;
        else
            return DEAD;
        return ALIVE;
    }
    if (f->sub > E_HEX0) {
        if (!is_hex(c))
            return DEAD;
        f->sub = f->sub - 1 == E_HEX0 ? E_NONE : f->sub - 1;
        return ALIVE;
    }
    if (c == '"') {
        value_done(g, s, -1);
        return ALIVE;
    }
    if (c == '\\') {
        f->sub = E_BS;
        return ALIVE;
    }
    if (c < 0x20)
        return DEAD;
    return c < 0x80 ? ALIVE : utf8_lead(f, c);
}

/* Tool parameter text: UTF-8 up to and including "</parameter>\n". */
static int raw_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    if (f->a)
        return utf8_cont(f, c);
    if (c >= 0x80) {
        f->sub = 0;
        return utf8_lead(f, c);
    }
    if (c == JC_RAW_END[f->sub])
        f->sub++;
    else
        f->sub = c == '<' ? 1 : 0;
    if (f->sub == JC_RAW_END_LEN)
        value_done(g, s, -1);
    return ALIVE;
}

/* ---- numbers: sub is the state of the JSON number automaton ---- */

enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static bool num_final(int st) { return st == N_ZERO || st == N_INT || st == N_FRAC || st == N_EXP; }

/* The next number state after c, or -1 when c does not extend the number. */
static int num_next(int st, int c, bool integer)
{
    switch (st) {
    case N_START:
        if (c == '-')
            return N_MINUS;
        /* fall through */
    case N_MINUS:
        return c == '0' ? N_ZERO : (is_digit(c) ? N_INT : -1);
    case N_INT:
        if (is_digit(c))
            return N_INT;
        /* fall through */
    case N_ZERO:
        if (integer)
            return -1;
        return c == '.' ? N_DOT : (c == 'e' || c == 'E') ? N_E : -1;
    case N_DOT:
        return is_digit(c) ? N_FRAC : -1;
    case N_FRAC:
        return is_digit(c) ? N_FRAC : (c == 'e' || c == 'E') ? N_E : -1;
    case N_E:
        if (c == '+' || c == '-')
            return N_ESIGN;
        /* fall through */
    case N_ESIGN:
    case N_EXP:
        return is_digit(c) ? N_EXP : -1;
    }
    return -1;
}

static int num_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    int nx = f->a < JC_MAX_NUM && c >= 0 ? num_next(f->sub, c, f->b) : -1;
    if (nx >= 0) {
        f->sub = (uint8_t)nx;
        f->a++;
        return ALIVE;
    }
    if (!num_final(f->sub))
        return DEAD;
    value_done(g, s, -1);
    return REFEED;
}

/* ---- literals ---- */

static int lit_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    const struct jc_litset *L = &g->lits[f->node];
    uint64_t next = 0, complete = 0;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (L->len[i] > f->a && c >= 0 && (uint8_t)L->text[i][f->a] == c)
            next |= 1ull << i;
        else if (L->len[i] == f->a)
            complete |= 1ull << i;
    }
    if (next) {
        f->cand = next;
        f->a++;
        return ALIVE;
    }
    if (!complete)
        return DEAD;
    value_done(g, s, __builtin_ctzll(complete));
    return REFEED;
}

/* ---- values and tools ---- */

/* Begin a value of f->node with its first (non-whitespace) byte c. */
static int value_start(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f, int c)
{
    const struct jc_node *n = &g->nodes[f->node];
    if (n->kind == JC_N_ANYOF)
        return EXPAND;
    if (n->kind == JC_N_ENUM) {
        int set = n->lit;
        s->depth--;
        return push_lit(s, g, set, ~0ull, 0) ? REFEED : DEAD;
    }
    int t = n->types;
    if (c == '{' && (t & JC_T_OBJ)) {
        f->kind = JC_F_OBJ, f->sub = P_OPEN, f->a = f->b = 0;
    } else if (c == '[' && (t & JC_T_ARR)) {
        f->kind = JC_F_ARR, f->sub = P_OPEN, f->a = 0;
    } else if (c == '"' && (t & JC_T_STR)) {
        f->kind = JC_F_STR, f->sub = 0, f->a = f->b = 0;
    } else if ((c == '-' || is_digit(c)) && (t & (JC_T_INT | JC_T_NUM))) {
        f->kind = JC_F_NUM, f->sub = N_START, f->a = 0, f->b = !(t & JC_T_NUM);
        return REFEED;
    } else if (c == 't' || c == 'f' || c == 'n') {
        uint64_t cand = ((t & JC_T_BOOL) ? 3u : 0u) | ((t & JC_T_NULL) ? 4u : 0u);
        s->depth--;
        return cand && push_lit(s, g, 0, cand, 0) ? REFEED : DEAD;
    } else {
        return DEAD;
    }
    return ALIVE;
}

static int tool_byte(const struct jc_grammar *g, struct jc_stack *s, struct jc_frame *f)
{
    switch (f->sub) {
    case T_NAME:
        f->sub = T_NAME_WAIT;
        return push_lit(s, g, g->tool_names, ~0ull, 0) ? REFEED : DEAD;
    case T_PARAMS:
        f->sub = T_PARAMS_WAIT;
        if (!push_lit(s, g, g->tool_params[f->a], ~0ull, 0))
            return DEAD;
        return REFEED;
    case T_RAW_WAIT:
        return push(s, JC_F_RAW, 0) ? REFEED : DEAD;
    case T_AFTER:
        if (!g->parallel)
            return DEAD;
        f->sub = T_NEXT_WAIT;
        return push_lit(s, g, g->tool_next, ~0ull, 0) ? REFEED : DEAD;
    }
    return DEAD;
}

static int stack_byte(const struct jc_grammar *g, struct jc_stack *s, int c)
{
    if (s->depth == 0)
        return is_ws(c) ? ws_take(s) : DEAD;
    struct jc_frame *f = &s->f[s->depth - 1];
    switch (f->kind) {
    case JC_F_VALUE:
        if (is_ws(c))
            return ws_take(s);
        return value_start(g, s, f, c);
    case JC_F_OBJ:
        return obj_byte(g, s, f, c);
    case JC_F_ARR:
        return arr_byte(g, s, f, c);
    case JC_F_STR:
        return str_byte(g, s, f, c);
    case JC_F_NUM:
        return num_byte(g, s, f, c);
    case JC_F_LIT:
        return lit_byte(g, s, f, c);
    case JC_F_TOOL:
        return tool_byte(g, s, f);
    case JC_F_RAW:
        return raw_byte(g, s, f, c);
    }
    return DEAD;
}

/* Feed c to one stack (in place); ALIVE, DEAD or EXPAND (top is an anyOf
 * value that c begins). */
static int stack_feed(const struct jc_grammar *g, struct jc_stack *s, int c)
{
    if (!is_ws(c))
        s->ws = 0;
    for (int guard = 0; guard < 4 * JC_MAX_DEPTH; guard++) {
        int r = stack_byte(g, s, c);
        if (r != REFEED)
            return r;
    }
    return DEAD;
}

static void alt_feed(const struct jc_grammar *g, const struct jc_stack *src, int c,
                     struct jc_state *dst, int level)
{
    if (dst->n >= JC_MAX_ALT || level > 8)
        return;
    struct jc_stack *s = &dst->s[dst->n];
    size_t used = offsetof(struct jc_stack, f) + sizeof s->f[0] * src->depth;
    memcpy(s, src, used);
    int r = stack_feed(g, s, c);
    if (r == ALIVE) {
        dst->n++;
        return;
    }
    if (r != EXPAND)
        return;
    const struct jc_node *n = &g->nodes[s->f[s->depth - 1].node];
    struct jc_stack tmp;
    memcpy(&tmp, s, offsetof(struct jc_stack, f) + sizeof s->f[0] * s->depth);
    for (int i = 0; i < n->n_alts; i++) {
        tmp.f[tmp.depth - 1].node = (uint16_t)g->alts[n->alts + i];
        alt_feed(g, &tmp, c, dst, level + 1);
    }
}

void jc_state_feed(const struct jc_grammar *g, const struct jc_state *src, int c,
                   struct jc_state *dst)
{
    dst->n = 0;
    for (int i = 0; i < src->n; i++)
        alt_feed(g, &src->s[i], c, dst, 0);
}

void jc_state_copy(struct jc_state *dst, const struct jc_state *src)
{
    dst->n = src->n;
    for (int i = 0; i < src->n; i++)
        memcpy(&dst->s[i], &src->s[i],
               offsetof(struct jc_stack, f) + sizeof src->s[i].f[0] * src->s[i].depth);
}

void jc_state_init(const struct jc_grammar *g, struct jc_state *st)
{
    memset(st, 0, offsetof(struct jc_state, s) + sizeof st->s[0]);
    st->n = 1;
    struct jc_stack *s = &st->s[0];
    if (g->mode == JC_MODE_TOOLS) {
        struct jc_frame *f = push(s, JC_F_TOOL, 0);
        f->sub = g->tool_start < 0 ? T_NAME : T_PARAMS;
        f->a = (uint16_t)(g->tool_start < 0 ? 0 : g->tool_start);
    } else {
        push(s, JC_F_VALUE, g->root);
    }
}

/* ---- end, plainness, keys ---- */

static bool stack_can_end(const struct jc_grammar *g, const struct jc_stack *src)
{
    struct jc_stack s;
    memcpy(&s, src, offsetof(struct jc_stack, f) + sizeof s.f[0] * src->depth);
    for (int guard = 0; guard < 2 * JC_MAX_DEPTH; guard++) {
        if (s.depth == 0)
            return true;
        struct jc_frame *f = &s.f[s.depth - 1];
        if (f->kind == JC_F_TOOL)
            return f->sub == T_AFTER;
        if (f->kind == JC_F_NUM && num_byte(g, &s, f, JC_END) == REFEED)
            continue;
        if (f->kind == JC_F_LIT && lit_byte(g, &s, f, JC_END) == REFEED)
            continue;
        return false;
    }
    return false;
}

bool jc_state_can_end(const struct jc_grammar *g, const struct jc_state *st)
{
    for (int i = 0; i < st->n; i++)
        if (stack_can_end(g, &st->s[i]))
            return true;
    return false;
}

bool jc_state_plain(const struct jc_state *st)
{
    if (st->n != 1 || st->s[0].depth == 0)
        return false;
    const struct jc_frame *f = &st->s[0].f[st->s[0].depth - 1];
    return f->kind == JC_F_STR && f->sub == 0 && f->a == 0;
}

int jc_state_key(const struct jc_state *st, uint8_t *buf)
{
    int len = 0;
    buf[len++] = (uint8_t)st->n;
    for (int i = 0; i < st->n; i++) {
        size_t used = offsetof(struct jc_stack, f) + sizeof st->s[i].f[0] * st->s[i].depth;
        memcpy(buf + len, &st->s[i], used);
        len += (int)used;
    }
    return len;
}
