/* json_constrain_int.h - the inside of json_constrain: the compiled grammar
 * (json_constrain_schema.c), the automaton state and its byte steps
 * (json_constrain.c), shared with the mask and constraint object
 * (json_constrain_mask.c). */
#ifndef CS_JSON_CONSTRAIN_INT_H
#define CS_JSON_CONSTRAIN_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/json_constrain.h"

#define JC_MAX_ALT 8        /* alternatives (anyOf branches) alive at once */
#define JC_MAX_LIT 64       /* literals per set (enum values, keys, tool names) */
#define JC_END (-1)         /* the end of the text, as a byte */

/* type bits */
enum {
    JC_T_NULL = 1, JC_T_BOOL = 2, JC_T_INT = 4, JC_T_NUM = 8,
    JC_T_STR = 16, JC_T_ARR = 32, JC_T_OBJ = 64, JC_T_ALL = 127,
};

enum jc_node_kind { JC_N_TYPES, JC_N_ENUM, JC_N_ANYOF };

/* A schema node. Node 0 is "any JSON value". */
struct jc_node {
    uint8_t kind;
    uint8_t types;          /* JC_N_TYPES */
    bool closed;            /* object: only the listed properties */
    int n_props, props;     /* object: props[props .. +n_props) of the grammar */
    int keys;               /* object: literal set of the quoted names */
    int values;             /* open object: node of the values */
    int items;              /* array: node of the items */
    int min_items, max_items;
    int lit;                /* JC_N_ENUM: literal set */
    int n_alts, alts;       /* JC_N_ANYOF: alts[alts .. +n_alts) */
};

struct jc_prop {
    int node;
    bool required;
};

struct jc_litset {
    int n;
    char *text[JC_MAX_LIT];
    uint16_t len[JC_MAX_LIT];
};

enum jc_mode { JC_MODE_JSON, JC_MODE_TOOLS };

struct jc_grammar {
    enum jc_mode mode;
    struct jc_node *nodes;
    int n_nodes, cap_nodes;
    struct jc_prop *props;
    int n_props, cap_props;
    int *alts;
    int n_alts, cap_alts;
    struct jc_litset *lits;  /* 0: true/false/null */
    int n_lits, cap_lits;
    int root;
    /* tools: literal sets of the names ("NAME>\n"), of each tool's parameter
     * headers plus the closing tags (last entry), of "\n<tool_call>..." */
    int tool_names, tool_next;
    int *tool_params;        /* per tool */
    int n_tools;
    int tool_start;          /* -1: at the name; else the named tool */
    bool parallel;
};

/* frame kinds */
enum { JC_F_VALUE, JC_F_OBJ, JC_F_ARR, JC_F_STR, JC_F_NUM, JC_F_LIT, JC_F_TOOL, JC_F_RAW };

struct jc_frame {
    uint16_t node;          /* schema node; JC_F_LIT: literal set */
    uint8_t kind;
    uint8_t sub;            /* phase / escape / number state */
    uint16_t a, b;          /* cursor, count, position, UTF-8 state */
    uint32_t pad;
    uint64_t cand;          /* JC_F_LIT: candidates still matching */
};

/* One alternative: a stack of frames; depth 0 = the value is complete. */
struct jc_stack {
    uint8_t depth;
    uint8_t ws;             /* consecutive whitespace bytes */
    uint8_t pad[6];
    struct jc_frame f[JC_MAX_DEPTH];
};

struct jc_state {
    int n;                  /* alternatives; 0 = dead */
    struct jc_stack s[JC_MAX_ALT];
};

/* json_constrain_schema.c */
void jc_grammar_free(struct jc_grammar *g);
int jc_grammar_json(struct jc_grammar **out, const cJSON *schema, struct cs_error *err);
int jc_grammar_tools(struct jc_grammar **out, const cJSON *tools, const char *named,
                     bool parallel, struct cs_error *err);

/* json_constrain.c */
/* The start state of g. */
void jc_state_init(const struct jc_grammar *g, struct jc_state *st);
/* dst = src fed with byte c (0..255); dst->n == 0 when dead. */
void jc_state_feed(const struct jc_grammar *g, const struct jc_state *src, int c,
                   struct jc_state *dst);
void jc_state_copy(struct jc_state *dst, const struct jc_state *src);
/* True when some alternative is complete. */
bool jc_state_can_end(const struct jc_grammar *g, const struct jc_state *st);
/* True when every plain string byte (see jc_byte_plain) leaves st as is. */
bool jc_state_plain(const struct jc_state *st);
/* Serialize st (the cache key) into buf (sizeof(struct jc_state) bytes);
 * returns the length. */
int jc_state_key(const struct jc_state *st, uint8_t *buf);

#endif
