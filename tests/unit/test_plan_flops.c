/* Planner FLOP and parameter formulas against hand-computed cases: Megatron-LM's Eq. 2 parameter
 * count and Eq. 3 FLOPs, the MFU/HFU convention, GQA and SwiGLU counts. */
#include "harness/st_test.h"
#include "strata/plan.h"

#include <math.h>

static void problem(strata_plan_problem_t *pb, const char *model, const char *cluster,
                    long long gpus)
{
    *pb = (strata_plan_problem_t){0};
    assert_int_equal(strata_model_preset(model, &pb->model), STRATA_OK);
    assert_int_equal(strata_topo_preset(cluster, &pb->topo), STRATA_OK);
    assert_int_equal(strata_accel_preset(pb->topo.accel, &pb->accel), STRATA_OK);
    pb->train = strata_training_default();
    pb->calib = strata_calib_default();
    pb->gpus = gpus;
}

static void test_params_match_megatron_eq2(void **state)
{
    (void)state;
    // P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)), plus the final LayerNorm (2h) Eq. 2 leaves out.
    const char *names[] = {"megatron-1.7b", "megatron-18.4b", "megatron-1t", "gpt3-175b"};
    for (int i = 0; i < 4; i++) {
        strata_model_t m;
        assert_int_equal(strata_model_preset(names[i], &m), STRATA_OK);
        double l = m.layers, h = m.hidden, V = m.vocab, s = m.seq;
        double eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + 2 * h;
        assert_true(fabs(strata_model_params(&m) - eq2) < 0.5);
    }
    strata_model_t m;
    assert_int_equal(strata_model_preset("gpt3-175b", &m), STRATA_OK);
    assert_true(fabs(strata_model_params(&m) / 1e9 - 174.6) < 0.05); /* Table 2's 174.6B */
}

static void test_params_gqa_swiglu(void **state)
{
    (void)state;
    // Llama-3 8B by hand: per layer q,o 2h^2 + k,v 2 h kv + 3 h f + 2 RMSNorm h; embeddings untied.
    strata_model_t m;
    assert_int_equal(strata_model_preset("llama3-8b", &m), STRATA_OK);
    double h = 4096, kv = 1024, f = 14336, V = 128256;
    double layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h;
    double want = 32 * layer + 2 * V * h + h;
    assert_true(fabs(strata_model_params(&m) - want) < 0.5);
    assert_true(fabs(want / 1e9 - 8.03) < 0.01);
}

static void test_flops_per_token(void **state)
{
    (void)state;
    strata_model_t m = strata_model_gpt("t", 2, 64, 4, 100, 32);
    // Per layer 24 h^2 + 4 s h, plus logits 2 h V.
    double want = 2 * (24.0 * 64 * 64 + 4.0 * 32 * 64) + 2.0 * 64 * 100;
    assert_true(fabs(strata_model_fwd_flops_per_token(&m, 32) - want) < 1e-6);
}

static void test_mfu_hfu_and_eq3(void **state)
{
    (void)state;
    strata_plan_problem_t pb;
    problem(&pb, "megatron-18.4b", "dgx-a100-superpod", 256);
    pb.train.global_batch = 1024;
    pb.train.recompute = STRATA_RECOMPUTE_FULL;
    pb.train.flash_attention = false;
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    par.dp = 32;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    double B = 1024, s = 2048, l = 40, h = 6144, V = 51200;
    double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    double model = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    assert_true(fabs(p.megatron_flops / eq3 - 1) < 1e-12);
    assert_true(fabs(p.model_flops / model - 1) < 1e-12);
    // With full recomputation of a GPT, hardware FLOPs are exactly Eq. 3.
    assert_true(fabs(p.hw_flops / eq3 - 1) < 1e-12);
    assert_true(fabs(p.mfu - model / (p.step_s * 256 * 312e12)) < 1e-12);
    assert_true(fabs(p.hfu - eq3 / (p.step_s * 256 * 312e12)) < 1e-12);
    assert_true(fabs(p.tokens_per_s - B * s / p.step_s) < 1e-6);
    // Selective recomputation adds only the attention core, 4 s h per layer per token.
    pb.train.recompute = STRATA_RECOMPUTE_SELECTIVE;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    assert_true(fabs((p.hw_flops - p.model_flops) / (B * s * l * 4 * s * h) - 1) < 1e-12);
}

static void test_breakdown_adds_up(void **state)
{
    (void)state;
    strata_plan_problem_t pb;
    problem(&pb, "llama3-70b", "h100-roce-24k", 1024);
    pb.train.global_batch = 512;
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    par.cp = 2;
    par.pp = 4;
    par.vp = 5;
    par.schedule = STRATA_SCHED_INTERLEAVED;
    par.dp = 16;
    for (int ov = 0; ov < 2; ov++) {
        for (int d = 0; d < STRATA_DIM_COUNT; d++)
            par.overlap[d] = ov;
        for (int z = 0; z <= 3; z++) {
            par.zero = z;
            strata_prediction_t p;
            assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
            double sum = p.compute_s + p.bubble_s + p.optimizer_s + p.straggler_s;
            assert_true(p.straggler_s > 0); /* 1,024 accelerators wait for their slowest */
            for (int d = 0; d < STRATA_DIM_COUNT; d++) {
                sum += p.comm[d].exposed_s;
                assert_true(p.comm[d].exposed_s <= p.comm[d].total_s + 1e-12);
            }
            assert_true(fabs(sum - p.step_s) < 1e-9 * p.step_s);
            // TP stays in the host, CP crosses hosts (rack), DP crosses racks.
            assert_int_equal(p.comm[STRATA_DIM_TP].level, 1);
            assert_int_equal(p.comm[STRATA_DIM_CP].level, 2);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_match_megatron_eq2), cmocka_unit_test(test_params_gqa_swiglu),
        cmocka_unit_test(test_flops_per_token),           cmocka_unit_test(test_mfu_hfu_and_eq3),
        cmocka_unit_test(test_breakdown_adds_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
