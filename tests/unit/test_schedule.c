/* Pipeline schedules as data (strata/schedule.h): every schedule's lists pass the checker over a
 * grid of stages, chunks and micro-batches; the generator refuses what a schedule cannot run,
 * naming the constraint; the checker catches hand-broken plans, naming stage and action; and the
 * simulation gives the bubbles and memory the literature gives. */
#include "harness/st_test.h"
#include "strata/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static int vmin_of(strata_schedule_t s)
{
    return s == STRATA_SCHED_INTERLEAVED || s == STRATA_SCHED_ZB_V ? 2 : 1;
}

static int vmax_of(strata_schedule_t s)
{
    return s == STRATA_SCHED_INTERLEAVED ? 4 : vmin_of(s);
}

/* Index of the first action of stage s matching (op, mb, chunk); fails the test if none. */
static int find(const strata_pp_plan_t *p, int s, strata_pp_op_t op, int mb, int chunk)
{
    for (int i = 0; i < p->count[s]; i++) {
        const strata_pp_action_t *a = &p->actions[s][i];
        if (a->op == op && a->mb == mb && a->chunk == chunk)
            return i;
    }
    fail_msg("stage %d has no %s mb %d chunk %d", s, strata_pp_op_name(op), mb, chunk);
    return -1;
}

static void remove_at(strata_pp_plan_t *p, int s, int i)
{
    memmove(&p->actions[s][i], &p->actions[s][i + 1],
            (size_t)(p->count[s] - i - 1) * sizeof p->actions[s][0]);
    p->count[s]--;
}

static void swap_at(strata_pp_plan_t *p, int s, int i, int j)
{
    strata_pp_action_t t = p->actions[s][i];
    p->actions[s][i] = p->actions[s][j];
    p->actions[s][j] = t;
}

static void expect_error(const strata_pp_plan_t *p, const char *const *words)
{
    assert_int_equal(strata_pp_check(p), STRATA_ERR_INVALID_ARG);
    const char *msg = strata_last_error();
    for (int i = 0; words[i]; i++)
        if (!strstr(msg, words[i]))
            fail_msg("expected '%s' in: %s", words[i], msg);
}

/* ---- generation and checking ---------------------------------------------------------------- */

static void test_every_schedule_passes_the_checker(void **state)
{
    (void)state;
    int checked = 0;
    for (int k = 0; k < STRATA_SCHED_COUNT; k++) {
        const strata_schedule_t s = (strata_schedule_t)k;
        for (int P = 1; P <= 8; P++)
            for (int V = vmin_of(s); V <= vmax_of(s); V++)
                for (int M = 1; M <= 3 * P; M++) {
                    if (s == STRATA_SCHED_INTERLEAVED && M % P)
                        continue; /* refused, below */
                    strata_pp_plan_t p;
                    strata_status_t rc = strata_pp_generate(s, P, V, M, &p);
                    if (rc != STRATA_OK)
                        fail_msg("%s P=%d V=%d M=%d: %s", strata_schedule_name(s), P, V, M,
                                 strata_last_error());
                    // generate checks already; check again as a user would, and count.
                    assert_int_equal(strata_pp_check(&p), STRATA_OK);
                    int compute = 0;
                    for (int st = 0; st < P; st++)
                        for (int i = 0; i < p.count[st]; i++)
                            compute += p.actions[st][i].op <= STRATA_PP_WGT;
                    assert_int_equal(compute,
                                     P * V * M * (strata_schedule_splits_backward(s) ? 3 : 2));
                    strata_pp_plan_free(&p);
                    checked++;
                }
    }
    assert_true(checked > 400);
}

static void test_refusals_name_the_constraint(void **state)
{
    (void)state;
    static const struct {
        strata_schedule_t s;
        int P, V, M;
        const char *words;
    } bad[] = {
        {STRATA_SCHED_1F1B, 0, 1, 4, "stages"},
        {STRATA_SCHED_1F1B, 4, 1, 0, "micro-batches"},
        {STRATA_SCHED_GPIPE, 4, 2, 8, "V = 1"},
        {STRATA_SCHED_ZB_H1, 4, 2, 8, "V = 1"},
        {STRATA_SCHED_INTERLEAVED, 4, 1, 8, "V >= 2"},
        {STRATA_SCHED_INTERLEAVED, 4, 2, 6, "multiple of the stages"},
        {STRATA_SCHED_ZB_V, 4, 3, 8, "V = 2"},
        {STRATA_SCHED_ZB_V, 4, 1, 8, "V = 2"},
        {STRATA_SCHED_COUNT, 4, 1, 8, "unknown schedule"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strata_pp_plan_t p;
        memset(&p, 0x5a, sizeof p);
        assert_int_equal(strata_pp_generate(bad[i].s, bad[i].P, bad[i].V, bad[i].M, &p),
                         STRATA_ERR_INVALID_ARG);
        if (!strstr(strata_last_error(), bad[i].words))
            fail_msg("case %zu: expected '%s' in: %s", i, bad[i].words, strata_last_error());
        assert_null(p.count); /* zeroed on failure */
        assert_null(p.actions);
    }
    // M below P and M not a multiple of P are fine where the schedule allows them.
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 8, 1, 3, &p), STRATA_OK);
    strata_pp_plan_free(&p);
    assert_int_equal(strata_pp_generate(STRATA_SCHED_ZB_V, 4, 2, 5, &p), STRATA_OK);
    strata_pp_plan_free(&p);
}

static void test_names(void **state)
{
    (void)state;
    for (int k = 0; k < STRATA_SCHED_COUNT; k++) {
        strata_schedule_t s;
        assert_int_equal(strata_schedule_parse(strata_schedule_name((strata_schedule_t)k), &s),
                         STRATA_OK);
        assert_int_equal(s, k);
    }
    strata_schedule_t s;
    assert_int_equal(strata_schedule_parse("zbv", &s), STRATA_OK);
    assert_int_equal(s, STRATA_SCHED_ZB_V);
    assert_int_equal(strata_schedule_parse("pipedream", &s), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "zb-v"));
    assert_string_equal(strata_schedule_name(STRATA_SCHED_COUNT), "?");
    // Where the chunks live: in order, or in a V for zb-v.
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_INTERLEAVED, 4, 2, 5), 1);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 3), 3);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 4), 3);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 7), 0);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 8), -1);
}

static void test_checker_catches_a_missing_recv(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 4, 1, 8, &p), STRATA_OK);
    // Stage 2 forgets to receive the output gradient of micro-batch 3 from stage 3.
    int i = find(&p, 2, STRATA_PP_RECV_GRAD, 3, 2);
    remove_at(&p, 2, i);
    int b = find(&p, 2, STRATA_PP_BWD, 3, 2);
    char at[64];
    snprintf(at, sizeof at, "stage 2, action %d (B mb 3 chunk 2)", b);
    expect_error(&p, (const char *const[]){at, "its output gradient is never received", NULL});
    strata_pp_plan_free(&p);
}

static void test_checker_catches_a_channel_order_swap(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 2, 1, 4, &p), STRATA_OK);
    // Stage 0 computes micro-batches 0 and 1 but sends their activations in the other order:
    // every dependency still holds, only the channel 0 -> 1 delivers them swapped.
    strata_pp_action_t *l = p.actions[0];
    assert_int_equal(l[0].op, STRATA_PP_FWD);
    assert_int_equal(l[1].op, STRATA_PP_SEND_ACT);
    assert_int_equal(l[2].op, STRATA_PP_FWD);
    assert_int_equal(l[3].op, STRATA_PP_SEND_ACT);
    swap_at(&p, 0, 1, 2); /* F0 F1 S0 S1 */
    swap_at(&p, 0, 2, 3); /* F0 F1 S1 S0 */
    int r = find(&p, 1, STRATA_PP_RECV_ACT, 0, 1);
    char at[64];
    snprintf(at, sizeof at, "stage 1, action %d (recv_act mb 0 chunk 1)", r);
    expect_error(&p, (const char *const[]){at, "out of order", "from stage 0", NULL});
    strata_pp_plan_free(&p);
}

static void test_checker_catches_bwd_before_fwd(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_GPIPE, 3, 1, 2, &p), STRATA_OK);
    int f = find(&p, 2, STRATA_PP_FWD, 1, 2), b = find(&p, 2, STRATA_PP_BWD, 1, 2);
    swap_at(&p, 2, f, b);
    char at[64];
    snprintf(at, sizeof at, "stage 2, action %d (B mb 1 chunk 2)", f);
    expect_error(&p, (const char *const[]){at, "its forward (F) is run only at action", NULL});
    strata_pp_plan_free(&p);
}

static void test_checker_catches_a_deadlock(void **state)
{
    (void)state;
    // Two stages, one micro-batch: stage 0 waits for the gradient before sending the activation
    // stage 1 waits for. Every dependency is in order within each list; the wait is circular.
    strata_pp_action_t s0[] = {{STRATA_PP_FWD, 0, 0, -1},
                               {STRATA_PP_RECV_GRAD, 0, 0, 1},
                               {STRATA_PP_SEND_ACT, 0, 0, 1},
                               {STRATA_PP_BWD, 0, 0, -1}};
    strata_pp_action_t s1[] = {{STRATA_PP_RECV_ACT, 1, 0, 0},
                               {STRATA_PP_FWD, 1, 0, -1},
                               {STRATA_PP_BWD, 1, 0, -1},
                               {STRATA_PP_SEND_GRAD, 1, 0, 0}};
    int count[] = {4, 4};
    strata_pp_action_t *lists[] = {s0, s1};
    strata_pp_plan_t p = {STRATA_SCHED_1F1B, 2, 1, 1, false, count, lists};
    expect_error(&p, (const char *const[]){"deadlock", "2 stages blocked",
                                           "stage 0, action 1 (recv_grad mb 0 chunk 0) waits",
                                           "stage 1, action 0 (recv_act mb 0 chunk 1) waits",
                                           NULL});
    // The same lists with the send first run.
    s0[1] = (strata_pp_action_t){STRATA_PP_SEND_ACT, 0, 0, 1};
    s0[2] = (strata_pp_action_t){STRATA_PP_RECV_GRAD, 0, 0, 1};
    assert_int_equal(strata_pp_check(&p), STRATA_OK);
}

static void test_checker_catches_bad_fields(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_ZB_H1, 3, 1, 3, &p), STRATA_OK);
    int i = find(&p, 1, STRATA_PP_SEND_ACT, 0, 1);
    p.actions[1][i].peer = 0; /* chunk 2 is on stage 2 */
    expect_error(&p, (const char *const[]){"stage 1", "peer 0, but chunk 2 is on stage 2", NULL});
    p.actions[1][i].peer = 2;
    int w = find(&p, 0, STRATA_PP_WGT, 2, 0);
    remove_at(&p, 0, w);
    expect_error(&p, (const char *const[]){"stage 0 never runs the weight gradient (W) of "
                                           "micro-batch 2 on chunk 0",
                                           NULL});
    strata_pp_plan_free(&p);
    // A duplicate forward.
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 1, 1, 2, &p), STRATA_OK);
    p.actions[0][2] = p.actions[0][0];
    expect_error(&p, (const char *const[]){"stage 0, action 2 (F mb 0 chunk 0)", "second F", NULL});
    strata_pp_plan_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_schedule_passes_the_checker),
        cmocka_unit_test(test_refusals_name_the_constraint),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_checker_catches_a_missing_recv),
        cmocka_unit_test(test_checker_catches_a_channel_order_swap),
        cmocka_unit_test(test_checker_catches_bwd_before_fwd),
        cmocka_unit_test(test_checker_catches_a_deadlock),
        cmocka_unit_test(test_checker_catches_bad_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
