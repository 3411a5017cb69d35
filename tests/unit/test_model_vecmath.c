/* The model's vectorisable exp (src/model/vecmath.h): accurate on the range it serves, and defined
 * for what a checkpoint can carry into it (NaN, +-Inf, huge values). Before the fix a NaN reached
 * a signed shift (UBSan: "left shift of negative value"; `strata sample` on a checkpoint with a NaN
 * weight, found by fuzzing). Its reductions: the lanes' sums in their fixed order (element i in
 * lane i % 8) at every length's tail, and the max. */
#include "harness/random.h"
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

/* st_sum and st_dot against the lanes summed by hand in their order, and st_max, at lengths 1 to
 * 40 (every tail), with values of mixed sign and magnitude so that the order shows in the bits. */
static void test_reductions(void **state)
{
    (void)state;
    uint64_t rs = 5;
    float x[40], y[40];
    for (int i = 0; i < 40; i++) {
        x[i] = st_test_uniform(&rs) * (i % 3 ? 1.f : 1e4f);
        y[i] = st_test_uniform(&rs);
    }
    for (int n = 1; n <= 40; n++) {
        float s[ST_LANES] = {0}, d[ST_LANES] = {0}, mx = x[0];
        for (int i = 0; i < n; i++) {
            s[i % ST_LANES] += x[i];
            d[i % ST_LANES] += x[i] * y[i];
            mx = x[i] > mx ? x[i] : mx;
        }
        float want_s = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
        float want_d = ((d[0] + d[4]) + (d[2] + d[6])) + ((d[1] + d[5]) + (d[3] + d[7]));
        assert_true(st_sum(x, n) == want_s);
        // The products may be fused with their sums or not (the build's choice): to rounding.
        assert_float_equal(st_dot(x, y, n), want_d, 1e-3f * (1.f + fabsf(want_d)));
        assert_true(st_max(x, n) == mx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_exp_non_finite),
        cmocka_unit_test(test_reductions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
