/* Straggler judgement (src/train/straggler.c): which rank of a window is slow, and the streak that
 * flags it and lets it go. The windows' per-rank busy times are scripted through the all-sum
 * callback, so every case is exact. */
#include <stdio.h>
#include <string.h>

#include "harness/st_test.h"
#include "train/straggler.h"

static void test_judge(void **state)
{
    (void)state;
    double ratio;
    double equal[4] = {0.010, 0.010, 0.010, 0.010};
    assert_int_equal(st_straggler_judge(equal, NULL, 4, &ratio), -1);
    double slow2[4] = {0.010, 0.011, 0.020, 0.009};
    assert_int_equal(st_straggler_judge(slow2, NULL, 4, &ratio), 2);
    assert_true(ratio > 1.9 && ratio < 2.1); // against the others' median, 10 ms
    double pair[2] = {0.030, 0.010};          // two ranks: the other one is the median
    assert_int_equal(st_straggler_judge(pair, NULL, 2, &ratio), 0);
    assert_true(ratio > 2.9 && ratio < 3.1);
    double tiny[3] = {0.0020, 0.0020, 0.0035}; // 1.75x, but 1.5 ms a step: rank 0's extra duties
    assert_int_equal(st_straggler_judge(tiny, NULL, 3, &ratio), -1);
    double mild[3] = {0.100, 0.100, 0.115}; // 15 ms more but only 1.15x
    assert_int_equal(st_straggler_judge(mild, NULL, 3, &ratio), -1);
    assert_int_equal(st_straggler_judge(equal, NULL, 1, &ratio), -1);
    // A pipeline's stages do different work: the heavy stage (ranks 1 and 3, role 1) is no
    // straggler beside the light one; a rank slow beside the others of its own role is.
    const double stages[4] = {0.007, 0.025, 0.007, 0.025};
    const int role[4] = {0, 1, 0, 1};
    assert_int_equal(st_straggler_judge(stages, NULL, 4, &ratio), 1);
    assert_int_equal(st_straggler_judge(stages, role, 4, &ratio), -1);
    const double slow_in_role[4] = {0.007, 0.025, 0.007, 0.040};
    assert_int_equal(st_straggler_judge(slow_in_role, role, 4, &ratio), 3);
    assert_true(ratio > 1.5 && ratio < 1.7);
    const int alone[4] = {0, 1, 2, 3}; // nobody to compare with
    assert_int_equal(st_straggler_judge(slow_in_role, alone, 4, &ratio), -1);
}

/* The all-sum of a window: the script's next row. */
typedef struct script {
    const double (*rows)[3];
    int next;
} script_t;

static strata_status_t scripted_sum(void *ctx, double *v, int n)
{
    script_t *s = ctx;
    memcpy(v, s->rows[s->next++], (size_t)n * sizeof *v);
    return STRATA_OK;
}

static void test_streak(void **state)
{
    (void)state;
    static const double rows[][3] = {
        {0.01, 0.01, 0.05}, {0.01, 0.01, 0.05}, {0.01, 0.01, 0.05}, // slow 3 windows: flagged
        {0.01, 0.01, 0.05},                                         // still
        {0.01, 0.01, 0.01},                                         // caught up: let go
        {0.05, 0.01, 0.01}, {0.01, 0.01, 0.05}, {0.05, 0.01, 0.01}, // alternating: nobody
        {0.05, 0.01, 0.01}, {0.05, 0.01, 0.01},                     // rank 0 three in a row
    };
    const int want[] = {-1, -1, 2, 2, -1, -1, -1, -1, -1, 0};
    script_t sc = {rows, 0};
    st_straggler_t s;
    assert_int_equal(st_straggler_init(&s, 2, 3), STRATA_OK);
    for (int w = 0; w < 10; w++) {
        for (int k = 0; k < 2; k++) {
            st_straggler_begin(&s, NULL);
            assert_int_equal(st_straggler_end(&s, NULL, 0.02, scripted_sum, &sc, 0, 3), STRATA_OK);
            assert_int_equal(s.window_ended, k == 1);
        }
        if (s.flagged != want[w])
            fail_msg("window %d: flagged %d, expected %d", w, s.flagged, want[w]);
    }
    st_straggler_free(&s);
    // Off: one rank, or window 0.
    assert_int_equal(st_straggler_init(&s, 0, 4), STRATA_OK);
    assert_int_equal(st_straggler_end(&s, NULL, 1.0, scripted_sum, &sc, 0, 4), STRATA_OK);
    assert_int_equal(s.flagged, -1);
    st_straggler_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge),
        cmocka_unit_test(test_streak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
