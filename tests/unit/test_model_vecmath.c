/* The model's vectorisable exp (src/model/vecmath.h): accurate on the range it serves, and defined
 * for what a checkpoint can carry into it (NaN, +-Inf, huge values). Before the fix a NaN reached
 * a signed shift (UBSan: "left shift of negative value"; `strata sample` on a checkpoint with a NaN
 * weight, found by fuzzing). */
#include "harness/st_test.h"

#include "model/vecmath.h"

#include <float.h>
#include <math.h>

static void test_exp_accuracy(void **state)
{
    (void)state;
    double worst = 0;
    for (float x = -87.f; x <= 87.f; x += 0.01f) {
        double want = exp((double)x), got = st_exp(x);
        double rel = fabs(got - want) / want;
        worst = rel > worst ? rel : worst;
    }
    assert_true(worst < 5e-7);
}

static void test_exp_non_finite(void **state)
{
    (void)state;
    volatile float nan = NAN, inf = INFINITY; // volatile: computed at run time, as in the model
    assert_true(isnan(st_exp(nan)));
    assert_true(isnan(st_exp(-nan)));
    assert_true(st_exp(inf) == st_exp(87.f));
    assert_true(st_exp(-inf) == st_exp(-87.f));
    assert_true(st_exp(FLT_MAX) == st_exp(87.f));
    assert_true(st_exp(-FLT_MAX) == st_exp(-87.f));
    assert_true(isfinite(st_exp(87.f)) && st_exp(-87.f) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_exp_non_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
