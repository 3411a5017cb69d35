/* Attention's AVX-512 softmax rows (attention_softmax.c) against double precision: the softmax and
 * its backward at every row length from 1 to 300 (every masked tail), with scores from a narrow
 * spread (as a trained model's) to a wide one (exps across many orders of magnitude, and terms
 * that underflow), and a row of one key. Skipped where the CPU has no AVX-512 (attention.c's loops
 * run there). */
#include "harness/random.h"
#include "harness/st_test.h"
#include "model/attention_softmax.h"

#include <math.h>
#include <string.h>

static uint64_t rs = 19; /* the random data's state (harness/random.h) */

#define MAX_N 300

static void need(void)
{
    if (!st_att_softmax_ready()) {
        print_message("no AVX-512 here: attention.c's loops run, nothing to check\n");
        skip();
    }
}

static void draw(float *x, int n, float spread)
{
    for (int i = 0; i < n; i++)
        x[i] = spread * st_test_uniform(&rs);
}

/* p = softmax(x) in double, from the differences x - max in float, as the kernel takes them (at
 * a spread of 60 their rounding alone moves an exp by up to 4e-6 of it). */
static void softmax_double(const float *x, double *p, int n)
{
    float mx = x[0];
    double sum = 0;
    for (int i = 1; i < n; i++)
        mx = fmaxf(mx, x[i]);
    for (int i = 0; i < n; i++)
        sum += p[i] = exp((double)(x[i] - mx));
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

static void check_rows(float spread)
{
    float x[MAX_N], p[MAX_N], d[MAX_N], g[MAX_N];
    double want[MAX_N];
    for (int n = 1; n <= MAX_N; n++) {
        draw(x, n, spread);
        memcpy(p, x, sizeof x);
        st_att_softmax_row(p, n);
        softmax_double(x, want, n);
        for (int i = 0; i < n; i++)
            if (!(fabs(p[i] - want[i]) <= 2e-6 * want[i] + 1e-37))
                fail_msg("spread %g, row of %d, key %d: %.9g, want %.9g", spread, n, i, p[i],
                         want[i]);
        // The backward on the kernel's own p: d_i = p_i (g_i - sum_k p_k g_k).
        draw(g, n, 1.f);
        memcpy(d, g, sizeof g);
        st_att_softmax_backward_row(p, d, n);
        double dot = 0;
        for (int i = 0; i < n; i++)
            dot += (double)p[i] * g[i];
        for (int i = 0; i < n; i++) {
            double w = p[i] * (g[i] - dot);
            if (!(fabs(d[i] - w) <= 1e-6 * p[i] + 1e-37))
                fail_msg("spread %g, row of %d, key %d: gradient %.9g, want %.9g", spread, n, i,
                         d[i], w);
        }
    }
}

static void test_narrow_scores(void **state)
{
    (void)state;
    need();
    check_rows(3.f);
}

static void test_wide_scores(void **state)
{
    (void)state;
    need();
    check_rows(60.f); // terms down to e^-120: below float's range, they come out as tiny or zero
}

static void test_one_key(void **state)
{
    (void)state;
    need();
    float p = -7.5f, d = 0.25f;
    st_att_softmax_row(&p, 1);
    assert_true(p == 1.f);
    st_att_softmax_backward_row(&p, &d, 1);
    assert_true(d == 0.f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_narrow_scores),
        cmocka_unit_test(test_wide_scores),
        cmocka_unit_test(test_one_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
