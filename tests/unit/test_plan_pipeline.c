/* The planner prices a pipeline by the schedule's own lists (strata/schedule.h): its bubble is
 * the simulated bubble of the generated lists on the devices' per-micro-batch times (which for
 * 1F1B, GPipe and interleaving is the textbook (p-1)/m and (p-1)/(v m) of the ideal time), its
 * activation memory the lists' peak, and ZB-V (two chunks per device, in a V) is priced with its
 * head and loss on the first device. */
#include "harness/st_test.h"
#include "strata/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static strata_plan_problem_t even_problem(void)
{
    strata_plan_problem_t pb = {0};
    pb.model = strata_model_gpt("even", 16, 2048, 16, 1024, 1024);
    assert_int_equal(strata_topo_preset("dgx-a100-superpod", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("a100-80gb", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.global_batch = 32;
    pb.calib = strata_calib_default();
    pb.gpus = 4;
    return pb;
}

static void test_model_bubble_is_the_schedules(void **state)
{
    (void)state;
    // Devices differ only by the embedding and the head, which are small here: the bubble is
    // within a few percent of the textbook one on the critical device's times, for every schedule.
    strata_plan_problem_t pb = even_problem();
    strata_parallel_t par = strata_parallel_default();
    par.pp = 4;
    for (int k = 0; k < STRATA_SCHED_COUNT; k++) {
        par.schedule = (strata_schedule_t)k;
        par.vp = k == STRATA_SCHED_INTERLEAVED || k == STRATA_SCHED_ZB_V ? 2 : 1;
        strata_prediction_t p;
        if (strata_plan_predict(&pb, &par, &p) != STRATA_OK)
            fail_msg("%s: %s", strata_schedule_name(par.schedule), strata_last_error());
        assert_int_equal(p.microbatches, 32);
        const double fb = p.fwd_s + p.bwd_s, w = p.wgrad_s;
        // The schedule's simulated bubble on uniform devices with the critical device's times.
        double frac = 0;
        assert_int_equal(strata_pp_bubble(par.schedule, 4, par.vp, 32, (p.bwd_s - w) / p.fwd_s,
                                          w / p.fwd_s, &frac, NULL),
                         STRATA_OK);
        const double sim = frac / (1 - frac) * 32 * fb;
        assert_true(fabs(p.bubble_s / sim - 1) < 0.05);
        // ... which for the schedules with a closed form is the closed form.
        double closed = -1;
        if (k == STRATA_SCHED_GPIPE || k == STRATA_SCHED_1F1B)
            closed = 3 * fb;
        else if (k == STRATA_SCHED_INTERLEAVED)
            closed = 3 * fb / 2;
        else if (k == STRATA_SCHED_ZB_H1)
            closed = 3 * (fb - 2 * w); /* (p-1)(F + B - W) with B the input gradient */
        if (closed > 0)
            assert_true(fabs(p.bubble_s / closed - 1) < 0.05);
        if (k == STRATA_SCHED_ZB_V) /* below ZB-H1's at this M = 8P */
            assert_true(p.bubble_s < 3 * (fb - 2 * w));
    }
}

static void test_zbv_in_the_planner(void **state)
{
    (void)state;
    strata_plan_problem_t pb = even_problem();
    strata_parallel_t par = strata_parallel_default();
    par.pp = 4;
    par.schedule = STRATA_SCHED_ZB_V;
    par.vp = 1;
    assert_int_equal(strata_plan_check(&pb, &par), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "vp=2"));
    par.vp = 2;
    strata_prediction_t v, h;
    assert_int_equal(strata_plan_predict(&pb, &par, &v), STRATA_OK);
    // The head and the loss are on the first device again: it is the critical one, and no tied
    // embedding crosses the pipeline.
    assert_int_equal(v.critical_stage, 0);
    par.schedule = STRATA_SCHED_ZB_H1;
    par.vp = 1;
    assert_int_equal(strata_plan_predict(&pb, &par, &h), STRATA_OK);
    assert_int_equal(h.critical_stage, 3);
    assert_true(v.bubble_s < h.bubble_s);
    // The search tries it.
    strata_search_opts_t o = strata_search_opts_default();
    o.sched_mask = 1u << STRATA_SCHED_ZB_V;
    o.top = 3;
    strata_search_result_t r;
    assert_int_equal(strata_plan_search(&pb, &o, &r), STRATA_OK);
    assert_true(r.ntop > 0);
    for (int i = 0; i < r.ntop; i++)
        assert_true(r.top[i].par.pp == 1 || (r.top[i].par.schedule == STRATA_SCHED_ZB_V &&
                                              r.top[i].par.vp == 2));
    strata_search_result_free(&r);
}

static void test_svg_draws_the_schedule(void **state)
{
    (void)state;
    strata_plan_problem_t pb = even_problem();
    strata_parallel_t par = strata_parallel_default();
    par.pp = 4;
    par.schedule = STRATA_SCHED_ZB_H1;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(strata_plan_svg(&pb, &par, &p, f), STRATA_OK);
    fclose(f);
    // Every stage's row, weight gradients, and the tail after the pipeline.
    assert_non_null(strstr(buf, "stage 3 ("));
    assert_non_null(strstr(buf, "stage 2: W micro-batch 31 chunk 2"));
    assert_non_null(strstr(buf, "data-parallel tail + optimizer"));
    assert_non_null(strstr(buf, "</svg>"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_bubble_is_the_schedules),
        cmocka_unit_test(test_zbv_in_the_planner),
        cmocka_unit_test(test_svg_draws_the_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
