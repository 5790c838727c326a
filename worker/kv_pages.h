/* kv_pages.h - a simple KV page allocator for single-process users (tests,
 * `cmpserve generate`). When serving, the coordinator's scheduler owns page
 * allocation and sends page tables with each step; this helper does the same
 * for callers that drive struct cs_batch themselves.
 *
 * Pages are indices 0..n_pages-1, shared by every attention layer of a slice
 * (cs_state allocates kv_pages pages per layer, all indexed alike). */
#ifndef CS_KV_PAGES_H
#define CS_KV_PAGES_H

#include <stdint.h>

struct kv_pages {
    int n_pages;
    int n_free;
    int32_t *free_ids;     /* stack of free page ids */
};

/* Set up n_pages free pages. CS_EINVAL for n_pages <= 0, CS_ENOMEM. */
int kv_pages_init(struct kv_pages *p, int n_pages);
void kv_pages_deinit(struct kv_pages *p);
/* Grow a sequence's page table from n_have to n_need pages (table has room
 * for n_need entries). CS_EFULL, leaving the table as it was, when too few
 * pages are free. */
int kv_pages_alloc(struct kv_pages *p, int32_t *table, int n_have, int n_need);
/* Return the n pages of a sequence's table. */
void kv_pages_free(struct kv_pages *p, const int32_t *table, int n);
/* Pages needed to hold n_tokens tokens. */
int kv_pages_for_tokens(int n_tokens, int page_size);

#endif
