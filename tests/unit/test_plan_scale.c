/* The planner's scale terms against hand-computed cases: the expected slowest of N accelerators
 * (published order statistics of the normal distribution), the expected busiest of U uplinks
 * under hashing (the Poisson sum by hand, and a simulation of the hashing itself), which fabric
 * levels a switch's hashing slows and by how much, and the straggler wait of a step. */
#include "harness/st_test.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdint.h>

static void test_expected_max_normal(void **state)
{
    (void)state;
    assert_true(st_expected_max_normal(1) == 0);
    // Closed forms: E[max of 2] = 1/sqrt(pi), E[max of 3] = 3 / (2 sqrt(pi)).
    assert_true(fabs(st_expected_max_normal(2) - 1 / sqrt(M_PI)) < 1e-6);
    assert_true(fabs(st_expected_max_normal(3) - 1.5 / sqrt(M_PI)) < 1e-6);
    // Tabulated expected normal order statistics (Harter 1961; Teichroew 1956).
    const struct {
        long long n;
        double e;
    } t[] = {{5, 1.16296}, {10, 1.53875}, {100, 2.50759}, {1000, 3.24144}};
    for (int i = 0; i < 4; i++)
        assert_true(fabs(st_expected_max_normal(t[i].n) - t[i].e) < 2e-5);
    // Grows like sqrt(2 ln n) and keeps growing at cluster sizes.
    assert_true(st_expected_max_normal(16384) > st_expected_max_normal(1024));
    assert_true(st_expected_max_normal(1 << 20) < sqrt(2 * log(1 << 20)));
}

/* A 64-bit LCG: the simulation below repeats exactly. */
static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void test_expected_max_load(void **state)
{
    (void)state;
    // One bin: the mean itself.
    assert_true(fabs(st_expected_max_load(1, 3.5) - 3.5) < 1e-9);
    // Two bins of Poisson(1), by hand: sum over k of 1 - F(k)^2, F the Poisson(1) CDF
    // (0.36788, 0.73576, 0.91970, 0.98101, 0.99634, 0.99941, 0.99992, ...) = 1.52378.
    assert_true(fabs(st_expected_max_load(2, 1) - 1.52378) < 1e-4);
    // The hashing itself: 16 connections of 16 sub-flows each thrown on 16 ports, the busiest
    // port's load averaged over 20,000 throws, against the closed form (Poisson loads).
    uint64_t seed = 12345;
    double sum = 0;
    const int trials = 20000;
    for (int tr = 0; tr < trials; tr++) {
        int load[16] = {0}, mx = 0;
        for (int f = 0; f < 16 * 16; f++) {
            int p = (int)(lcg(&seed) % 16);
            if (++load[p] > mx)
                mx = load[p];
        }
        sum += mx;
    }
    double simulated = sum / trials / 16.0, model = st_ecmp_factor(16, 1, 16);
    print_message("busiest of 16 ports, 16 x 16 sub-flows: simulated %.3f, model %.3f\n", simulated,
                  model);
    assert_true(fabs(model / simulated - 1) < 0.04);
    // More sub-flows spread better; none (0) means no hashing to suffer from; one port, no choice.
    assert_true(st_ecmp_factor(16, 1, 64) < st_ecmp_factor(16, 1, 16));
    assert_true(st_ecmp_factor(16, 1, 16) < st_ecmp_factor(16, 1, 1));
    assert_true(st_ecmp_factor(16, 1, 0) == 1);
    assert_true(st_ecmp_factor(4, 4, 16) == 1);
}

/* host (8 per host, scale-up) < leaf (4 hosts) < spine (4 leaves, 1:4 oversubscribed). */
static strata_plan_problem_t fabric_problem(void)
{
    strata_plan_problem_t pb = {0};
    strata_topo_init(&pb.topo, "three-tier");
    strata_topo_level_t host = {"host", 8, 300e9, 3e-6, 1, STRATA_LINK_SCALE_UP, 0, {0}};
    strata_topo_level_t leaf = {"leaf", 4, 25e9, 5e-6, 1, STRATA_LINK_SCALE_OUT, 0, {0}};
    strata_topo_level_t spine = {"spine", 4, 25e9, 7e-6, 4, STRATA_LINK_SCALE_OUT, 0, {0}};
    assert_int_equal(strata_topo_add_level(&pb.topo, &host), STRATA_OK);
    assert_int_equal(strata_topo_add_level(&pb.topo, &leaf), STRATA_OK);
    assert_int_equal(strata_topo_add_level(&pb.topo, &spine), STRATA_OK);
    pb.model = strata_model_gpt("gpt", 16, 2048, 16, 32000, 2048);
    assert_int_equal(strata_accel_preset("a100-80gb", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.global_batch = 64;
    pb.calib = strata_calib_default();
    pb.gpus = 128;
    return pb;
}

static void test_ecmp_slows_switch_tiers(void **state)
{
    (void)state;
    strata_plan_problem_t pb = fabric_problem(), eff;
    pb.calib.ecmp_subflows = 4;
    st_plan_effective(&pb, &eff);
    // Host: scale-up; leaf: its children are hosts, wired port by port: both untouched.
    assert_true(eff.topo.level[0].efficiency == 0);
    assert_true(eff.topo.level[1].efficiency == 0);
    // Spine: a leaf's 32 accelerators send through 32 / 4 = 8 hashed uplinks, 4 x 4 = 16
    // sub-flows per uplink on average.
    double f = st_expected_max_load(8, 16) / 16;
    assert_true(f > 1.2 && f < 2);
    assert_true(fabs(eff.topo.level[2].efficiency - pb.calib.eta_out / f) < 1e-12);
    // A data-parallel group with one member per leaf (tp 8 x pp 4 = stride 32) is limited by the
    // spine, so its allreduce of a large vector (latency negligible) is nearly f times slower.
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8, par.pp = 4, par.dp = 4;
    strata_group_t g = st_plan_group(&par, 1u << STRATA_DIM_DP);
    strata_price_t a, b;
    assert_int_equal(st_plan_coll(&pb, &g, STRATA_COLL_ALLREDUCE, 1e15, &a), STRATA_OK);
    assert_int_equal(st_plan_coll(&eff, &g, STRATA_COLL_ALLREDUCE, 1e15, &b), STRATA_OK);
    // The transfers are f times slower; the local reductions (gamma) are not, so a little less.
    double x = b.seconds / a.seconds;
    printf("spine-bound allreduce: x%.4f slower by %s (f = %.4f)\n", x, strata_algo_name(b.algo), f);
    assert_true(x <= f + 1e-9 && x > f - 0.01 * f);
    // Switched off: the fabric as given.
    pb.terms_off = STRATA_TERM_SCALE;
    st_plan_effective(&pb, &eff);
    assert_true(eff.topo.level[2].efficiency == 0);
    pb.terms_off = 0;
    pb.calib.ecmp_subflows = 0;
    st_plan_effective(&pb, &eff);
    assert_true(eff.topo.level[2].efficiency == 0);
}

static void test_straggler_wait(void **state)
{
    (void)state;
    strata_plan_problem_t pb = fabric_problem();
    pb.calib.ecmp_subflows = 0; /* the stragglers alone */
    pb.calib.straggler_cv = 0.02;
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8, par.pp = 4, par.dp = 4;
    strata_prediction_t with, without;
    assert_int_equal(strata_plan_predict(&pb, &par, &with), STRATA_OK);
    pb.terms_off = STRATA_TERM_SCALE;
    assert_int_equal(strata_plan_predict(&pb, &par, &without), STRATA_OK);
    // 128 accelerators: the slowest is E[max of 128 normals] standard deviations slow; the step's
    // compute and bubble stretch by 2% of that, nothing else changes.
    double z = st_expected_max_normal(128);
    assert_true(z > 2.5 && z < 2.7);
    double want = 0.02 * z * (with.compute_s + with.bubble_s);
    assert_true(fabs(with.straggler_s - want) < 1e-12 * want);
    assert_true(without.straggler_s == 0);
    assert_true(fabs(with.step_s - without.step_s - want) < 1e-9 * with.step_s);
    assert_true(with.compute_s == without.compute_s && with.bubble_s == without.bubble_s);
}

static void test_mfu_falls_faster_with_scale(void **state)
{
    (void)state;
    // A fixed model and per-replica batch from 256 to 8,192 accelerators of the 24K H100 cluster:
    // the scale terms make MFU fall more than the base model says (stragglers grow with N; the
    // data-parallel rings cross more hashed switch tiers).
    strata_plan_problem_t pb = {0};
    assert_int_equal(strata_model_preset("llama3-70b", &pb.model), STRATA_OK);
    assert_int_equal(strata_topo_preset("h100-roce-24k", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("h100-sxm", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.calib = strata_calib_default();
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8, par.pp = 4;
    double mfu[2][2];
    const int gpus[2] = {256, 8192};
    for (int i = 0; i < 2; i++) {
        pb.gpus = gpus[i];
        par.dp = gpus[i] / 32;
        pb.train.global_batch = 16 * par.dp;
        for (int on = 0; on < 2; on++) {
            pb.terms_off = on ? 0 : STRATA_TERM_SCALE;
            strata_prediction_t p;
            assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
            mfu[i][on] = p.mfu;
        }
    }
    print_message("MFU 256 -> 8192: base %.3f -> %.3f, with scale terms %.3f -> %.3f\n", mfu[0][0],
                  mfu[1][0], mfu[0][1], mfu[1][1]);
    assert_true(mfu[1][1] / mfu[0][1] < mfu[1][0] / mfu[0][0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expected_max_normal),
        cmocka_unit_test(test_expected_max_load),
        cmocka_unit_test(test_ecmp_slows_switch_tiers),
        cmocka_unit_test(test_straggler_wait),
        cmocka_unit_test(test_mfu_falls_faster_with_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
