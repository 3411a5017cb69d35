/* The model against the published measurements in data/validation: mean absolute percentage error
 * at most 10% on the Megatron-LM SC'21 tables with the built-in calibration, a refit that lands
 * where the built-in constants are, and a leave-one-out error that stays small. */
#include "harness/st_test.h"
#include "strata/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void load(strata_vtable_t *t, const char *name)
{
    char path[1200], dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    snprintf(path, sizeof path, "%s/../../data/validation/%s", dir, name);
    if (strata_vtable_load(path, t) != STRATA_OK)
        fail_msg("%s", strata_last_error());
}

static double mape(const strata_vtable_t *t, const strata_calib_t *c, bool calibrate_rows)
{
    double s = 0;
    int n = 0;
    for (int r = 0; r < t->nrows; r++) {
        if (t->rows[r].calibrate != calibrate_rows)
            continue;
        double v;
        assert_int_equal(strata_vrow_predict(&t->rows[r], c, &v, NULL), STRATA_OK);
        s += fabs(v / t->rows[r].measured - 1);
        n++;
    }
    return n ? s / n : 0;
}

static void test_megatron_tables(void **state)
{
    (void)state;
    strata_vtable_t t = {0};
    load(&t, "megatron_sc21_table1.csv");
    load(&t, "megatron_sc21_zero3.csv");
    assert_int_equal(t.nrows, 22);
    strata_calib_t c = strata_calib_default();
    double e = mape(&t, &c, true);
    print_message("MAPE on the Megatron-LM tables: %.2f%%\n", 100 * e);
    assert_true(e <= 0.10);
    // Refitting from a perturbed start comes back to (about) the built-in constants' error.
    strata_calib_t start = c, fit;
    start.eta_gemm = 0.7;
    start.eta_zero3 = 0.3;
    double fm;
    assert_int_equal(strata_calib_fit(&t, -1, STRATA_CALIB_FIT_DEFAULT, &start, &fit, &fm),
                     STRATA_OK);
    assert_true(fm <= e + 0.005);
    // Leave-one-out on a few rows: fit without the row, predict it.
    const int rows[] = {0, 3, 9, 12, 20};
    double loo = 0;
    for (int k = 0; k < 5; k++) {
        strata_calib_t f2;
        assert_int_equal(strata_calib_fit(&t, rows[k], STRATA_CALIB_FIT_DEFAULT, &c, &f2, NULL),
                         STRATA_OK);
        double v;
        assert_int_equal(strata_vrow_predict(&t.rows[rows[k]], &f2, &v, NULL), STRATA_OK);
        loo += fabs(v / t.rows[rows[k]].measured - 1);
    }
    assert_true(loo / 5 <= 0.15);
    strata_vtable_free(&t);
}

static void test_held_out_tables_load(void **state)
{
    (void)state;
    strata_vtable_t t = {0};
    load(&t, "megascale_headline.csv");
    load(&t, "holdout_from_memory.csv");
    strata_calib_t c = strata_calib_default();
    assert_true(t.nrows >= 3);
    for (int r = 0; r < t.nrows; r++)
        assert_false(t.rows[r].calibrate);
    // Never fitted on; a loose sanity bound, the numbers are reported by `strata plan validate`.
    assert_true(mape(&t, &c, false) <= 0.25);
    strata_vtable_free(&t);
}

static void load_all(strata_vtable_t *t)
{
    load(t, "megatron_sc21_table1.csv");
    load(t, "megatron_sc21_zero3.csv");
    load(t, "megascale_headline.csv");
    load(t, "holdout_from_memory.csv");
}

static void test_validate_stages(void **state)
{
    (void)state;
    strata_vtable_t t = {0};
    load_all(&t);
    strata_calib_t start = strata_calib_default();
    strata_vreport_t r;
    assert_int_equal(strata_validate(&t, STRATA_CALIB_FIT_DEFAULT, &start, true, &r), STRATA_OK);
    assert_int_equal(r.nrows, t.nrows);
    assert_int_equal(r.n_calibration, 22);
    assert_int_equal(r.n_held_out, t.nrows - 22);
    assert_int_equal(strata_vstage_terms_off(STRATA_VSTAGE_BASE), STRATA_TERM_ALL);
    assert_int_equal(strata_vstage_terms_off(STRATA_VSTAGE_HW), 0);
    for (int s = 0; s < STRATA_VSTAGE_COUNT; s++) {
        print_message("%-8s calibration rows (LOO) %.2f%%, held out %.2f%%, all %.2f%%\n",
                      strata_vstage_name((strata_vstage_t)s), 100 * r.mae_calibration[s],
                      100 * r.mae_held_out[s], 100 * r.mae_all[s]);
        double sum = 0;
        for (int i = 0; i < t.nrows; i++)
            sum += fabs(r.rows[i].error[s]);
        assert_true(fabs(sum / t.nrows - r.mae_all[s]) < 1e-12);
        assert_true(r.mae_all[s] < 0.10);
    }
    // A calibration row's error is the prediction of constants fitted without it, from the
    // same start: redo the base stage's for row 3 by hand, every row with the terms off.
    strata_vtable_t base = {.rows = t.rows, .nrows = t.nrows};
    for (int i = 0; i < t.nrows; i++)
        t.rows[i].pb.terms_off = STRATA_TERM_ALL;
    strata_calib_t f;
    assert_int_equal(strata_calib_fit(&base, 3, STRATA_CALIB_FIT_DEFAULT, &start, &f, NULL),
                     STRATA_OK);
    double v;
    assert_int_equal(strata_vrow_predict(&t.rows[3], &f, &v, NULL), STRATA_OK);
    assert_true(fabs(v / t.rows[3].measured - 1 - r.rows[3].error[STRATA_VSTAGE_BASE]) < 1e-12);
    // A held-out row's error is under the fit on the calibration rows.
    int h = t.nrows - 1;
    assert_false(t.rows[h].calibrate);
    assert_int_equal(strata_vrow_predict(&t.rows[h], &r.fit[STRATA_VSTAGE_BASE], &v, NULL),
                     STRATA_OK);
    assert_true(fabs(v / t.rows[h].measured - 1 - r.rows[h].error[STRATA_VSTAGE_BASE]) < 1e-12);
    for (int i = 0; i < t.nrows; i++)
        t.rows[i].pb.terms_off = 0;
    strata_vreport_free(&r);
    strata_vtable_free(&t);
}

static void test_validate_is_honest(void **state)
{
    (void)state;
    // What a row's own measurement says cannot move its out-of-sample prediction.
    strata_vtable_t t = {0};
    load_all(&t);
    strata_calib_t start = strata_calib_default();
    strata_vreport_t a, b;
    const int c = 5, h = t.nrows - 2;
    assert_true(t.rows[c].calibrate && !t.rows[h].calibrate);
    // A held-out row: no fitted constant moves, so neither does its prediction.
    assert_int_equal(strata_validate(&t, STRATA_CALIB_FIT_DEFAULT, &start, false, &a), STRATA_OK);
    t.rows[h].measured *= 0.5;
    assert_int_equal(strata_validate(&t, STRATA_CALIB_FIT_DEFAULT, &start, false, &b), STRATA_OK);
    for (int s = 0; s < STRATA_VSTAGE_COUNT; s++) {
        assert_memory_equal(&a.fit[s], &b.fit[s], sizeof a.fit[s]);
        assert_true(a.rows[h].predicted[s] == b.rows[h].predicted[s]);
    }
    t.rows[h].measured *= 2;
    strata_vreport_free(&a);
    strata_vreport_free(&b);
    // A calibration row: its leave-one-out prediction stays exactly where it was.
    assert_int_equal(strata_validate(&t, STRATA_CALIB_FIT_DEFAULT, &start, true, &a), STRATA_OK);
    double m = t.rows[c].measured;
    t.rows[c].measured *= 1.5;
    assert_int_equal(strata_validate(&t, STRATA_CALIB_FIT_DEFAULT, &start, true, &b), STRATA_OK);
    for (int s = 0; s < STRATA_VSTAGE_COUNT; s++) {
        double pa = (1 + a.rows[c].error[s]) * m, pb = (1 + b.rows[c].error[s]) * m * 1.5;
        assert_true(fabs(pa / pb - 1) < 1e-12);
        assert_true(a.rows[c].predicted[s] != b.rows[c].predicted[s]); /* the full fit saw it */
    }
    strata_vreport_free(&a);
    strata_vreport_free(&b);
    strata_vtable_free(&t);
}

/* "quick" (the default): the tables; "loo": the leave-one-out validations, each a few dozen
 * refits (a minute here, too long under the sanitizers: ctest label "heavy"). */
int main(int argc, char **argv)
{
    const struct CMUnitTest quick[] = {
        cmocka_unit_test(test_megatron_tables),
        cmocka_unit_test(test_held_out_tables_load),
    };
    const struct CMUnitTest loo[] = {
        cmocka_unit_test(test_validate_stages),
        cmocka_unit_test(test_validate_is_honest),
    };
    if (argc > 1 && !strcmp(argv[1], "loo"))
        return cmocka_run_group_tests(loo, NULL, NULL);
    return cmocka_run_group_tests(quick, NULL, NULL);
}
