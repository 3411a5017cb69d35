/* The planner's accelerator terms against hand-computed cases: a GEMM's output tiles in waves over
 * the SMs (the library's tile choice), its rate by shape, FP8 GEMMs at the FP8 peak with casts and
 * FP8-kept inputs and weights, and FP8 refused on an accelerator without it. */
#include "harness/st_test.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <string.h>

static void test_wave_util(void **state)
{
    (void)state;
    strata_accel_t a;
    assert_int_equal(strata_accel_preset("a100-80gb", &a), STRATA_OK); /* 108 SMs, 256 x 128 */
    // 8192 x 8192: 32 x 64 = 2048 large tiles in 19 waves of 108 (the halved tiles do no better).
    assert_true(fabs(strata_accel_wave_util(&a, 8192, 8192) - 2048.0 / (19 * 108)) < 1e-12);
    // 2048 x 1024: 64 large tiles fill 64 of 108 SMs once; 128 x 64 tiles make 256, three waves
    // of 108, the best choice.
    assert_true(fabs(strata_accel_wave_util(&a, 2048, 1024) - 256.0 / 324) < 1e-12);
    // Exactly one full wave.
    assert_true(fabs(strata_accel_wave_util(&a, 256 * 12, 128 * 9) - 1) < 1e-12);
    // No SMs (a CPU): no waves.
    assert_int_equal(strata_accel_preset("cpu", &a), STRATA_OK);
    assert_true(strata_accel_wave_util(&a, 100, 100) == 1);
}

static void test_gemm_rate_by_shape(void **state)
{
    (void)state;
    strata_accel_t a;
    assert_int_equal(strata_accel_preset("a100-80gb", &a), STRATA_OK);
    // Compute-bound 2048 x 1024 x 4096: peak x large-GEMM efficiency x K's shape factor x the
    // waves of the output tiles.
    double want = 312e12 * 0.85 * (4096.0 / (4096 + 96)) * (256.0 / 324);
    double got = strata_accel_gemm_flops(&a, STRATA_PREC_BF16, 2048, 1024, 4096);
    assert_true(fabs(got / want - 1) < 1e-12);
    // The same GEMM on H100 in FP8 against bf16: the peaks and large-GEMM efficiencies' ratio.
    assert_int_equal(strata_accel_preset("h100-sxm", &a), STRATA_OK);
    double r = strata_accel_gemm_flops(&a, STRATA_PREC_FP8, 16384, 16384, 16384) /
               strata_accel_gemm_flops(&a, STRATA_PREC_BF16, 16384, 16384, 16384);
    assert_true(fabs(r - (1979 * 0.70) / (989 * 0.75)) < 1e-9);
}

static strata_plan_problem_t problem(const char *accel)
{
    strata_plan_problem_t pb = {0};
    pb.model = strata_model_gpt("gpt", 8, 1024, 16, 51200, 2048);
    assert_int_equal(strata_topo_preset("dgx-h100-superpod", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset(accel, &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.flash_attention = false;
    pb.train.recompute = STRATA_RECOMPUTE_NONE;
    pb.train.micro_batch = 2;
    pb.train.global_batch = 16;
    pb.calib = strata_calib_default();
    pb.gpus = 8;
    return pb;
}

static void test_fp8_layer(void **state)
{
    (void)state;
    strata_plan_problem_t pb = problem("h100-sxm");
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    par.dp = 1;
    pb.train.micro_batch = 8; /* casts long enough to be above the kernel floor */
    st_layer_cost_t b16, f8;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &b16), STRATA_OK);
    pb.train.precision = STRATA_PREC_FP8;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &f8), STRATA_OK);
    const double T = 8 * 2048, h = 1024, f = 4096, t = 8;
    // The GEMM inputs kept for the backward lose a byte each: QKV's and MLP-up's (sharded by SP)
    // and the output projection's and MLP-down's.
    assert_true(fabs(b16.act_bytes - f8.act_bytes - T * (h / t + h / t + h / t + f / t)) < 1e-6);
    // The linear layers run at the FP8 rate; the forward adds the cast-transposes of the four
    // GEMM inputs (read 2 bytes, write 1 + 1), at the achieved memory bandwidth.
    assert_true(f8.gemm_fwd_s < b16.gemm_fwd_s);
    double cast = (f8.fwd_s - b16.fwd_s) - (f8.gemm_fwd_s - b16.gemm_fwd_s);
    double want = T * 4 * (h + h / t + h + f / t) / (pb.accel.mem_bw_Bps * pb.calib.eta_mem);
    assert_true(fabs(cast - want) < 1e-9 * want);
    // Attention stays in bf16.
    assert_true(f8.attn_fwd_s == b16.attn_fwd_s);
    // An FP8 copy of the resident weights: one byte per parameter more.
    strata_prediction_t p8, p16;
    assert_int_equal(strata_plan_predict(&pb, &par, &p8), STRATA_OK);
    pb.train.precision = STRATA_PREC_BF16;
    assert_int_equal(strata_plan_predict(&pb, &par, &p16), STRATA_OK);
    double P = strata_model_params(&pb.model);
    assert_true(p8.mem.weights > p16.mem.weights);
    assert_true(fabs((p8.mem.weights - p16.mem.weights) / p16.mem.weights - 0.5) < 1e-12);
    assert_true(p16.mem.weights < P); /* sharded over TP */
    assert_true(p8.step_s < p16.step_s);
}

static void test_fp8_needs_fp8_units(void **state)
{
    (void)state;
    strata_plan_problem_t pb = problem("a100-80gb");
    pb.train.precision = STRATA_PREC_FP8;
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "fp8"));
    assert_non_null(strstr(strata_last_error(), "a100-80gb"));
    strata_precision_t prec;
    assert_int_equal(strata_precision_parse("fp8", &prec), STRATA_OK);
    assert_int_equal(prec, STRATA_PREC_FP8);
    assert_string_equal(strata_precision_name(STRATA_PREC_FP8), "fp8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wave_util),
        cmocka_unit_test(test_gemm_rate_by_shape),
        cmocka_unit_test(test_fp8_layer),
        cmocka_unit_test(test_fp8_needs_fp8_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
