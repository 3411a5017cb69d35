/* The harvester's rules on scripted side tasks (steps that sleep a given time): the state machine
 * (created -> paused <-> running -> finished, a task paused in the middle and resumed with its state
 * until it finishes, finalize once), the memory refusal (not even initialised), a step that overruns
 * its learned cost benched from the next bubble, priorities, and a destroy that stops an unfinished
 * task. Times are generous (steps of 1 ms, an overrun of 40 ms) so a loaded machine cannot flip a
 * verdict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>

#include <cmocka.h>

#include "strata/harvest.h"

typedef struct scripted {
    int steps_total;     /* finished after this many (0: never) */
    int done;            /* steps run: the state kept between bubbles */
    int long_step;       /* this step (1-based) sleeps 40 ms (0: none) */
    int inits, pauses, resumes, finals;
    int *log, *nlog, tag; /* order of steps across tasks */
} scripted_t;

static void sleep_ms(double ms)
{
    struct timespec ts = {0, (long)(ms * 1e6)};
    nanosleep(&ts, NULL);
}

static strata_status_t s_init(void *p)
{
    ((scripted_t *)p)->inits++;
    return STRATA_OK;
}
static strata_status_t s_step(void *p)
{
    scripted_t *s = p;
    s->done++;
    if (s->log)
        s->log[(*s->nlog)++] = s->tag;
    sleep_ms(s->done == s->long_step ? 40 : 1);
    return STRATA_OK;
}
static bool s_finished(const void *p)
{
    const scripted_t *s = p;
    return s->steps_total && s->done >= s->steps_total;
}
static void s_pause(void *p)
{
    ((scripted_t *)p)->pauses++;
}
static void s_resume(void *p)
{
    ((scripted_t *)p)->resumes++;
}
static void s_final(void *p)
{
    ((scripted_t *)p)->finals++;
}

/* A bubble of budget_s seconds with mem bytes free, without a poll. */
static double bubble(strata_harvester_t *h, double budget_s, size_t mem)
{
    strata_harvest_bubble_t b = {.budget_s = budget_s, .mem_free = mem};
    return strata_harvester_bubble(h, &b);
}

static strata_side_task_ops_t ops(size_t mem)
{
    return (strata_side_task_ops_t){.name = "scripted", .mem_bytes = mem, .init = s_init,
                                    .step = s_step, .is_finished = s_finished, .pause = s_pause,
                                    .resume = s_resume, .finalize = s_final};
}

static void test_state_machine(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    scripted_t s = {.steps_total = 12};
    strata_side_task_ops_t o = ops(0);
    int id = -1;
    assert_int_equal(strata_harvester_add(h, &o, &s, 0, &id), STRATA_OK);
    assert_int_equal(strata_harvester_state(h, id), STRATA_TASK_CREATED);
    // A bubble of 4 ms: the first step (the measurement), then steps while they fit.
    bubble(h, 0.004, 1 << 20);
    assert_int_equal(s.inits, 1);
    assert_true(s.done >= 1 && s.done < 12);
    assert_int_equal(strata_harvester_state(h, id), STRATA_TASK_PAUSED);
    assert_int_equal(s.pauses, 1); // paused at the bubble's end, in the middle of the task
    int after_first = s.done;
    while (strata_harvester_state(h, id) != STRATA_TASK_FINISHED)
        bubble(h, 0.5, 1 << 20);
    assert_int_equal(s.done, 12); // resumed with its state: not one step more or less
    assert_true(s.resumes >= 2 && s.done > after_first);
    assert_int_equal(s.inits, 1);
    assert_int_equal(s.finals, 1);
    bubble(h, 0.5, 1 << 20); // nothing left to run
    assert_int_equal(s.done, 12);
    strata_harvest_stats_t st = strata_harvester_stats(h);
    assert_int_equal((int)st.steps, 12);
    assert_true(st.harvested_s > 0.010 && st.harvested_s <= st.bubble_s);
    strata_harvester_destroy(h);
    assert_int_equal(s.finals, 1); // finalized once, at the finish
}

static void test_memory_refusal(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    scripted_t s = {0};
    strata_side_task_ops_t o = ops(1000);
    int id;
    assert_int_equal(strata_harvester_add(h, &o, &s, 0, &id), STRATA_OK);
    assert_true(bubble(h, 0.05, 999) == 0.0);
    assert_int_equal(s.inits, 0); // not even initialised
    assert_int_equal(strata_harvester_state(h, id), STRATA_TASK_CREATED);
    assert_int_equal((int)strata_harvester_stats(h).refused_memory, 1);
    bubble(h, 0.05, 1000);
    assert_int_equal(s.inits, 1);
    assert_true(s.done >= 1);
    int done = s.done;
    bubble(h, 0.05, 10); // initialised, but this bubble has no room for it
    assert_int_equal(s.done, done);
    strata_harvester_destroy(h);
    assert_int_equal(s.finals, 1); // stopped unfinished: finalized
}

static void test_overrun_benched(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    scripted_t s = {.long_step = 4};
    strata_side_task_ops_t o = ops(0);
    int id;
    assert_int_equal(strata_harvester_add(h, &o, &s, 0, &id), STRATA_OK);
    // Bubbles of 20 ms until the long step (40 ms) has run past one's end; the bubble after it
    // runs none of the task's steps.
    int guard = 0;
    while (s.done < s.long_step && guard++ < 100)
        bubble(h, 0.02, 1 << 20);
    assert_int_equal(s.done, s.long_step); // the overrun ends the task's bubble at once
    assert_true(strata_harvester_stats(h).overruns >= 1);
    bubble(h, 0.2, 1 << 20);
    assert_int_equal(s.done, s.long_step); // benched
    assert_true(strata_harvester_stats(h).benched >= 1);
    assert_true(strata_harvester_step_cost(h, id) >= 0.035); // it learned the long step
    bubble(h, 0.2, 1 << 20);
    assert_true(s.done > s.long_step); // back after one bubble out
    strata_harvester_destroy(h);
}

/* An overrun that still ends inside its bubble cost the training nothing: not benched, but its
 * learned cost rises, so a bubble too short for it is left alone. */
static void test_overrun_inside(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    scripted_t s = {.long_step = 3};
    strata_side_task_ops_t o = ops(0);
    int id;
    assert_int_equal(strata_harvester_add(h, &o, &s, 0, &id), STRATA_OK);
    bubble(h, 0.08, 1 << 20); // the 40 ms step ends at about 42 ms, inside the bubble; then
    // 40 ms x 1.25 no longer fits
    assert_true(s.done >= s.long_step);
    strata_harvest_stats_t st = strata_harvester_stats(h);
    assert_true(st.overruns >= 1); // the long step (a loaded machine may add a short one)
    assert_int_equal((int)st.benched, 0);
    int done = s.done;
    bubble(h, 0.03, 1 << 20); // 40 ms x 1.25 does not fit 30 ms
    assert_int_equal(s.done, done);
    bubble(h, 0.2, 1 << 20); // not benched: it goes again where it fits
    assert_true(s.done > done);
    strata_harvester_destroy(h);
}

typedef struct poll {
    int calls, over_after;
} poll_t;

static bool p_over(void *ctx)
{
    poll_t *p = ctx;
    return ++p->calls > p->over_after;
}

/* The poll ends the bubble at once, long before the prediction runs out. */
static void test_poll_ends_bubble(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    scripted_t s = {0};
    strata_side_task_ops_t o = ops(0);
    int id;
    assert_int_equal(strata_harvester_add(h, &o, &s, 0, &id), STRATA_OK);
    poll_t p = {.over_after = 3}; // over at the 4th poll: after 3 steps
    strata_harvest_bubble_t b = {.budget_s = 10, .mem_free = 1 << 20, .over = p_over,
                                 .over_ctx = &p};
    double done = strata_harvester_bubble(h, &b);
    assert_int_equal(s.done, 3);
    assert_true(done < 1.0);
    assert_int_equal(strata_harvester_state(h, id), STRATA_TASK_PAUSED);
    assert_int_equal(s.pauses, 1);
    strata_harvester_destroy(h);
}

/* A step with nothing to do (STRATA_INPROGRESS) yields the bubble to the next task. */
typedef struct idle {
    int calls;
} idle_t;

static strata_status_t i_step(void *p)
{
    ((idle_t *)p)->calls++;
    return STRATA_INPROGRESS;
}

static void test_idle_yields(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    idle_t w = {0};
    scripted_t s = {.steps_total = 3};
    strata_side_task_ops_t oi = {.name = "waiting", .step = i_step}, o = ops(0);
    int wid;
    assert_int_equal(strata_harvester_add(h, &oi, &w, 9, &wid), STRATA_OK);
    assert_int_equal(strata_harvester_add(h, &o, &s, 0, NULL), STRATA_OK);
    bubble(h, 0.5, 1 << 20);
    assert_int_equal(w.calls, 1); // asked once per bubble, then passed over
    assert_int_equal(s.done, 3);
    assert_int_equal(strata_harvester_state(h, wid), STRATA_TASK_PAUSED);
    assert_int_equal((int)strata_harvester_stats(h).steps, 3); // an idle step is not work
    bubble(h, 0.5, 1 << 20);
    assert_int_equal(w.calls, 2);
    strata_harvester_destroy(h);
}

static void test_priorities(void **state)
{
    (void)state;
    strata_harvester_t *h = NULL;
    assert_int_equal(strata_harvester_create(0.25, &h), STRATA_OK);
    int log[64], n = 0;
    scripted_t lo = {.steps_total = 2, .log = log, .nlog = &n, .tag = 1};
    scripted_t hi = {.steps_total = 2, .log = log, .nlog = &n, .tag = 2};
    strata_side_task_ops_t o = ops(0);
    assert_int_equal(strata_harvester_add(h, &o, &lo, 0, NULL), STRATA_OK);
    assert_int_equal(strata_harvester_add(h, &o, &hi, 5, NULL), STRATA_OK);
    for (int i = 0; i < 10 && n < 4; i++)
        bubble(h, 0.5, 1 << 20);
    assert_int_equal(n, 4);
    assert_int_equal(log[0], 2);
    assert_int_equal(log[1], 2);
    assert_int_equal(log[2], 1);
    assert_int_equal(log[3], 1);
    strata_harvester_destroy(h);
    strata_side_task_ops_t bad = {.name = "no step"};
    assert_int_equal(strata_harvester_create(-1, &h), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_harvester_create(0, &h), STRATA_OK);
    assert_int_equal(strata_harvester_add(h, &bad, NULL, 0, NULL), STRATA_ERR_INVALID_ARG);
    strata_harvester_destroy(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_machine),
        cmocka_unit_test(test_memory_refusal),
        cmocka_unit_test(test_overrun_benched),
        cmocka_unit_test(test_overrun_inside),
        cmocka_unit_test(test_poll_ends_bubble),
        cmocka_unit_test(test_idle_yields),
        cmocka_unit_test(test_priorities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
