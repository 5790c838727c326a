/* test_scheduler.c - proves the step policy of coordinator/scheduler.h:
 * decodes first and one token each, prefill chunks on the fixed grid of
 * prefill_chunk, oldest first with no overtaking, the budget never exceeded,
 * sampling exactly when an entry reaches the known tokens, and the budget
 * rule that always leaves room for one whole chunk. */
#include "coordinator/scheduler.h"
#include "test_util.h"

static void test_scheduler_decodes_then_prefill(void)
{
    struct sched_seq s[3] = {
        {.n_prompt = 20, .n_ctx = 20, .n_done = 0},   /* prefill, oldest */
        {.n_prompt = 5, .n_ctx = 7, .n_done = 6},     /* decoding */
        {.n_prompt = 9, .n_ctx = 9, .n_done = 8},     /* last prefill token */
    };
    struct sched_limits lim = {.step_tokens = 12, .prefill_chunk = 8};
    struct sched_entry e[3];
    int n = sched_plan(s, 3, &lim, e);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(e[0].seq, 1);       /* the decode comes first */
    CHECK_EQ_INT(e[0].first, 6);
    CHECK_EQ_INT(e[0].n, 1);
    CHECK(e[0].sample);
    CHECK_EQ_INT(e[1].seq, 0);       /* then the oldest prefill: a whole chunk */
    CHECK_EQ_INT(e[1].n, 8);
    CHECK(!e[1].sample);
    CHECK_EQ_INT(e[2].seq, 2);       /* then the next one: 1 token left, it samples */
    CHECK_EQ_INT(e[2].first, 8);
    CHECK_EQ_INT(e[2].n, 1);
    CHECK(e[2].sample);
}

static void test_scheduler_no_overtaking(void)
{
    struct sched_seq s[2] = {
        {.n_prompt = 30, .n_ctx = 30, .n_done = 0},
        {.n_prompt = 2, .n_ctx = 2, .n_done = 0},
    };
    struct sched_limits lim = {.step_tokens = 6, .prefill_chunk = 8};
    struct sched_entry e[2];
    /* the oldest chunk (8) does not fit in 6: nothing else may pass it */
    CHECK_EQ_INT(sched_plan(s, 2, &lim, e), 0);
    lim.step_tokens = 9;
    CHECK_EQ_INT(sched_plan(s, 2, &lim, e), 1);
    CHECK_EQ_INT(e[0].seq, 0);
}

static void test_scheduler_chunk_grid(void)
{
    /* a prompt resumed at 13 goes to 16 (grid of 8), then 16..24, 24..27 */
    struct sched_seq s = {.n_prompt = 27, .n_ctx = 27, .n_done = 13};
    struct sched_limits lim = {.step_tokens = 100, .prefill_chunk = 8};
    struct sched_entry e;
    int firsts[] = {13, 16, 24}, ns[] = {3, 8, 3};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(sched_plan(&s, 1, &lim, &e), 1);
        CHECK_EQ_INT(e.first, firsts[i]);
        CHECK_EQ_INT(e.n, ns[i]);
        CHECK_EQ_INT(e.sample, i == 2);
        s.n_done += e.n;
    }
    CHECK_EQ_INT(sched_plan(&s, 1, &lim, &e), 0);   /* nothing left to run */
}

static void test_scheduler_budget(void)
{
    struct sched_seq s[6];
    for (int i = 0; i < 6; i++)
        s[i] = (struct sched_seq){.n_prompt = 4, .n_ctx = 5, .n_done = 4};
    struct sched_limits lim = {.step_tokens = 4, .prefill_chunk = 8};
    struct sched_entry e[6];
    CHECK_EQ_INT(sched_plan(s, 6, &lim, e), 4);   /* decodes are capped by the budget too */
    CHECK_EQ_INT(sched_step_budget(10, 8, 3), 10);
    CHECK_EQ_INT(sched_step_budget(4, 8, 3), 10);
    CHECK_EQ_INT(sched_step_budget(0, 0, 0), 1);
    CHECK_EQ_INT(sched_pages_for(0, 16), 0);
    CHECK_EQ_INT(sched_pages_for(16, 16), 1);
    CHECK_EQ_INT(sched_pages_for(17, 16), 2);
    CHECK_EQ_INT(sched_plan(s, 6, NULL, e), 0);
}

int main(void)
{
    RUN(test_scheduler_decodes_then_prefill);
    RUN(test_scheduler_no_overtaking);
    RUN(test_scheduler_chunk_grid);
    RUN(test_scheduler_budget);
    return test_report();
}
