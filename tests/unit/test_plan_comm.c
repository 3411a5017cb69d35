/* Communication terms of the planner against hand-computed cases: the ZeRO stage volumes, the
 * tensor-parallel volume per layer, the group-to-link reduction over the fabric tree (aggregation
 * over rails, sharing of uplinks, oversubscription) and that every term goes through the shared
 * network model. */
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
    // Each forward all-reduce costs what the network model says on the host's NVLink.
    strata_net_eff_t ne = st_plan_net_eff(&pb);
    strata_link_t nv = {.alpha_s = 3e-6,
                        .beta_s_per_b = 1 / (300e9 * pb.calib.eta_up),
                        .gamma_s_per_b = ne.gamma_s_per_b};
    double ar = strata_netmodel_cost(STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING, 8, X, &nv);
    assert_true(fabs(lc.tp_fwd_s - 2 * ar) < 1e-12);
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

static void test_group_links(void **state)
{
    (void)state;
    strata_topo_t t;
    assert_int_equal(strata_topo_preset("h100-roce-24k", &t), STRATA_OK);
    strata_net_eff_t e = {.eff = {1, 1}, .gamma_s_per_b = 0};
    strata_link_t l;
    int top;
    // 8 ranks in one host: NVLink per GPU.
    strata_group_t g = {1, {{8, 1}}};
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, true, &l, &top), STRATA_OK);
    assert_int_equal(top, 1);
    assert_true(fabs(1 / l.beta_s_per_b - 450e9) < 1);
    // One rank per host (stride 8), 2 hosts in a rack: each group has one NIC's worth.
    g = (strata_group_t){1, {{2, 8}}};
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, true, &l, &top), STRATA_OK);
    assert_int_equal(top, 2);
    assert_true(fabs(1 / l.beta_s_per_b - 50e9) < 1);
    // 16 contiguous ranks over 2 hosts: 8 members per host drive 8 rails at once.
    g = (strata_group_t){1, {{16, 1}}};
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, true, &l, &top), STRATA_OK);
    assert_true(fabs(1 / l.beta_s_per_b - 400e9) < 1);
    assert_true(fabs(l.alpha_s - 4e-6) < 1e-12);
    // ... but a point-to-point flow uses one rail.
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, false, &l, &top), STRATA_OK);
    assert_true(fabs(1 / l.beta_s_per_b - 50e9) < 1);
    // One rank per zone (stride 3072) across 8 zones: the 1:7 aggregation layer.
    g = (strata_group_t){1, {{8, 3072}}};
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, true, &l, &top), STRATA_OK);
    assert_int_equal(top, 4);
    assert_true(fabs(1 / l.beta_s_per_b - 50e9 / 7) < 1);
    assert_true(fabs(l.alpha_s - 9e-6) < 1e-12);
    // Two dimensions: 2 members inside a host (stride 4) x 4 hosts (stride 8): 2 rails per host.
    g = (strata_group_t){2, {{2, 4}, {4, 8}}};
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, true, &l, &top), STRATA_OK);
    assert_true(fabs(1 / l.beta_s_per_b - 100e9) < 1);
    assert_int_equal(strata_group_size(&g), 8);
    // A group larger than the cluster is an error.
    g = (strata_group_t){1, {{2, 24576}}};
    assert_int_equal(strata_netmodel_group_link(&t, &g, &e, true, &l, &top),
                     STRATA_ERR_INVALID_ARG);
    // p2p is alpha + bytes * beta.
    strata_link_t k = {.alpha_s = 1e-6, .beta_s_per_b = 1e-9};
    assert_true(fabs(strata_netmodel_p2p(1000, &k) - 2e-6) < 1e-15);
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
        cmocka_unit_test(test_group_links),
        cmocka_unit_test(test_mapping_order_changes_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
