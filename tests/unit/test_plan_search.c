/* The search against brute force on a small space: every configuration predicted one by one with
 * strata_plan_predict, the best must be the search's best, the number of valid configurations
 * must match, and each kept candidate must be what a direct prediction says. */
#include "harness/st_test.h"
#include "strata/plan.h"

#include <math.h>
#include <string.h>

static strata_plan_problem_t small_problem(bool flash)
{
    strata_plan_problem_t pb = {0};
    pb.model = strata_model_gpt("small", 8, 512, 8, 1000, 512);
    pb.model.kv_heads = 4;
    assert_int_equal(strata_topo_preset("dgx-a100-superpod", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("a100-40gb", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.global_batch = 32;
    pb.train.flash_attention = flash;
    pb.calib = strata_calib_default();
    pb.gpus = 16;
    return pb;
}

static void brute(const strata_plan_problem_t *pb0, const strata_search_opts_t *o, long long *valid,
                  double *best, double *best_all)
{
    *valid = 0;
    *best = *best_all = INFINITY;
    const int N = 16;
    for (int tp = 1; tp <= N; tp++)
        for (int cp = 1; cp <= N; cp++)
            for (int pp = 1; pp <= N; pp++)
                for (int dp = 1; dp <= N; dp++) {
                    if (tp * cp * pp * dp != N)
                        continue;
                    for (int mb = 1; mb <= 32; mb++)
                        for (int sp = 0; sp < 2; sp++)
                            for (int rc = 0; rc < 3; rc++)
                                for (int s = 0; s < STRATA_SCHED_COUNT; s++)
                                    for (int vp = 1; vp <= 8; vp++)
                                        for (int zv = 0; zv < 6; zv++) {
                                            // ZeRO 0-3, then ZeRO-3 keeping parameters and
                                            // ZeRO-3 reducing once.
                                            int z = zv < 4 ? zv : 3;
                                            strata_plan_problem_t pb = *pb0;
                                            pb.train.micro_batch = mb;
                                            pb.train.sequence_parallel = sp;
                                            pb.train.recompute = (strata_recompute_t)rc;
                                            strata_parallel_t par = strata_parallel_default();
                                            par.tp = tp, par.cp = cp, par.pp = pp, par.dp = dp;
                                            par.vp = vp, par.zero = z;
                                            par.zero_keep_params = zv == 4;
                                            par.zero_reduce_once = zv == 5;
                                            par.schedule = (strata_schedule_t)s;
                                            for (int d = 0; d < STRATA_DIM_COUNT; d++)
                                                par.overlap[d] = o->overlap[d];
                                            strata_prediction_t p;
                                            if (strata_plan_predict(&pb, &par, &p) != STRATA_OK)
                                                continue;
                                            if (p.mem.fits && p.step_s < *best_all)
                                                *best_all = p.step_s;
                                            // The search counts each distinct configuration once.
                                            if ((tp == 1 && sp) ||
                                                (pp == 1 && s != STRATA_SCHED_1F1B) ||
                                                (dp * cp == 1 && z > 0) ||
                                                (pb.train.flash_attention &&
                                                 rc == STRATA_RECOMPUTE_SELECTIVE))
                                                continue;
                                            (*valid)++;
                                            if (p.mem.fits && p.step_s < *best)
                                                *best = p.step_s;
                                        }
                }
}

static void check(bool flash)
{
    strata_plan_problem_t pb = small_problem(flash);
    strata_search_opts_t o = strata_search_opts_default();
    o.top = 25;
    strata_search_result_t r;
    assert_int_equal(strata_plan_search(&pb, &o, &r), STRATA_OK);
    long long valid;
    double best, best_all;
    brute(&pb, &o, &valid, &best, &best_all);
    assert_int_equal(r.valid, valid);
    assert_true(r.enumerated >= r.valid && r.valid >= r.fitting && r.fitting == r.evaluated);
    assert_true(r.ntop == 25);
    assert_true(fabs(r.top[0].pred.step_s - best) <= 1e-12 * best);
    assert_true(fabs(best - best_all) <= 1e-12 * best); /* deduplication loses nothing */
    for (int i = 0; i < r.ntop; i++) {
        if (i)
            assert_true(r.top[i - 1].pred.step_s <= r.top[i].pred.step_s);
        strata_plan_problem_t q = pb;
        q.train = r.top[i].train;
        strata_prediction_t p;
        assert_int_equal(strata_plan_predict(&q, &r.top[i].par, &p), STRATA_OK);
        assert_true(fabs(p.step_s - r.top[i].pred.step_s) <= 1e-12 * p.step_s);
        assert_true(p.mem.fits);
    }
    strata_search_result_free(&r);
}

static void test_search_equals_brute_force(void **state)
{
    (void)state;
    check(true);
    check(false);
}

static void test_search_nothing_fits(void **state)
{
    (void)state;
    strata_plan_problem_t pb = small_problem(true);
    assert_int_equal(strata_model_preset("llama3-405b", &pb.model), STRATA_OK);
    pb.train.global_batch = 16;
    strata_search_opts_t o = strata_search_opts_default();
    strata_search_result_t r;
    assert_int_equal(strata_plan_search(&pb, &o, &r), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "fits in memory"));
    // Nothing held on error (the asan build's leak check failed strata plan's path, which does
    // not free after an error; found by fuzzing).
    assert_null(r.top);
    assert_int_equal(r.ntop, 0);
    o.allow_no_fit = true;
    assert_int_equal(strata_plan_search(&pb, &o, &r), STRATA_OK);
    assert_false(r.top[0].pred.mem.fits);
    strata_search_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_equals_brute_force),
        cmocka_unit_test(test_search_nothing_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
