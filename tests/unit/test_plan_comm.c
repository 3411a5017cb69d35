/* Communication terms of the planner against hand-computed cases: the ZeRO stage volumes, the
 * tensor-parallel volume and price per layer (the algorithm the communicator would choose, by
 * hand), and that the mapping order moves groups across levels. Shapes of strided groups and the
 * prices themselves are tested in test_price.c; that the planner and the communicator agree, in
 * test_price_agree.c. */
#include "harness/st_test.h"
#include "plan/plan_internal.h"

#include <math.h>

static strata_plan_problem_t problem(long long gpus)
{
    strata_plan_problem_t pb = {0};
    pb.model = strata_model_gpt("gpt", 8, 1024, 16, 51200, 2048);
    assert_int_equal(strata_topo_preset("dgx-a100-superpod", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("a100-80gb", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.global_batch = 64;
    pb.train.micro_batch = 1;
    pb.calib = strata_calib_default();
    pb.gpus = gpus;
    return pb;
}

static void test_zero_volumes(void **state)
{
    (void)state;
    strata_plan_problem_t pb = problem(16);
    pb.train.precision = STRATA_PREC_BF16; /* weights 2 bytes, gradients 4 */
    strata_parallel_t par = strata_parallel_default();
    par.dp = 16;
    const double P = strata_model_params(&pb.model), d = 16, f = (d - 1) / d, m = 64 / 16;
    // Bytes one rank sends per step: ring all-reduce 2(d-1)/d of the gradients; ZeRO-1 a
    // reduce-scatter of gradients and an all-gather of weights; ZeRO-2 reduce-scatters every
    // micro-batch; ZeRO-3 gathers weights twice and scatters gradients every micro-batch.
    const double want[4] = {2 * f * P * 4, f * P * (4 + 2), f * P * (m * 4 + 2),
                            m * f * P * (2 * 2 + 4)};
    for (int z = 0; z <= 3; z++) {
        par.zero = z;
        strata_prediction_t p;
        assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
        assert_true(fabs(p.comm[STRATA_DIM_DP].bytes / want[z] - 1) < 1e-12);
    }
}

static void test_tp_volume_and_cost(void **state)
{
    (void)state;
    strata_plan_problem_t pb = problem(8);
    pb.train.sequence_parallel = false;
    pb.train.recompute = STRATA_RECOMPUTE_NONE;
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    st_layer_cost_t lc;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &lc), STRATA_OK);
    // Narayanan et al.: 8 b s h (t-1)/t elements per layer per micro-batch (2 all-reduces forward,
    // 2 backward), in bytes.
    const double X = 2048.0 * 1024 * 2;
    assert_true(fabs(lc.tp_bytes - 8 * 2048.0 * 1024 * 7 / 8 * 2) < 1e-6);
    // Each forward all-reduce costs what the communicator of 8 ranks on one host's NVLink would
    // pay: halving-doubling (8 is a power of two, so it beats the ring's 14 latencies with 6),
    // 2 log2(8) alpha + 2 (7/8) X beta + (7/8) X gamma.
    strata_net_eff_t ne = st_plan_net_eff(&pb);
    const double a = 3e-6, b = 1 / (300e9 * pb.calib.eta_up), g = ne.gamma_s_per_b;
    double ar = 6 * a + 2 * 7.0 / 8 * X * b + 7.0 / 8 * X * g;
    assert_true(fabs(lc.tp_fwd_s / (2 * ar) - 1) < 1e-12);
    assert_int_equal(lc.tp_level, 1);
    // Full recomputation runs the forward's all-reduces again.
    pb.train.recompute = STRATA_RECOMPUTE_FULL;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &lc), STRATA_OK);
    assert_true(fabs(lc.tp_rec_s - lc.tp_fwd_s) < 1e-15);
    // SP: all-gathers and reduce-scatters of the same tensor, same bytes as the all-reduces.
    pb.train.sequence_parallel = true;
    pb.train.recompute = STRATA_RECOMPUTE_NONE;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &lc), STRATA_OK);
    assert_true(fabs(lc.tp_bytes - 8 * 2048.0 * 1024 * 7 / 8 * 2) < 1e-6);
}

static void test_mapping_order_changes_levels(void **state)
{
    (void)state;
    strata_plan_problem_t pb = problem(64);
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    par.dp = 8;
    par.zero = 0;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    assert_int_equal(p.comm[STRATA_DIM_TP].level, 1); /* host */
    assert_int_equal(p.comm[STRATA_DIM_DP].level, 2); /* su */
    double good = p.step_s;
    // DP innermost: TP now spans hosts and the step is slower.
    assert_int_equal(strata_order_parse("dp,tp,cp,pp", par.order), STRATA_OK);
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    assert_int_equal(p.comm[STRATA_DIM_TP].level, 2);
    assert_int_equal(p.comm[STRATA_DIM_DP].level, 1);
    assert_true(p.step_s > good);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_volumes),
        cmocka_unit_test(test_tp_volume_and_cost),
        cmocka_unit_test(test_mapping_order_changes_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
