/* kv_pages.c - the free-list page allocator of kv_pages.h. */
#include "kv_pages.h"

#include <stdlib.h>

#include "../common/status.h"

int kv_pages_init(struct kv_pages *p, int n_pages)
{
    p->n_pages = 0;
    p->n_free = 0;
    p->free_ids = NULL;
    if (n_pages <= 0)
        return CS_EINVAL;
    p->free_ids = malloc((size_t)n_pages * sizeof *p->free_ids);
    if (!p->free_ids)
        return CS_ENOMEM;
    p->n_pages = n_pages;
    /* hand out low ids first */
    for (int i = 0; i < n_pages; i++)
        p->free_ids[i] = n_pages - 1 - i;
    p->n_free = n_pages;
    return CS_OK;
}

void kv_pages_deinit(struct kv_pages *p)
{
    free(p->free_ids);
    p->free_ids = NULL;
    p->n_pages = p->n_free = 0;
}

int kv_pages_alloc(struct kv_pages *p, int32_t *table, int n_have, int n_need)
{
    if (n_have < 0 || n_need < n_have)
        return CS_EINVAL;
    if (n_need - n_have > p->n_free)
        return CS_EFULL;
    for (int i = n_have; i < n_need; i++)
        table[i] = p->free_ids[--p->n_free];
    return CS_OK;
}

void kv_pages_free(struct kv_pages *p, const int32_t *table, int n)
{
    for (int i = 0; i < n && p->n_free < p->n_pages; i++)
        if (table[i] >= 0 && table[i] < p->n_pages)
            p->free_ids[p->n_free++] = table[i];
}

int kv_pages_for_tokens(int n_tokens, int page_size)
{
    if (n_tokens <= 0 || page_size <= 0)
        return 0;
    return (n_tokens + page_size - 1) / page_size;
}
